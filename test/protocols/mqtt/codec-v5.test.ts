/**
 * MQTT 5.0 codec: golden byte fixtures for every packet type (laid out by hand from chapter 3 of the 5.0 spec;
 * cross-checked once against an independent encoder), the v5 normative checks, round trips and a seeded
 * mutation fuzz at level 5.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  INCOMPLETE,
  MqttProtocolError,
  encodePacket,
  encodePublishFrame,
  parsePacket,
  type MqttPacket,
  type ParseResult,
} from '../../../src/protocols/mqtt/codec/index.js';
import { prng } from '../../helpers/prng.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

function parse5(buf: Buffer): ParseResult {
  const r = parsePacket(buf, 0, 1 << 20, 5);
  assert.notEqual(r, INCOMPLETE, 'expected a whole packet');
  return r as ParseResult;
}

const GOLDEN5: Array<{ name: string; bytes: string; packet: MqttPacket }> = [
  {
    name: 'CONNECT v5 minimal, no properties',
    // "MQTT" | level 5 | flags clean | keepalive 60 | props len 0 | "abc"
    bytes: '10 10 0004 4d515454 05 02 003c 00 0003 616263',
    packet: {
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 5,
      cleanSession: true,
      keepalive: 60,
      clientId: 'abc',
      will: null,
      username: null,
      password: null,
      properties: {},
    },
  },
  {
    name: 'CONNECT v5 with session expiry, receive maximum, user property, will with delay',
    // flags: will 0x04 | will QoS 1 0x08 | clean 0x02 = 0x0e
    // props (15): 11 00000e10 | 21 0014 | 26 0001 61 0001 62
    // will props (7), in identifier order: 01 01 | 18 00000005
    bytes: '10 2e 0004 4d515454 05 0e 001e 0f 11 00000e10 21 0014 26 0001 61 0001 62 0002 6335 07 01 01 18 00000005 0001 77 0003 627965',
    packet: {
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 5,
      cleanSession: true,
      keepalive: 30,
      clientId: 'c5',
      will: {
        topic: 'w',
        payload: Buffer.from('bye'),
        qos: 1,
        retain: false,
        properties: { payloadFormatIndicator: 1, willDelayInterval: 5 },
      },
      username: null,
      password: null,
      properties: { sessionExpiryInterval: 3600, receiveMaximum: 20, userProperties: [['a', 'b']] },
    },
  },
  {
    name: 'CONNECT v5 password without user name (allowed in 5.0)',
    bytes: '10 12 0004 4d515454 05 42 0000 00 0001 61 0002 7077',
    packet: {
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 5,
      cleanSession: true,
      keepalive: 0,
      clientId: 'a',
      will: null,
      username: null,
      password: Buffer.from('pw'),
      properties: {},
    },
  },
  {
    name: 'CONNACK v5 with assigned client identifier, receive maximum, topic alias maximum',
    // props (12): 12 0003 78797a | 21 000a | 22 0005
    bytes: '20 0f 00 00 0c 12 0003 78797a 21 000a 22 0005',
    packet: {
      type: 'connack',
      sessionPresent: false,
      returnCode: 0,
      properties: { assignedClientIdentifier: 'xyz', receiveMaximum: 10, topicAliasMaximum: 5 },
    },
  },
  {
    name: 'CONNACK v5 refused 0x86 with reason string',
    bytes: '20 07 00 86 04 1f 0001 78',
    packet: { type: 'connack', sessionPresent: false, returnCode: 0x86, properties: { reasonString: 'x' } },
  },
  {
    name: 'PUBLISH v5 QoS 1 with message expiry, topic alias, subscription identifiers',
    // props (13): 02 0000003c | 0b 01 | 0b ac02 | 23 0001   (subscription id 300 = ac 02)
    bytes: '32 17 0003 612f62 0007 0d 02 0000003c 0b 01 0b ac02 23 0001 6869',
    packet: {
      type: 'publish',
      dup: false,
      qos: 1,
      retain: false,
      topic: 'a/b',
      packetId: 7,
      payload: Buffer.from('hi'),
      properties: { messageExpiryInterval: 60, subscriptionIdentifiers: [1, 300], topicAlias: 1 },
    },
  },
  {
    name: 'PUBLISH v5 empty topic with topic alias, QoS 0',
    bytes: '30 08 0000 03 23 0002 6869',
    packet: {
      type: 'publish',
      dup: false,
      qos: 0,
      retain: false,
      topic: '',
      packetId: 0,
      payload: Buffer.from('hi'),
      properties: { topicAlias: 2 },
    },
  },
  {
    name: 'PUBLISH v5 response topic, correlation data, content type',
    // props (14): 03 0002 6374 | 08 0001 72 | 09 0002 6364
    bytes: '30 13 0001 74 0e 03 0002 6374 08 0001 72 09 0002 6364 7a',
    packet: {
      type: 'publish',
      dup: false,
      qos: 0,
      retain: false,
      topic: 't',
      packetId: 0,
      payload: Buffer.from('z'),
      properties: { contentType: 'ct', responseTopic: 'r', correlationData: Buffer.from('cd') },
    },
  },
  { name: 'PUBACK v5 short form (success, no properties)', bytes: '40 02 000a', packet: { type: 'puback', packetId: 10, reasonCode: 0, properties: {} } },
  {
    name: 'PUBACK v5 0x10 no matching subscribers',
    bytes: '40 03 000a 10',
    packet: { type: 'puback', packetId: 10, reasonCode: 0x10, properties: {} },
  },
  {
    name: 'PUBREC v5 0x90 with reason string',
    bytes: '50 08 000a 90 04 1f 0001 78',
    packet: { type: 'pubrec', packetId: 10, reasonCode: 0x90, properties: { reasonString: 'x' } },
  },
  { name: 'PUBREL v5 0x92 packet id not found', bytes: '62 03 000a 92', packet: { type: 'pubrel', packetId: 10, reasonCode: 0x92, properties: {} } },
  { name: 'PUBCOMP v5 short form', bytes: '70 02 ffff', packet: { type: 'pubcomp', packetId: 65535, reasonCode: 0, properties: {} } },
  {
    name: 'SUBSCRIBE v5 with subscription identifier and options (no local, RAP, retain handling 2)',
    // props (2): 0b 2a | "a/#" options 0x2e = rh 2 <<4 | rap 0x08 | nl 0x04 | qos 2
    bytes: '82 0b 0003 02 0b 2a 0003 612f23 2e',
    packet: {
      type: 'subscribe',
      packetId: 3,
      subscriptions: [{ filter: 'a/#', qos: 2, noLocal: true, retainAsPublished: true, retainHandling: 2 }],
      properties: { subscriptionIdentifiers: [42] },
    },
  },
  {
    name: 'SUBACK v5 granted 1 and 0x8f topic filter invalid',
    bytes: '90 05 0003 00 01 8f',
    packet: { type: 'suback', packetId: 3, returnCodes: [1, 0x8f], properties: {} },
  },
  {
    name: 'UNSUBSCRIBE v5',
    bytes: 'a2 08 0004 00 0003 612f23',
    packet: { type: 'unsubscribe', packetId: 4, filters: ['a/#'], properties: {} },
  },
  {
    name: 'UNSUBACK v5 success and 0x11 no subscription existed',
    bytes: 'b0 05 0004 00 00 11',
    packet: { type: 'unsuback', packetId: 4, reasonCodes: [0, 0x11], properties: {} },
  },
  { name: 'PINGREQ v5', bytes: 'c0 00', packet: { type: 'pingreq' } },
  { name: 'PINGRESP v5', bytes: 'd0 00', packet: { type: 'pingresp' } },
  { name: 'DISCONNECT v5 short form', bytes: 'e0 00', packet: { type: 'disconnect', reasonCode: 0, properties: {} } },
  {
    name: 'DISCONNECT v5 0x8e session taken over with reason string',
    bytes: 'e0 06 8e 04 1f 0001 78',
    packet: { type: 'disconnect', reasonCode: 0x8e, properties: { reasonString: 'x' } },
  },
  {
    name: 'DISCONNECT v5 0x04 with will, session expiry 0',
    bytes: 'e0 07 04 05 11 00000000',
    packet: { type: 'disconnect', reasonCode: 0x04, properties: { sessionExpiryInterval: 0 } },
  },
  { name: 'AUTH v5 short form', bytes: 'f0 00', packet: { type: 'auth', reasonCode: 0, properties: {} } },
  {
    name: 'AUTH v5 continue with method and data',
    // props (11): 15 0003 616263 | 16 0002 0102
    bytes: 'f0 0d 18 0b 15 0003 616263 16 0002 0102',
    packet: { type: 'auth', reasonCode: 0x18, properties: { authenticationMethod: 'abc', authenticationData: hex('0102') } },
  },
];

describe('mqtt codec v5: golden fixtures', () => {
  for (const g of GOLDEN5) {
    test(`decode ${g.name}`, () => {
      const buf = hex(g.bytes);
      const r = parse5(buf);
      assert.equal(r.bytesConsumed, buf.length);
      assert.deepEqual(r.packet, g.packet);
    });
    test(`encode ${g.name}`, () => {
      assert.equal(encodePacket(g.packet, 5).toString('hex'), hex(g.bytes).toString('hex'));
    });
    test(`every strict prefix of ${g.name} is incomplete`, () => {
      const buf = hex(g.bytes);
      for (let n = 0; n < buf.length; n++) assert.equal(parsePacket(buf.subarray(0, n), 0, 1 << 20, 5), INCOMPLETE, `prefix ${n}`);
    });
  }
  test('a PUBACK with reason 0x00 and an empty property block decodes like the short form', () => {
    assert.deepEqual(parse5(hex('40 04 000a 00 00')).packet, { type: 'puback', packetId: 10, reasonCode: 0, properties: {} });
  });
  test('AUTH is a reserved packet type below level 5 [MQTT-4.8.0-1]', () => {
    assert.throws(
      () => parsePacket(hex('f0 00'), 0, 100, 4),
      (e: unknown) => e instanceof MqttProtocolError && e.normative === '[MQTT-4.8.0-1]',
    );
  });
});

/** Malformed v5 input: the normative statement and the reason code the server reports. */
const BAD5: Array<{ name: string; bytes: string; id?: string; reason: number; connectLevel?: 5 }> = [
  { name: 'PUBLISH with a CONNECT-only property (0x11)', bytes: '30 09 0001 74 05 11 00000001', id: '[MQTT-2.2.2-2]', reason: 0x81 },
  { name: 'PUBLISH with unknown property 0x7f', bytes: '30 06 0001 74 02 7f 00', id: '[MQTT-2.2.2-2]', reason: 0x81 },
  { name: 'PUBLISH repeating message expiry', bytes: '30 0e 0001 74 0a 02 00000001 02 00000002', id: '[MQTT-2.2.2-2]', reason: 0x82 },
  { name: 'PUBLISH topic alias 0', bytes: '30 07 0001 74 03 23 0000', reason: 0x82 },
  { name: 'PUBLISH subscription identifier 0', bytes: '30 06 0001 74 02 0b 00', reason: 0x82 },
  { name: 'PUBLISH payload format 2', bytes: '30 06 0001 74 02 01 02', reason: 0x82 },
  { name: 'PUBLISH announced UTF-8 payload that is not', bytes: '30 07 0001 74 02 01 01 ff', id: '[MQTT-3.3.2-6]', reason: 0x99 },
  { name: 'PUBLISH empty topic without alias', bytes: '30 03 0000 00', id: '[MQTT-3.3.4-1]', reason: 0x82 },
  { name: 'PUBLISH topic with wildcard', bytes: '30 04 0001 23 00', id: '[MQTT-3.3.2-2]', reason: 0x90 },
  { name: 'PUBLISH property length past the end', bytes: '30 05 0001 74 09 01', reason: 0x81 },
  { name: 'PUBLISH property length of five bytes', bytes: '30 08 0001 74 ffffffff01', id: '[MQTT-1.5.5-1]', reason: 0x81 },
  { name: 'SUBSCRIBE retain handling 3', bytes: '82 07 0001 00 0001 61 30', id: '[MQTT-3.8.3-5]', reason: 0x82 },
  { name: 'SUBSCRIBE reserved option bits', bytes: '82 07 0001 00 0001 61 40', id: '[MQTT-3.8.3-5]', reason: 0x81 },
  { name: 'SUBSCRIBE two subscription identifiers', bytes: '82 0b 0001 04 0b 01 0b 02 0001 61 00', id: '[MQTT-3.8.2-1]', reason: 0x82 },
  { name: 'DISCONNECT with a PUBLISH-only property', bytes: 'e0 04 00 02 01 00', id: '[MQTT-2.2.2-2]', reason: 0x81 },
  { name: 'AUTH reason code 0x01', bytes: 'f0 01 01', id: '[MQTT-3.15.2-1]', reason: 0x81 },
  { name: 'CONNECT v5 receive maximum 0', bytes: '10 11 0004 4d515454 05 02 003c 03 21 0000 0001 61', reason: 0x82, connectLevel: 5 },
  {
    name: 'CONNECT v5 will with a CONNECT-only property',
    bytes: '10 17 0004 4d515454 05 06 003c 00 0001 61 03 21 0001 0001 77 0000',
    id: '[MQTT-2.2.2-2]',
    reason: 0x81,
    connectLevel: 5,
  },
  {
    name: 'CONNECT v5 authentication data without method',
    bytes: '10 11 0004 4d515454 05 02 003c 03 16 0000 0001 61',
    id: '[MQTT-3.1.2-11]',
    reason: 0x82,
    connectLevel: 5,
  },
];

