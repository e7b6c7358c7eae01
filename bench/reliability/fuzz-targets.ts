/**
 * The decoders `npm run fuzz` feeds, with their valid seed inputs, the one error type each may throw, and the
 * largest single allocation each may legitimately make for an input of a given size.
 *
 * - mqtt/3.1.1 and mqtt/5.0: the MQTT packet parser (a stream of packets, as a connection feeds it).
 * - kafka/<Api>: every Kafka request decoder the broker routes (src/protocols/kafka/routes.ts), seeded with a
 *   request of that API at every version it supports.
 * - record-batch: the produced `records` field as the Produce handler takes it apart (split, header, CRC,
 *   validation) and as readers decode it; batch/<codec>: the same with a compressed body, for each codec the
 *   broker decompresses (gzip, snappy raw and xerial, lz4, zstd).
 *
 * - amqp/0-9-1: the AMQP codec's FrameReader (protocol header, then frames) with every method frame and content
 *   header it returns decoded, seeded with the golden fixtures of every method and a message split at frame-max.
 * - amqp/connection: the listener's own input path (AmqpConnection: frames split over reads, content headers and
 *   body frames assembled into messages on several channels) on an open connection with no ahead budget, so that
 *   every allocation must follow the bytes that arrived, never a size a frame or a content header announced
 *   (issue 24: 1 MiB announced, 1 byte sent). Each input is fed whole and again cut in pieces.
 *
 * - nats/server and nats/client: the NATS parsers (what a broker reads, what a client reads), seeded with the golden
 *   fixtures; each input is parsed whole and cut in two, and the two runs must agree (operations and error), and
 *   every HPUB/HMSG header block is parsed. A payload buffer up to max_payload may be allocated once its control
 *   line is read: that is the allowance.
 * - nats/server-gather: the server parser as the broker runs it (a payload budget, here of nothing): parsed whole,
 *   in small pieces and in small borrowed pieces, which must agree, with the budget given back after each run and
 *   no allowance for announced sizes: a payload's memory must follow the bytes that arrived.
 *
 * The WAL frame reader is not here: src/storage/wal/frame.ts has no decoder of its own, and the frame scan in
 * partition-wal.ts reads files it wrote itself (CRC-checked), not client bytes.
 */
import './alloc-guard.js';
import { execFileSync } from 'node:child_process';
import snappy from 'snappyjs';
import lz4 from 'lz4js';
import { gzipSync } from 'node:zlib';
import { Compression, FlowError, crc32c, decodeBatch, encodeBatch, readBatchInfo, splitBatches } from '../../src/core/index.js';
import { batchProblem } from '../../src/protocols/kafka/validate.js';
import {
  ApiVersionsApi,
  FetchApi,
  KafkaProtocolError,
  ListOffsetsApi,
  MetadataApi,
  ProduceApi,
  ZERO_UUID,
  decodeRequest,
  encodeRequest,
  type AnyApiCodec,
} from '../../src/protocols/kafka/codec/index.js';
import { KAFKA_ROUTES } from '../../src/protocols/kafka/routes.js';
import { INCOMPLETE, MqttProtocolError, encodePacket, parsePacket, type MqttPacket, type ProtocolLevel } from '../../src/protocols/mqtt/codec/index.js';
import { API_SAMPLES } from '../../test/protocols/kafka/samples.js';
import {
  AmqpCodecError,
  FRAME_HEADER,
  FRAME_METHOD,
  FrameReader,
  PROTOCOL_HEADER,
  decodeContentHeader,
  decodeMethod,
  encodeMessageFrames,
} from '../../src/protocols/amqp/codec/index.js';
import { FULL_PROPERTIES_FIXTURE, METHOD_FIXTURES } from '../../test/protocols/amqp/codec-fixtures.js';
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import pino from 'pino';
import { AmqpAdapter } from '../../src/protocols/amqp/adapter.js';
import { AmqpConnection } from '../../src/protocols/amqp/connection.js';
import { resolveAmqpOptions } from '../../src/protocols/amqp/options.js';
import type { AccessControl } from '../../src/control/index.js';
import type { AdapterContext } from '../../src/protocols/types.js';
import {
  NatsClientParser,
  NatsProtocolError,
  NatsServerParser,
  PayloadBudget,
  parseHeaders,
  type NatsClientHandler,
  type NatsServerHandler,
} from '../../src/protocols/nats/codec/index.js';
import { CLIENT_CASES, SERVER_CASES } from '../../test/protocols/nats/codec/fixtures.js';

