/**
 * The AMQP module's view for the RabbitMQ management API (the contract is the control plane's:
 * src/control/rabbitmq/types.ts): live connections with their channels and consumers, read from the adapter's
 * connection set when asked (nothing is kept or counted for it), and the resource alarms.
 */
import type { AmqpChannelView, AmqpConnectionView, AmqpManagementView, AmqpStreamQueueView } from '../../control/index.js';
import {
  isFlowError,
  isQualifiedStream,
  namespaceNames,
  splitName,
  splitStreamName,
  vhostQueueOfStream,
  vhostStreamOfQueue,
  type StreamDef,
} from '../../core/index.js';
import type { AmqpAdapter } from './adapter.js';
import type { AmqpChannel } from './channel.js';
import { AmqpConnection } from './connection.js';
import { tableToJson } from './properties.js';
import type { FieldTable } from './codec/index.js';
import { AmqpConsumer } from './consume.js';
import { partitionQueue, superStreamPartitions, type SuperStreamCtx } from './super-stream.js';
import { removePartition } from './super-stream-declare.js';
import { checkEquivalent, streamQueueSettings } from './stream-args.js';
import { AmqpError } from './errors.js';

/** A duration in RabbitMQ's form (x-max-age): the largest unit that divides it. */
function durationText(ms: number): string {
  for (const [u, n] of [
    ['Y', 365 * 86_400_000],
    ['M', 30 * 86_400_000],
    ['D', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
  ] as const)
    if (ms % n === 0) return `${ms / n}${u}`;
  return `${Math.max(1, Math.round(ms / 1000))}s`;
}

/** A stream's settings as the arguments of its stream queue (stream-args.ts reads them the other way). */
function streamArguments(def: StreamDef): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (def.retentionMs !== null && def.retentionMs > 0) out['x-max-age'] = durationText(def.retentionMs);
  if (typeof def.retentionBytes === 'number' && def.retentionBytes > 0) out['x-max-length-bytes'] = def.retentionBytes;
  if (typeof def.segmentBytes === 'number' && def.segmentBytes > 0) out['x-stream-max-segment-size-bytes'] = def.segmentBytes;
  out['x-queue-type'] = 'stream';
  return out;
}

/**
 * Every stream as AMQP sees it: a super stream's partitions as their queues `S-<key>` (a queue or stream of that
 * exact name wins, as in declare.ts), any other stream as the stream queue of its name (a classic queue of the same
 * name wins).
 */