describe('mqtt codec v5: malformed packets', () => {
  for (const b of BAD5) {
    test(b.name, () => {
      assert.throws(
        () => parsePacket(hex(b.bytes), 0, 1 << 20, 5),
        (e: unknown) => {
          assert.ok(e instanceof MqttProtocolError, `not a MqttProtocolError: ${String(e)}`);
          if (b.id !== undefined) assert.equal(e.normative, b.id, e.message);
          assert.equal(e.reasonCode, b.reason, e.message);
          assert.equal(e.protocolLevel, b.connectLevel);
          return true;
        },
      );
    });
  }
  test('packet over the maximum size reports 0x95 Packet too large', () => {
    assert.throws(
      () => parsePacket(hex('30 e807'), 0, 100, 5),
      (e: unknown) => e instanceof MqttProtocolError && e.reasonCode === 0x95,
    );
  });
  test('the same PUBLISH with a property block is malformed at level 4 only through its payload, not its layout', () => {
    // At level 4 the bytes after the topic are payload: the packet decodes.
    const bytes = hex('30 06 0001 74 02 7f 00');
    const r = parsePacket(bytes, 0, 100, 4);
    assert.ok(r !== INCOMPLETE && r.packet.type === 'publish' && r.packet.payload.length === 3);
  });
});