export interface FuzzTarget {
  name: string;
  /** Valid inputs the mutations start from. */
  seeds: Buffer[];
  /** Decodes one input completely; throws what the decoder throws. */
  decode(input: Buffer): void;
  /** The decoder's own error type: anything else thrown is a failure. */
  isOwnError(e: unknown): boolean;
  /** Largest single allocation allowed while decoding an input of `n` bytes. */
  allocLimit(n: number): number;
  /**
   * Record-batch targets: makes a mutated batch well-formed enough to get past the header and CRC checks
   * (a hostile client computes CRCs too), so that the record and decompression decoders behind them are reached.
   */
  reframe?: boolean;
}

/** What a protocol decoder may allocate besides views: small structures, never more than a few times its input. */
const protocolLimit = (n: number): number => 4 * n + 4096;

// ---------------------------------------------------------------------------------------------------------- MQTT

const b = (s: string): Buffer => Buffer.from(s);

function mqttPackets(level: ProtocolLevel): MqttPacket[] {
  const v5 = level === 5;
  const props = v5
    ? {
        userProperties: [['k', 'v']] as Array<[string, string]>,
        contentType: 'text/plain',
        correlationData: b('corr'),
        messageExpiryInterval: 60,
        responseTopic: 'r/t',
      }
    : undefined;
  const name = level === 3 ? 'MQIsdp' : 'MQTT';
  const packets: MqttPacket[] = [
    {
      type: 'connect',
      protocolName: name,
      protocolLevel: level,
      cleanSession: false,
      keepalive: 30,
      clientId: 'fuzz-client',
      will: { topic: 'w/t', payload: b('gone'), qos: 1, retain: true, ...(v5 ? { properties: { willDelayInterval: 5, contentType: 'x' } } : {}) },
      username: 'user',
      password: b('secret'),
      ...(v5
        ? {
            properties: {
              sessionExpiryInterval: 3600,
              receiveMaximum: 10,
              maximumPacketSize: 65536,
              topicAliasMaximum: 4,
              authenticationMethod: 'SCRAM',
              authenticationData: b('abc'),
            },
          }
        : {}),
    },
    { type: 'connect', protocolName: name, protocolLevel: level, cleanSession: true, keepalive: 0, clientId: '', will: null, username: null, password: null },
    { type: 'publish', dup: false, qos: 0, retain: false, topic: 'a/b', packetId: 0, payload: b('hello') },
    {
      type: 'publish',
      dup: true,
      qos: 1,
      retain: true,
      topic: 'sensors/ü/temp',
      packetId: 7,
      payload: Buffer.alloc(40, 0x61),
      ...(props ? { properties: props } : {}),
    },
    {
      type: 'publish',
      dup: false,
      qos: 2,
      retain: false,
      topic: 'x',
      packetId: 65535,
      payload: Buffer.alloc(0),
      ...(v5 ? { properties: { topicAlias: 3, subscriptionIdentifiers: [1, 268435455] } } : {}),
    },
    { type: 'puback', packetId: 1, ...(v5 ? { reasonCode: 0x10, properties: { reasonString: 'none' } } : {}) },
    { type: 'pubrec', packetId: 2 },
    { type: 'pubrel', packetId: 3, ...(v5 ? { reasonCode: 0x92 } : {}) },
    { type: 'pubcomp', packetId: 4 },
    {
      type: 'subscribe',
      packetId: 10,
      subscriptions: [
        { filter: 'a/+/c', qos: 1, ...(v5 ? { noLocal: true, retainAsPublished: true, retainHandling: 2 as const } : {}) },
        { filter: '#', qos: 2 },
        { filter: '$share/g/s/#', qos: 0 },
      ],
      ...(v5 ? { properties: { subscriptionIdentifiers: [42], userProperties: [['a', 'b']] as Array<[string, string]> } } : {}),
    },
    { type: 'unsubscribe', packetId: 11, filters: ['a/+/c', '#'] },
    { type: 'pingreq' },
    { type: 'disconnect', ...(v5 ? { reasonCode: 0x04, properties: { sessionExpiryInterval: 0, reasonString: 'bye' } } : {}) },
  ];
  if (v5) packets.push({ type: 'auth', reasonCode: 0x18, properties: { authenticationMethod: 'SCRAM', authenticationData: b('client-final') } });
  return packets;
}

