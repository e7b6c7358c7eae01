/**
 * Deleting a namespace with what is its (the admin API's `DELETE /api/v1/namespaces/{name}`, the RabbitMQ management
 * API's `DELETE /api/vhosts/{vhost}`): as RabbitMQ deletes a vhost with its queues, exchanges, permissions and
 * policies. Refused, before anything changes, for `default` and while users live in the namespace (a user's home is
 * not deleted under it; RabbitMQ users belong to no vhost). Then, in this order:
 *
 * - this broker's clients in the namespace are disconnected (AMQP connections in its vhost, guests' among them:
 *   connection.close 320 `CONNECTION_FORCED - vhost 't1' is deleted`, RabbitMQ's text; other protocols their kick),
 *   and their ends waited for (5 s at most): an MQTT session's last write comes before its delete below;
 * - its queues and exchanges (core names `$ns/<ns>/...`; their bindings go with them) and its streams (`<ns>~...`: the
 *   namespace's Kafka topics, JetStream streams, KV buckets and object stores, AMQP stream queues, with their records,
 *   committed offsets, producer states and JetStream consumers);
 * - its Kafka consumer groups (`$ns/<ns>/<group>`): the coordinator's members dropped (a disconnected Kafka client
 *   stays a member until its session times out) and the group's committed offsets, whatever stream they are on;
 * - its Kafka transactional ids (`$ns/<ns>/<id>`): the transaction coordinator's state, in memory and in the
 *   metastore (control documents `txn`); the aborted lists of its streams (`txn-aborted`) went with each stream;
 * - its MQTT sessions (client ids `$ns/<ns>/<id>`): persistent sessions with their subscriptions and queued messages,
 *   in the MQTT module's memory and in the metastore;
 * - its retained messages (topics `$ns/<ns>/...`), in memory and in the metastore (in cluster mode every broker's
 *   copy, as the admin API's clear);
 * - every policy scoped to it, whoever made it: the RabbitMQ permissions and topic permissions of guests from other
 *   namespaces (permissions.ts), policies made through the admin API or a Kafka CreateAcls of its clients;
 * - the RabbitMQ policies and operator policies of its vhost (control documents `rabbitmq-policy`);
 * - the namespace itself.
 *
 * The metastore's other tables hold nothing of a namespace but through these names: JetStream consumers, producer
 * states, segments and partitions go with their stream. Of `control_docs`, the kinds not deleted here name users
 * (gone before), tokens (a user's), quotas of users, the broker's settings, or are the Kafka transaction
 * coordinator's, deleted above (`txn` by transactional id) or with their stream (`txn-aborted` by stream partition).
 * In cluster mode a transactional id another broker coordinates leaves the metastore here; that broker's memory
 * keeps it until the id's next owner change.
 *
 * A namespace made again under the same name starts empty: nothing of the deleted one applies to it. In cluster mode
 * the other brokers disconnect their clients of the namespace when their directory learns it is gone (the `control`
 * notify every control-plane change sends, with the slow poll behind it; see `followNamespaceRemovals`): the same
 * close, 320 for AMQP, and they drop the namespace's Kafka groups they coordinate. A new connection to the vhost is
 * refused (530).
 */
import { DEFAULT_NAMESPACE, FlowError, isFlowError, namespaceNames, splitStreamName, type Engine, type NamespaceNames } from '../core/index.js';
import type { AccessControl } from './access.js';
import type { ConsumerGroupAdmin, SessionAdmin } from './api/types.js';
import type { ClientRegistry } from './clients.js';
import type { Directory } from './directory.js';

export interface NamespaceRemoval {
  disconnected: number;
  queues: number;
  exchanges: number;
  streams: number;
  /** Kafka consumer groups (in a coordinator's memory or with committed offsets). */
  groups: number;
  /** MQTT sessions (persistent sessions, with their subscriptions and queued messages). */
  sessions: number;
  /** Kafka transactional ids (the transaction coordinator's state). */
  transactionalIds: number;
  retained: number;
  policies: number;
  rabbitPolicies: number;
}

/** What the protocols offer for a namespace's groups and sessions (the admin API's hooks, absent: none running). */
export interface NamespaceRemovalHooks {
  groups?: () => ReadonlyArray<{ protocol: string; admin: ConsumerGroupAdmin }>;
  mqttSessions?: () => SessionAdmin | null | undefined;
}

/**
 * Disconnects this broker's clients of a namespace that is deleted: AMQP's connection.close 320 with RabbitMQ's text,
 * the other protocols' kick. Answers the entries kicked.
 */
export function disconnectNamespace(clients: ClientRegistry, name: string): Array<{ id: string }> {
  const kicked: Array<{ id: string }> = [];
  for (const c of clients.list()) {
    if (c.namespace !== name) continue;
    c.reg.kick(c.reg.protocol === 'amqp' ? `vhost '${name}' is deleted` : `namespace '${name}' is deleted`);
    kicked.push(c);
  }
  return kicked;
}

/**
 * Disconnects this broker's clients of every namespace a directory change finds gone, or made again since the last
 * change (another `createdAt`), whichever broker deleted it: in cluster mode the brokers that did not delete it learn
 * it here (the `control` notify every control-plane change sends, the slow poll behind it). Answers the unsubscribe.
 */
