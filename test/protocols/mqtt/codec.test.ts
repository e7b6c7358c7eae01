/**
 * MQTT codec: golden byte fixtures written by hand from the MQTT 3.1.1 packet layouts, round trips, the
 * normative checks, streaming (every prefix is INCOMPLETE) and a seeded mutation fuzz.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  INCOMPLETE,
  MqttProtocolError,
  encodePacket,
  encodePublishFrame,
  parsePacket,
  peekFrameLength,
  type MqttPacket,
  type ParseResult,
} from '../../../src/protocols/mqtt/codec/index.js';
import { prng } from '../../helpers/prng.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

function parseAll(buf: Buffer, level: 3 | 4 = 4): ParseResult {
  const r = parsePacket(buf, 0, 1 << 20, level);
  assert.notEqual(r, INCOMPLETE, 'expected a whole packet');
  return r as ParseResult;
}

/** Fixtures: the packet and its bytes, laid out per the MQTT 3.1.1 spec, chapter 3. */
const GOLDEN: Array<{ name: string; bytes: string; packet: MqttPacket; level?: 3 | 4 }> = [
  {
    name: 'CONNECT minimal (clean session, keep alive 60, client id "abc")',
    // type 1 | rem 15 | "MQTT" | level 4 | flags 0x02 | keepalive 60 | "abc"
    bytes: '10 0f 0004 4d515454 04 02 003c 0003 616263',
    packet: {
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 4,
      cleanSession: true,
      keepalive: 60,
      clientId: 'abc',
      will: null,
      username: null,
      password: null,
    },
  },
  {
    name: 'CONNECT with will (QoS 1, retain), user name and password',
    // flags: user 0x80 | password 0x40 | will retain 0x20 | will QoS 1 0x08 | will 0x04 | clean 0x02 = 0xee
    bytes: '10 1b 0004 4d515454 04 ee 000a 0001 63 0001 77 0003 627965 0001 75 0001 70',
    packet: {
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 4,
      cleanSession: true,
      keepalive: 10,
      clientId: 'c',
      will: { topic: 'w', payload: Buffer.from('bye'), qos: 1, retain: true },
      username: 'u',
      password: Buffer.from('p'),
    },
  },
  {
    name: 'CONNECT MQTT 3.1 ("MQIsdp", level 3), clean session 0, empty keep alive',
    bytes: '10 11 0006 4d5149736470 03 00 0000 0003 616263',
    packet: {
      type: 'connect',
      protocolName: 'MQIsdp',
      protocolLevel: 3,
      cleanSession: false,
      keepalive: 0,
      clientId: 'abc',
      will: null,
      username: null,
      password: null,
    },
    level: 3,
  },
  { name: 'CONNACK accepted', bytes: '20 02 00 00', packet: { type: 'connack', sessionPresent: false, returnCode: 0 } },
  { name: 'CONNACK session present', bytes: '20 02 01 00', packet: { type: 'connack', sessionPresent: true, returnCode: 0 } },
  { name: 'CONNACK not authorized', bytes: '20 02 00 05', packet: { type: 'connack', sessionPresent: false, returnCode: 5 } },
  {
    name: 'PUBLISH QoS 0 "a/b" "hi"',
    bytes: '30 07 0003 612f62 6869',
    packet: { type: 'publish', dup: false, qos: 0, retain: false, topic: 'a/b', packetId: 0, payload: Buffer.from('hi') },
  },
  {
    name: 'PUBLISH QoS 1 DUP RETAIN id 10',
    bytes: '3b 09 0003 612f62 000a 6869',
    packet: { type: 'publish', dup: true, qos: 1, retain: true, topic: 'a/b', packetId: 10, payload: Buffer.from('hi') },
  },
  {
    name: 'PUBLISH QoS 2 id 0x1234, empty payload',
    bytes: '34 05 0001 74 1234',
    packet: { type: 'publish', dup: false, qos: 2, retain: false, topic: 't', packetId: 0x1234, payload: Buffer.alloc(0) },
  },
  {
    name: 'PUBLISH with a UTF-8 topic ("é/日")',
    bytes: '30 08 0006 c3a9 2f e697a5',
    packet: { type: 'publish', dup: false, qos: 0, retain: false, topic: 'é/日', packetId: 0, payload: Buffer.alloc(0) },
  },
  { name: 'PUBACK', bytes: '40 02 000a', packet: { type: 'puback', packetId: 10 } },
  { name: 'PUBREC', bytes: '50 02 000a', packet: { type: 'pubrec', packetId: 10 } },
  { name: 'PUBREL (flags 0010)', bytes: '62 02 000a', packet: { type: 'pubrel', packetId: 10 } },
  { name: 'PUBCOMP', bytes: '70 02 ffff', packet: { type: 'pubcomp', packetId: 65535 } },
  {
    name: 'SUBSCRIBE two filters (flags 0010)',
    bytes: '82 0c 0001 0003 612f2b 01 0001 23 00',
    packet: {
      type: 'subscribe',
      packetId: 1,
      subscriptions: [
        { filter: 'a/+', qos: 1 },
        { filter: '#', qos: 0 },
      ],
    },
  },
  { name: 'SUBACK granted 1 and failure', bytes: '90 04 0001 01 80', packet: { type: 'suback', packetId: 1, returnCodes: [1, 0x80] } },
  {
    name: 'UNSUBSCRIBE (flags 0010)',
    bytes: 'a2 07 0002 0003 612f2b',
    packet: { type: 'unsubscribe', packetId: 2, filters: ['a/+'] },
  },
  { name: 'UNSUBACK', bytes: 'b0 02 0002', packet: { type: 'unsuback', packetId: 2 } },
  { name: 'PINGREQ', bytes: 'c0 00', packet: { type: 'pingreq' } },
  { name: 'PINGRESP', bytes: 'd0 00', packet: { type: 'pingresp' } },
  { name: 'DISCONNECT', bytes: 'e0 00', packet: { type: 'disconnect' } },
];

