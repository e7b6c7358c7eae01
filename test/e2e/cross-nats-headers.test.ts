/**
 * NATS headers across protocols, with real clients against bin/flowmq. A NATS header is a message header (one entry
 * per value, key as sent, UTF-8 value): an MQTT v5 user property, an AMQP headers-table entry (a long string), a
 * Kafka record header. The reply subject is the response topic (MQTT v5 Response Topic, AMQP reply-to, record
 * header flowmq.reply-to); the `Nats-Msg-Id` header is the message id as well (AMQP message-id,
 * flowmq.message-id) and stays a header. Towards NATS, the properties a NATS message has no field for become the
 * reserved headers `Content-Type`, `Correlation-Id` (UTF-8, or base64 when the bytes are not UTF-8) and
 * `Nats-Msg-Id`, unless the message carries a header of that name already.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import kafkajsPkg, { type KafkaMessage } from 'kafkajs';
import { headers as natsHeaders } from 'nats';
import { eventually } from './harness.js';
import { crossFixture, natsCollector, userProps } from './cross-nats-helpers.js';
import { mqttCollector } from './mqtt-helpers.js';
import { takeUntil } from './amqp-helpers.js';

const { Kafka, logLevel } = kafkajsPkg;

/** KafkaJS record headers as arrays of UTF-8 values (it gives an array for a repeated key). */
function recordHeaders(m: KafkaMessage): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [k, v] of Object.entries(m.headers ?? {})) {
    out[k] = (Array.isArray(v) ? v : [v]).map((x) => (x === undefined ? '' : x.toString()));
  }
  return out;
}