function mqttTarget(name: string, levels: ProtocolLevel[]): FuzzTarget {
  const seeds: Buffer[] = [];
  for (const level of levels) {
    const frames = mqttPackets(level).map((p) => encodePacket(p, level));
    seeds.push(...frames);
    // A connection's stream: CONNECT then several packets back to back.
    seeds.push(Buffer.concat(frames.slice(1)));
  }
  return {
    name,
    seeds,
    decode(input) {
      // A stream, as a connection parses it: the first byte (of the seed or the mutation) picks the level among
      // those of this target, and the largest packet size is the protocol's own maximum, so that the length
      // field is never refused by configuration before the parser has to cope with it.
      const level = levels[input.length > 0 ? input[input.length - 1] % levels.length : 0];
      let off = 0;
      for (let guard = 0; guard <= input.length; guard++) {
        const r = parsePacket(input, off, undefined, level);
        if (r === INCOMPLETE) return;
        if (r.bytesConsumed <= 0 || off + r.bytesConsumed > input.length) {
          throw new Error(`parser consumed ${r.bytesConsumed} bytes at ${off} of ${input.length}`);
        }
        off += r.bytesConsumed;
      }
      throw new Error('parser made no progress');
    },
    isOwnError: (e) => e instanceof MqttProtocolError,
    allocLimit: protocolLimit,
  };
}

// --------------------------------------------------------------------------------------------------------- Kafka

const BATCH = encodeBatch([
  { key: b('k'), value: b('v'), headers: [{ key: 'h', value: b('x') }], timestamp: 1700000000000 },
  { key: null, value: b('second'), headers: [], timestamp: 1700000000001 },
]);

/** A request body for the APIs that samples.ts (the admin and group APIs) does not cover. */
const EXTRA_REQUESTS: Array<{ codec: AnyApiCodec; body: unknown }> = [
  { codec: ApiVersionsApi, body: { clientSoftwareName: 'flowmq-fuzz', clientSoftwareVersion: '1.0' } },
  {
    codec: MetadataApi,
    body: {
      topics: [
        { topicId: ZERO_UUID, name: 'a.b' },
        { topicId: ZERO_UUID, name: 'ü' },
      ],
      allowAutoTopicCreation: true,
      includeClusterAuthorizedOperations: true,
      includeTopicAuthorizedOperations: true,
    },
  },
  {
    codec: ProduceApi,
    body: {
      transactionalId: null,
      acks: -1,
      timeoutMs: 1000,
      topics: [
        {
          name: 't1',
          partitions: [
            { index: 0, records: BATCH },
            { index: 1, records: null },
          ],
        },
        { name: 't2', partitions: [{ index: 5, records: Buffer.concat([BATCH, BATCH]) }] },
      ],
    },
  },
  {
    codec: FetchApi,
    body: {
      replicaId: -1,
      maxWaitMs: 500,
      minBytes: 1,
      maxBytes: 1 << 20,
      isolationLevel: 1,
      sessionId: 0,
      sessionEpoch: 0,
      topics: [
        {
          topic: 't',
          partitions: [{ partition: 0, currentLeaderEpoch: 3, fetchOffset: 2 ** 40, lastFetchedEpoch: 2, logStartOffset: 0, partitionMaxBytes: 1000 }],
        },
      ],
      forgottenTopics: [{ topic: 'old', partitions: [1, 2] }],
      rackId: 'rack-a',
      clusterId: 'c1',
    },
  },
  {
    codec: ListOffsetsApi,
    body: { replicaId: -1, isolationLevel: 1, topics: [{ name: 't', partitions: [{ partitionIndex: 0, currentLeaderEpoch: 0, timestamp: -1 }] }] },
  },
];