describe('mqtt codec: golden fixtures', () => {
  for (const g of GOLDEN) {
    test(`decode ${g.name}`, () => {
      const buf = hex(g.bytes);
      const r = parseAll(buf, g.level ?? 4);
      assert.equal(r.bytesConsumed, buf.length);
      assert.deepEqual(r.packet, g.packet);
    });
    test(`encode ${g.name}`, () => {
      assert.equal(encodePacket(g.packet).toString('hex'), hex(g.bytes).toString('hex'));
    });
    test(`every strict prefix of ${g.name} is incomplete`, () => {
      const buf = hex(g.bytes);
      for (let n = 0; n < buf.length; n++) assert.equal(parsePacket(buf.subarray(0, n)), INCOMPLETE, `prefix ${n}`);
    });
  }
});

describe('mqtt codec: remaining length', () => {
  // Boundaries of the 1..4-byte encoding (spec table 2.4).
  const cases: Array<[number, string]> = [
    [0, '00'],
    [127, '7f'],
    [128, '8001'],
    [16383, 'ff7f'],
    [16384, '808001'],
    [2097151, 'ffff7f'],
    [2097152, '80808001'],
    [268435455, 'ffffff7f'],
  ];
  test('encodes the boundary values of table 2.4', () => {
    for (const [n, h] of cases) {
      if (n < 3 || n > 4_000_000) continue; // a PUBLISH needs >= 3 bytes; keep allocations small
      const frame = encodePublishFrame('t', Buffer.alloc(n - 3), 0, false, false, 0);
      assert.equal(frame.subarray(1, 1 + h.length / 2).toString('hex'), h, `length ${n}`);
      const r = parsePacket(frame, 0, frame.length);
      assert.ok(r !== INCOMPLETE && r.bytesConsumed === frame.length);
      assert.equal(peekFrameLength(frame), frame.length);
    }
  });
  test('the largest length is recognised before the packet arrives', () => {
    const head = hex('30 ffffff7f');
    assert.equal(parsePacket(head, 0, 268_435_455 + 5), INCOMPLETE);
    assert.equal(peekFrameLength(head), 5 + 268435455);
  });
  test('a fifth length byte is malformed', () => {
    assert.throws(() => parsePacket(hex('30 ffffffff01')), MqttProtocolError);
  });
  test('an oversized packet is refused from its header alone', () => {
    assert.throws(
      () => parsePacket(hex('30 e807'), 0, 100), // remaining length 1000, no body yet
      (e: unknown) => e instanceof MqttProtocolError && /exceeds the maximum packet size/.test(e.reason),
    );
  });
  test('several packets in one buffer, parsed from offsets', () => {
    const buf = Buffer.concat([hex('c0 00'), hex('30 07 0003 612f62 6869'), hex('e0 00'), hex('40')]);
    const types: string[] = [];
    let off = 0;
    for (;;) {
      const r = parsePacket(buf, off);
      if (r === INCOMPLETE) break;
      types.push(r.packet.type);
      off += r.bytesConsumed;
    }
    assert.deepEqual(types, ['pingreq', 'publish', 'disconnect']);
    assert.equal(off, buf.length - 1);
  });
});

