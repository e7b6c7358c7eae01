/**
 * The JetStream service in cluster mode (the design is in cluster.ts): consumers acquired and released with their
 * ownership ('consumer' kind, loaded from the metastore when acquired), a consumer request routed to the broker that
 * serves it (claimed there first when nobody does yet, retried while ownership moves), and the channel's handlers
 * (`js.request`, `js.ack`, `js.deliver`, `js.publish`, `js.consumers`).
 */
import type { Cluster } from '../../../cluster/index.js';
import { call, decodeMessage, listen, RPC, serve } from '../../../cluster/index.js';
import { FlowError, type StreamEntry } from '../../../core/index.js';
import { consumerKey, decodeDelivery, pause, retriable, retryWindowMs, splitConsumerKey, targetOf } from './cluster.js';
import type { ConsumerConfig } from './config.js';
import { Consumer } from './consumer.js';
import { isValidApiName } from './subjects.js';
import { BAD_JSON, JetStreamState, type Json, NO_ANSWER, parseJson, randomName } from './service-state.js';
import { ownsPublished, publishWith } from './message-api.js';
import { consumerInfoJson, onAck } from './consumer-api.js';
import { jsOptions } from './stream-view.js';

export function joinCluster(js: JetStreamState, cl: Cluster): void {
  // The consumers of a workqueue or interest stream are placed with the stream's partition: its owner decides what
  // their acks remove (checkRetention).
  cl.colocate('consumer', (key) => {
    const [stream] = splitConsumerKey(key);
    const e = js.engine.getAnyStream(stream);
    return e !== undefined && jsOptions(e.def).retention !== 'limits' ? { kind: 'partition', name: partitionKey(stream) } : null;
  });
  cl.register('consumer', {
    acquire: (key, epoch) => acquireConsumer(js, key, epoch),
    release: (key, lost) => releaseConsumer(js, key, lost),
  });
  // Claimed but nothing to serve (an ephemeral consumer of a dead broker, a consumer deleted meanwhile, a request
  // naming a consumer that never existed): its owner row goes.
  cl.on('owned', (kind: string, key: string) => {
    if (kind === 'partition') {
      // Mirrors and sources are copied by their partition's owner; retention is decided there.
      js.syncSources();
      if (retentionStream(js, key) !== null) void checkRetention(js);
      return;
    }
    if (kind !== 'consumer' || js.creating.has(key)) return;
    const [stream, name] = splitConsumerKey(key);
    if (js.getConsumer(stream, name) === undefined) forgetUnserved(js, cl, key);
  });
  js.slowTicks.push(() => void checkRetention(js));
  cl.on('released', (kind: string, key: string) => {
    if (kind !== 'partition') return;
    js.syncSources();
    const stream = retentionStream(js, key);
    if (stream !== null) js.retentionHere.delete(stream);
  });
  const ch = cl.channel;
  if (ch === null) throw new FlowError('CONFIG_ERROR', 'JetStream in cluster mode needs the internal channel');
  serve(ch, RPC.jsRequest, async (from, head) => {
    js.clusterStats.served++;
    const out = await serveConsumer(js, from, head.t, head.body, head.reply);
    return out === NO_ANSWER ? { none: true } : { out };
  });
  listen(ch, RPC.jsAck, (from, head) => onAck(js, head.l, head.b, head.r ?? undefined, from));
  ch.on(RPC.jsDeliver.name, (_from, body) => {
    js.clusterStats.deliveriesReceived++;
    // A delivery or status for a client of this broker, from the consumer's owner.
    js.sendLocal(decodeDelivery(body));
  });
  serve(ch, RPC.jsPublish, (_from, _head, tail) => {
    const msg = decodeMessage(tail);
    if (!ownsPublished(js, msg)) throw new FlowError('NOT_OWNER', 'the stream partition of this JetStream publish is not written by this broker');
    return new Promise<Json | null>((resolve) => {
      const info = publishWith(js, msg, (ack) => resolve(ack), false);
      // No stream here captured it (deleted meanwhile): no PubAck, as on a single broker.
      if (info.captured.length === 0 && info.delivered === 0) resolve(null);
    });
  });
  serve(ch, RPC.jsConsumers, (_from, head) => ({ infos: js.sortedConsumers(head.stream).map((c) => consumerInfoJson(c)) }));
}

