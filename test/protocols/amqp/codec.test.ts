/**
 * AMQP 0-9-1 codec: golden fixtures for every method (checked against amqplib's encoder and decoder as well),
 * frames spelled out byte by byte from the spec, field tables with every RabbitMQ type, content headers with all
 * 14 properties, body framing across frame-max, the streaming FrameReader and the reply codes of bad input.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { describe, test } from 'node:test';
import {
  AmqpCodecError,
  FRAME_BODY,
  FRAME_HEADER,
  FRAME_HEARTBEAT,
  FRAME_METHOD,
  FrameReader,
  HEARTBEAT_FRAME,
  MAX_FIELD_DEPTH,
  METHOD_NAMES,
  PROTOCOL_HEADER,
  Typed,
  decodeContentHeader,
  decodeMethod,
  decodeTable,
  decodeTableEntries,
  encodeContent,
  encodeContentHeader,
  encodeFieldValue,
  encodeFrame,
  encodeMessageFrames,
  encodeMethod,
  encodeMethodFrame,
  encodeTable,
  fieldBoolean,
  fieldInteger,
  fieldNumber,
  fieldString,
  fieldTable,
  methodInfo,
  methodInfoById,
  replyTextOf,
  type AmqpFrame,
  type AmqpMethod,
  type FieldTable,
  type Method,
  type ProtocolHeaderFrame,
} from '../../../src/protocols/amqp/codec/index.js';
import { FULL_PROPERTIES_FIXTURE, METHOD_FIXTURES } from './codec-fixtures.js';
import { amqplibArgName, amqplibCodec, amqplibDefs, amqplibFrame, amqplibId, plain, toAmqplib } from './helpers.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

/** The payload of a single whole frame. */
const payloadOf = (frame: Buffer): Buffer => frame.subarray(7, frame.length - 1);

function codecError(fn: () => unknown, replyCode: number, pattern?: RegExp): AmqpCodecError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  assert.ok(caught instanceof AmqpCodecError, `expected AmqpCodecError ${replyCode}, got ${String(caught)}`);
  assert.equal(caught.replyCode, replyCode, caught.message);
  assert.equal(caught.code, 'PROTOCOL_ERROR');
  if (pattern) assert.match(caught.message, pattern);
  return caught;
}

/** Our method object as amqplib's decoder returns it (reserved fields left out, `nowait`, longstr as Buffer). */
function compareWithAmqplib(ours: AmqpMethod, theirs: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(ours)) {
    if (k === 'name') continue;
    const t = theirs[amqplibArgName(k)];
    if (typeof v === 'string' && Buffer.isBuffer(t)) assert.equal(t.toString('utf8'), v, `${ours.name}.${k}`);
    else assert.deepStrictEqual(plain(t), plain(v), `${ours.name}.${k}`);
  }
}

/**
 * Our method as amqplib's encoder wants it: its reserved fields from what it decoded, our values otherwise,
 * tables with explicit tags (amqplib would pick 'b' for a small number where we send 'I').
 */
function asAmqplibFields(ours: AmqpMethod, decoded: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...decoded };
  for (const [k, v] of Object.entries(ours)) {
    if (k === 'name') continue;
    out[amqplibArgName(k)] =
      typeof v === 'string' && Buffer.isBuffer(decoded[amqplibArgName(k)])
        ? Buffer.from(v)
        : v !== null && typeof v === 'object' && !Buffer.isBuffer(v)
          ? toAmqplib(v as FieldTable)
          : v;
  }
  return out;
}