/** Malformed input and the normative statement each one breaks. */
const BAD: Array<{ name: string; bytes: string; id?: string; connack?: number }> = [
  { name: 'reserved packet type 0', bytes: '00 00', id: '[MQTT-4.8.0-1]' },
  { name: 'reserved packet type 15', bytes: 'f0 00', id: '[MQTT-4.8.0-1]' },
  { name: 'PUBACK with flags', bytes: '41 02 0001', id: '[MQTT-2.2.2-2]' },
  { name: 'CONNACK with flags', bytes: '28 02 0000', id: '[MQTT-2.2.2-2]' },
  { name: 'PINGREQ with flags', bytes: 'c1 00', id: '[MQTT-2.2.2-2]' },
  { name: 'PUBREL with flags 0000', bytes: '60 02 0001', id: '[MQTT-3.6.1-1]' },
  { name: 'SUBSCRIBE with flags 0000', bytes: '80 06 0001 0001 61 00', id: '[MQTT-3.8.1-1]' },
  { name: 'UNSUBSCRIBE with flags 0000', bytes: 'a0 05 0001 0001 61', id: '[MQTT-3.10.1-1]' },
  { name: 'DISCONNECT with flags', bytes: 'e2 00', id: '[MQTT-3.14.1-1]' },
  { name: 'PUBLISH QoS 3', bytes: '36 05 0001 61 0001', id: '[MQTT-3.3.1-4]' },
  { name: 'PUBLISH QoS 0 with DUP', bytes: '38 03 0001 61', id: '[MQTT-3.3.1-2]' },
  { name: 'PUBLISH topic with +', bytes: '30 05 0003 612f2b', id: '[MQTT-3.3.2-2]' },
  { name: 'PUBLISH topic with #', bytes: '30 03 0001 23', id: '[MQTT-3.3.2-2]' },
  { name: 'PUBLISH empty topic', bytes: '30 02 0000', id: '[MQTT-4.7.3-1]' },
  { name: 'PUBLISH QoS 1 packet id 0', bytes: '32 05 0001 61 0000', id: '[MQTT-2.3.1-1]' },
  { name: 'PUBLISH QoS 1 without packet id', bytes: '32 03 0001 61' },
  { name: 'PUBLISH topic length past the end', bytes: '30 03 0005 61' },
  { name: 'topic with U+0000', bytes: '30 05 0003 610062', id: '[MQTT-1.5.3-2]' },
  { name: 'topic with ill-formed UTF-8', bytes: '30 04 0002 c328', id: '[MQTT-1.5.3-1]' },
  { name: 'topic with an encoded surrogate', bytes: '30 05 0003 eda080', id: '[MQTT-1.5.3-1]' },
  { name: 'topic with an overlong encoding', bytes: '30 04 0002 c0af', id: '[MQTT-1.5.3-1]' },
  { name: 'CONNECT reserved flag', bytes: '10 0d 0004 4d515454 04 03 003c 0001 61', id: '[MQTT-3.1.2-3]' },
  { name: 'CONNECT unknown protocol name', bytes: '10 0d 0004 4d515458 04 02 003c 0001 61', id: '[MQTT-3.1.2-1]' },
  {
    name: 'CONNECT level 6',
    bytes: '10 0d 0004 4d515454 06 02 003c 0001 61',
    id: '[MQTT-3.1.2-2]',
    connack: 1,
  },
  { name: 'CONNECT "MQIsdp" level 4', bytes: '10 0f 0006 4d5149736470 04 02 003c 0001 61', id: '[MQTT-3.1.2-2]', connack: 1 },
  { name: 'CONNECT will QoS 3', bytes: '10 12 0004 4d515454 04 1e 003c 0001 61 0001 77 0000', id: '[MQTT-3.1.2-14]' },
  { name: 'CONNECT will QoS without will flag', bytes: '10 0d 0004 4d515454 04 0a 003c 0001 61', id: '[MQTT-3.1.2-13]' },
  { name: 'CONNECT will retain without will flag', bytes: '10 0d 0004 4d515454 04 22 003c 0001 61', id: '[MQTT-3.1.2-15]' },
  { name: 'CONNECT password without user name', bytes: '10 10 0004 4d515454 04 42 003c 0001 61 0001 70', id: '[MQTT-3.1.2-22]' },
  { name: 'CONNECT will topic with wildcard', bytes: '10 12 0004 4d515454 04 06 003c 0001 61 0001 23 0000', id: '[MQTT-3.3.2-2]' },
  { name: 'CONNECT with trailing bytes', bytes: '10 0e 0004 4d515454 04 02 003c 0001 61 ff', id: '[MQTT-3.1.4-1]' },
  { name: 'CONNECT client id with U+0000', bytes: '10 0d 0004 4d515454 04 02 003c 0001 00', id: '[MQTT-1.5.3-2]' },
  { name: 'CONNECT user name missing', bytes: '10 0d 0004 4d515454 04 82 003c 0001 61' },
  { name: 'SUBSCRIBE without filters', bytes: '82 02 0001', id: '[MQTT-3.8.3-3]' },
  { name: 'SUBSCRIBE requests QoS 3', bytes: '82 06 0001 0001 61 03', id: '[MQTT-3.8.3-4]' },
  { name: 'SUBSCRIBE reserved option bits', bytes: '82 06 0001 0001 61 04', id: '[MQTT-3.8.3-4]' },
  { name: 'SUBSCRIBE packet id 0', bytes: '82 06 0000 0001 61 00', id: '[MQTT-2.3.1-1]' },
  { name: 'SUBSCRIBE filter without its QoS byte', bytes: '82 05 0001 0001 61' },
  { name: 'UNSUBSCRIBE without filters', bytes: 'a2 02 0001', id: '[MQTT-3.10.3-2]' },
  { name: 'SUBACK reserved return code', bytes: '90 03 0001 03', id: '[MQTT-3.9.3-2]' },
  { name: 'CONNACK session present with refusal', bytes: '20 02 01 05', id: '[MQTT-3.2.2-4]' },
  { name: 'CONNACK reserved return code', bytes: '20 02 00 06' },
  { name: 'PUBACK remaining length 3', bytes: '40 03 000100' },
  { name: 'PINGREQ with a body', bytes: 'c0 01 00' },
];