/** This broker owns the consumer now: load it from the metastore (nothing yet when it is being created here). */
export async function acquireConsumer(js: JetStreamState, key: string, epoch: number): Promise<void> {
  const [stream, name] = splitConsumerKey(key);
  const here = js.getConsumer(stream, name);
  if (here !== undefined) {
    here.epoch = epoch;
    return;
  }
  const e = await streamKnown(js, stream);
  if (!e) return;
  const r = await js.engine.store.getConsumer(stream, name);
  if (r === null || js.getConsumer(stream, name) !== undefined) return;
  let config: ConsumerConfig;
  try {
    config = JSON.parse(r.config) as ConsumerConfig;
  } catch {
    js.logger.warn({ stream, consumer: name }, 'JetStream consumer with unreadable config skipped');
    return;
  }
  const c = new Consumer(js, stream, name, config, r.createdAt, true, r);
  c.epoch = epoch;
  js.add(c);
  if (c.isPush) c.pump();
}

/**
 * This broker lets the consumer go: stop serving it (pull requests waiting here end without an answer: their
 * clients' next requests reach the new owner), and unless ownership is already lost, write its state last.
 */
export async function releaseConsumer(js: JetStreamState, key: string, lost: boolean): Promise<void> {
  const [stream, name] = splitConsumerKey(key);
  const c = js.getConsumer(stream, name);
  if (c === undefined) return;
  c.close(false);
  js.dirty.delete(c);
  const m = js.consumers.get(stream);
  if (m?.get(name) === c) m.delete(name);
  if (m?.size === 0) js.consumers.delete(stream);
  if (!lost && c.durable) await js.engine.store.putConsumer(c.record(), c.epoch);
}

/**
 * The stream's definition, waiting a little for it when this broker has not heard of it yet: a stream created
 * on another broker reaches this one's catalog by notification, maybe after a request that names it.
 */
export async function streamKnown(js: JetStreamState, stream: string): Promise<StreamEntry | undefined> {
  for (let i = 0; i < 20; i++) {
    const e = js.engine.getAnyStream(stream);
    if (e !== undefined || js.closed) return e;
    await new Promise((r) => setTimeout(r, 50));
  }
  return js.engine.getAnyStream(stream);
}

/** The consumer a CONSUMER request names ("<stream>/<name>"), or null (NAMES, LIST, malformed). */
export function consumerKeyOf(t: string[], body: string): { key: string; body: string } | null {
  const [, b, c] = t;
  if (b === 'DURABLE' && c === 'CREATE' && t.length === 5) return { key: consumerKey(t[3], t[4]), body };
  if (b === 'CREATE' && t.length >= 3) {
    if (t.length >= 4) return { key: consumerKey(t[2], t[3]), body };
    // An ephemeral consumer named only in the body, or not at all: the name is chosen here, so that every
    // broker agrees where the consumer lives.
    const raw = parseJson(body);
    if (raw === BAD_JSON || raw === null || typeof raw !== 'object' || Array.isArray(raw)) return null;
    const req = raw as Json;
    const cfg = (req.config ?? {}) as Json;
    if (typeof cfg !== 'object' || cfg === null || Array.isArray(cfg)) return null;
    const given =
      typeof cfg.name === 'string' && cfg.name !== ''
        ? cfg.name
        : typeof cfg.durable_name === 'string' && cfg.durable_name !== ''
          ? cfg.durable_name
          : undefined;
    if (given !== undefined) return isValidApiName(given) ? { key: consumerKey(t[2], given), body } : null;
    const name = randomName();
    return { key: consumerKey(t[2], name), body: JSON.stringify({ ...req, config: { ...cfg, name } }) };
  }
  if ((b === 'INFO' || b === 'DELETE') && t.length === 4) return { key: consumerKey(c, t[3]), body };
  if (b === 'MSG' && c === 'NEXT' && t.length === 5) return { key: consumerKey(t[3], t[4]), body };
  return null;
}

