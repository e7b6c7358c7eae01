/**
 * AMQP basic properties ↔ Message (src/protocols/amqp/properties.ts) and queue.declare's x-arguments
 * (channel.ts queueArguments).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Typed, decodeTable, encodeTable } from '../../../src/protocols/amqp/codec/index.js';
import { messageOfPublish, propertiesOf } from '../../../src/protocols/amqp/properties.js';
import { queueArguments } from '../../../src/protocols/amqp/channel.js';
import { AmqpError } from '../../../src/protocols/amqp/errors.js';
import { makeMessage } from '../../../src/core/index.js';

const base = { exchange: 'x', routingKey: 'k', body: Buffer.from('b'), origin: 'c1', user: null };

describe('amqp properties', () => {
  it('headers: raw bytes kept for AMQP, values as bytes for other protocols', () => {
    const headers = { s: 'text', n: new Typed('b', -3), l: new Typed('l', 2n ** 40n), t: true, x: Buffer.from([1, 2]), nested: { a: 1 } };
    const raw = encodeTable(headers);
    const msg = messageOfPublish({ ...base, props: { rawHeaders: raw } }, 1_000_123);
    assert.ok(msg.amqpHeaders?.equals(raw));
    const byKey = Object.fromEntries(msg.headers.map((h) => [h.key, h.value?.toString('latin1')]));
    assert.deepEqual(byKey, { s: 'text', n: '-3', l: String(2 ** 40), t: 'true', x: '\x01\x02', nested: '{"a":1}' });
    const back = propertiesOf({ ...msg, exchange: 'x' }, 1_000_200);
    assert.ok(back.rawHeaders?.equals(raw), "the publisher's bytes go back unchanged");
  });

  it('a message from another protocol gets a headers table of strings (bytes when not UTF-8)', () => {
    const msg = makeMessage('a/b', Buffer.from('p'), {
      headers: [
        { key: 'k', value: Buffer.from('v') },
        { key: 'bin', value: Buffer.from([0xff, 0xfe]) },
        { key: 'nil', value: null },
      ],
    });
    const p = propertiesOf(msg, Date.now());
    assert.deepEqual(p.headers, { k: 'v', bin: Buffer.from([0xff, 0xfe]), nil: null });
  });

  it("timestamp: the publisher's kept exactly, none added when it sent none", () => {
    const withTs = messageOfPublish({ ...base, props: { timestamp: 1_700_000_000 } }, 1_800_000_000_123);
    assert.equal(withTs.timestamp, 1_700_000_000_000);
    assert.equal(propertiesOf({ ...withTs, exchange: 'x' }, 0).timestamp, 1_700_000_000);
    const without = messageOfPublish({ ...base, props: {} }, 1_800_000_000_000);
    assert.equal(without.timestamp, 1_800_000_000_001, 'a receipt time never falls on a whole second');
    assert.equal(propertiesOf({ ...without, exchange: 'x' }, 0).timestamp, undefined);
  });

  it('a message from another protocol carries its timestamp (seconds) and the expiry left', () => {
    const msg = makeMessage('a/b', Buffer.from('p'), { timestamp: 1_800_000_000_123, origin: 'mqtt-client', expiresAt: 1_800_000_010_123 });
    msg.exchange = 'amq.topic';
    const p = propertiesOf(msg, 1_800_000_005_123);
    assert.equal(p.timestamp, 1_800_000_000);
    assert.equal(p.expiration, '5000');
  });

  it("expiration: delivered back exactly as sent, also beside the publisher's own timestamp and later", () => {
    const m = messageOfPublish({ ...base, props: { expiration: '0600', timestamp: 1_700_000_000 } }, 5_000_500);
    assert.equal(m.expiresAt, 5_000_500 + 600, 'counted from receipt');
    assert.equal(propertiesOf({ ...m, exchange: 'x' }, 5_000_900).expiration, '0600');
  });

  it('expiration: counted from receipt, delivered back as published; invalid values are 406', () => {
    const m = messageOfPublish({ ...base, props: { expiration: '60000' } }, 5_000_500);
    assert.equal(m.expiresAt, 5_000_500 + 60_000);
    assert.equal(propertiesOf({ ...m, exchange: 'x' }, 5_030_000).expiration, '60000');
    for (const bad of ['-1', 'abc', '1.5', '']) {
      assert.throws(
        () => messageOfPublish({ ...base, props: { expiration: bad } }, 0),
        (e: unknown) => e instanceof AmqpError && e.code === 406,
      );
    }
  });

  it('delivery-mode, reply-to (separators swapped), correlation-id and the rest', () => {
    const m = messageOfPublish(
      {
        ...base,
        props: {
          deliveryMode: 2,
          replyTo: 'replies.client-1',
          correlationId: 'c-7',
          contentType: 'text/plain',
          priority: 3,
          messageId: 'id',
          type: 't',
          appId: 'a',
          userId: 'u',
        },
      },
      1,
    );
    assert.equal(m.persistent, true);
    assert.equal(m.qos, 1);
    assert.equal(m.responseTopic, 'replies/client-1');
    assert.deepEqual(m.correlationData, Buffer.from('c-7'));
    const p = propertiesOf({ ...m, exchange: 'x' }, 1);
    assert.deepEqual(
      {
        deliveryMode: p.deliveryMode,
        replyTo: p.replyTo,
        correlationId: p.correlationId,
        contentType: p.contentType,
        priority: p.priority,
        messageId: p.messageId,
        type: p.type,
        appId: p.appId,
        userId: p.userId,
      },
      {
        deliveryMode: 2,
        replyTo: 'replies.client-1',
        correlationId: 'c-7',
        contentType: 'text/plain',
        priority: 3,
        messageId: 'id',
        type: 't',
        appId: 'a',
        userId: 'u',
      },
    );
    assert.equal(messageOfPublish({ ...base, props: { deliveryMode: 1 } }, 1).persistent, false);
  });

  it('user-id must match the authenticated user', () => {
    assert.throws(
      () => messageOfPublish({ ...base, user: 'alice', props: { userId: 'bob' } }, 1),
      (e: unknown) => e instanceof AmqpError && e.code === 406,
    );
    assert.equal(messageOfPublish({ ...base, user: 'alice', props: { userId: 'alice' } }, 1).userId, 'alice');
  });

  it("dead-letter history becomes x-death and x-first-death-*, beside the publisher's headers", () => {
    const m = messageOfPublish({ ...base, props: { headers: { keep: 'me' } } }, 1);
    m.exchange = 'x';
    m.deaths = [{ queue: 'q', reason: 'rejected', exchange: 'x', routingKeys: ['k'], count: 2, time: 1_700_000_000_000 }];
    const p = propertiesOf(m, 1);
    const t = p.headers ?? decodeTable(p.rawHeaders!);
    assert.equal(t.keep, 'me');
    assert.equal(t['x-first-death-reason'], 'rejected');
    const d = (t['x-death'] as Array<Record<string, unknown>>)[0]!;
    assert.equal(d.queue, 'q');
    assert.equal(d.reason, 'rejected');
    assert.deepEqual(d['routing-keys'], ['k']);
    assert.equal((d.count as Typed).value, 2n);
  });
});

describe('amqp queue arguments', () => {
  it('reads the x-arguments the core acts on, whatever integer type the client chose', () => {
    const a = queueArguments(
      {
        'x-message-ttl': new Typed('l', 1000n),
        'x-expires': 5000,
        'x-max-length': new Typed('s', 10),
        'x-overflow': 'reject-publish',
        'x-dead-letter-exchange': 'dlx',
        'x-dead-letter-routing-key': 'dead',
        'x-single-active-consumer': true,
        'x-queue-type': 'quorum',
      },
      'q',
      true,
      false,
    );
    assert.deepEqual(a, {
      messageTtlMs: 1000,
      expiresMs: 5000,
      maxLength: 10,
      overflow: 'reject-publish',
      deadLetterExchange: 'dlx',
      deadLetterRoutingKey: 'dead',
      singleActiveConsumer: true,
    });
  });

  it('refuses bad values with 406', () => {
    const bad = [
      { 'x-message-ttl': -1 },
      { 'x-expires': 0 },
      { 'x-overflow': 'drop-tail' },
      { 'x-max-length': 'ten' },
      { 'x-queue-type': 'quorum' },
      { 'x-queue-type': 'lazy' },
      { 'x-dead-letter-routing-key': 'k' },
    ];
    for (const t of bad)
      assert.throws(
        () => queueArguments(t, 'q', false, false),
        (e: unknown) => e instanceof AmqpError && e.code === 406,
        JSON.stringify(t),
      );
  });
});

describe('AMQP delivery mode of messages from other protocols', () => {
  it('is 2 for an MQTT QoS 1 publish, unsaid for QoS 0, and as published for AMQP messages', () => {
    assert.equal(propertiesOf(makeMessage('a/b', Buffer.from('x'), { qos: 1 }), Date.now()).deliveryMode, 2);
    assert.equal(propertiesOf(makeMessage('a/b', Buffer.from('x'), { qos: 0 }), Date.now()).deliveryMode, undefined);
    assert.equal(propertiesOf(makeMessage('a/b', Buffer.from('x'), { qos: 1, persistent: false }), Date.now()).deliveryMode, 1);
  });
});