function streamQueues(ctx: SuperStreamCtx): AmqpStreamQueueView[] {
  const { engine, router } = ctx;
  const records = (s: string, p: number) => {
    const o = engine.offsets(s, p);
    return Math.max(0, o.highWatermark - o.logStartOffset);
  };
  const out: AmqpStreamQueueView[] = [];
  for (const def of engine.listAllStreams()) {
    if (isQualifiedStream(def.name)) {
      // A vhost's stream queue (`t1~orders` is t1's `orders`: `$ns/t1/orders`), or its declared super stream's
      // partition queues (`$ns/t1/S-<key>`); a tenant's stream of several partitions is no derived super stream.
      const q = vhostQueueOfStream(namespaceNames(splitStreamName(def.name).namespace), def.name);
      if (q === null) continue;
      const sup = superStreamPartitions(ctx, q);
      if (sup !== null) {
        for (const p of sup) {
          const name = `${q}-${p.key}`;
          if (p.partition >= def.partitions || router.getQueue(name) !== undefined) continue;
          const args = streamArguments(def);
          out.push({ name, stream: def.name, partition: p.partition, superStream: q, key: p.key, arguments: args, messages: records(def.name, p.partition) });
        }
        continue;
      }
      if (def.partitions !== 1 || router.getQueue(q) !== undefined) continue;
      out.push({ name: q, stream: def.name, partition: 0, superStream: null, key: null, arguments: streamArguments(def), messages: records(def.name, 0) });
      continue;
    }
    const parts = superStreamPartitions(ctx, def.name);
    if (parts !== null && parts.length > 0) {
      for (const p of parts) {
        const name = `${def.name}-${p.key}`;
        if (router.getQueue(name) !== undefined || engine.getStream(name) !== undefined) continue;
        if (p.partition >= def.partitions) continue;
        const args = streamArguments(def);
        out.push({
          name,
          stream: def.name,
          partition: p.partition,
          superStream: def.name,
          key: p.key,
          arguments: args,
          messages: records(def.name, p.partition),
        });
      }
      continue;
    }
    if (router.getQueue(def.name) !== undefined) continue;
    out.push({ name: def.name, stream: def.name, partition: 0, superStream: null, key: null, arguments: streamArguments(def), messages: records(def.name, 0) });
  }
  return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** queue.delete of a stream queue or partition queue, without a channel (the caller checked permissions). */
/**
 * A stream queue made by the management API (PUT /api/queues, definitions import): the checks and the stream of an
 * AMQP queue.declare with x-queue-type stream (declare.ts), RabbitMQ's texts as the 400's reason.
 */
async function declareStreamQueue(
  ctx: SuperStreamCtx,
  name: string,
  args: Record<string, unknown>,
  durable: boolean,
  autoDelete: boolean,
): Promise<{ created: boolean } | { error: string }> {
  const { engine, router } = ctx;
  // `name` is the queue's internal name: `$ns/t1/orders` in vhost t1, whose stream is `t1~orders` (core vhosts.ts).
  const { namespace, name: own } = splitName(name);
  const ns = namespaceNames(namespace);
  const vhost = ns.isDefault ? '/' : namespace;
  if (!durable) return { error: `invalid property 'non-durable' for queue '${own}' in vhost '${vhost}'` };
  if (autoDelete) return { error: `invalid property 'auto-delete' for queue '${own}' in vhost '${vhost}'` };
  if (router.getQueue(name) !== undefined) return { error: `inequivalent arg 'x-queue-type' for queue '${own}' in vhost '${vhost}'` };
  const stream = vhostStreamOfQueue(ns, name);
  if (stream === null) return { error: `stream queue name '${own}': not a valid stream name` };
  // A super stream's partition queue that exists (an import of an export holds them): left as it is.
  if (engine.getAnyStream(stream) === undefined && partitionQueue(ctx, name) !== null) return { created: false };
  const table = args as FieldTable;
  try {
    const settings = streamQueueSettings(table, own, vhost);
    const existing = engine.getAnyStream(stream);
    if (existing !== undefined) {
      checkEquivalent(existing.def, table, settings, vhost);
      return { created: false };
    }
    await engine.createStream({ name: stream, partitions: 1, ...settings, ...(ns.isDefault ? {} : { namespaced: true }) });
    return { created: true };
  } catch (err) {
    if (err instanceof AmqpError) return { error: err.message };
    if (isFlowError(err, 'INVALID_ARGUMENT')) return { error: `stream queue name '${own}': ${(err as Error).message}` };
    if (isFlowError(err, 'ALREADY_EXISTS')) return { created: false };
    throw err;
  }
}

async function deleteStreamQueue(ctx: SuperStreamCtx, name: string): Promise<number | null> {
  const { engine, router } = ctx;
  if (router.getQueue(name) !== undefined) return null;
  const { namespace } = splitName(name);
  const stream = vhostStreamOfQueue(namespaceNames(namespace), name);
  if (stream !== null && engine.getAnyStream(stream) !== undefined) {
    const o = engine.offsets(stream, 0);
    await engine.deleteStream(stream);
    return o.highWatermark - o.logStartOffset;
  }
  const p = partitionQueue(ctx, name);
  return p === null ? null : removePartition(ctx, p);
}

/** The queue a stream consumer reads: a super stream's partition queue `S-<key>`, else the stream's own name. */
function streamConsumerQueue(ctx: SuperStreamCtx, stream: string, partition: number): string {
  // A vhost's stream `t1~S` is reached by its queue (or super-stream exchange) `$ns/t1/S`.
  const x = isQualifiedStream(stream) ? (vhostQueueOfStream(namespaceNames(splitStreamName(stream).namespace), stream) ?? stream) : stream;
  const p = superStreamPartitions(ctx, x)?.find((y) => y.partition === partition);
  return p === undefined ? x : `${x}-${p.key}`;
}

function channelView(ch: AmqpChannel, ctx: SuperStreamCtx): AmqpChannelView {
  const consumers = [];
  for (const c of ch.consumers?.values() ?? []) {
    consumers.push({
      tag: c.tag,
      queue: c.queue.def.name,
      ackRequired: !c.noAck,
      prefetchCount: c instanceof AmqpConsumer ? c.prefetch : 0,
      priority: c.priority ?? 0,
    });
  }
  for (const [tag, c] of ch.streamConsumers ?? []) {
    consumers.push({ tag, queue: streamConsumerQueue(ctx, c.stream, c.partition), ackRequired: !c.noAck, prefetchCount: ch.consumerPrefetch, priority: 0 });
  }
  let unconfirmed = 0;
  for (let i = ch.confirmHead; i < ch.confirms.length; i++) if (ch.confirms[i].state === 0) unconfirmed++;
  return {
    number: ch.ch,
    prefetchCount: ch.consumerPrefetch,
    globalPrefetchCount: ch.channelPrefetch,
    unacked: ch.unacked?.size ?? 0,
    confirm: ch.confirm,
    transactional: ch.tx,
    uncommittedMessages: ch.txPublishes?.length ?? 0,
    uncommittedAcks: ch.txSettles?.length ?? 0,
    unconfirmed,
    consumers,
  };
}

function connectionView(c: AmqpConnection, ctx: SuperStreamCtx): AmqpConnectionView {
  const f = c.managementFigures();
  const s = c.stream as unknown as { localAddress?: string; localPort?: number; bytesRead?: number; bytesWritten?: number };
  return {
    id: c.id,
    state: f.state,
    user: c.user ?? c.loginName,
    vhost: c.vhost,
    namespace: c.principal.namespace,
    peerHost: c.remoteAddress ?? '',
    peerPort: c.remotePort ?? 0,
    host: s.localAddress ?? '',
    port: s.localPort ?? 0,
    tls: c.listener === 'amqps',
    authMechanism: c.loginMechanism,
    frameMax: c.frameMax,
    channelMax: f.channelMax,
    heartbeatSec: f.heartbeatSec,
    connectedAt: f.openedAt,
    recvOct: s.bytesRead ?? 0,
    sendOct: s.bytesWritten ?? 0,
    recvCnt: f.frames.in,
    sendCnt: f.frames.out,
    clientProperties: c.clientProperties === null ? {} : tableToJson(c.clientProperties as FieldTable),
    channels: f.channels.map((ch) => channelView(ch, ctx)),
  };
}

export function managementView(adapter: AmqpAdapter): AmqpManagementView {
  const ctx: SuperStreamCtx = { engine: adapter.ctx.engine, router: adapter.router };
  const all = (): AmqpConnection[] => [...adapter.connections].filter((c): c is AmqpConnection => c instanceof AmqpConnection);
  return {
    connections: () => all().map((c) => connectionView(c, ctx)),
    alarms: () => adapter.alarms,
    totals: () => ({
      publish: adapter.stats.published,
      confirm: adapter.stats.confirmsAcked,
      returnUnroutable: adapter.stats.returned,
      dropUnroutable: adapter.stats.droppedUnroutable,
    }),
    memoryLimit: () => adapter.options.memoryHighWatermark,
    streamQueues: () => streamQueues(ctx),
    deleteStreamQueue: (name) => deleteStreamQueue(ctx, name),
    declareStreamQueue: (name, args, durable, autoDelete) => declareStreamQueue(ctx, name, args, durable, autoDelete),
    close(id, reason) {
      const c = all().find((x) => x.id === id);
      if (c === undefined) return false;
      c.kick(reason);
      return true;
    },
  };
}