describe('mqtt codec v5: round trips', () => {
  test('encode then decode gives the packet back', () => {
    const packets: MqttPacket[] = [
      ...GOLDEN5.map((g) => g.packet),
      {
        type: 'publish',
        dup: true,
        qos: 2,
        retain: true,
        topic: 'ü/ñ',
        packetId: 9,
        payload: Buffer.alloc(70_000, 3),
        properties: {
          payloadFormatIndicator: 0,
          userProperties: [
            ['k', 'v1'],
            ['k', 'v2'],
          ],
          subscriptionIdentifiers: [268_435_455],
        },
      },
      {
        type: 'connack',
        sessionPresent: true,
        returnCode: 0,
        properties: {
          sessionExpiryInterval: 0xffffffff,
          maximumQoS: 1,
          retainAvailable: 1,
          maximumPacketSize: 1024,
          wildcardSubscriptionAvailable: 1,
          subscriptionIdentifierAvailable: 1,
          sharedSubscriptionAvailable: 1,
          serverKeepAlive: 10,
          responseInformation: 'resp/',
          serverReference: 'other',
          authenticationMethod: 'm',
          authenticationData: Buffer.from('d'),
        },
      },
    ];
    for (const p of packets) {
      const buf = encodePacket(p, 5);
      const r = parse5(buf);
      assert.equal(r.bytesConsumed, buf.length);
      assert.deepEqual(r.packet, p);
    }
  });
  test('v5 PUBLISH frame with an empty property block', () => {
    const f = encodePublishFrame('t', Buffer.from('x'), 0, false, false, 0, {});
    assert.equal(f.toString('hex'), hex('30 05 0001 74 00 78').toString('hex'));
  });
});