describe('AMQP codec: methods', () => {
  test('there is a golden fixture for every method, and every method is in the table', () => {
    assert.deepEqual(
      METHOD_FIXTURES.map((f) => f.method.name),
      [...METHOD_NAMES],
    );
    // 0-9-1's six classes + confirm, RabbitMQ's extensions included
    assert.equal(METHOD_NAMES.length, 64);
  });

  for (const f of METHOD_FIXTURES) {
    test(`${f.method.name}: golden bytes both ways, and amqplib agrees`, () => {
      const bytes = hex(f.hex);
      assert.equal(encodeMethodFrame(f.channel, f.method).toString('hex'), f.hex);
      assert.deepStrictEqual(plain(decodeMethod(payloadOf(bytes))), plain(f.method));
      assert.deepEqual(encodeMethod(f.method), payloadOf(bytes));

      // The reference: amqplib's decoder reads our bytes, and its encoder, fed what it decoded, gives them back.
      const id = amqplibId(f.method.name);
      const theirs = amqplibDefs.decode(id, payloadOf(bytes).subarray(4));
      compareWithAmqplib(f.method, theirs);
      assert.equal(amqplibDefs.encodeMethod(id, f.channel, asAmqplibFields(f.method, theirs)).toString('hex'), f.hex);

      const info = methodInfo(f.method.name)!;
      assert.equal(info.classId * 65536 + info.methodId, id);
      assert.equal(methodInfoById(info.classId, info.methodId)?.name, f.method.name);
    });
  }

  test('connection.tune spelled out from the spec (§4.2.3, class 10 method 30)', () => {
    const bytes = encodeMethodFrame(0, { name: 'connection.tune', channelMax: 2047, frameMax: 131072, heartbeat: 60 });
    assert.deepEqual(
      bytes,
      hex(`01 0000 0000000c
           000a 001e
           07ff 00020000 003c
           ce`),
    );
  });

  test('basic.publish spelled out: reserved ticket 0, two shortstrs, mandatory and immediate in one octet', () => {
    const m: Method<'basic.publish'> = { name: 'basic.publish', exchange: 'ex', routingKey: 'k', mandatory: true, immediate: true };
    assert.deepEqual(
      encodeMethodFrame(1, m),
      hex(`01 0001 0000000c
           003c 0028
           0000 02 6578 01 6b 03
           ce`),
    );
    assert.deepEqual(decodeMethod(hex('003c0028 0000 026578 016b 02')), { ...m, mandatory: false, immediate: true });
  });

  test('exchange.declare packs its five bits into one octet, lowest bit first', () => {
    const base = { name: 'exchange.declare', exchange: 'x', type: 'fanout', arguments: {} } as const;
    const flags = (p: boolean, d: boolean, a: boolean, i: boolean, n: boolean): number => {
      const b = encodeMethod({ ...base, passive: p, durable: d, autoDelete: a, internal: i, noWait: n });
      // class, method, ticket, "x", "fanout", then the bits octet, then the 4-byte empty table
      return b[4 + 2 + 2 + 7]!;
    };
    assert.equal(flags(true, false, false, false, false), 0b00001);
    assert.equal(flags(false, true, false, false, false), 0b00010);
    assert.equal(flags(false, false, true, false, false), 0b00100);
    assert.equal(flags(false, false, false, true, false), 0b01000);
    assert.equal(flags(false, false, false, false, true), 0b10000);
    assert.equal(flags(true, true, true, true, true), 0b11111);
  });

  test('basic.deliver with a delivery tag above 2^32 and a UTF-8 consumer tag', () => {
    const m: Method<'basic.deliver'> = {
      name: 'basic.deliver',
      consumerTag: 'ctag-é',
      deliveryTag: 2 ** 40 + 1,
      redelivered: true,
      exchange: '',
      routingKey: 'q',
    };
    const bytes = encodeMethodFrame(7, m);
    assert.deepEqual(
      bytes,
      hex(`01 0007 00000018
           003c 003c
           07 637461672dc3a9
           0000010000000001
           01
           00
           01 71
           ce`),
    );
    assert.deepStrictEqual(decodeMethod(payloadOf(bytes)), m);
    const theirs = amqplibFrame.decodeFrame(amqplibFrame.parseFrame(bytes) as AmqpFrame & { size: number; rest: Buffer });
    assert.equal((theirs.fields as Record<string, unknown>).deliveryTag, 2 ** 40 + 1);
  });

  test('missing optional arguments encode as their zero values', () => {
    assert.deepEqual(
      encodeMethod({ name: 'queue.declare' } as AmqpMethod),
      encodeMethod({
        name: 'queue.declare',
        queue: '',
        passive: false,
        durable: false,
        exclusive: false,
        autoDelete: false,
        noWait: false,
        arguments: {},
      }),
    );
  });

  test('unknown class or method: 540 not-implemented, with the ids for connection.close', () => {
    const e = codecError(() => decodeMethod(hex('00c8 000a')), 540, /unknown method 200\.10/);
    assert.equal(e.classId, 200);
    assert.equal(e.methodId, 10);
    codecError(() => decodeMethod(hex('003c 0063')), 540); // basic.99
    codecError(() => decodeMethod(hex('001e 000a 00')), 540); // access.request: gone in 0-9-1
    assert.match(replyTextOf(e), /^NOT_IMPLEMENTED - unknown method/);
  });

  test('truncated arguments, leftover bytes, a too short payload: 502 syntax-error naming the method', () => {
    const frame = encodeMethodFrame(1, { name: 'basic.ack', deliveryTag: 5, multiple: false });
    const payload = payloadOf(frame);
    for (let n = 4; n < payload.length; n++) {
      const e = codecError(() => decodeMethod(payload.subarray(0, n)), 502, /truncated/);
      assert.equal(e.classId, 60);
      assert.equal(e.methodId, 80);
    }
    codecError(() => decodeMethod(payload.subarray(0, 3)), 502, /class-id|method-id/);
    codecError(() => decodeMethod(Buffer.concat([payload, Buffer.from([0])])), 502, /1 bytes after the arguments of basic.ack/);
    // a shortstr longer than what is left
    codecError(() => decodeMethod(hex('003c 0028 0000 05 6162')), 502, /truncated exchange/);
    // a table whose length runs past the payload
    codecError(() => decodeMethod(hex('0032 000a 0000 0171 00 000000ff 0161')), 502, /field table/);
  });

  test('a delivery tag above 2^53 - 1 cannot be a JS number: 502, not a silently wrong tag', () => {
    codecError(() => decodeMethod(hex('003c 0050 0020000000000000 00')), 502, /above 2\^53/);
    assert.equal((decodeMethod(hex('003c 0050 001fffffffffffff 01')) as Method<'basic.ack'>).deliveryTag, Number.MAX_SAFE_INTEGER);
  });

  test('encoding refuses values that do not fit their wire type with an AmqpCodecError', () => {
    codecError(
      () => encodeMethodFrame(1, { name: 'basic.publish', exchange: 'x'.repeat(256), routingKey: '', mandatory: false, immediate: false }),
      502,
      /255/,
    );
    codecError(() => encodeMethodFrame(1, { name: 'basic.qos', prefetchSize: 0, prefetchCount: 65536, global: false }), 502, /prefetchCount/);
    codecError(() => encodeMethodFrame(1, { name: 'basic.ack', deliveryTag: -1, multiple: false }), 502, /deliveryTag/);
    codecError(() => encodeMethodFrame(1, { name: 'basic.ack', deliveryTag: 1.5, multiple: false }), 502);
    codecError(() => encodeMethodFrame(65536, { name: 'channel.close-ok' }), 502, /channel/);
    codecError(() => encodeMethodFrame(1, { name: 'basic.nope' } as unknown as AmqpMethod), 540);
    codecError(() => encodeMethodFrame(1, { name: 'channel.flow', active: 'yes' } as unknown as AmqpMethod), 502, /boolean/);
    // a shortstr of exactly 255 bytes is fine (é is 2 bytes in UTF-8)
    const key = 'é'.repeat(127) + 'a';
    const m = decodeMethod(encodeMethod({ name: 'basic.publish', exchange: '', routingKey: key, mandatory: false, immediate: false }));
    assert.equal((m as Method<'basic.publish'>).routingKey, key);
  });

  test('the content methods are marked', () => {
    const withContent = METHOD_NAMES.filter((n) => methodInfo(n)!.hasContent);
    assert.deepEqual(withContent, ['basic.publish', 'basic.return', 'basic.deliver', 'basic.get-ok']);
  });
});