function kafkaTargets(): FuzzTarget[] {
  const bodies = [...EXTRA_REQUESTS, ...API_SAMPLES.map((s) => ({ codec: s.codec, body: s.request }))];
  return KAFKA_ROUTES.map((route) => {
    const codec = route.codec;
    const seeds: Buffer[] = [];
    let corr = 1;
    for (const s of bodies.filter((x) => x.codec === codec)) {
      for (let v = codec.minVersion; v <= codec.maxVersion; v++) {
        seeds.push(encodeRequest(codec, { apiVersion: v, correlationId: corr++, clientId: corr % 2 ? 'fuzz' : null }, s.body));
      }
    }
    if (seeds.length === 0) throw new Error(`no fuzz seed for ${codec.name}: add a request to samples.ts`);
    return {
      name: `kafka/${codec.name}`,
      seeds,
      decode(input: Buffer) {
        decodeRequest(input);
      },
      isOwnError: (e: unknown) => e instanceof KafkaProtocolError,
      allocLimit: protocolLimit,
    };
  });
}

// -------------------------------------------------------------------------------------------------- record batches

const RECORDS = [
  {
    key: b('key-1'),
    value: b('a value that compresses a value that compresses a value'),
    headers: [{ key: 'flowmq.topic', value: b('a/b') }],
    timestamp: 1700000000000,
  },
  { key: null, value: null, headers: [], timestamp: 1700000000005 },
  {
    key: b(''),
    value: Buffer.alloc(300, 0x41),
    headers: [
      { key: 'h1', value: null },
      { key: 'h2', value: b('v2') },
    ],
    timestamp: 1700000000009,
  },
];

/** The batch `batch` with its body replaced by `body` and its compression bits set to `codec`; length and CRC fixed. */
export function withBody(batch: Buffer, body: Buffer, codec: number): Buffer {
  const out = Buffer.concat([batch.subarray(0, 61), body]);
  out.writeInt32BE(out.length - 12, 8);
  out.writeInt16BE((out.readInt16BE(21) & ~0x07) | codec, 21);
  out.writeUInt32BE(crc32c(out, 21, out.length), 17);
  return out;
}

/** Sets a batch's length field to its size and recomputes its CRC (what a hostile client can always do). */
export function reframe(batch: Buffer): Buffer {
  if (batch.length < 61) return batch;
  const out = Buffer.from(batch);
  out.writeInt32BE(out.length - 12, 8);
  out.writeUInt32BE(crc32c(out, 21, out.length), 17);
  return out;
}

const u8 = (x: Uint8Array): Buffer => Buffer.from(x.buffer, x.byteOffset, x.byteLength);

function xerialSnappy(body: Buffer): Buffer {
  const block = u8(snappy.compress(body));
  const head = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1]);
  const len = Buffer.alloc(4);
  len.writeInt32BE(block.length);
  return Buffer.concat([head, len, block]);
}

/** zstd frames from the zstd command (fzstd only decompresses); none when it is not installed. */
function zstdFrames(body: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (const args of [
    ['-q', '-c'],
    ['-q', '-c', '--no-check', '-19'],
  ]) {
    try {
      out.push(execFileSync('zstd', args, { input: body }));
    } catch {
      // no zstd command: the zstd target still gets mutated headers of the other seeds and random bytes
    }
  }
  return out;
}

/** What the broker does with a produced `records` field, then what readers do with each stored batch. */
function decodeRecords(input: Buffer): void {
  for (const batch of splitBatches(input)) {
    const info = readBatchInfo(batch);
    batchProblem(batch, info);
    decodeBatch(batch);
  }
}

const isCorruptData = (e: unknown): boolean => e instanceof FlowError && e.code === 'CORRUPT_DATA';