describe('mqtt codec: malformed packets', () => {
  for (const b of BAD) {
    test(b.name, () => {
      assert.throws(
        () => parsePacket(hex(b.bytes)),
        (e: unknown) => {
          assert.ok(e instanceof MqttProtocolError, `not a MqttProtocolError: ${String(e)}`);
          assert.equal(e.code, 'PROTOCOL_ERROR');
          if (b.id !== undefined) assert.equal(e.normative, b.id, e.message);
          assert.equal(e.connackReturnCode, b.connack);
          return true;
        },
      );
    });
  }
  test('a BOM is a character, not skipped [MQTT-1.5.3-3]', () => {
    const r = parseAll(hex('30 06 0004 efbbbf61'));
    assert.equal(r.packet.type === 'publish' && r.packet.topic, '\ufeffa');
  });
});

describe('mqtt codec: round trips', () => {
  test('encode then decode gives the packet back', () => {
    const packets: MqttPacket[] = [
      ...GOLDEN.filter((g) => g.level === undefined).map((g) => g.packet),
      {
        type: 'publish',
        dup: false,
        qos: 1,
        retain: false,
        topic: 'factory/line-1/ñ/telemetry',
        packetId: 65535,
        payload: Buffer.alloc(70_000, 7),
      },
      {
        type: 'subscribe',
        packetId: 9,
        subscriptions: [
          { filter: '$share/g/a/#', qos: 2 },
          { filter: 'x', qos: 0 },
        ],
      },
      { type: 'suback', packetId: 9, returnCodes: [0, 1, 2, 0x80] },
      {
        type: 'connect',
        protocolName: 'MQTT',
        protocolLevel: 4,
        cleanSession: false,
        keepalive: 65535,
        clientId: '',
        will: { topic: 'w/x', payload: Buffer.alloc(0), qos: 2, retain: false },
        username: 'ü',
        password: Buffer.alloc(0),
      },
    ];
    for (const p of packets) {
      const buf = encodePacket(p);
      const r = parseAll(buf);
      assert.equal(r.bytesConsumed, buf.length);
      assert.deepEqual(r.packet, p);
    }
  });
  test('encoders refuse what a receiver would reject', () => {
    assert.throws(() => encodePublishFrame('t', Buffer.alloc(0), 1, false, false, 0), /packet identifier/);
    assert.throws(() => encodePublishFrame('x'.repeat(70_000), Buffer.alloc(0), 0, false, false, 0), /longer than 65535/);
    assert.throws(() => encodePacket({ type: 'subscribe', packetId: 1, subscriptions: [] }), /at least one/);
  });
  test('QoS 0 never carries DUP [MQTT-3.3.1-2]', () => {
    assert.equal(encodePublishFrame('t', Buffer.alloc(0), 0, false, true, 0)[0], 0x30);
  });
});