describe('mqtt codec v5: fuzz', () => {
  test('20000 mutated v5 packets: only MqttProtocolError escapes, decodable ones re-encode identically', () => {
    const seeds = GOLDEN5.map((g) => hex(g.bytes));
    const rnd = prng(0xc0ffee);
    let decoded = 0;
    let errors = 0;
    for (let i = 0; i < 20_000; i++) {
      let buf = Buffer.from(seeds[Math.floor(rnd() * seeds.length)]);
      const op = Math.floor(rnd() * 4);
      if (op === 0) for (let k = 0; k < 1 + rnd() * 3; k++) buf[Math.floor(rnd() * buf.length)] ^= 1 << Math.floor(rnd() * 8);
      else if (op === 1) for (let k = 0; k < 1 + rnd() * 3; k++) buf[Math.floor(rnd() * buf.length)] = Math.floor(rnd() * 256);
      else if (op === 2) buf = buf.subarray(0, Math.floor(rnd() * buf.length));
      else {
        const at = 2 + Math.floor(rnd() * Math.max(1, buf.length - 2));
        buf = Buffer.concat([buf.subarray(0, at), Buffer.from([Math.floor(rnd() * 256)]), buf.subarray(at)]);
        buf[1] = Math.min(127, buf.length - 2);
      }
      let r: ParseResult | typeof INCOMPLETE;
      try {
        r = parsePacket(buf, 0, 4096, 5);
      } catch (e) {
        if (e instanceof MqttProtocolError) {
          errors++;
          assert.ok(e.reasonCode >= 0x80, `reason code ${e.reasonCode} of a protocol error`);
          continue;
        }
        throw e;
      }
      if (r === INCOMPLETE) continue;
      decoded++;
      const again = parsePacket(encodePacket(r.packet, 5), 0, 1 << 20, 5);
      assert.notEqual(again, INCOMPLETE);
      assert.deepEqual((again as ParseResult).packet, r.packet);
    }
    assert.ok(decoded > 1000, `only ${decoded} mutated packets decoded`);
    assert.ok(errors > 1000, `only ${errors} mutated packets refused`);
  });
});