function batchTargets(): FuzzTarget[] {
  const plain = RECORDS.map((_, i) => encodeBatch(RECORDS.slice(0, i + 1)));
  const bodies = plain.map((p) => p.subarray(61));
  const compressed = (codec: number, f: (body: Buffer) => Buffer[]): Buffer[] => plain.flatMap((p, i) => f(bodies[i]).map((body) => withBody(p, body, codec)));
  // Largest output each format can produce per input byte (what its decoder may legitimately allocate):
  // deflate 1032:1; snappy 64 bytes from a 3-byte copy; lz4 255 bytes per match-length byte; zstd 128 KiB from
  // a 4-byte RLE block (and fzstd allocates a window of up to twice that).
  const ratio =
    (r: number, floor = 0) =>
    (n: number) =>
      Math.max(floor, r * n) + 64 * 1024;
  const targets: Array<[string, Buffer[], (n: number) => number]> = [
    // Mutated attributes reach the decompressors too: zlib's fixed 16 KiB output chunk is allowed.
    ['record-batch', [...plain, Buffer.concat(plain)], (n) => protocolLimit(n) + 64 * 1024],
    ['batch/gzip', compressed(Compression.Gzip, (x) => [gzipSync(x)]), ratio(1032)],
    ['batch/snappy', compressed(Compression.Snappy, (x) => [u8(snappy.compress(x)), xerialSnappy(x)]), ratio(22)],
    ['batch/lz4', compressed(Compression.Lz4, (x) => [u8(lz4.compress(x))]), ratio(256)],
    ['batch/zstd', compressed(Compression.Zstd, zstdFrames), ratio(65536)],
  ];
  return targets.map(([name, seeds, allocLimit]) => ({
    name,
    seeds: seeds.length > 0 ? seeds : plain,
    decode: decodeRecords,
    isOwnError: isCorruptData,
    allocLimit,
    reframe: true,
  }));
}

// ---------------------------------------------------------------------------------------------------------- AMQP

function amqpTarget(): FuzzTarget {
  const frames = METHOD_FIXTURES.map((f) => Buffer.from(f.hex, 'hex'));
  const message = encodeMessageFrames(
    1,
    { name: 'basic.publish', exchange: 'amq.topic', routingKey: 'a.b', mandatory: true, immediate: false },
    FULL_PROPERTIES_FIXTURE.properties,
    Buffer.alloc(300, 7),
    128,
  );
  const seeds = [
    ...frames.map((f) => Buffer.concat([PROTOCOL_HEADER, f])),
    Buffer.concat([PROTOCOL_HEADER, ...frames.slice(0, 8), message]),
    Buffer.concat([PROTOCOL_HEADER, message, message]),
  ];
  return {
    name: 'amqp/0-9-1',
    seeds,
    decode(input) {
      // A connection's stream with the usual frame-max: the reader, then the decoders of what it returns.
      const reader = new FrameReader({ frameMax: 131072 });
      reader.push(input);
      for (let f = reader.read(); f !== null; f = reader.read()) {
        if (f.type === FRAME_METHOD) decodeMethod(f.payload);
        else if (f.type === FRAME_HEADER) decodeContentHeader(f.payload, true);
      }
    },
    isOwnError: (e) => e instanceof AmqpCodecError,
    allocLimit: protocolLimit,
  };
}

/**
 * A socket stand-in for the amqp/connection target: writes are dropped, and nothing is deferred (the fuzz loop is
 * synchronous: a callback scheduled per input would pile up for the whole run).
 */
class NullSocket extends EventEmitter {
  destroyed = false;
  readonly writableLength = 0;
  readonly writableNeedDrain = false;
  cork(): void {}
  uncork(): void {}
  write(): boolean {
    return true;
  }
  end(): void {}
  pause(): void {}
  resume(): void {}
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.emit('close');
  }
}

/** The amqp/connection target's "refused": the connection closed itself (connection.close sent) over the input. */
class ConnectionRefused extends Error {}

/** Settles never: the router's and engine's asynchronous answers, so that nothing runs after an input is done. */
const NEVER = new Promise<never>(() => undefined);