// ------------------------------------------------------------------ fuzz

describe('mqtt codec: fuzz', () => {
  const seeds = GOLDEN.map((g) => hex(g.bytes)).concat([
    encodePublishFrame('a/b/c', Buffer.alloc(300, 1), 1, false, false, 7),
    encodePublishFrame('ü/ñ', Buffer.from('x'), 2, true, true, 9),
  ]);

  /** Parses a whole buffer as a stream: only packets, INCOMPLETE or MqttProtocolError may come out. */
  function parseStream(buf: Buffer, level: 3 | 4): number {
    let off = 0;
    let packets = 0;
    for (let guard = 0; guard <= buf.length; guard++) {
      let r: ParseResult | typeof INCOMPLETE;
      try {
        r = parsePacket(buf, off, 4096, level);
      } catch (e) {
        if (e instanceof MqttProtocolError) return packets;
        throw e;
      }
      if (r === INCOMPLETE) return packets;
      assert.ok(r.bytesConsumed > 0 && off + r.bytesConsumed <= buf.length);
      // What decodes re-encodes and decodes to the same thing.
      const again = parsePacket(encodePacket(r.packet, level), 0, 1 << 20, level);
      assert.notEqual(again, INCOMPLETE);
      assert.deepEqual((again as ParseResult).packet, r.packet);
      off += r.bytesConsumed;
      packets++;
    }
    assert.fail('parser did not make progress');
  }

  test('20000 mutated, truncated and spliced packets: typed errors only, never a hang', () => {
    const rnd = prng(0x5eed);
    const pick = <T>(a: T[]): T => a[Math.floor(rnd() * a.length)];
    let decoded = 0;
    for (let i = 0; i < 20_000; i++) {
      let buf = Buffer.from(pick(seeds));
      switch (Math.floor(rnd() * 6)) {
        case 0: // flip bits
          for (let k = 0, n = 1 + Math.floor(rnd() * 3); k < n; k++) buf[Math.floor(rnd() * buf.length)] ^= 1 << Math.floor(rnd() * 8);
          break;
        case 1: // random byte values
          for (let k = 0, n = 1 + Math.floor(rnd() * 4); k < n; k++) buf[Math.floor(rnd() * buf.length)] = Math.floor(rnd() * 256);
          break;
        case 2: // truncate
          buf = buf.subarray(0, Math.floor(rnd() * buf.length));
          break;
        case 3: // insert or delete a byte
          {
            const at = Math.floor(rnd() * buf.length);
            buf =
              rnd() < 0.5
                ? Buffer.concat([buf.subarray(0, at), Buffer.from([Math.floor(rnd() * 256)]), buf.subarray(at)])
                : Buffer.concat([buf.subarray(0, at), buf.subarray(at + 1)]);
          }
          break;
        case 4: // splice two packets, mutate the length field
          buf = Buffer.concat([buf, Buffer.from(pick(seeds))]);
          buf[1] = Math.floor(rnd() * 256);
          break;
        default: {
          // pure noise
          buf = Buffer.alloc(1 + Math.floor(rnd() * 64));
          for (let k = 0; k < buf.length; k++) buf[k] = Math.floor(rnd() * 256);
        }
      }
      decoded += parseStream(buf, rnd() < 0.9 ? 4 : 3);
    }
    assert.ok(decoded > 1000, `only ${decoded} mutated packets decoded: the fuzz is not reaching the decoders`);
  });
});
