/**
 * AMQP exchanges and routing end to end (amqplib against bin/flowmq): direct, fanout, topic and headers
 * exchanges, the default exchange, exchange-to-exchange bindings, mandatory returns, channel errors that close
 * only their channel, every content property and header type preserved, and the bridge to MQTT through amq.topic.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import { amqpFixture, connectAmqp, take } from './amqp-helpers.js';

describe('e2e: AMQP routing', () => {
  const f = amqpFixture({ connect: true });

  it('fanout reaches every bound queue; direct only the matching key', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertExchange('fan', 'fanout', { durable: false });
    await ch.assertExchange('dir', 'direct', { durable: false });
    const qs = ['f1', 'f2', 'f3'];
    for (const q of qs) {
      await ch.assertQueue(q, { durable: false, exclusive: true });
      await ch.bindQueue(q, 'fan', 'ignored');
    }
    await ch.bindQueue('f1', 'dir', 'red');
    await ch.bindQueue('f2', 'dir', 'green');
    ch.publish('fan', 'any', Buffer.from('to all'));
    ch.publish('dir', 'green', Buffer.from('green only'));
    ch.publish('dir', 'blue', Buffer.from('nobody'));
    const f1 = await take(ch, 'f1', 1);
    const f2 = await take(ch, 'f2', 2);
    const f3 = await take(ch, 'f3', 1);
    assert.equal(f1[0]!.content.toString(), 'to all');
    assert.deepEqual(
      f2.map((m) => m.content.toString()),
      ['to all', 'green only'],
    );
    assert.equal(f2[1]!.fields.exchange, 'dir');
    assert.equal(f2[1]!.fields.routingKey, 'green');
    assert.equal(f3[0]!.content.toString(), 'to all');
    // Marker: nothing else reached f1 (the direct publish to 'blue' and 'green' did not).
    ch.publish('fan', 'any', Buffer.from('marker'));
    assert.equal((await take(ch, 'f1', 1))[0]!.content.toString(), 'marker');
    await ch.close();
  });

  it('topic: * is one word, # zero or more words anywhere', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertExchange('logs', 'topic', { durable: false });
    await ch.assertQueue('t-kern', { exclusive: true });
    await ch.assertQueue('t-crit', { exclusive: true });
    await ch.assertQueue('t-mid', { exclusive: true });
    await ch.bindQueue('t-kern', 'logs', 'kern.*');
    await ch.bindQueue('t-crit', 'logs', '*.critical');
    await ch.bindQueue('t-mid', 'logs', 'a.#.z');
    for (const k of ['kern.critical', 'kern.info', 'user.critical', 'kern.info.extra', 'a.z', 'a.b.c.z', 'a.b.c']) ch.publish('logs', k, Buffer.from(k));
    ch.publish('logs', 'kern.end', Buffer.from('end'));
    ch.publish('logs', 'x.critical', Buffer.from('end'));
    ch.publish('logs', 'a.end.z', Buffer.from('end'));
    const kern = await take(ch, 't-kern', 3);
    const crit = await take(ch, 't-crit', 3);
    const mid = await take(ch, 't-mid', 3);
    assert.deepEqual(
      kern.map((m) => m.fields.routingKey),
      ['kern.critical', 'kern.info', 'kern.end'],
    );
    assert.deepEqual(
      crit.map((m) => m.fields.routingKey),
      ['kern.critical', 'user.critical', 'x.critical'],
    );
    assert.deepEqual(
      mid.map((m) => m.fields.routingKey),
      ['a.z', 'a.b.c.z', 'a.end.z'],
    );
    await ch.close();
  });

  it('headers: values compare by type as RabbitMQ does (int 1 is not "1"; any integer width matches)', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('h-int', { exclusive: true });
    await ch.assertQueue('h-str', { exclusive: true });
    await ch.bindQueue('h-int', 'amq.headers', '', { 'x-match': 'all', n: 1 });
    await ch.bindQueue('h-str', 'amq.headers', '', { 'x-match': 'all', n: '1' });
    ch.publish('amq.headers', '', Buffer.from('int'), { headers: { n: 1 } });
    // amqplib sends a JS number as a long or a signed int; a byte-wide int ('b') is the same class.
    ch.publish('amq.headers', '', Buffer.from('byte'), { headers: { n: { '!': 'byte', value: 1 } } });
    ch.publish('amq.headers', '', Buffer.from('str'), { headers: { n: '1' } });
    ch.publish('amq.headers', '', Buffer.from('float'), { headers: { n: { '!': 'double', value: 1.5 } } });
    ch.publish('amq.headers', '', Buffer.from('end'), { headers: { n: 1 } });
    ch.publish('amq.headers', '', Buffer.from('end'), { headers: { n: '1' } });
    assert.deepEqual(
      (await take(ch, 'h-int', 3)).map((m) => m.content.toString()),
      ['int', 'byte', 'end'],
    );
    assert.deepEqual(
      (await take(ch, 'h-str', 2)).map((m) => m.content.toString()),
      ['str', 'end'],
    );
    await ch.close();
  });

  it('headers: x-match all and any', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('h-all', { exclusive: true });
    await ch.assertQueue('h-any', { exclusive: true });
    await ch.bindQueue('h-all', 'amq.headers', '', { 'x-match': 'all', format: 'pdf', type: 'report' });
    await ch.bindQueue('h-any', 'amq.match', '', { 'x-match': 'any', format: 'pdf', type: 'log' });
    ch.publish('amq.headers', '', Buffer.from('pdf report'), { headers: { format: 'pdf', type: 'report' } });
    ch.publish('amq.headers', '', Buffer.from('pdf only'), { headers: { format: 'pdf' } });
    ch.publish('amq.match', '', Buffer.from('log'), { headers: { type: 'log' } });
    ch.publish('amq.match', '', Buffer.from('neither'), { headers: { format: 'zip', type: 'x' } });
    ch.publish('amq.headers', '', Buffer.from('end'), { headers: { format: 'pdf', type: 'report' } });
    ch.publish('amq.match', '', Buffer.from('end'), { headers: { format: 'pdf' } });
    const all = await take(ch, 'h-all', 2);
    assert.deepEqual(
      all.map((m) => m.content.toString()),
      ['pdf report', 'end'],
    );
    const any = await take(ch, 'h-any', 2);
    assert.deepEqual(
      any.map((m) => m.content.toString()),
      ['log', 'end'],
    );
    await ch.close();
  });

  it('exchange-to-exchange bindings and the default exchange', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertExchange('src-x', 'direct', { durable: false });
    await ch.assertExchange('dst-x', 'fanout', { durable: false });
    await ch.bindExchange('dst-x', 'src-x', 'k');
    await ch.assertQueue('e2e-q', { exclusive: true });
    await ch.bindQueue('e2e-q', 'dst-x', '');
    ch.publish('src-x', 'k', Buffer.from('via e2e'));
    ch.publish('', 'e2e-q', Buffer.from('via default'));
    const got = await take(ch, 'e2e-q', 2);
    assert.deepEqual(
      got.map((m) => m.content.toString()),
      ['via e2e', 'via default'],
    );
    assert.equal(got[1]!.fields.exchange, '');
    await ch.close();
  });

  it('mandatory: an unroutable message comes back with basic.return 312 NO_ROUTE', async () => {
    const ch = await f.conn.createChannel();
    const returned = new Promise<{ fields: Record<string, unknown>; content: Buffer; properties: Record<string, unknown> }>((resolve) =>
      ch.on('return', resolve),
    );
    ch.publish('amq.direct', 'nobody-here', Buffer.from('lost'), { mandatory: true, messageId: 'm-1' });
    const r = await returned;
    assert.equal(r.fields.replyCode, 312);
    assert.equal(r.fields.replyText, 'NO_ROUTE');
    assert.equal(r.fields.exchange, 'amq.direct');
    assert.equal(r.fields.routingKey, 'nobody-here');
    assert.equal(r.content.toString(), 'lost');
    assert.equal(r.properties.messageId, 'm-1');
    await ch.close();
  });

  it('a publish to an unknown exchange closes that channel with 404; the connection and its other channels go on', async () => {
    const a = await f.conn.createChannel();
    const b = await f.conn.createChannel();
    b.on('error', () => undefined);
    const closed = new Promise<Error>((resolve) => a.on('error', resolve));
    a.publish('no-such-exchange', 'k', Buffer.from('x'));
    const err = await closed;
    assert.match(err.message, /404/);
    assert.match(err.message, /NOT_FOUND - no exchange 'no-such-exchange'/);
    await b.assertQueue('still-here', { exclusive: true });
    // Redeclaring with other properties: 406 on that channel only.
    const c = await f.conn.createChannel();
    c.on('error', () => undefined);
    await assert.rejects(c.assertQueue('still-here', { exclusive: true, durable: false }), /406|PRECONDITION_FAILED/);
    await assert.rejects(b.checkQueue('no-such-queue'), /404/);
    const d = await f.conn.createChannel();
    await d.checkQueue('still-here');
    await d.close();
  });

  it("another connection's exclusive queue is locked (405)", async () => {
    const other = await connectAmqp(f.broker);
    const ch = await other.createChannel();
    ch.on('error', () => undefined);
    const mine = await f.conn.createChannel();
    await mine.assertQueue('locked-q', { exclusive: true });
    await assert.rejects(
      ch.consume('locked-q', () => undefined),
      /405|RESOURCE_LOCKED/,
    );
    await other.close();
    await mine.close();
  });

  it('every content property and header type survives the trip', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('props-q', { exclusive: true });
    const headers = {
      str: 'text',
      int: 42,
      neg: -7,
      big: 2 ** 40,
      float: 1.5,
      bool: true,
      nested: { a: 'b', n: 1 },
      arr: [1, 'two', false],
      bin: Buffer.from([0, 1, 2, 255]),
      nil: null,
    };
    const ts = Math.floor(Date.now() / 1000);
    ch.sendToQueue('props-q', Buffer.from('p'), {
      contentType: 'application/json',
      contentEncoding: 'gzip',
      headers,
      deliveryMode: 2,
      priority: 7,
      correlationId: 'corr-1',
      replyTo: 'reply.queue',
      expiration: '60000',
      messageId: 'id-1',
      type: 'event',
      appId: 'app',
    });
    ch.sendToQueue('props-q', Buffer.from('bare'));
    // With a timestamp of the publisher's own: both kept exactly, the expiration as sent (as RabbitMQ returns it).
    ch.sendToQueue('props-q', Buffer.from('ts'), { timestamp: ts, expiration: '060000' });
    const [m, bare, withTs] = await take(ch, 'props-q', 3);
    assert.equal(withTs!.properties.timestamp, ts);
    assert.equal(withTs!.properties.expiration, '060000');
    const p = m!.properties;
    assert.equal(p.contentType, 'application/json');
    assert.equal(p.contentEncoding, 'gzip');
    assert.equal(p.deliveryMode, 2);
    assert.equal(p.priority, 7);
    assert.equal(p.correlationId, 'corr-1');
    assert.equal(p.replyTo, 'reply.queue');
    assert.equal(p.expiration, '60000');
    assert.equal(p.messageId, 'id-1');
    assert.equal(p.timestamp, undefined);
    assert.equal(p.type, 'event');
    assert.equal(p.appId, 'app');
    assert.deepEqual(p.headers, headers);
    // A message published without properties comes back without them.
    const b = bare!.properties;
    for (const k of ['contentType', 'deliveryMode', 'timestamp', 'expiration', 'messageId', 'correlationId', 'replyTo']) {
      assert.equal((b as unknown as Record<string, unknown>)[k], undefined, k);
    }
    await ch.close();
  });

  it('amq.topic bridges to MQTT both ways: routing key a.b.c is topic a/b/c', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('from-mqtt', { exclusive: true });
    await ch.bindQueue('from-mqtt', 'amq.topic', 'sensors.*.temp');
    const client = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5 });
    try {
      await client.subscribeAsync('alerts/#', { qos: 1 });
      const fromAmqp = new Promise<{ topic: string; payload: Buffer; packet: mqtt.IPublishPacket }>((resolve) =>
        client.on('message', (topic, payload, packet) => resolve({ topic, payload, packet })),
      );
      ch.publish('amq.topic', 'alerts.fire.kitchen', Buffer.from('hot'), { contentType: 'text/plain', headers: { who: 'amqp' } });
      const got = await fromAmqp;
      assert.equal(got.topic, 'alerts/fire/kitchen');
      assert.equal(got.payload.toString(), 'hot');
      assert.equal(got.packet.properties?.contentType, 'text/plain');
      assert.deepEqual({ ...got.packet.properties?.userProperties }, { who: 'amqp' });
      await client.publishAsync('sensors/k1/temp', '21.5', { qos: 1, properties: { userProperties: { unit: 'C' }, responseTopic: 'replies/k1' } });
      const [m] = await take(ch, 'from-mqtt', 1);
      assert.equal(m!.content.toString(), '21.5');
      assert.equal(m!.fields.exchange, 'amq.topic');
      assert.equal(m!.fields.routingKey, 'sensors.k1.temp');
      assert.equal(m!.properties.headers?.unit, 'C');
      assert.equal(m!.properties.replyTo, 'replies.k1');
    } finally {
      await client.endAsync();
      await ch.close();
    }
  });

  it('RPC between AMQP and MQTT v5 through amq.topic: reply-to ↔ Response Topic, correlation-id ↔ Correlation Data', async () => {
    const ch = await f.conn.createChannel();
    const client = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5 });
    try {
      // MQTT v5 requester, AMQP server.
      await ch.assertQueue('rpc-server', { exclusive: true });
      await ch.bindQueue('rpc-server', 'amq.topic', 'rpc.add');
      await ch.consume('rpc-server', (m) => {
        if (m === null) return;
        ch.ack(m);
        ch.publish('amq.topic', m.properties.replyTo as string, Buffer.from(`sum:${m.content.toString()}`), { correlationId: m.properties.correlationId });
      });
      await client.subscribeAsync('replies/r1', { qos: 1 });
      const reply = new Promise<mqtt.IPublishPacket>((resolve) => client.once('message', (_t, _p, packet) => resolve(packet)));
      await client.publishAsync('rpc/add', '1+2', { qos: 1, properties: { responseTopic: 'replies/r1', correlationData: Buffer.from('req-1') } });
      const r = await reply;
      assert.equal(r.topic, 'replies/r1');
      assert.equal(r.payload.toString(), 'sum:1+2');
      assert.deepEqual(r.properties?.correlationData, Buffer.from('req-1'));

      // AMQP requester, MQTT v5 server.
      await client.subscribeAsync('svc/echo', { qos: 1 });
      client.on('message', (topic, payload, packet) => {
        if (topic !== 'svc/echo') return;
        void client.publishAsync(packet.properties!.responseTopic!, Buffer.concat([Buffer.from('echo:'), payload]), {
          qos: 1,
          properties: { correlationData: packet.properties!.correlationData },
        });
      });
      await ch.assertQueue('answers', { exclusive: true });
      await ch.bindQueue('answers', 'amq.topic', 'answers.a1');
      ch.publish('amq.topic', 'svc.echo', Buffer.from('hi'), { replyTo: 'answers.a1', correlationId: 'c-9' });
      const [a] = await take(ch, 'answers', 1);
      assert.equal(a!.content.toString(), 'echo:hi');
      assert.equal(a!.properties.correlationId, 'c-9');
      assert.equal(a!.fields.routingKey, 'answers.a1');
    } finally {
      await client.endAsync();
      await ch.close();
    }
  });
});