function amqpConnectionTarget(): FuzzTarget {
  const engine = new Proxy(
    {
      getQueue: () => undefined,
      getStream: () => undefined,
      getExchange: () => ({ name: 'x' }),
      writeRefusal: () => null,
      publishTo: () => ({ routed: 1, durable: NEVER, rejected: false }),
    } as Record<string | symbol, unknown>,
    { get: (t, k) => (k in t ? t[k] : () => NEVER) },
  );
  const access = {
    open: true,
    version: 0,
    can: () => true,
    subscription: () => 'allow',
  };
  const control = {
    accessFor: () => access,
    clients: { register: () => ({ close() {}, messagesIn: 0, messagesOut: 0 }) },
    quotas: { connect: () => ({ refused: 'fuzz' }) },
    anonymousAllowed: () => true,
    hasUsers: false,
    version: 0,
  } as unknown as AccessControl;
  const ctx = { engine, logger: pino({ level: 'silent' }), brokerId: 0 } as unknown as AdapterContext;
  const adapter = new AmqpAdapter(ctx, resolveAmqpOptions({ memoryHighWatermark: 0, frameAheadBudget: 0, partialBodyBudget: 1 << 30 }), control, () => 0);
  const frame = (type: number, ch: number, payload: Buffer): Buffer => {
    const f = Buffer.alloc(8 + payload.length);
    f[0] = type;
    f.writeUInt16BE(ch, 1);
    f.writeUInt32BE(payload.length, 3);
    payload.copy(f, 7);
    f[7 + payload.length] = 0xce;
    return f;
  };
  const publish = (ch: number, body: Buffer, announced = body.length, pieces = 1): Buffer => {
    const header = encodeMessageFrames(
      ch,
      { name: 'basic.publish', exchange: 'amq.topic', routingKey: 'a.b', mandatory: false, immediate: false },
      FULL_PROPERTIES_FIXTURE.properties,
      Buffer.alloc(0),
      131072,
    );
    // encodeMessageFrames wrote a content header for 0 bytes: rewrite its body size (the header frame's payload
    // starts with class, weight, then the 8-byte size).
    const out = Buffer.from(header);
    const methodSize = out.readUInt32BE(3);
    out.writeBigUInt64BE(BigInt(announced), 8 + methodSize + 7 + 4);
    const parts: Buffer[] = [out];
    const step = Math.max(1, Math.ceil(body.length / pieces));
    for (let at = 0; at < body.length; at += step) parts.push(frame(3, ch, body.subarray(at, at + step)));
    return Buffer.concat(parts);
  };
  const open = (ch: number) => frame(1, ch, Buffer.from([0, 20, 0, 10, 0]));
  const body = Buffer.alloc(3000, 7);
  const seeds = [
    Buffer.concat([open(1), publish(1, body)]),
    Buffer.concat([open(1), publish(1, body, body.length, 40)]),
    Buffer.concat([open(1), publish(1, Buffer.alloc(1, 1), 1 << 20)]),
    Buffer.concat([open(1), open(2), publish(1, body, body.length, 3), publish(2, Buffer.alloc(1, 1), 1 << 20), publish(1, body, body.length, 7)]),
    Buffer.concat([open(1), frame(1, 1, Buffer.from([0, 85, 0, 10, 0])), publish(1, body, body.length, 5), publish(1, body)]),
  ];
  const feed = (input: Buffer, cut: number): void => {
    const socket = new NullSocket();
    let receive: (b: Buffer) => void = () => undefined;
    const conn = new AmqpConnection(socket as unknown as Duplex, adapter, {
      id: 'fuzz',
      attachInput: (r) => {
        receive = r;
        return true;
      },
    });
    // Opened without the handshake (whose login is asynchronous): St.Opened, frame-max 128 KiB.
    const c = conn as unknown as Record<string, unknown>;
    c.st = 5;
    c.frameMax = 131072;
    if (!conn.isOpen) throw new Error('the fuzz target no longer opens its connection (AmqpConnection states changed)');
    let refused = false;
    try {
      if (cut > 0 && cut < input.length) {
        receive(input.subarray(0, cut));
        receive(input.subarray(cut));
      } else receive(input);
      refused = !conn.isOpen;
    } finally {
      conn.destroy();
    }
    if (adapter.input.partialBytes !== 0 || adapter.input.aheadBytes !== 0)
      throw new Error(`a closed connection left ${adapter.input.partialBytes} partial body bytes, ${adapter.input.aheadBytes} ahead bytes counted`);
    if (refused) throw new ConnectionRefused('the connection closed itself');
  };
  return {
    name: 'amqp/connection',
    seeds,
    decode(input) {
      let refusal: unknown = null;
      try {
        feed(input, 0);
      } catch (e) {
        if (!(e instanceof ConnectionRefused)) throw e;
        refusal = e;
      }
      feed(input, input.length >> 1);
      if (refusal !== null) throw refusal;
    },
    // The connection answers bad input itself (connection.close): nothing else may escape it.
    isOwnError: (e) => e instanceof ConnectionRefused,
    allocLimit: protocolLimit,
  };
}