/**
 * A table with every type of RabbitMQ's errata, written by hand: key (shortstr), tag, value.
 */
const ALL_TYPES_ENTRIES = `
  04 626f6f6c 74 01
  02 6938 62 fe
  02 7538 42 c8
  03 693136 73 fed4
  03 753136 75 ea60
  03 693332 49 fffeee90
  03 753332 69 b2d05e00
  03 693634 6c ffffff0000000000
  03 753634 4c 8000000000000001
  03 663332 66 3fc00000
  03 663634 64 3fd0000000000000
  03 646563 44 02 00003039
  03 737472 53 00000006 68c3a96c6c6f
  05 6279746573 78 00000003 010203
  03 617272 41 0000000b 49 00000001 53 00000001 61
  02 7473 54 000000006553f100
  03 746162 46 00000003 016b 56
  04 766f6964 56
`;
const ALL_TYPES_TABLE: FieldTable = {
  bool: true,
  i8: new Typed('b', -2),
  u8: new Typed('B', 200),
  i16: new Typed('s', -300),
  u16: new Typed('u', 60000),
  i32: -70000,
  u32: new Typed('i', 3000000000),
  i64: new Typed('l', -(2n ** 40n)),
  u64: new Typed('L', -(2n ** 63n) + 1n), // 'L' is signed, as RabbitMQ reads it
  f32: new Typed('f', 1.5),
  f64: new Typed('d', 0.25),
  dec: new Typed('D', { scale: 2, value: 12345 }),
  str: 'héllo',
  bytes: Buffer.from([1, 2, 3]),
  arr: [1, 'a'],
  ts: new Typed('T', 1700000000n),
  tab: { k: null },
  void: null,
};

function withLength(entries: string): Buffer {
  const body = hex(entries);
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  return Buffer.concat([len, body]);
}