export function followNamespaceRemovals(dir: Directory, clients: ClientRegistry, hooks: NamespaceRemovalHooks = {}): () => void {
  const created = () => new Map(dir.listNamespaces().map((n) => [n.name, n.createdAt]));
  let known = created();
  return dir.onChange(() => {
    const now = created();
    for (const [name, at] of known) {
      if (now.get(name) === at) continue;
      disconnectNamespace(clients, name);
      // The groups this broker coordinates (cluster mode: the deleting broker may not): members and memory dropped.
      void removeGroups(hooks, namespaceNames(name)).catch(() => undefined);
    }
    known = now;
  });
}

/**
 * Deletes the namespace's Kafka groups known to this broker's coordinator, members dropped; those another broker
 * coordinates (NOT_OWNER) are left to it. Answers their names.
 */
async function removeGroups(hooks: NamespaceRemovalHooks, ns: NamespaceNames): Promise<string[]> {
  const gone: string[] = [];
  for (const g of hooks.groups?.() ?? []) {
    if (g.protocol !== 'kafka') continue; // JetStream's consumers went with their streams
    for (const s of await g.admin.list()) {
      if (ns.ownName(s.name) === null) continue;
      await g.admin
        .delete(s.name, true)
        .catch((e: unknown) => (isFlowError(e) && (e.code === 'NOT_FOUND' || e.code === 'NOT_OWNER') ? undefined : Promise.reject(e)));
      gone.push(s.name);
    }
  }
  return gone;
}

const DISCONNECT_WAIT_MS = 5000;

export async function removeNamespace(
  access: Pick<AccessControl, 'directory' | 'clients'>,
  engine: Engine,
  name: string,
  hooks: NamespaceRemovalHooks = {},
): Promise<NamespaceRemoval> {
  const dir = access.directory;
  if (name === DEFAULT_NAMESPACE) throw new FlowError('INVALID_ARGUMENT', 'the default namespace cannot be deleted');
  if (dir.namespace(name) === undefined) throw new FlowError('NOT_FOUND', `namespace "${name}" does not exist`);
  const users = dir.listUsers().filter((u) => u.namespace === name).length;
  if (users > 0) throw new FlowError('INVALID_ARGUMENT', `namespace "${name}" still has ${users} user(s)`);
  const ns = namespaceNames(name);
  const out: NamespaceRemoval = {
    disconnected: 0,
    queues: 0,
    exchanges: 0,
    streams: 0,
    groups: 0,
    sessions: 0,
    transactionalIds: 0,
    retained: 0,
    policies: 0,
    rabbitPolicies: 0,
  };
  const kicked = disconnectNamespace(access.clients, name);
  out.disconnected = kicked.length;
  // Bounded: a connection that does not end in time does not keep the namespace; its session may then be written
  // once more after the delete below, which its expiry removes.
  const deadline = Date.now() + DISCONNECT_WAIT_MS;
  while (kicked.some((c) => access.clients.get(c.id) !== undefined) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  for (const q of engine.listQueues()) {
    if (ns.ownName(q.name) === null) continue;
    await engine.deleteQueue(q.name);
    out.queues++;
  }
  for (const x of engine.listExchanges()) {
    if (ns.ownName(x.name) === null) continue;
    await engine.deleteExchange(x.name);
    out.exchanges++;
  }
  for (const s of engine.listAllStreams()) {
    if (splitStreamName(s.name).namespace !== name) continue;
    await engine.deleteStream(s.name);
    out.streams++;
  }
  const groups = new Set(await removeGroups(hooks, ns));
  // Offsets the coordinators did not cover (cluster mode: groups another broker coordinates, which drops them from its
  // memory when its directory learns the namespace is gone, followNamespaceRemovals).
  for (const g of await engine.store.listGroups()) {
    if (ns.ownName(g) === null) continue;
    await engine.store.deleteGroup(g);
    groups.add(g);
  }
  out.groups = groups.size;
  const txnIds = new Set((await engine.transactions.removeIds?.((id) => ns.ownName(id) !== null)) ?? []);
  // Those the coordinator did not hold (Kafka not running here; cluster mode: ids another broker coordinates).
  for (const r of await dir.store.listControl('txn')) {
    if (ns.ownName(r.name) === null) continue;
    if (await dir.store.deleteControl('txn', r.name)) txnIds.add(r.name);
  }
  out.transactionalIds = txnIds.size;
  const mqtt = hooks.mqttSessions?.() ?? null;
  for (const s of await engine.store.listSessions('mqtt')) {
    if (ns.ownName(s.clientId) === null) continue;
    await mqtt?.delete(s.clientId);
    await engine.store.deleteSession(s.clientId);
    out.sessions++;
  }
  const retained = new Set<string>();
  engine.retained.match(`${ns.topicPrefix}#`, (m) => retained.add(m.topic));
  for (const r of await engine.store.listRetained()) if (ns.ownTopic(r.topic) !== null) retained.add(r.topic);
  for (const topic of retained) {
    if (!(await engine.clearRetained(topic))) await engine.store.deleteRetained(topic);
    out.retained++;
  }
  for (const p of dir.policies.defs()) {
    if (p.namespace !== name) continue;
    await dir.deletePolicy(p.name).catch(ignoreNotFound);
    out.policies++;
  }
  for (const r of await dir.store.listControl('rabbitmq-policy')) {
    if (r.data.namespace !== name) continue;
    if (await dir.store.deleteControl('rabbitmq-policy', r.name)) out.rabbitPolicies++;
  }
  // Its last change reloads the directory: the RabbitMQ policies are read again with it (rabbitmq/server.ts).
  await dir.deleteNamespace(name);
  return out;
}

function ignoreNotFound(e: unknown): Promise<void> | undefined {
  return e instanceof FlowError && e.code === 'NOT_FOUND' ? undefined : Promise.reject(e);
}