// ---------------------------------------------------------------------------------------------------------- NATS

const NATS_LIMITS = { maxControlLine: 4096, maxPayload: 64 * 1024 };

/** Records a parser's operations as one string (to compare two runs), parsing every header block it is given. */
class NatsTrace implements NatsServerHandler, NatsClientHandler {
  out = '';
  onConnect(o: object): void {
    this.out += `C${JSON.stringify(o)}|`;
  }
  onPub(s: string, r: string | null, p: Buffer): void {
    this.out += `P${s} ${r} ${p.toString('hex')}|`;
  }
  onHpub(s: string, r: string | null, h: Buffer, p: Buffer): void {
    parseHeaders(h);
    this.out += `H${s} ${r} ${h.toString('hex')} ${p.toString('hex')}|`;
  }
  onSub(s: string, q: string | null, sid: string): void {
    this.out += `S${s} ${q} ${sid}|`;
  }
  onUnsub(sid: string, max: number | null): void {
    this.out += `U${sid} ${max}|`;
  }
  onInfo(o: object): void {
    this.out += `I${JSON.stringify(o)}|`;
  }
  onMsg(s: string, sid: string, r: string | null, p: Buffer): void {
    this.out += `M${s} ${sid} ${r} ${p.toString('hex')}|`;
  }
  onHmsg(s: string, sid: string, r: string | null, h: Buffer, p: Buffer): void {
    parseHeaders(h);
    this.out += `HM${s} ${sid} ${r} ${h.toString('hex')} ${p.toString('hex')}|`;
  }
  onOk(): void {
    this.out += '+|';
  }
  onErr(t: string): void {
    this.out += `-${t}|`;
  }
  onPing(): void {
    this.out += 'pi|';
  }
  onPong(): void {
    this.out += 'po|';
  }
}

function natsTarget(side: 'server' | 'client'): FuzzTarget {
  const cases = side === 'server' ? SERVER_CASES : CLIENT_CASES;
  const seeds = cases.map((c) => Buffer.from(c.input, 'latin1'));
  seeds.push(Buffer.concat(seeds.filter((_, i) => cases[i]!.error === undefined)));
  const run = (chunks: Buffer[]): { trace: string; error: unknown } => {
    const p = side === 'server' ? new NatsServerParser(NATS_LIMITS) : new NatsClientParser(NATS_LIMITS);
    const h = new NatsTrace();
    try {
      for (const c of chunks) (p as NatsServerParser).push(c, h as NatsServerHandler);
      return { trace: h.out, error: null };
    } catch (e) {
      return { trace: h.out, error: e };
    }
  };
  return {
    name: `nats/${side}`,
    seeds,
    decode(input) {
      const whole = run([input]);
      const cutAt = input.length >> 1;
      const halves = run([input.subarray(0, cutAt), input.subarray(cutAt)]);
      const errText = (e: unknown): string => (e instanceof NatsProtocolError ? `${e.errText}` : String(e));
      if (whole.trace !== halves.trace || (whole.error === null) !== (halves.error === null) || errText(whole.error) !== errText(halves.error)) {
        throw new Error(
          `NATS parser differs when the input is cut at ${cutAt}: ${whole.trace} ${errText(whole.error)} / ${halves.trace} ${errText(halves.error)}`,
        );
      }
      if (whole.error !== null) throw whole.error;
    },
    isOwnError: (e) => e instanceof NatsProtocolError,
    allocLimit: (n) => Math.max(protocolLimit(n), NATS_LIMITS.maxPayload),
  };
}

