/**
 * AMQP codec fuzzing, seeded (a failure names its seed): random and mutated bytes never make the decoders throw
 * anything but AmqpCodecError, and random methods, tables and properties survive encode → decode (and amqplib
 * reads what we write).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  AmqpCodecError,
  FrameReader,
  METHOD_DEFS,
  METHOD_NAMES,
  PROTOCOL_HEADER,
  Typed,
  decodeContentHeader,
  decodeMethod,
  decodeTable,
  encodeContent,
  encodeContentHeader,
  encodeFrame,
  encodeMessageFrames,
  encodeMethod,
  encodeMethodFrame,
  encodeTable,
  methodInfo,
  type AmqpFrame,
  type AmqpMethod,
  type BasicProperties,
  type FieldTable,
  type FieldValue,
  type ProtocolHeaderFrame,
} from '../../../src/protocols/amqp/codec/index.js';
import { prng } from '../../helpers/prng.js';
import { FULL_PROPERTIES_FIXTURE, METHOD_FIXTURES } from './codec-fixtures.js';
import { amqplibArgName, amqplibCodec, amqplibDefs, amqplibId, plain } from './helpers.js';

type Rand = () => number;
const int = (r: Rand, n: number): number => Math.floor(r() * n);
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[int(r, xs.length)]!;

function bytes(r: Rand, n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = int(r, 256);
  return b;
}

const ALPHABET = ['a', 'b', 'z', '.', '#', '*', '/', '-', '_', ' ', 'é', '日', '\u0000', '😀', '0', '9'];
function text(r: Rand, maxBytes: number): string {
  let s = '';
  const n = int(r, 12);
  for (let i = 0; i < n; i++) {
    const c = pick(r, ALPHABET);
    if (Buffer.byteLength(s + c) > maxBytes) break;
    s += c;
  }
  return s;
}

/** Runs fn; anything thrown must be an AmqpCodecError with a codec reply code. Returns whether it threw. */
function onlyCodecErrors(fn: () => void, context: string): boolean {
  try {
    fn();
    return false;
  } catch (e) {
    if (!(e instanceof AmqpCodecError)) {
      assert.fail(`${context}: threw ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
    }
    assert.ok([501, 502, 503, 505, 540].includes(e.replyCode), `${context}: reply code ${e.replyCode}`);
    return true;
  }
}

function randomValue(r: Rand, depth: number): FieldValue {
  switch (int(r, depth > 3 ? 16 : 19)) {
    case 0:
      return r() < 0.5;
    case 1:
      return new Typed('b', int(r, 256) - 128);
    case 2:
      return new Typed('B', int(r, 256));
    case 3:
      return new Typed('s', int(r, 65536) - 32768);
    case 4:
      return new Typed('u', int(r, 65536));
    case 5:
      return int(r, 2 ** 32) - 2 ** 31; // I
    case 6:
      return new Typed('i', int(r, 2 ** 32));
    case 7:
      return new Typed('l', bytes(r, 8).readBigInt64BE(0));
    case 8:
      return new Typed('L', bytes(r, 8).readBigInt64BE(0));
    case 9:
      return new Typed('f', bytes(r, 4).readFloatBE(0));
    case 10:
      return new Typed('d', bytes(r, 8).readDoubleBE(0));
    case 11:
      return new Typed('D', { scale: int(r, 256), value: int(r, 2 ** 32) });
    case 12:
      return text(r, 40);
    case 13:
      return bytes(r, int(r, 20));
    case 14:
      return new Typed('T', bytes(r, 8).readBigUInt64BE(0));
    case 15:
      return null;
    case 16:
      return Array.from({ length: int(r, 4) }, () => randomValue(r, depth + 1));
    case 17:
      return randomTable(r, depth + 1);
    default:
      return new Typed('S', Buffer.from([0xff, ...bytes(r, int(r, 5))])); // never valid UTF-8
  }
}

function randomTable(r: Rand, depth = 0): FieldTable {
  const t: FieldTable = {};
  const n = int(r, depth === 0 ? 8 : 4);
  // keys that are not integer-like, so the object keeps wire order and bytes compare exactly
  for (let i = 0; i < n; i++) t[`k${i}${text(r, 20)}`] = randomValue(r, depth);
  return t;
}

function randomMethod(r: Rand): AmqpMethod {
  const name = pick(r, METHOD_NAMES);
  const m: Record<string, unknown> = { name };
  for (const [key, kind] of METHOD_DEFS[name].args) {
    if (key === '') continue;
    switch (kind) {
      case 'octet':
        m[key] = int(r, 256);
        break;
      case 'short':
        m[key] = int(r, 65536);
        break;
      case 'long':
        m[key] = int(r, 2 ** 32);
        break;
      case 'longlong':
        m[key] = r() < 0.5 ? int(r, 1000) : int(r, 2 ** 53);
        break;
      case 'bit':
        m[key] = r() < 0.5;
        break;
      case 'shortstr':
        m[key] = r() < 0.1 ? 'x'.repeat(255) : text(r, 255);
        break;
      case 'longstr':
        m[key] = bytes(r, int(r, 50));
        break;
      case 'longtext':
        m[key] = text(r, 100);
        break;
      case 'table':
        m[key] = randomTable(r);
        break;
    }
  }
  return m as unknown as AmqpMethod;
}

function randomProperties(r: Rand): BasicProperties {
  const p: BasicProperties = {};
  const s = (): string => text(r, 255);
  if (r() < 0.5) p.contentType = s();
  if (r() < 0.5) p.contentEncoding = s();
  if (r() < 0.5) p.headers = randomTable(r);
  if (r() < 0.5) p.deliveryMode = int(r, 256);
  if (r() < 0.5) p.priority = int(r, 256);
  if (r() < 0.5) p.correlationId = s();
  if (r() < 0.5) p.replyTo = s();
  if (r() < 0.5) p.expiration = s();
  if (r() < 0.5) p.messageId = s();
  if (r() < 0.5) p.timestamp = int(r, 2 ** 53);
  if (r() < 0.5) p.type = s();
  if (r() < 0.5) p.userId = s();
  if (r() < 0.5) p.appId = s();
  if (r() < 0.5) p.clusterId = s();
  return p;
}

/** Flip, insert, delete or truncate a few bytes. */
function mutate(r: Rand, b: Buffer): Buffer {
  let out = Buffer.from(b);
  const edits = 1 + int(r, 3);
  for (let i = 0; i < edits; i++) {
    const at = int(r, Math.max(1, out.length));
    switch (int(r, 5)) {
      case 0:
        if (out.length > 0) out[at] = int(r, 256);
        break;
      case 1:
        if (out.length > 0) out[at] ^= 1 << int(r, 8);
        break;
      case 2:
        out = Buffer.concat([out.subarray(0, at), bytes(r, 1 + int(r, 4)), out.subarray(at)]);
        break;
      case 3:
        out = Buffer.concat([out.subarray(0, at), out.subarray(at + 1 + int(r, 4))]);
        break;
      default:
        out = out.subarray(0, at);
    }
  }
  return out;
}

const payloadOf = (frame: Buffer): Buffer => frame.subarray(7, frame.length - 1);

function hasTag(v: FieldValue, tag: string): boolean {
  if (v instanceof Typed) return v.type === tag;
  if (Array.isArray(v)) return v.some((x) => hasTag(x, tag));
  if (v !== null && typeof v === 'object' && !(v instanceof Uint8Array) && !(v instanceof Date)) return Object.values(v).some((x) => hasTag(x, tag));
  return false;
}

/** amqplib reads a content header we accepted to the same property values (it has no 'L' type). */
function compareHeaderWithAmqplib(payload: Buffer, ours: ReturnType<typeof decodeContentHeader>, context: string): void {
  let theirs: Record<string, unknown>;
  try {
    theirs = amqplibDefs.decode(60, payload.subarray(12));
  } catch (e) {
    assert.ok(ours.properties.headers !== undefined && hasTag(ours.properties.headers, 'L'), `${context}: amqplib: ${String(e)}`);
    return;
  }
  for (const [k, v] of Object.entries(ours.properties)) {
    if (k === 'headers' || k === 'rawHeaders') continue;
    assert.deepStrictEqual(theirs[k], v, `${context}: ${k}`);
  }
}

describe('AMQP codec fuzz: hostile bytes', () => {
  test('random method payloads (known ids, random arguments) throw only AmqpCodecError; what decodes, amqplib reads alike', () => {
    const seed = 0xa11ce;
    const r = prng(seed);
    let decoded = 0;
    let compared = 0;
    for (let i = 0; i < 20000; i++) {
      const info = methodInfo(pick(r, METHOD_NAMES))!;
      const head = Buffer.alloc(4);
      head.writeUInt16BE(r() < 0.02 ? int(r, 65536) : info.classId, 0);
      head.writeUInt16BE(r() < 0.02 ? int(r, 65536) : info.methodId, 2);
      const payload = Buffer.concat([head, bytes(r, int(r, 40))]);
      let m: AmqpMethod | undefined;
      if (!onlyCodecErrors(() => (m = decodeMethod(payload)), `seed ${seed} #${i} ${payload.toString('hex')}`)) {
        decoded++;
        // whatever decodes re-encodes, and decodes to the same thing again
        assert.deepStrictEqual(plain(decodeMethod(encodeMethod(m!))), plain(m));
        // and amqplib reads the same bytes to the same values (methods without tables: amqplib lacks some types)
        if (!METHOD_DEFS[m!.name].args.some(([, kind]) => kind === 'table')) {
          const theirs = amqplibDefs.decode(amqplibId(m!.name), payload.subarray(4));
          for (const [k, v] of Object.entries(m!)) {
            if (k === 'name') continue;
            const t = theirs[amqplibArgName(k)];
            assert.deepStrictEqual(typeof v === 'string' && Buffer.isBuffer(t) ? t.toString('utf8') : t, v, `seed ${seed} #${i} ${m!.name}.${k}`);
          }
          compared++;
        }
      }
    }
    assert.ok(compared > 50, `only ${compared} compared with amqplib`);
    assert.ok(decoded > 100, `only ${decoded} random payloads decoded: the fuzz is not reaching the arguments`);
  });

  test('mutated golden method frames throw only AmqpCodecError, or decode to something that round-trips', () => {
    const seed = 0xbeef;
    const r = prng(seed);
    for (let i = 0; i < 20000; i++) {
      const f = pick(r, METHOD_FIXTURES);
      const payload = mutate(r, payloadOf(Buffer.from(f.hex, 'hex')));
      let m: AmqpMethod | undefined;
      if (!onlyCodecErrors(() => (m = decodeMethod(payload)), `seed ${seed} #${i} ${payload.toString('hex')}`)) {
        assert.deepStrictEqual(plain(decodeMethod(encodeMethod(m!))), plain(m));
      }
    }
  });

  test('random and mutated content headers throw only AmqpCodecError', () => {
    const seed = 0xc0ffee;
    const r = prng(seed);
    const good = payloadOf(Buffer.from(FULL_PROPERTIES_FIXTURE.hex, 'hex'));
    for (let i = 0; i < 10000; i++) {
      const payload = i % 2 === 0 ? mutate(r, good) : Buffer.concat([Buffer.from([0, 60, 0, 0]), bytes(r, int(r, 60))]);
      for (const decodeHeaders of [false, true]) {
        let h: ReturnType<typeof decodeContentHeader> | undefined;
        if (!onlyCodecErrors(() => (h = decodeContentHeader(payload, decodeHeaders)), `seed ${seed} #${i} ${payload.toString('hex')}`)) {
          // a header that passed the in-place check must also decode, and re-encode to a header that decodes the same
          // (re-encoded from rawHeaders: a decoded table can be lossy where a key is not valid UTF-8)
          const { headers: _decoded, ...props } = h!.properties;
          const again = decodeContentHeader(encodeContentHeader(60, h!.bodySize, props), decodeHeaders);
          assert.deepStrictEqual(plain(again), plain(h));
          if (props.rawHeaders) decodeTable(props.rawHeaders);
          if (decodeHeaders) compareHeaderWithAmqplib(payload, h!, `seed ${seed} #${i}`);
        }
      }
    }
  });

  test('random and mutated field tables throw only AmqpCodecError', () => {
    const seed = 0x7ab1e;
    const r = prng(seed);
    for (let i = 0; i < 10000; i++) {
      let b: Buffer;
      if (i % 2 === 0) {
        b = mutate(r, encodeTable(randomTable(r)));
      } else {
        // a plausible prefix, then noise: tags drawn mostly from the valid ones
        const body = Buffer.concat(
          Array.from({ length: 1 + int(r, 6) }, () =>
            Buffer.concat([Buffer.from([1, 0x61, r() < 0.9 ? 'tbBsuIilLfdDSxATFV'.charCodeAt(int(r, 18)) : int(r, 256)]), bytes(r, int(r, 10))]),
          ),
        );
        const len = Buffer.alloc(4);
        len.writeUInt32BE(r() < 0.9 ? body.length : int(r, 2 ** 32));
        b = Buffer.concat([len, body]);
      }
      let t: FieldTable | undefined;
      if (!onlyCodecErrors(() => (t = decodeTable(b)), `seed ${seed} #${i} ${b.toString('hex')}`)) {
        assert.deepStrictEqual(plain(decodeTable(encodeTable(t))), plain(t));
      }
    }
  });

  test('random streams through the FrameReader throw only AmqpCodecError, and valid ones parse whole', () => {
    const seed = 0xf4a3e;
    const r = prng(seed);
    for (let i = 0; i < 1000; i++) {
      const frames: Buffer[] = [PROTOCOL_HEADER];
      const count = 1 + int(r, 6);
      for (let k = 0; k < count; k++) {
        frames.push(
          r() < 0.5 ? encodeMethodFrame(int(r, 4), randomMethod(r)) : encodeContent(1 + int(r, 3), 60, randomProperties(r), bytes(r, int(r, 600)), 0),
        );
      }
      const valid = Buffer.concat(frames);
      const stream = i % 2 === 0 ? valid : mutate(r, valid);
      const borrowed = r() < 0.5;
      const shared = Buffer.alloc(300);
      const reader = new FrameReader({ frameMax: r() < 0.5 ? 0 : 4096 + int(r, 4096), borrowed });
      const got: Array<AmqpFrame | ProtocolHeaderFrame> = [];
      onlyCodecErrors(() => {
        for (let at = 0; at < stream.length;) {
          const n = 1 + int(r, 300);
          if (borrowed) {
            shared.fill(0xee);
            reader.push(shared.subarray(0, stream.copy(shared, 0, at, at + n)));
          } else {
            reader.push(stream.subarray(at, at + n));
          }
          at += n;
          for (let f = reader.read(); f !== null; f = reader.read()) {
            got.push(f);
            if (f.type === 1) decodeMethod(f.payload);
            if (f.type === 2) decodeContentHeader(f.payload, true);
          }
          // memory stays bounded: what waits is less than one frame (at most frame-max), never a backlog
          if (reader.frameMax !== 0) assert.ok(reader.buffered < reader.frameMax, `seed ${seed} #${i}: ${reader.buffered} buffered`);
        }
      }, `seed ${seed} #${i}`);
      if (stream === valid && reader.frameMax === 0) {
        // every frame came out, and nothing is left over
        assert.equal(reader.buffered, 0);
        assert.equal(got.length >= count + 1, true);
        assert.equal(got.filter((f) => f.type === 1).length, frames.filter((f) => f[0] === 1).length);
      }
    }
  });
});

