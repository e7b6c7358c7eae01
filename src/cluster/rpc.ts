/**
 * The catalogue of the brokers' channel: every request and one-way message brokers exchange, with the types of its
 * bodies, a validator for each (a peer's body is checked against it before anything reads it), and the channel
 * version it appeared in. A broker announces the newest channel version it speaks at the handshake; a call whose
 * message is newer than what the peer speaks fails at once with UNAVAILABLE instead of reaching a broker that has
 * no handler for it (a rolling upgrade: brokers of the previous version keep working with the new ones on what
 * both know). Adding a message: define it here with `since: CHANNEL_VERSION` (raised by one when a release adds
 * messages), then call it with `call`/`cast` and serve it with `serve`/`listen`; nothing sends a method name
 * as a string of its own.
 *
 * Bodies are a JSON head and an optional binary tail (wire.ts); `raw` bodies are bytes only.
 */
import { createRequire } from 'node:module';
import type { Ajv, ValidateFunction } from 'ajv';
import { FlowError } from '../core/index.js';
import type { PartitionOffsets } from '../core/index.js';
import type { InterestMessage } from './interest.js';
import type { PeerChannel } from './types.js';
import { decodeBody, encodeBody } from './wire.js';

/**
 * The newest channel version this broker speaks. 4: `live.store` (QoS 1/2 publishes stored by the owners of the
 * persistent sessions they reach before they are acknowledged) and durable interest entries (`d`, `ds`). 5: the
 * fifth element of stream.append's head (a batch stamped with the forwarder's producer id, checked as such) and
 * queue.publish's forwarder and sequence (`f`, `n`): forwarded writes are recognised when retried; `stream.sizes`.
 * 6: `stream.maintain` (the admin API's flush and compact at the owners of a stream's partitions).
 */
export const CHANNEL_VERSION = 6;
/** The oldest version a peer may speak and still be let in. */
export const MIN_CHANNEL_VERSION = 1;

type Schema = Record<string, unknown>;

/** How one side of a message is encoded and checked. */
export interface BodyCodec<T> {
  encode(head: T, tail?: Buffer): Buffer;
  /** Decodes and validates; throws PROTOCOL_ERROR naming the message and what was wrong. */
  decode(body: Buffer, what: string): { head: T; tail: Buffer };
}

let ajv: Ajv | null = null;

/** Ajv is loaded with the first check (synchronously: it is CommonJS), not at start: it was ~23 ms of a broker's start. */
function newAjv(): Ajv {
  const { Ajv: AjvClass } = createRequire(import.meta.url)('ajv') as typeof import('ajv');
  return new AjvClass({ strictSchema: true, strictRequired: true, strictTypes: false, strictTuples: false });
}

/** A validator of `schema`, compiled on first use (so that a broker's start does not pay for all of them). */
function checker<T>(schema: Schema): (value: unknown, what: string) => T {
  let check: ValidateFunction<T> | null = null;
  return (value, what) => {
    // strictTypes/strictTuples off: nullable unions and the optional fourth element of live.publish's x.
    check ??= (ajv ??= newAjv()).compile<T>(schema);
    if (!check(value)) throw new FlowError('PROTOCOL_ERROR', `cluster ${what}: ${ajv!.errorsText(check.errors, { dataVar: 'head' })}`);
    return value;
  };
}

/** A JSON head checked against `schema`, with an optional binary tail. */
export function json<T>(schema: Schema): BodyCodec<T> {
  const check = checker<T>(schema);
  return {
    encode: (head, tail) => encodeBody(head, tail),
    decode(body, what) {
      let d: { head: unknown; tail: Buffer };
      try {
        d = decodeBody<unknown>(body);
      } catch (err) {
        throw new FlowError('PROTOCOL_ERROR', `cluster ${what}: ${(err as Error).message}`, { cause: err });
      }
      return { head: check(d.head, what), tail: d.tail };
    },
  };
}

/** A body that is JSON text alone (no length prefix, no tail): channel.ping's reply, as version 1 sent it. */
export function bareJson<T>(schema: Schema): BodyCodec<T> {
  const check = checker<T>(schema);
  return {
    encode: (head) => Buffer.from(JSON.stringify(head)),
    decode(body, what) {
      let v: unknown;
      try {
        v = JSON.parse(body.toString('utf8'));
      } catch (err) {
        throw new FlowError('PROTOCOL_ERROR', `cluster ${what}: not JSON`, { cause: err });
      }
      return { head: check(v, what), tail: EMPTY };
    },
  };
}