/**
 * The server parser as a broker runs it, with a payload budget (none at all here, so every payload cut by a chunk
 * boundary is gathered as its bytes arrive), fed the input whole, in small pieces, and in small borrowed pieces
 * (copied): the same operations and error each time, the budget back to nothing once the parser stops, and no
 * allocation beyond a few times the input, whatever size a control line announces (a `PUB x 65536` with a few bytes
 * behind it must not allocate 1 MiB).
 */
/** nats/server-gather's limits: payloads far larger than its allocation allowance may be announced. */
const GATHER_LIMITS = { maxControlLine: 4096, maxPayload: 1024 * 1024 };

function natsGatherTarget(): FuzzTarget {
  const seeds = SERVER_CASES.map((c) => Buffer.from(c.input, 'latin1'));
  seeds.push(Buffer.concat(seeds.filter((_, i) => SERVER_CASES[i]!.error === undefined)));
  seeds.push(Buffer.from(`PUB big 1048576\r\n${'x'.repeat(700)}`), Buffer.from(`HPUB big r 12 600000\r\nNATS/1.0\r\n\r\n${'y'.repeat(600)}`));
  const run = (chunks: Buffer[], borrowed: boolean): { trace: string; error: unknown } => {
    const budget = new PayloadBudget(0);
    const p = new NatsServerParser({ ...GATHER_LIMITS, budget, borrowed });
    const h = new NatsTrace();
    let error: unknown = null;
    try {
      for (const c of chunks) p.push(c, h);
    } catch (e) {
      error = e;
    }
    p.stop();
    if (budget.aheadBytes !== 0 || budget.gathering !== 0) throw new Error(`payload budget not given back: ${JSON.stringify(budget.figures())}`);
    return { trace: h.out, error };
  };
  return {
    name: 'nats/server-gather',
    seeds,
    decode(input) {
      const whole = run([input], false);
      // Pieces of 1 to 700 bytes (a view of a chunk from 512 on, copies below), in a pattern set by the input.
      const pieces: Buffer[] = [];
      const step = [1, 3, 511, 512, 700][input.length % 5]!;
      for (let k = 0; k < input.length; k += step) pieces.push(Buffer.from(input.subarray(k, k + step)));
      const errText = (e: unknown): string => (e instanceof NatsProtocolError ? `${e.errText}` : String(e));
      for (const borrowed of [false, true]) {
        const cut = run(pieces, borrowed);
        if (whole.trace !== cut.trace || errText(whole.error) !== errText(cut.error)) {
          throw new Error(
            `NATS parser with a budget differs in pieces of ${step} (borrowed ${borrowed}): ${whole.trace} ${errText(whole.error)} / ${cut.trace} ${errText(cut.error)}`,
          );
        }
      }
      if (whole.error !== null) throw whole.error;
    },
    isOwnError: (e) => e instanceof NatsProtocolError,
    // Borrowed mode copies small payloads into a 64 KiB slab of its own (one per parser): that is the allowance,
    // well under the sizes the seeds announce.
    allocLimit: (n) => Math.max(protocolLimit(n), 64 * 1024),
  };
}

let cached: FuzzTarget[] | undefined;

/** Every fuzz target, in a fixed order. */
export function fuzzTargets(): FuzzTarget[] {
  cached ??= [
    mqttTarget('mqtt/3.1.1', [4, 3]),
    mqttTarget('mqtt/5.0', [5]),
    ...kafkaTargets(),
    ...batchTargets(),
    amqpTarget(),
    amqpConnectionTarget(),
    natsTarget('server'),
    natsTarget('client'),
    natsGatherTarget(),
  ];
  return cached;
}