describe('AMQP codec fuzz: round trips', () => {
  test('random methods encode → decode to themselves, and amqplib decodes them to the same values', () => {
    const seed = 0x5eed;
    const r = prng(seed);
    for (let i = 0; i < 3000; i++) {
      const m = randomMethod(r);
      const frame = encodeMethodFrame(int(r, 65536), m);
      const back = decodeMethod(payloadOf(frame));
      assert.deepStrictEqual(plain(back), plain(m), `seed ${seed} #${i}`);
      // amqplib cannot read every table type ('L'), so it checks the methods without tables
      if (i % 5 === 0 && !METHOD_DEFS[m.name].args.some(([, kind]) => kind === 'table')) {
        const theirs = amqplibDefs.decode(amqplibId(m.name), payloadOf(frame).subarray(4));
        for (const [k, v] of Object.entries(m)) {
          if (k === 'name') continue;
          const t = theirs[amqplibArgName(k)];
          assert.deepStrictEqual(typeof v === 'string' && Buffer.isBuffer(t) ? t.toString('utf8') : t, v, `seed ${seed} #${i} ${m.name}.${k}`);
        }
      }
    }
  });

  test('random tables with every type: decode(encode(t)) = t and the bytes re-encode identically', () => {
    const seed = 0x7ab;
    const r = prng(seed);
    for (let i = 0; i < 3000; i++) {
      const t = randomTable(r);
      const b = encodeTable(t);
      const back = decodeTable(b);
      assert.deepStrictEqual(plain(back), plain(t), `seed ${seed} #${i}`);
      assert.ok(encodeTable(back).equals(b), `seed ${seed} #${i}`);
    }
  });

  test('amqplib decodes random tables of the types it knows to the same values', () => {
    const seed = 0x4a5;
    const r = prng(seed);
    for (let i = 0; i < 1000; i++) {
      const t: FieldTable = {};
      for (let k = 0; k < 5; k++) {
        const v = randomValue(r, 0);
        if (v instanceof Typed || v === null || typeof v !== 'object' || Buffer.isBuffer(v)) {
          // L and non-UTF-8 S have no amqplib reading; T and 64-bit ints come back as its own forms
          if (v instanceof Typed && ['L', 'S', 'T', 'l', 'D'].includes(v.type)) continue;
          t[`k${k}`] = v;
        }
      }
      const theirs = amqplibCodec.decodeFields(encodeTable(t).subarray(4));
      const expected: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(t)) expected[k] = v instanceof Typed ? v.value : v;
      assert.deepStrictEqual(theirs, expected, `seed ${seed} #${i}`);
    }
  });

  test('random properties and bodies: header + body frames at any frame-max reassemble to the input', () => {
    const seed = 0xb0d7;
    const r = prng(seed);
    for (let i = 0; i < 1000; i++) {
      const props = randomProperties(r);
      const body = bytes(r, int(r, 3000));
      const frameMax = r() < 0.2 ? 0 : 4096 + int(r, 4096);
      const channel = int(r, 65536);
      const method: AmqpMethod = {
        name: 'basic.deliver',
        consumerTag: text(r, 255),
        deliveryTag: int(r, 2 ** 53),
        redelivered: r() < 0.5,
        exchange: text(r, 255),
        routingKey: text(r, 255),
      };
      let all: Buffer;
      try {
        all = encodeMessageFrames(channel, method, props, body, frameMax);
      } catch (e) {
        // a random headers table can outgrow a small frame-max; that is the only refusal expected
        assert.ok(e instanceof AmqpCodecError && /exceeds frame-max/.test(e.message), String(e));
        continue;
      }
      const reader = new FrameReader({ frameMax, protocolHeader: false });
      reader.push(all);
      const frames: AmqpFrame[] = [];
      for (let f = reader.read(); f !== null; f = reader.read()) frames.push(f as AmqpFrame);
      assert.deepStrictEqual(plain(decodeMethod(frames[0]!.payload)), plain(method), `seed ${seed} #${i}`);
      const h = decodeContentHeader(frames[1]!.payload, true);
      const { rawHeaders, ...rest } = h.properties;
      assert.deepStrictEqual(plain(rest), plain(props), `seed ${seed} #${i}`);
      if (props.headers) assert.ok(rawHeaders!.equals(encodeTable(props.headers)));
      assert.equal(h.bodySize, body.length);
      const bodyFrames = frames.slice(2);
      assert.ok(bodyFrames.every((f) => f.type === 3 && f.channel === channel && (frameMax === 0 || f.payload.length <= frameMax - 8)));
      assert.ok(Buffer.concat(bodyFrames.map((f) => f.payload)).equals(body), `seed ${seed} #${i}`);
      // and the content alone is the same bytes as the tail of the combined encoding
      assert.ok(encodeContent(channel, 60, props, body, frameMax).equals(all.subarray(all.length - (all.length - 8 - frames[0]!.payload.length))));
      assert.ok(
        encodeFrame(2, channel, frames[1]!.payload).equals(
          all.subarray(8 + frames[0]!.payload.length, 16 + frames[0]!.payload.length + frames[1]!.payload.length),
        ),
      );
    }
  });
});