describe('AMQP codec: field tables', () => {
  test('every type of the errata, hand-written bytes: decoded with its tag kept, re-encoded to the same bytes', () => {
    const bytes = withLength(ALL_TYPES_ENTRIES);
    const t = decodeTable(bytes);
    assert.deepStrictEqual(plain(t), plain(ALL_TYPES_TABLE));
    assert.equal(Object.getPrototypeOf(t), null);
    assert.deepEqual(encodeTable(t), bytes);
    assert.deepEqual(encodeTable(ALL_TYPES_TABLE), bytes);
  });

  test('amqplib reads our tables and we read its tables (every type it knows: all but L)', () => {
    const ours: FieldTable = { ...ALL_TYPES_TABLE };
    delete ours.u64;
    const bytes = encodeTable(ours);
    const theirs = amqplibCodec.decodeFields(bytes.subarray(4));
    assert.equal(theirs.bool, true);
    assert.equal(theirs.i8, -2);
    assert.equal(theirs.u8, 200);
    assert.equal(theirs.i16, -300);
    assert.equal(theirs.u16, 60000);
    assert.equal(theirs.i32, -70000);
    assert.equal(theirs.u32, 3000000000);
    assert.equal(theirs.i64, -(2 ** 40));
    assert.equal(theirs.f32, 1.5);
    assert.equal(theirs.f64, 0.25);
    assert.deepEqual(theirs.dec, { '!': 'decimal', value: { places: 2, digits: 12345 } });
    assert.equal(theirs.str, 'héllo');
    assert.deepEqual(theirs.bytes, Buffer.from([1, 2, 3]));
    assert.deepEqual(theirs.arr, [1, 'a']);
    assert.deepEqual(theirs.ts, { '!': 'timestamp', value: 1700000000 });
    assert.deepEqual(theirs.tab, { k: null });
    assert.equal(theirs.void, null);

    const buf = Buffer.alloc(4096);
    const n = amqplibCodec.encodeTable(buf, toAmqplib(ours) as Record<string, unknown>, 0);
    assert.deepEqual(buf.subarray(0, n), bytes);
  });

  test('what amqplib sends for plain JS numbers (b, s, I, l, d) reads back as numbers through fieldNumber', () => {
    const buf = Buffer.alloc(256);
    const n = amqplibCodec.encodeTable(buf, { small: 5, mid: 1000, big: 100000, huge: 2 ** 40, frac: 0.5, neg: -3 }, 0);
    const t = decodeTable(buf.subarray(0, n));
    assert.deepEqual((t.small as Typed).type, 'b');
    assert.deepEqual((t.mid as Typed).type, 's');
    assert.equal(t.big, 100000);
    assert.deepEqual((t.huge as Typed).type, 'l');
    assert.deepEqual((t.frac as Typed).type, 'd');
    assert.deepEqual(
      Object.values(t).map((v) => fieldNumber(v)),
      [5, 1000, 100000, 2 ** 40, 0.5, -3],
    );
    assert.deepEqual(
      Object.values(t).map((v) => fieldInteger(v)),
      [5, 1000, 100000, 2 ** 40, undefined, -3],
    );
    // and re-encoding keeps amqplib's choice of tags
    assert.deepEqual(encodeTable(t), buf.subarray(0, n));
  });

  test('natural JS values pick their tags: int32 → I, other safe integers and bigint → l, fractions → d, Date → T', () => {
    assert.equal(encodeFieldValue(7).toString('hex'), '4900000007');
    assert.equal(encodeFieldValue(-(2 ** 31)).toString('hex'), '4980000000');
    assert.equal(encodeFieldValue(2 ** 31).toString('hex'), '6c0000000080000000');
    assert.equal(encodeFieldValue(10n).toString('hex'), '6c000000000000000a');
    assert.equal(encodeFieldValue(0.5).toString('hex'), '643fe0000000000000');
    assert.equal(encodeFieldValue(new Date(1700000000999)).toString('hex'), '54000000006553f100');
    assert.equal(encodeFieldValue(false).toString('hex'), '7400');
    assert.equal(encodeFieldValue(null).toString('hex'), '56');
    assert.equal(encodeFieldValue(new Uint8Array([9])).toString('hex'), '780000000109');
    assert.equal(encodeFieldValue([undefined]).toString('hex'), '410000000156');
    assert.equal(encodeTable({ skipped: undefined, a: 'x' }).toString('hex'), '00000008' + '0161' + '5300000001' + '78');
    assert.equal(encodeTable(undefined).toString('hex'), '00000000');
  });

  test('a long string that is not UTF-8 keeps its bytes (Typed S)', () => {
    const bytes = withLength('01 61 53 00000002 ff fe');
    const t = decodeTable(bytes);
    assert.ok(t.a instanceof Typed && t.a.type === 'S');
    assert.deepEqual((t.a as Typed<'S'>).value, Buffer.from([0xff, 0xfe]));
    assert.deepEqual(encodeTable(t), bytes);
    assert.equal(fieldString(t.a), '\ufffd\ufffd');
  });

  test('a key named __proto__ is an ordinary key, not a prototype', () => {
    const bytes = withLength('09 5f5f70726f746f5f5f 46 00000007 01 78 53 00000000');
    const t = decodeTable(bytes);
    assert.equal(Object.getPrototypeOf(t), null);
    assert.ok(Object.prototype.hasOwnProperty.call(t, '__proto__'));
    assert.deepEqual(encodeTable(t), bytes);
  });

  test('bad tables: unknown tag, truncation, nesting beyond MAX_FIELD_DEPTH are 502, not a crash', () => {
    codecError(() => decodeTable(withLength('01 61 51')), 502, /unknown field type 0x51/);
    codecError(() => decodeTable(withLength('01 61 49 0000')), 502, /truncated/);
    codecError(() => decodeTable(hex('00000005 0161 74')), 502, /field table/);
    codecError(() => decodeTable(Buffer.concat([withLength('01 61 74 01'), Buffer.from([0])])), 502, /after the field table/);
    // arrays nested deeper than the limit: 'A' in 'A' in ...
    let inner = hex('41 00000000');
    for (let i = 0; i < MAX_FIELD_DEPTH + 5; i++) {
      const len = Buffer.alloc(4);
      len.writeUInt32BE(inner.length);
      inner = Buffer.concat([Buffer.from([0x41]), len, inner]);
    }
    const deep = Buffer.concat([hex('0161'), inner]);
    codecError(() => decodeTable(withLength(deep.toString('hex'))), 502, /nested deeper/);
    // within the limit is fine
    let ok: FieldTable = {};
    for (let i = 0; i < MAX_FIELD_DEPTH - 1; i++) ok = { n: ok };
    assert.deepStrictEqual(plain(decodeTable(encodeTable(ok))), plain(ok));
  });

  test('encoding refuses what has no field type', () => {
    codecError(() => encodeTable({ f: (() => 1) as unknown as string }), 502, /function/);
    codecError(() => encodeTable({ m: new Map() as unknown as FieldTable }), 502, /Map/);
    codecError(() => encodeTable({ b: new Typed('b', 128) }), 502, /int8/);
    codecError(() => encodeTable({ l: 2n ** 63n }), 502, /int64/);
    codecError(() => encodeTable({ L: new Typed('L', 2n ** 63n) }), 502, /int64/);
    codecError(() => encodeTable({ ['k'.repeat(256)]: 1 }), 502, /255/);
  });

  test("AMQPLAIN's response is a table without its length prefix: decodeTableEntries reads amqplib's", () => {
    const credentials = createRequire(import.meta.url)('amqplib/lib/credentials') as {
      amqplain(user: string, pass: string): { mechanism: string; response(): Buffer };
    };
    const c = credentials.amqplain('guest', 'pä55');
    assert.equal(c.mechanism, 'AMQPLAIN');
    assert.deepStrictEqual(plain(decodeTableEntries(c.response())), { LOGIN: 'guest', PASSWORD: 'pä55' });
    codecError(() => decodeTableEntries(Buffer.from([5, 0x61])), 502, /truncated/);
  });

  test('field helpers read values whatever their tag', () => {
    assert.equal(fieldNumber(new Typed('D', { scale: 2, value: 150 })), 1.5);
    assert.equal(fieldNumber(new Typed('L', 2n ** 60n)), undefined);
    assert.equal(fieldNumber('5'), undefined);
    assert.equal(fieldString(Buffer.from('abc')), 'abc');
    assert.equal(fieldString(1), undefined);
    assert.equal(fieldBoolean(true), true);
    assert.equal(fieldBoolean(1), undefined);
    assert.deepEqual(fieldTable({ a: 1 }), { a: 1 });
    assert.equal(fieldTable([1]), undefined);
    assert.equal(fieldTable(new Typed('I', 1)), undefined);
  });
});