/** A consumer request at the broker its client is on: served here if this broker owns it, else forwarded. */
export async function routeConsumer(js: JetStreamState, cl: Cluster, t: string[], body: string, reply: string): Promise<Json> {
  const target0 = consumerKeyOf(t, body);
  // Malformed: answered here, the way a single broker answers it (nothing is created).
  if (target0 === null) return js.routeLocal(t, body, reply, undefined);
  const { key } = target0;
  body = target0.body;
  const deadline = Date.now() + retryWindowMs(cl);
  let fresh = false;
  for (let attempt = 0; ; attempt++) {
    try {
      const to = await targetOf(cl, key, fresh);
      if (to === cl.id) return await serveConsumer(js, cl.id, t, body, reply);
      js.clusterStats.forwarded++;
      const { head } = await call(cl.channel!, to, RPC.jsRequest, { t, body, reply });
      return head.none === true || head.out === undefined ? NO_ANSWER : head.out;
    } catch (err) {
      if (!retriable(err) || Date.now() >= deadline || js.closed) {
        js.clusterStats.forwardFailures++;
        throw err;
      }
      fresh = true;
      await pause(attempt);
    }
  }
}

/** Gives up the owner row of a consumer nothing is served for; a create of the same consumer waits for it. */
function forgetUnserved(js: JetStreamState, cl: Cluster, key: string): void {
  if (js.forgetting.has(key)) return;
  const done = cl
    .forget('consumer', key)
    .catch(() => undefined)
    .finally(() => js.forgetting.delete(key));
  js.forgetting.set(key, done);
}

/**
 * Serves a consumer request here (from this broker's client, or forwarded by broker `from`): claims the consumer
 * first when this broker does not own it yet (NOT_OWNER when another broker should: the requester retries).
 */
export async function serveConsumer(js: JetStreamState, from: number, t: string[], body: string, reply: string): Promise<Json> {
  const cl = js.cluster!;
  const target = consumerKeyOf(t, body);
  if (target === null) return js.routeLocal(t, body, reply, from);
  const { key } = target;
  const create = t[1] === 'CREATE' || t[1] === 'DURABLE';
  if (create) js.creating.add(key);
  try {
    // An earlier request (an INFO of the consumer before it existed) claimed it and is giving the row up: a create
    // must not run under that claim, or the forget that lands next fences the new consumer's writes.
    if (create) await js.forgetting.get(key);
    if (cl.owns('consumer', key) === null) {
      const [stream] = splitConsumerKey(key);
      // The stream must be known here before its consumer can be loaded or made.
      if ((await streamKnown(js, stream)) === undefined) return js.routeLocal(t, target.body, reply, from);
      await cl.ensure('consumer', key);
    }
    return await js.routeLocal(t, target.body, reply, from);
  } finally {
    if (create) {
      js.creating.delete(key);
      const [stream, name] = splitConsumerKey(key);
      // A create that made nothing (refused) leaves no owner row behind.
      if (cl.owns('consumer', key) !== null && js.getConsumer(stream, name) === undefined) forgetUnserved(js, cl, key);
    }
  }
}

/** The owner row name of a JetStream stream's (single) partition (src/cluster/streams.ts partitionName). */
export function partitionKey(stream: string): string {
  return `${stream}/0`;
}

/** The stream of a partition owner row ("<stream>/0") when it is a workqueue or interest stream, else null. */
function retentionStream(js: JetStreamState, key: string): string | null {
  if (!key.endsWith('/0')) return null;
  const stream = key.slice(0, -2);
  const e = js.engine.getAnyStream(stream);
  return e !== undefined && jsOptions(e.def).retention !== 'limits' ? stream : null;
}

const checking = new WeakMap<JetStreamState, Promise<void>>();
/** When each stream decided here was last checked against the store, per service. */
const verified = new WeakMap<JetStreamState, Map<string, number>>();
/**
 * A stream decided here is checked against the store again after this long: its consumers are created here (placed
 * with its partition), so a stored one served elsewhere only appears when brokers disagreed on the stream for a
 * moment (one had not heard of it yet); it moves here at the next reconcile. One query per stream, not per tick.
 */
const VERIFY_MS = 10_000;