/** A body that is bytes only (no head). */
export const raw: BodyCodec<Buffer> = {
  encode: (head) => head,
  decode: (body) => ({ head: body, tail: EMPTY }),
};

/** An empty body. */
export const empty: BodyCodec<null> = {
  encode: () => EMPTY,
  decode: () => ({ head: null, tail: EMPTY }),
};

const EMPTY = Buffer.alloc(0);

/** A request and its reply. */
export interface Rpc<Q, R> {
  readonly kind: 'request';
  readonly name: string;
  readonly since: number;
  readonly request: BodyCodec<Q>;
  readonly reply: BodyCodec<R>;
}

/** A one-way message. */
export interface Cast<M> {
  readonly kind: 'oneway';
  readonly name: string;
  readonly since: number;
  readonly message: BodyCodec<M>;
}

const rpc = <Q, R>(name: string, since: number, request: BodyCodec<Q>, reply: BodyCodec<R>): Rpc<Q, R> => ({ kind: 'request', name, since, request, reply });
const oneway = <M>(name: string, since: number, message: BodyCodec<M>): Cast<M> => ({ kind: 'oneway', name, since, message });

// ------------------------------------------------------------------------------------------------ schema pieces

const str = { type: 'string' } as const;
const int = { type: 'integer' } as const;
const num = { type: 'number' } as const;
const bool = { type: 'boolean' } as const;
const strOrNull = { type: ['string', 'null'] } as const;
const jsonObject = { type: 'object' } as const;
const arrayOf = (items: Schema | typeof str | typeof int): Schema => ({ type: 'array', items });
const tuple = (...items: Schema[]): Schema => ({ type: 'array', items, minItems: items.length, maxItems: items.length });
/**
 * An object with these properties, all required unless named in `optional`. Properties it does not name are let
 * through (and ignored): a broker of a newer version may add one, as Kafka's tagged fields do.
 */
const obj = (props: Record<string, Schema>, optional: string[] = []): Schema => ({
  type: 'object',
  properties: props,
  required: Object.keys(props).filter((k) => !optional.includes(k)),
});
const offsets = obj({ logStartOffset: int, highWatermark: int });
const queueStats = obj({ ready: int, unacked: int, bytes: int, consumers: int });
const interest = obj(
  {
    i: str,
    s: int,
    o: arrayOf(tuple({ enum: [0, 1] }, str, str, strOrNull)),
    e: arrayOf(tuple(str, str, strOrNull)),
    d: arrayOf(tuple({ enum: [0, 1] }, str, str)),
    ds: arrayOf(tuple(str, str)),
  },
  ['o', 'e', 'd', 'ds'],
);

// ------------------------------------------------------------------------------------------------ message types

/**
 * stream.append: [stream, partition, number, previous number, stamped] per batch in the tail (stream-appends.ts: the
 * owner takes it only after the previous one; stamped 1: the batch carries the forwarder's producer id and sequence,
 * checked by ProducerState.checkForwarded); four elements to and from a broker of channel version 3 or 4 (nothing
 * stamped), [stream, partition] of version 2.
 */
export type AppendHead = [string, number, number?, number?, (0 | 1)?];
/** stream.append's answer per batch, in order. */
export type AppendAnswer = { o: number; d?: 1; h: number; l: number } | { e: string; m: string };
export interface LivePublishHead {
  /** [index, liveKeys of the shared groups the receiver serves for that message], ascending. */
  g: Array<[number, string[]]>;
  /**
   * [index, deliverTopic, status, guardTopic] of messages carrying these delivery-only properties, which the
   * stored-message encoding leaves out. A broker of the version before guard topics sends three elements.
   */
  x?: Array<[number, string | null, string | null, (string | null)?]>;
}
/**
 * live.store: a batch of QoS 1/2 messages (the tail, as live.publish's) to be delivered by the receiver and stored by
 * the persistent sessions named per message before the answer. `g` and `x` as live.publish's; `s`: [index, session
 * keys to store it, session keys to skip (the publisher holds it for them, in order), 1 when only the named sessions
 * get it (a retry: the live subscribers had it on the first attempt)], one per message.
 */
export interface LiveStoreHead extends LivePublishHead {
  s: Array<[number, string[], string[], 0 | 1]>;
}
export type QueueStats = { ready: number; unacked: number; bytes: number; consumers: number };
export interface QueueDeliverItem {
  q: string;
  k: string;
  i: number;
  r: boolean;
  n: number;
  m: number;
  e: number;
}
export interface QueueGetDelivery {
  queue: string;
  id: number;
  redelivered: boolean;
  deliveryCount: number;
  remaining: number;
}
/** kafka.txnMarker: stream, partition, producer id and epoch, commit (else abort), the offset the partition joined at. */
export interface TxnMarkerHead {
  s: string;
  p: number;
  pid: number;
  e: number;
  c: boolean;
  o: number;
}
/** A JSON object (JetStream API bodies). */
type Json = Record<string, unknown>;