describe('AMQP codec: content', () => {
  test('a content header with all 14 properties: golden bytes both ways, and amqplib agrees', () => {
    const f = FULL_PROPERTIES_FIXTURE;
    const bytes = hex(f.hex);
    assert.deepEqual(encodeFrame(FRAME_HEADER, f.channel, encodeContentHeader(60, f.bodySize, f.properties)), bytes);
    const decoded = decodeContentHeader(payloadOf(bytes), true);
    assert.equal(decoded.classId, 60);
    assert.equal(decoded.bodySize, 1234);
    const { rawHeaders, ...rest } = decoded.properties;
    assert.deepStrictEqual(plain(rest), plain(f.properties));
    assert.deepEqual(rawHeaders, encodeTable(f.properties.headers));

    assert.deepEqual(amqplibDefs.encodeProperties(60, f.channel, f.bodySize, f.properties), bytes);
    const theirs = amqplibFrame.decodeFrame(amqplibFrame.parseFrame(bytes) as AmqpFrame);
    assert.deepEqual(theirs.fields, f.properties);
  });

  test('headers are not decoded unless asked, but their bytes always come along and are checked', () => {
    const bytes = hex(FULL_PROPERTIES_FIXTURE.hex);
    const p = decodeContentHeader(payloadOf(bytes)).properties;
    assert.equal(p.headers, undefined);
    assert.deepEqual(decodeTable(p.rawHeaders!), decodeContentHeader(payloadOf(bytes), true).properties.headers);
    // the raw bytes are a copy, not a view into the frame
    const before = Buffer.from(p.rawHeaders!);
    payloadOf(bytes).fill(0);
    assert.ok(p.rawHeaders!.equals(before));
  });

  test('raw headers pass through byte for byte, tags and key order included', () => {
    // 'b' and 's' tags, integer-like keys (a JS object would reorder "2" before "10")
    const raw = withLength('02 3130 62 05   01 32 73 0100   01 78 6c 0000000000000001');
    const header = encodeContentHeader(60, 0, { rawHeaders: raw, deliveryMode: 2 });
    const back = decodeContentHeader(header);
    assert.deepEqual(back.properties.rawHeaders, raw);
    assert.equal(back.properties.deliveryMode, 2);
    // a decoded-then-changed table wins over stale raw bytes
    const changed = encodeContentHeader(60, 0, { rawHeaders: raw, headers: { only: 'this' } });
    assert.deepEqual(plain(decodeContentHeader(changed, true).properties.headers), { only: 'this' });
    codecError(() => encodeContentHeader(60, 0, { rawHeaders: hex('00000005 00') }), 502, /rawHeaders/);
  });

  test('no properties: flags 0; each property alone sets its own flag bit (15 down to 2)', () => {
    assert.equal(encodeContentHeader(60, 3, {}).toString('hex'), '003c' + '0000' + '0000000000000003' + '0000');
    const each: Array<[string, unknown, number]> = [
      ['contentType', 'a', 15],
      ['contentEncoding', 'a', 14],
      ['headers', {}, 13],
      ['deliveryMode', 1, 12],
      ['priority', 9, 11],
      ['correlationId', 'a', 10],
      ['replyTo', 'a', 9],
      ['expiration', '1', 8],
      ['messageId', 'a', 7],
      ['timestamp', 1, 6],
      ['type', 'a', 5],
      ['userId', 'a', 4],
      ['appId', 'a', 3],
      ['clusterId', 'a', 2],
    ];
    for (const [key, value, bit] of each) {
      const payload = encodeContentHeader(60, 0, { [key]: value });
      assert.equal(payload.readUInt16BE(12), 1 << bit, key);
      const p = decodeContentHeader(payload, true).properties as Record<string, unknown>;
      assert.deepStrictEqual(plain(p[key]), value, key);
    }
  });

  test('bad content headers: another class 505, weight, flag bit 1, extra flags, leftovers 502', () => {
    const good = encodeContentHeader(60, 5, { contentType: 'x' });
    const other = Buffer.from(good);
    other.writeUInt16BE(50, 0);
    codecError(() => decodeContentHeader(other), 505, /class 50/);
    const weight = Buffer.from(good);
    weight.writeUInt16BE(1, 2);
    codecError(() => decodeContentHeader(weight), 502, /weight/);
    codecError(() => decodeContentHeader(hex('003c 0000 0000000000000000 0002')), 502, /bit 1/);
    codecError(() => decodeContentHeader(hex('003c 0000 0000000000000000 0001 8000')), 502, /beyond/);
    assert.deepEqual(decodeContentHeader(hex('003c 0000 0000000000000000 0001 0000')).properties, {});
    codecError(() => decodeContentHeader(Buffer.concat([good, Buffer.from([1])])), 502, /after the content properties/);
    for (let n = 0; n < good.length; n++) codecError(() => decodeContentHeader(good.subarray(0, n)), 502, /truncated/);
    codecError(() => decodeContentHeader(hex('003c 0000 0000000000000000 2000 00000005 0161 51 00 00')), 502, /headers|field type/);
  });

  test('encodeContent splits the body at frame-max (8 bytes of overhead per frame) and amqplib reassembles it', () => {
    const body = Buffer.alloc(10000);
    for (let i = 0; i < body.length; i++) body[i] = i % 251;
    const all = encodeContent(3, 60, { contentType: 'application/octet-stream' }, body, 4096);
    const frames: Array<{ type: number; channel: number; payload: Buffer }> = [];
    let rest = all;
    for (;;) {
      const f = amqplibFrame.parseFrame(rest);
      if (f === false) break;
      frames.push(f);
      rest = f.rest;
    }
    assert.equal(rest.length, 0);
    assert.deepEqual(
      frames.map((f) => [f.type, f.channel, f.payload.length]),
      [
        [FRAME_HEADER, 3, frames[0]!.payload.length],
        [FRAME_BODY, 3, 4088],
        [FRAME_BODY, 3, 4088],
        [FRAME_BODY, 3, 1824],
      ],
    );
    assert.equal(decodeContentHeader(frames[0]!.payload).bodySize, 10000);
    assert.deepEqual(Buffer.concat(frames.slice(1).map((f) => f.payload)), body);

    // exactly one frame's worth, an empty body (no body frame), and no limit (frame-max 0)
    const exact = encodeContent(1, 60, {}, Buffer.alloc(4088, 1), 4096);
    assert.equal(exact.length, 8 + 14 + 4096);
    assert.equal(encodeContent(1, 60, {}, Buffer.alloc(0), 4096).length, 8 + 14);
    assert.equal(encodeContent(1, 60, {}, Buffer.alloc(100000), 0).length, 8 + 14 + 8 + 100000);
    codecError(() => encodeContent(1, 60, {}, body, 8), 502, /frame-max/);
    codecError(() => encodeContent(1, 60, { headers: { big: 'x'.repeat(5000) } }, body, 4096), 502, /exceeds frame-max/);
  });

  test('encodeMessageFrames = method frame + header frame + body frames in one buffer', () => {
    const method: Method<'basic.deliver'> = {
      name: 'basic.deliver',
      consumerTag: 'c',
      deliveryTag: 1,
      redelivered: false,
      exchange: 'amq.topic',
      routingKey: 'a.b',
    };
    const props = { deliveryMode: 2, headers: { h: 1 } };
    const body = Buffer.from('hello world');
    const one = encodeMessageFrames(9, method, props, body, 64);
    assert.ok(one.equals(Buffer.concat([encodeMethodFrame(9, method), encodeContent(9, 60, props, body, 64)])));
    assert.ok(
      encodeMessageFrames(9, method, props, Buffer.alloc(1000), 64).equals(
        Buffer.concat([encodeMethodFrame(9, method), encodeContent(9, 60, props, Buffer.alloc(1000), 64)]),
      ),
    );
    codecError(() => encodeMessageFrames(9, { ...method, routingKey: 'k'.repeat(200) }, {}, body, 100), 502, /exceeds frame-max/);
  });
});