/**
 * Cluster mode: which workqueue and interest streams this broker decides retention for (js.retentionHere). It must
 * own the stream's partition and serve every durable consumer the store has for it (they are placed with the
 * partition: loaded here when missing): with one of them elsewhere, an interest stream would drop what only that
 * one still needs. A stream that becomes decided here has its view looked at again (what its consumers' stored acks
 * removed goes); one that stops being decided here removes nothing more here. Run on the service's slow tick and
 * when a partition is acquired; one run at a time.
 */
export function checkRetention(js: JetStreamState): Promise<void> {
  const running = checking.get(js);
  if (running !== undefined) return running;
  const p = runCheck(js).finally(() => checking.delete(js));
  checking.set(js, p);
  return p;
}

async function runCheck(js: JetStreamState): Promise<void> {
  const cl = js.cluster;
  if (cl === null || js.closed) return;
  let seen = verified.get(js);
  if (seen === undefined) verified.set(js, (seen = new Map<string, number>()));
  const now = Date.now();
  for (const d of js.engine.listAllStreams()) {
    const name = d.name;
    if (jsOptions(d).retention === 'limits' || d.partitions !== 1 || cl.owns('partition', partitionKey(name)) === null) {
      js.retentionHere.delete(name);
      seen.delete(name);
      continue;
    }
    if (js.retentionHere.has(name) && now - (seen.get(name) ?? 0) < VERIFY_MS) continue;
    let ready = true;
    try {
      for (const r of await js.engine.store.listConsumers(name)) {
        if (js.getConsumer(name, r.name) !== undefined || !readable(r.config)) continue;
        // Placed here with the partition: taken now rather than at the next reconcile.
        await cl.ensure('consumer', consumerKey(name, r.name)).catch(() => undefined);
        if (js.getConsumer(name, r.name) === undefined) ready = false;
      }
    } catch (err) {
      js.logLimit.log('warn', `jetstream-retention|${name}`, { err, stream: name }, 'JetStream consumers of a retention stream not listed');
      ready = false;
    }
    ready &&= cl.owns('partition', partitionKey(name)) !== null;
    if (!ready) {
      js.retentionHere.delete(name);
      continue;
    }
    seen.set(name, now);
    if (js.retentionHere.has(name)) continue;
    js.retentionHere.add(name);
    // Held back until now: what the consumers' stored acks (or, on an interest stream, nobody) let go.
    const v = await js.freshView(name);
    v?.recheckFrom(1);
  }
}

/** A stored consumer configuration acquireConsumer can load (one it cannot is skipped, as at a single broker's start). */
function readable(config: string): boolean {
  try {
    JSON.parse(config);
    return true;
  } catch {
    return false;
  }
}

/**
 * STREAM.INFO and STREAM.MSG.GET of a stream whose state lives with its partition's owner (workqueue and interest
 * retention: what its consumers removed; mirrors and sources: the copier's lag and activity), at another broker:
 * answered by the owner. null: served here (owned here, nobody else owns it, or the owner could not be reached).
 */
export async function routeStream(js: JetStreamState, cl: Cluster, t: string[], body: string, reply: string): Promise<Json | null> {
  const name = t[1] === 'INFO' ? t[2] : t[3];
  const e = name === undefined ? undefined : js.engine.getAnyStream(name);
  if (e === undefined || e.def.partitions !== 1) return null;
  const o = jsOptions(e.def);
  if (o.retention === 'limits' && o.mirror === null && o.sources.length === 0) return null;
  const key = partitionKey(name);
  if (cl.owns('partition', key) !== null) return null;
  try {
    const owner = cl.owner('partition', key) ?? (await cl.lookup('partition', key));
    if (owner === null || owner.broker === cl.id) return null;
    js.clusterStats.forwarded++;
    const { head } = await call(cl.channel!, owner.broker, RPC.jsRequest, { t, body, reply });
    return head.none === true || head.out === undefined ? null : head.out;
  } catch (err) {
    js.clusterStats.forwardFailures++;
    js.logLimit.log(
      'warn',
      `jetstream-stream-forward|${name}`,
      { err, stream: name },
      "JetStream stream request answered here: its partition's owner could not be reached",
    );
    return null;
  }
}