// ------------------------------------------------------------------------------------------------ the catalogue

/** Every message of the channel, by area. */
export const RPC = {
  /** Built into every channel: id, incarnation and clock of the peer (health checks, tests). */
  ping: rpc('channel.ping', 1, empty, bareJson<{ id: number; incarnation: string; at: number }>(obj({ id: int, incarnation: str, at: num }))),

  // Stream partitions (cluster/streams.ts): served by the partition's owner.
  streamHw: oneway('stream.hw', 1, json<Array<[string, number, number, number]>>(arrayOf(tuple(str, int, int, int)))),
  /** Stored bytes [stream, hot, objects] of the partitions the sender holds (every 2 s): namespace usage and quotas. */
  streamSizes: oneway('stream.sizes', 5, json<Array<[string, number, number]>>(arrayOf(tuple(str, int, int)))),
  streamAppend: rpc(
    'stream.append',
    1,
    json<AppendHead[]>(arrayOf({ type: 'array', items: [str, int, int, int, { enum: [0, 1] }], minItems: 2, maxItems: 5 })),
    json<AppendAnswer[]>(arrayOf({ oneOf: [obj({ o: int, d: { const: 1 }, h: int, l: int }, ['d']), obj({ e: str, m: str })] })),
  ),
  streamRead: rpc(
    'stream.read',
    1,
    json<{ s: string; p: number; o: number; m: number }>(obj({ s: str, p: int, o: int, m: int })),
    json<PartitionOffsets>(offsets),
  ),
  streamOffsets: rpc('stream.offsets', 1, json<{ s: string; p: number }>(obj({ s: str, p: int })), json<PartitionOffsets>(offsets)),
  streamWait: rpc(
    'stream.wait',
    1,
    json<{ s: string; p: number; o: number; t: number }>(obj({ s: str, p: int, o: int, t: num })),
    json<PartitionOffsets | null>({ oneOf: [{ type: 'null' }, offsets] }),
  ),
  streamTime: rpc('stream.time', 1, json<{ s: string; p: number; t: number }>(obj({ s: str, p: int, t: num })), json<number>(int)),
  streamTrim: rpc('stream.trim', 1, json<{ s: string; p: number; o: number }>(obj({ s: str, p: int, o: int })), json<number>(int)),
  /** The admin API's flush (and with `c`, compact) at the owner of partition `p`: it seals every tail it holds. */
  streamMaintain: rpc('stream.maintain', 6, json<{ s: string; p: number; c: boolean }>(obj({ s: str, p: int, c: bool })), json<number>(int)),

  // Live pub/sub (cluster/live.ts): interest tables and forwarded publishes.
  livePublish: oneway(
    'live.publish',
    1,
    json<LivePublishHead>(
      obj({ g: arrayOf(tuple(int, arrayOf(str))), x: arrayOf({ type: 'array', items: [int, strOrNull, strOrNull, strOrNull], minItems: 3, maxItems: 4 }) }, [
        'x',
      ]),
    ),
  ),
  /** The answer: [index, session keys not owned here (the publisher retries them at their owner)], for those with any. */
  liveStore: rpc(
    'live.store',
    4,
    json<LiveStoreHead>(
      obj(
        {
          g: arrayOf(tuple(int, arrayOf(str))),
          x: arrayOf({ type: 'array', items: [int, strOrNull, strOrNull, strOrNull], minItems: 3, maxItems: 4 }),
          s: arrayOf(tuple(int, arrayOf(str), arrayOf(str), { enum: [0, 1] })),
        },
        ['x'],
      ),
    ),
    json<{ m: Array<[number, string[]]> }>(obj({ m: arrayOf(tuple(int, arrayOf(str))) })),
  ),
  liveInterest: oneway('live.interest', 1, json<InterestMessage>(interest)),
  liveSync: oneway('live.sync', 1, json<InterestMessage>(interest)),
  liveSnapshot: rpc('live.snapshot', 1, empty, json<InterestMessage>(interest)),
  /** A retained message too big for a notification: the topic (UTF-8) in, the stored message (or nothing) out. */
  liveRetained: rpc('live.retained', 1, raw, raw),

  // Durable queues (cluster/queues.ts): served by the queue's owner, deliveries to the consumer's broker.
  // f, n (version 5): the forwarding broker's life and the first message's number (older owners ignore them).
  queuePublish: rpc(
    'queue.publish',
    1,
    json<{ q: string; f?: string; n?: number }>(obj({ q: str, f: str, n: int }, ['f', 'n'])),
    json<{ r: number[] }>(obj({ r: arrayOf(int) })),
  ),
  queueConsume: rpc(
    'queue.consume',
    1,
    json<{ q: string; k: string; i: string; t: string; o: string; n: boolean; p: number; x: boolean; c: number }>(
      obj({ q: str, k: str, i: str, t: str, o: str, n: bool, p: int, x: bool, c: int }),
    ),
    json<{ e: number; s: QueueStats }>(obj({ e: int, s: queueStats })),
  ),
  queueCredit: rpc(
    'queue.credit',
    1,
    json<{ q: string; k: string; i: string; n: number }>(obj({ q: str, k: str, i: str, n: int })),
    json<{ ok: boolean }>(obj({ ok: bool })),
  ),
  queueCancel: rpc(
    'queue.cancel',
    1,
    json<{ q: string; k: string; i: string; e: number; r: number[] }>(obj({ q: str, k: str, i: str, e: int, r: arrayOf(int) })),
    json<Record<string, never>>(obj({})),
  ),
  queueCancelled: oneway('queue.cancelled', 1, json<{ k: string; r: string }>(obj({ k: str, r: str }))),
  queueDeliver: rpc(
    'queue.deliver',
    1,
    json<QueueDeliverItem[]>(arrayOf(obj({ q: str, k: str, i: int, r: bool, n: int, m: int, e: int }))),
    json<{ refuse: number[] }>(obj({ refuse: arrayOf(int) })),
  ),
  queueGet: rpc(
    'queue.get',
    1,
    json<{ q: string; o: string; n: boolean; i: string }>(obj({ q: str, o: str, n: bool, i: str })),
    json<{ d: QueueGetDelivery | null; e: number; s: QueueStats }>(
      obj({ d: { oneOf: [{ type: 'null' }, obj({ queue: str, id: int, redelivered: bool, deliveryCount: int, remaining: int })] }, e: int, s: queueStats }),
    ),
  ),
  queueSettle: rpc(
    'queue.settle',
    1,
    json<{ q: string; e: number; ops: Array<[number, number]> }>(obj({ q: str, e: int, ops: arrayOf(tuple(int, int)) })),
    json<Record<string, never>>(obj({})),
  ),
  queueRelease: rpc('queue.release', 1, json<{ q: string; o: string; i: string }>(obj({ q: str, o: str, i: str })), json<Record<string, never>>(obj({}))),
  queuePurge: rpc('queue.purge', 1, json<{ q: string }>(obj({ q: str })), json<{ n: number }>(obj({ n: int }))),
  queueDelete: rpc('queue.delete', 1, json<{ q: string }>(obj({ q: str })), json<{ n: number }>(obj({ n: int }))),
  queueStats: rpc('queue.stats', 1, json<{ q: string }>(obj({ q: str })), json<{ s: QueueStats }>(obj({ s: queueStats }))),
  queueCheck: rpc(
    'queue.check',
    1,
    json<{ i: string; k: string[] }>(obj({ i: str, k: arrayOf(str) })),
    json<{ missing: string[] }>(obj({ missing: arrayOf(str) })),
  ),

  // MQTT persistent sessions (protocols/mqtt/cluster.ts): served by the broker holding the session.
  sessionTakeover: rpc('session.takeover', 1, json<{ clientId: string }>(obj({ clientId: str })), json<{ ok: boolean }>(obj({ ok: bool }))),
  sessionDelete: rpc('session.delete', 1, json<{ clientId: string }>(obj({ clientId: str })), json<{ deleted: boolean }>(obj({ deleted: bool }))),

  // JetStream consumers (protocols/nats/jetstream): served by the consumer's or the stream's owner.
  jsRequest: rpc(
    'js.request',
    1,
    json<{ t: string[]; body: string; reply: string }>(obj({ t: arrayOf(str), body: str, reply: str })),
    json<{ none?: boolean; out?: Json }>(obj({ none: bool, out: jsonObject }, ['none', 'out'])),
  ),
  jsAck: oneway('js.ack', 1, json<{ l: string[]; b: string; r: string | null }>(obj({ l: arrayOf(str), b: str, r: strOrNull }))),
  /** A delivery or status for a client of the receiving broker; the tail is the stored message. */
  jsDeliver: oneway('js.deliver', 1, json<{ s: string | null; d: string | null; g?: string | null }>(obj({ s: strOrNull, d: strOrNull, g: strOrNull }, ['g']))),
  /** A publish for streams owned by the receiver; the tail is the stored message; the reply its PubAck or null. */
  jsPublish: rpc('js.publish', 1, json<null>({ type: 'null' }), json<Json | null>({ type: ['object', 'null'] })),
  jsConsumers: rpc('js.consumers', 1, json<{ stream: string }>(obj({ stream: str })), json<{ infos: Json[] }>(obj({ infos: arrayOf(jsonObject) }))),

  // Kafka transactions (protocols/kafka/transactions): the transaction coordinator asks a partition's leader to
  // write a commit or abort marker and update the partition's transaction state (version 2).
  kafkaTxnMarker: rpc(
    'kafka.txnMarker',
    2,
    json<TxnMarkerHead>(obj({ s: str, p: int, pid: int, e: int, c: bool, o: int })),
    json<{ o: number }>(obj({ o: int })),
  ),
} as const;

