/**
 * Deleting a namespace with what is its (the admin API's `DELETE /api/v1/namespaces/{name}`, the RabbitMQ management
 * API's `DELETE /api/vhosts/{vhost}`): as RabbitMQ deletes a vhost with its queues, exchanges, permissions and
 * policies. Refused, before anything changes, for `default` and while users live in the namespace (a user's home is
 * not deleted under it; RabbitMQ users belong to no vhost). Then, in this order:
 *
 * - this broker's clients in the namespace are disconnected (AMQP connections in its vhost, guests' among them:
 *   connection.close 320 `CONNECTION_FORCED - vhost 't1' is deleted`, RabbitMQ's text; other protocols their kick);
 * - its queues and exchanges (core names `$ns/<ns>/...`; their bindings go with them) and its streams (`<ns>~...`: the
 *   namespace's Kafka topics, JetStream streams and AMQP stream queues, with their records and consumers);
 * - every policy scoped to it, whoever made it: the RabbitMQ permissions and topic permissions of guests from other
 *   namespaces (permissions.ts), policies made through the admin API or a Kafka CreateAcls of its clients;
 * - the RabbitMQ policies and operator policies of its vhost (control documents `rabbitmq-policy`);
 * - the namespace itself.
 *
 * A namespace made again under the same name starts empty: nothing of the deleted one applies to it. In cluster mode
 * the clients connected to other brokers are not disconnected: their next use of a deleted queue or exchange finds
 * none, and a new connection to the vhost is refused (530).
 */
import { DEFAULT_NAMESPACE, FlowError, namespaceNames, splitStreamName, type Engine } from '../core/index.js';
import type { AccessControl } from './access.js';

export interface NamespaceRemoval {
  disconnected: number;
  queues: number;
  exchanges: number;
  streams: number;
  policies: number;
  rabbitPolicies: number;
}

export async function removeNamespace(access: Pick<AccessControl, 'directory' | 'clients'>, engine: Engine, name: string): Promise<NamespaceRemoval> {
  const dir = access.directory;
  if (name === DEFAULT_NAMESPACE) throw new FlowError('INVALID_ARGUMENT', 'the default namespace cannot be deleted');
  if (dir.namespace(name) === undefined) throw new FlowError('NOT_FOUND', `namespace "${name}" does not exist`);
  const users = dir.listUsers().filter((u) => u.namespace === name).length;
  if (users > 0) throw new FlowError('INVALID_ARGUMENT', `namespace "${name}" still has ${users} user(s)`);
  const ns = namespaceNames(name);
  const out: NamespaceRemoval = { disconnected: 0, queues: 0, exchanges: 0, streams: 0, policies: 0, rabbitPolicies: 0 };
  for (const c of access.clients.list()) {
    if (c.namespace !== name) continue;
    c.reg.kick(c.reg.protocol === 'amqp' ? `vhost '${name}' is deleted` : `namespace '${name}' is deleted`);
    out.disconnected++;
  }
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
  for (const p of dir.policies.defs()) {
    if (p.namespace !== name) continue;
    await dir.deletePolicy(p.name).catch((e: unknown) => (e instanceof FlowError && e.code === 'NOT_FOUND' ? undefined : Promise.reject(e)));
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