/** Reads everything the reader has; a ProtocolHeaderFrame first when expected. */
function drain(r: FrameReader): Array<AmqpFrame | ProtocolHeaderFrame> {
  const out: Array<AmqpFrame | ProtocolHeaderFrame> = [];
  for (let f = r.read(); f !== null; f = r.read()) out.push(f);
  return out;
}

describe('AMQP codec: FrameReader', () => {
  const publish: AmqpMethod = { name: 'basic.publish', exchange: '', routingKey: 'q', mandatory: false, immediate: false };
  const stream = Buffer.concat([
    PROTOCOL_HEADER,
    encodeMethodFrame(0, { name: 'connection.start-ok', clientProperties: {}, mechanism: 'PLAIN', response: Buffer.from('\0u\0p'), locale: 'en_US' }),
    HEARTBEAT_FRAME,
    encodeMessageFrames(1, publish, { contentType: 'text/plain' }, Buffer.alloc(300, 7), 128),
    encodeMethodFrame(1, { name: 'channel.close', replyCode: 200, replyText: 'bye', classId: 0, methodId: 0 }),
  ]);
  const expected = (() => {
    const r = new FrameReader();
    r.push(stream);
    return drain(r).map((f) => (f.type === 'protocol-header' ? f : { ...f, payload: Buffer.from(f.payload) }));
  })();

  test('the protocol header and the heartbeat frame are the bytes amqplib uses (§4.2.2, §4.2.7)', () => {
    assert.deepEqual(PROTOCOL_HEADER, Buffer.from(amqplibFrame.PROTOCOL_HEADER, 'latin1'));
    assert.deepEqual(PROTOCOL_HEADER, hex('414d5150 00000901'));
    assert.deepEqual(HEARTBEAT_FRAME, hex('08 0000 00000000 ce'));
    assert.deepEqual(HEARTBEAT_FRAME, amqplibFrame.HEARTBEAT_BUF);
  });

  test('reads the protocol header then every frame of a stream', () => {
    assert.deepEqual(
      expected.map((f) => f.type),
      ['protocol-header', FRAME_METHOD, FRAME_HEARTBEAT, FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_BODY, FRAME_BODY, FRAME_METHOD],
    );
    assert.deepEqual(expected[0], { type: 'protocol-header', bytes: PROTOCOL_HEADER, supported: true });
    assert.deepStrictEqual(decodeMethod((expected[3] as AmqpFrame).payload), publish);
    assert.deepEqual(
      expected.slice(5, 8).map((f) => (f as AmqpFrame).payload.length),
      [120, 120, 60],
    );
  });

  test('the same frames whatever the chunking: byte by byte, and random splits', () => {
    const one = new FrameReader();
    const got: Array<AmqpFrame | ProtocolHeaderFrame> = [];
    for (let i = 0; i < stream.length; i++) {
      one.push(stream.subarray(i, i + 1));
      got.push(...drain(one));
    }
    assert.deepEqual(got, expected);
    assert.equal(one.buffered, 0);

    let seed = 12345;
    for (let round = 0; round < 50; round++) {
      const r = new FrameReader({ frameMax: 4096 });
      const frames: Array<AmqpFrame | ProtocolHeaderFrame> = [];
      for (let at = 0; at < stream.length;) {
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        const n = 1 + (seed % 97);
        r.push(Buffer.from(stream.subarray(at, at + n)));
        at += n;
        frames.push(...drain(r));
      }
      assert.deepEqual(frames, expected);
    }
  });

  test('a frame inside one chunk is a view, not a copy', () => {
    const r = new FrameReader({ protocolHeader: false });
    const chunk = encodeMethodFrame(1, { name: 'basic.ack', deliveryTag: 1, multiple: false });
    r.push(chunk);
    const f = r.read() as AmqpFrame;
    assert.equal(f.payload.buffer, chunk.buffer);
    assert.equal(r.read(), null);
  });

  test('another protocol header is returned as sent, with supported false', () => {
    for (const sent of ['AMQP\x01\x01\x00\x09', 'AMQP\x00\x00\x09\x00', 'GET / HTTP/1.1\r\n', '\x16\x03\x01\x02\x00\x01\x00\x01']) {
      const r = new FrameReader();
      r.push(Buffer.from(sent.slice(0, 5), 'latin1'));
      assert.equal(r.read(), null, 'waits for 8 bytes');
      r.push(Buffer.from(sent.slice(5), 'latin1'));
      const h = r.read() as ProtocolHeaderFrame;
      assert.equal(h.type, 'protocol-header');
      assert.equal(h.supported, false);
      assert.deepEqual(h.bytes, Buffer.from(sent.slice(0, 8), 'latin1'));
    }
  });

  test('frame-max is enforced from the 7-byte frame header, before the payload is buffered', () => {
    const r = new FrameReader({ frameMax: 4096, protocolHeader: false });
    r.push(hex('03 0001 00001000')); // a body frame of 4096 + 8 bytes announced
    const e = codecError(() => r.read(), 501, /4104 bytes exceeds frame-max 4096/);
    assert.match(replyTextOf(e), /^FRAME_ERROR - /);
    assert.equal(r.buffered, 7);
    // exactly frame-max is accepted; raising frameMax after tune takes effect at once
    const ok = new FrameReader({ frameMax: 4096, protocolHeader: false });
    ok.push(encodeFrame(FRAME_BODY, 1, Buffer.alloc(4088)));
    assert.equal((ok.read() as AmqpFrame).payload.length, 4088);
    ok.push(encodeFrame(FRAME_BODY, 1, Buffer.alloc(5000)));
    codecError(() => ok.read(), 501);
    const raised = new FrameReader({ frameMax: 4096, protocolHeader: false });
    raised.frameMax = 131072;
    raised.push(encodeFrame(FRAME_BODY, 1, Buffer.alloc(5000)));
    assert.equal((raised.read() as AmqpFrame).payload.length, 5000);
  });

  test('bad frame-end octet, unknown frame type, heartbeat off channel 0: 501 frame-error', () => {
    const bad = Buffer.from(encodeMethodFrame(1, { name: 'tx.select' }));
    bad[bad.length - 1] = 0xcd;
    const r = new FrameReader({ protocolHeader: false });
    r.push(bad);
    codecError(() => r.read(), 501, /frame-end octet 0xcd/);
    // the same across chunks (the copying path)
    const r2 = new FrameReader({ protocolHeader: false });
    r2.push(bad.subarray(0, 5));
    r2.push(bad.subarray(5));
    codecError(() => r2.read(), 501, /frame-end/);

    for (const [bytes, pattern] of [
      ['04 0000 00000000 ce', /unknown frame type 4/],
      ['41 4d51 50000009 01', /unknown frame type 65/], // a second protocol header
      ['08 0001 00000000 ce', /heartbeat/],
      ['08 0000 00000001 00 ce', /heartbeat/],
    ] as const) {
      const x = new FrameReader({ protocolHeader: false });
      x.push(hex(bytes));
      codecError(() => x.read(), 501, pattern);
    }
  });

  test('borrowed chunks (one read buffer reused for every read): the same frames, the waiting bytes copied', () => {
    const shared = Buffer.alloc(97);
    for (const step of [1, 5, 7, 8, 13, 96, 97]) {
      const r = new FrameReader({ borrowed: true });
      const frames: Array<AmqpFrame | ProtocolHeaderFrame> = [];
      for (let at = 0; at < stream.length; at += step) {
        const n = stream.copy(shared, 0, at, at + step);
        r.push(shared.subarray(0, n));
        for (let f = r.read(); f !== null; f = r.read()) {
          // a view is valid while it is handled: keep a copy, as a connection handler would
          frames.push(f.type === 'protocol-header' ? f : { ...f, payload: Buffer.from(f.payload) });
        }
        shared.fill(0xee); // the next read overwrites the buffer
      }
      assert.deepEqual(frames, expected, `reads of ${step} bytes`);
      assert.equal(r.buffered, 0);
    }
  });

  test('borrowed chunks: retain() keeps the rest when reading stops early; pushing before that is a caller bug', () => {
    const shared = Buffer.from(stream);
    const r = new FrameReader({ borrowed: true });
    r.push(shared);
    assert.equal((r.read() as ProtocolHeaderFrame).supported, true);
    r.retain(); // stop here, e.g. the connection is paused
    shared.fill(0);
    const rest: Array<AmqpFrame | ProtocolHeaderFrame> = [];
    for (let f = r.read(); f !== null; f = r.read()) rest.push(f);
    assert.deepEqual(rest, expected.slice(1));

    const bad = new FrameReader({ borrowed: true });
    bad.push(stream.subarray(0, 20));
    assert.throws(() => bad.push(stream.subarray(20)), /before read\(\) returned null/);
  });

  test('a frame trickling in is gathered into one buffer of its size: the reader keeps no pushed chunk', () => {
    const frame = encodeFrame(FRAME_BODY, 4, Buffer.alloc(20000, 0x5a));
    const r = new FrameReader({ frameMax: 131072, protocolHeader: false });
    let f: AmqpFrame | null = null;
    for (let i = 0; i < frame.length; i++) {
      const one = Buffer.from([frame[i]!]);
      r.push(one);
      f = r.read() as AmqpFrame | null;
      if (i < frame.length - 1) {
        assert.equal(f, null);
        assert.equal(r.buffered, i + 1);
      }
      // once the 7-byte frame header is in, each chunk is copied as it comes: changing it afterwards is harmless
      if (i >= 6) one[0] = 0;
    }
    assert.ok(f !== null);
    assert.equal(f.channel, 4);
    assert.ok(f.payload.equals(Buffer.alloc(20000, 0x5a)));
    assert.equal(r.buffered, 0);
  });

  test('frames of zero length and partial frames: null until complete, nothing lost', () => {
    const r = new FrameReader({ protocolHeader: false });
    const f = encodeFrame(FRAME_BODY, 2, Buffer.alloc(0));
    r.push(f.subarray(0, 7));
    assert.equal(r.read(), null);
    r.push(f.subarray(7));
    assert.deepEqual(r.read(), { type: FRAME_BODY, channel: 2, payload: Buffer.alloc(0) });
    assert.equal(r.read(), null);
    assert.equal(r.buffered, 0);
  });
});