/** The request head of a catalogue entry. */
export type RpcRequest<D> = D extends Rpc<infer Q, infer _R> ? Q : never;
/** The reply head of a catalogue entry. */
export type RpcReply<D> = D extends Rpc<infer _Q, infer R> ? R : never;

/** Every message of the catalogue, for checks over all of them. */
export const ALL_MESSAGES: ReadonlyArray<Rpc<unknown, unknown> | Cast<unknown>> = Object.values(RPC) as ReadonlyArray<Rpc<unknown, unknown> | Cast<unknown>>;

// ------------------------------------------------------------------------------------------------ typed calls

function tooNew(ch: PeerChannel, to: number, def: { name: string; since: number }): FlowError | null {
  const v = ch.peerVersion(to);
  if (v === undefined || v >= def.since) return null;
  return new FlowError('UNAVAILABLE', `broker ${to} speaks channel version ${v}; ${def.name} needs version ${def.since}`);
}

/** Sends a request and decodes (and checks) its reply. */
export async function call<Q, R>(
  ch: PeerChannel,
  to: number,
  def: Rpc<Q, R>,
  head: Q,
  opts: { tail?: Buffer; timeoutMs?: number } = {},
): Promise<{ head: R; tail: Buffer }> {
  const old = tooNew(ch, to, def);
  if (old) throw old;
  const reply = await ch.request(to, def.name, def.request.encode(head, opts.tail), opts.timeoutMs);
  return def.reply.decode(reply, `${def.name} reply from broker ${to}`);
}