describe('e2e: NATS headers across MQTT v5, AMQP and Kafka', () => {
  const f = crossFixture('cross-headers');

  it('NATS headers become MQTT v5 user properties (repeated keys, case as sent); the reply subject the response topic', async () => {
    const sub = await mqttCollector(f.broker.mqttUrl, ['h2m/#']);
    try {
      const h = natsHeaders();
      h.append('Tenant', 'acme');
      h.append('x-trace', 'abc-1');
      h.append('X-Trace', 'upper case is another key');
      h.append('multi', 'one');
      h.append('multi', 'two');
      h.append('empty', '');
      h.append('Nats-Msg-Id', 'msg-42');
      h.append('Content-Type', 'application/json'); // a header only: NATS has no content type of its own
      h.append('utf8', 'größe ✓');
      f.nc.publish('h2m.with.headers', '{"n":1}', { headers: h, reply: 'replies.h2m/x.1' });
      f.nc.publish('h2m.end', 'end');
      const [p] = await sub.until('end');
      assert.ok(p !== undefined, 'the message with headers arrived');
      assert.equal(p.topic, 'h2m/with/headers');
      assert.equal(p.payload.toString(), '{"n":1}');
      assert.deepEqual(userProps(p), {
        Tenant: ['acme'],
        'x-trace': ['abc-1'],
        'X-Trace': ['upper case is another key'],
        multi: ['one', 'two'],
        empty: [''],
        'Nats-Msg-Id': ['msg-42'],
        'Content-Type': ['application/json'],
        utf8: ['größe ✓'],
      });
      // The reply subject with its separators swapped: a `/` in a token is a `.` in a level.
      assert.equal(p.properties?.responseTopic, 'replies/h2m.x/1');
      assert.equal(p.properties?.contentType, undefined);
      assert.equal(p.properties?.correlationData, undefined);
    } finally {
      await sub.c.endAsync();
    }
  });

  it('MQTT v5 user properties become NATS headers; content type, correlation data and response topic the reserved headers and the reply', async () => {
    const ns = natsCollector(f.nc, 'm2h.>');
    await f.nc.flush();
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await pub.publishAsync('m2h/text', 'a', {
        qos: 1,
        properties: {
          userProperties: { tenant: 'acme', multi: ['one', 'two'], empty: '' },
          contentType: 'application/json',
          correlationData: Buffer.from('req-7'),
          responseTopic: 'clients/c1.v2/replies',
        },
      });
      const binary = Buffer.from([0x00, 0xff, 0x80, 0x0d, 0x0a, 0xc3, 0x28]);
      await pub.publishAsync('m2h/binary', 'b', { qos: 1, properties: { correlationData: binary } });
      // The publisher's own header of a reserved name wins over the property (one value, not two).
      await pub.publishAsync('m2h/own', 'c', { qos: 1, properties: { contentType: 'text/plain', userProperties: { 'Content-Type': 'text/csv' } } });
      await pub.publishAsync('m2h/end', 'end', { qos: 1 });
      const got = await ns.until('end');
      assert.deepEqual(
        got.map((s) => [s.subject, s.data, s.reply]),
        [
          ['m2h.text', 'a', 'clients.c1/v2.replies'],
          ['m2h.binary', 'b', ''],
          ['m2h.own', 'c', ''],
        ],
      );
      for (const s of got) assert.equal(s.headerError, undefined, `headers of ${s.subject} decode`);
      assert.deepEqual(got[0]!.headers, {
        tenant: ['acme'],
        multi: ['one', 'two'],
        empty: [''],
        'Content-Type': ['application/json'],
        'Correlation-Id': ['req-7'],
      });
      assert.deepEqual(got[1]!.headers, { 'Correlation-Id': ['base64:' + binary.toString('base64')] });
      assert.deepEqual(got[2]!.headers, { 'Content-Type': ['text/csv'] });
    } finally {
      await pub.endAsync();
      ns.sub.unsubscribe();
    }
  });

  it('headers between NATS clients come through exactly as sent: nothing added, Nats-Msg-Id once', async () => {
    const ns = natsCollector(f.nc, 'n2n.*');
    await f.nc.flush();
    const h = natsHeaders();
    h.append('Nats-Msg-Id', 'id-1');
    h.append('A', '1');
    h.append('A', '2');
    f.nc.publish('n2n.h', 'with', { headers: h, reply: 'n2n-replies.x' });
    f.nc.publish('n2n.plain', 'without');
    f.nc.publish('n2n.end', 'end');
    const got = await ns.until('end');
    assert.deepEqual(got, [
      { subject: 'n2n.h', reply: 'n2n-replies.x', data: 'with', headers: { 'Nats-Msg-Id': ['id-1'], A: ['1', '2'] }, status: '' },
      { subject: 'n2n.plain', reply: '', data: 'without', headers: null, status: '' },
    ]);
    ns.sub.unsubscribe();
  });

  it('NATS headers reach an AMQP consumer as its headers table; Nats-Msg-Id is the message-id, the reply subject the reply-to', async () => {
    await f.ch.assertQueue('xh-amqp', { exclusive: true });
    await f.ch.bindQueue('xh-amqp', 'amq.topic', 'h2a.#');
    const h = natsHeaders();
    h.append('tenant', 'acme');
    h.append('Nats-Msg-Id', 'msg-7');
    h.append('utf8', 'größe ✓');
    f.nc.publish('h2a.x', 'payload', { headers: h, reply: 'replies.h2a' });
    f.nc.publish('h2a.end', 'end');
    const [m] = await takeUntil(f.ch, 'xh-amqp', 'end');
    assert.ok(m !== undefined);
    assert.equal(m.fields.routingKey, 'h2a.x');
    assert.deepEqual({ ...m.properties.headers }, { tenant: 'acme', 'Nats-Msg-Id': 'msg-7', utf8: 'größe ✓' });
    assert.equal(m.properties.messageId, 'msg-7');
    assert.equal(m.properties.replyTo, 'replies.h2a');
    assert.equal(m.properties.correlationId, undefined);
    assert.equal(m.properties.contentType, undefined);
  });

  it('AMQP properties and headers reach a NATS subscriber as headers (numbers and booleans as text)', async () => {
    const ns = natsCollector(f.nc, 'a2h.*');
    await f.nc.flush();
    f.ch.publish('amq.topic', 'a2h.props', Buffer.from('p'), {
      headers: { tenant: 'acme', count: 3, ok: true },
      messageId: 'm-1',
      correlationId: 'c-1',
      contentType: 'text/plain',
      replyTo: 'replies.a2h/v2',
    });
    // The publisher's Nats-Msg-Id header and its message-id property: one header, the publisher's.
    f.ch.publish('amq.topic', 'a2h.own', Buffer.from('o'), { headers: { 'Nats-Msg-Id': 'from-header' }, messageId: 'from-property' });
    f.ch.publish('amq.topic', 'a2h.end', Buffer.from('end'));
    const got = await ns.until('end');
    assert.deepEqual(
      got.map((s) => [s.subject, s.data, s.reply]),
      [
        ['a2h.props', 'p', 'replies.a2h/v2'],
        ['a2h.own', 'o', ''],
      ],
    );
    assert.deepEqual(got[0]!.headers, {
      tenant: ['acme'],
      count: ['3'],
      ok: ['true'],
      'Nats-Msg-Id': ['m-1'],
      'Correlation-Id': ['c-1'],
      'Content-Type': ['text/plain'],
    });
    assert.deepEqual(got[1]!.headers, { 'Nats-Msg-Id': ['from-header'] });
    ns.sub.unsubscribe();
  });

  it('NATS headers become Kafka record headers through a stream; Kafka record headers become NATS headers', async () => {
    await f.broker.api('POST', '/api/v1/streams', { name: 'hdr-stream', partitions: 1, bindings: ['h2k/#'] });
    const h = natsHeaders();
    h.append('tenant', 'acme');
    h.append('multi', 'one');
    h.append('multi', 'two');
    h.append('Nats-Msg-Id', 'k-1');
    f.nc.publish('h2k.x', 'to kafka', { headers: h });
    f.nc.publish('h2k.end', 'end');
    await f.nc.flush();

    const kafka = new Kafka({ brokers: [f.broker.kafka], clientId: 'xh', logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
    const consumer = kafka.consumer({ groupId: 'xh-readers', maxWaitTimeInMs: 200 });
    const records: KafkaMessage[] = [];
    await consumer.connect();
    try {
      await consumer.subscribe({ topic: 'hdr-stream', fromBeginning: true });
      await consumer.run({ eachMessage: async ({ message }) => void records.push(message) });
      await eventually(() => records.some((r) => String(r.value) === 'end'), 30_000, 'the marker record');
    } finally {
      await consumer.disconnect();
    }
    const r = records[0]!;
    assert.equal(String(r.value), 'to kafka');
    const rh = recordHeaders(r);
    assert.equal(rh['flowmq.topic']?.[0], 'h2k/x');
    assert.deepEqual(rh['flowmq.message-id'], ['k-1']);
    // The NATS headers are the plain record headers, values in order.
    assert.deepEqual(Object.fromEntries(Object.entries(rh).filter(([k]) => !k.startsWith('flowmq.'))), {
      tenant: ['acme'],
      multi: ['one', 'two'],
      'Nats-Msg-Id': ['k-1'],
    });

    // Kafka → NATS: plain record headers are headers; reserved ones are the properties they carry.
    const ns = natsCollector(f.nc, 'hdr-stream');
    await f.nc.flush();
    const producer = kafka.producer();
    await producer.connect();
    try {
      await producer.send({
        topic: 'hdr-stream',
        acks: -1,
        messages: [
          {
            value: 'from kafka',
            headers: {
              src: 'kafka',
              'flowmq.reply-to': 'replies/k.1',
              'flowmq.message-id': 'km-1',
              'flowmq.content-type': 'text/plain',
              'flowmq.correlation-id': 'kc-1',
            },
          },
          { value: 'end' },
        ],
      });
    } finally {
      await producer.disconnect();
    }
    const got = await ns.until('end');
    assert.deepEqual(
      got.map((s) => [s.subject, s.data, s.reply]),
      [['hdr-stream', 'from kafka', 'replies.k/1']],
    );
    assert.deepEqual(got[0]!.headers, { src: ['kafka'], 'Nats-Msg-Id': ['km-1'], 'Content-Type': ['text/plain'], 'Correlation-Id': ['kc-1'] });
    ns.sub.unsubscribe();
  });

  it('headers NATS cannot carry (keys with spaces, colons or non-ASCII; values with CR or LF) are left out, the rest arrives', async () => {
    // A NATS header key is printable ASCII without ':' and a value has no CR/LF; anything else in an HMSG header
    // block would break the client's parser or inject headers. MQTT user properties and Kafka headers may hold it.
    const ns = natsCollector(f.nc, 'bad.*');
    await f.nc.flush();
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    const kafka = new Kafka({ brokers: [f.broker.kafka], clientId: 'xh-bad', logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: 'bad.kafka' }], waitForLeaders: true });
    await admin.disconnect();
    const producer = kafka.producer();
    await producer.connect();
    try {
      await pub.publishAsync('bad/mqtt', 'm', {
        qos: 1,
        properties: {
          userProperties: {
            good: 'yes',
            'has space': 'x',
            'a:b': 'x',
            größe: 'x',
            inject: 'v\r\nInjected: yes',
            lf: 'v\nInjected: yes',
          },
        },
      });
      await producer.send({
        topic: 'bad.kafka',
        acks: -1,
        messages: [{ value: 'k', headers: { good: 'yes', crlf: Buffer.from('v\r\nInjected: yes'), 'sp ace': 'x' } }],
      });
      await pub.publishAsync('bad/end', 'end', { qos: 1 });
      const got = await ns.until('end');
      assert.deepEqual(
        got.map((s) => [s.subject, s.data, s.headerError]),
        [
          ['bad.mqtt', 'm', undefined],
          ['bad.kafka', 'k', undefined],
        ],
      );
      for (const s of got) {
        const h = s.headers ?? {};
        assert.deepEqual(h.good, ['yes'], `the valid header of ${s.subject}`);
        // Keys NATS cannot carry are left out; a value with CR/LF is left out or put on one line, never split.
        assert.deepEqual(
          Object.keys(h).filter((k) => !['good', 'inject', 'lf', 'crlf'].includes(k)),
          [],
          `keys of ${s.subject}: ${JSON.stringify(h)}`,
        );
        for (const [k, vs] of Object.entries(h)) for (const v of vs) assert.ok(!/[\r\n]/.test(v), `${k}: ${JSON.stringify(v)} on one line`);
      }
      assert.equal(f.nc.isClosed(), false);
    } finally {
      await pub.endAsync();
      await producer.disconnect();
      ns.sub.unsubscribe();
    }
  });
});