/** Sends a one-way message (dropped, as one-way messages are, to a peer too old for it). */
export function cast<M>(ch: PeerChannel, to: number, def: Cast<M>, head: M, tail?: Buffer): void {
  if (tooNew(ch, to, def)) return;
  ch.send(to, def.name, def.message.encode(head, tail));
}

/** The same one-way message to several peers, encoded once. */
export function castAll<M>(ch: PeerChannel, to: Iterable<number>, def: Cast<M>, head: M, tail?: Buffer): void {
  let body: Buffer | null = null;
  for (const id of to) {
    if (tooNew(ch, id, def)) continue;
    ch.send(id, def.name, (body ??= def.message.encode(head, tail)));
  }
}

/** A reply with a binary tail (a handler returns its head alone otherwise). */
export class WithTail<R> {
  constructor(
    readonly head: R,
    readonly tail: Buffer,
  ) {}
}

/** Serves a request: the handler gets the checked head and the tail, and returns the reply head (or WithTail). */
export function serve<Q, R>(ch: PeerChannel, def: Rpc<Q, R>, fn: (from: number, head: Q, tail: Buffer) => R | WithTail<R> | Promise<R | WithTail<R>>): void {
  ch.handle(def.name, async (from, body) => {
    const { head, tail } = def.request.decode(body, `${def.name} request from broker ${from}`);
    const out = await fn(from, head, tail);
    return out instanceof WithTail ? def.reply.encode(out.head, out.tail) : def.reply.encode(out);
  });
}

/** Listens to a one-way message: the handler gets the checked head and the tail. */
export function listen<M>(ch: PeerChannel, def: Cast<M>, fn: (from: number, head: M, tail: Buffer) => void): void {
  ch.on(def.name, (from, body) => {
    const { head, tail } = def.message.decode(body, `${def.name} from broker ${from}`);
    fn(from, head, tail);
  });
}
