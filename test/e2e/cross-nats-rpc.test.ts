/**
 * Request/reply between NATS and the other protocols, with real clients against bin/flowmq. A NATS request is a
 * publish whose reply subject is an inbox (`_INBOX.<id>.<token>`): an AMQP consumer sees it as reply-to and answers
 * on amq.topic with that routing key, an MQTT v5 responder sees it as the Response Topic (`_INBOX/<id>/<token>`) and
 * publishes there. The other way, a NATS responder answers an MQTT v5 or AMQP requester by publishing to the reply
 * subject it received (the response topic, separators swapped); the requester's correlation data / correlation-id
 * reaches it as the `Correlation-Id` header. A request that nothing in any protocol receives gets the no-responders
 * status at once; one that a subscriber of another protocol receives does not.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type IPublishPacket } from 'mqtt';
import type { Channel, ConsumeMessage } from 'amqplib';
import { ErrorCode, headers as natsHeaders, type Msg, type NatsError } from 'nats';
import { eventually } from './harness.js';
import { crossFixture, seen, timeout, userProps } from './cross-nats-helpers.js';

describe('e2e: request/reply between NATS, AMQP and MQTT v5', () => {
  const f = crossFixture('cross-rpc');

  it('NATS requests are answered by an amqplib RPC server (reply-to = the inbox; the answer on amq.topic)', async () => {
    const server: Channel = await f.conn.createChannel();
    await server.assertQueue('nrpc-square', { durable: false, autoDelete: true });
    await server.bindQueue('nrpc-square', 'amq.topic', 'svc.square');
    const seenByServer: ConsumeMessage[] = [];
    const held: ConsumeMessage[] = [];
    await server.consume('nrpc-square', (m) => {
      if (m === null) return;
      seenByServer.push(m);
      held.push(m);
      server.ack(m);
      if (held.length < 3) return;
      // All three answered together, last first: each reply must reach its own request's inbox.
      for (const r of held.reverse()) {
        const n = Number(r.content.toString());
        server.publish('amq.topic', r.properties.replyTo as string, Buffer.from(String(n * n)), { headers: { answeredBy: 'amqp' } });
      }
    });
    try {
      const h = natsHeaders();
      h.append('tenant', 'acme');
      const replies = await timeout(
        Promise.all([3, 4, 5].map((n) => f.nc.request('svc.square', String(n), { timeout: 15_000, headers: h }))),
        20_000,
        'three replies',
      );
      assert.deepEqual(
        replies.map((r) => Buffer.from(r.data).toString()),
        ['9', '16', '25'],
      );
      for (const r of replies) assert.deepEqual(seen(r).headers, { answeredBy: ['amqp'] });
      // What the AMQP server saw: the NATS inbox as reply-to (an inbox subject is a routing key as it is).
      assert.equal(seenByServer.length, 3);
      const inboxes = new Set<string>();
      for (const m of seenByServer) {
        assert.equal(m.fields.routingKey, 'svc.square');
        assert.match(String(m.properties.replyTo), /^_INBOX\.[A-Za-z0-9]+\.[A-Za-z0-9]+$/);
        inboxes.add(String(m.properties.replyTo));
        assert.equal(m.properties.headers?.tenant, 'acme');
      }
      assert.equal(inboxes.size, 3, 'one inbox per request');
    } finally {
      await server.close();
    }
  });

  it('NATS requests are answered by an MQTT v5 responder (response topic = the inbox with / separators)', async () => {
    const responder = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, clientId: 'nrpc-mqtt', reconnectPeriod: 0 });
    const got: IPublishPacket[] = [];
    const held: IPublishPacket[] = [];
    responder.on('message', (_t, _p, packet) => {
      got.push(packet);
      held.push(packet);
      if (held.length < 3) return;
      for (const r of held.reverse()) {
        void responder.publishAsync(r.properties!.responseTopic!, r.payload.toString().toUpperCase(), {
          qos: 1,
          properties: { userProperties: { answeredBy: 'mqtt' } },
        });
      }
    });
    await responder.subscribeAsync('svc/upper/+', { qos: 1 });
    try {
      const h = natsHeaders();
      h.append('trace', 't-1');
      const replies = await timeout(
        Promise.all(['a', 'b', 'c'].map((w) => f.nc.request(`svc.upper.${w}`, `word ${w}`, { timeout: 15_000, headers: h }))),
        20_000,
        'three replies',
      );
      assert.deepEqual(
        replies.map((r) => [Buffer.from(r.data).toString(), seen(r).headers]),
        [
          ['WORD A', { answeredBy: ['mqtt'] }],
          ['WORD B', { answeredBy: ['mqtt'] }],
          ['WORD C', { answeredBy: ['mqtt'] }],
        ],
      );
      assert.deepEqual(got.map((p) => p.topic).sort(), ['svc/upper/a', 'svc/upper/b', 'svc/upper/c']);
      for (const p of got) {
        assert.match(p.properties?.responseTopic ?? '', /^_INBOX\/[A-Za-z0-9]+\/[A-Za-z0-9]+$/);
        assert.deepEqual(userProps(p), { trace: ['t-1'] });
        assert.equal(p.properties?.correlationData, undefined);
      }
    } finally {
      await responder.endAsync();
    }
  });

  it('a NATS responder answers MQTT v5 requests: the response topic is its reply subject, the correlation data its Correlation-Id header', async () => {
    const responderSaw: Array<ReturnType<typeof seen>> = [];
    const held: Msg[] = [];
    const sub = f.nc.subscribe('svc.echo.*', {
      callback: (err, m) => {
        if (err !== null) return;
        responderSaw.push(seen(m));
        held.push(m);
        if (held.length < 3) return;
        for (const r of held.reverse()) {
          // A responder that copies the correlation header, as it would for a NATS requester of that style.
          const h = natsHeaders();
          const corr = r.headers?.get('Correlation-Id');
          if (corr !== undefined && corr !== '') h.append('Correlation-Id', corr);
          r.respond(r.data, { headers: h });
        }
      },
    });
    await f.nc.flush();
    const client = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, clientId: 'nrpc-req', reconnectPeriod: 0 });
    try {
      const replies: IPublishPacket[] = [];
      client.on('message', (_t, _p, packet) => replies.push(packet));
      await client.subscribeAsync('clients/nrpc-req/replies', { qos: 1 });
      for (const i of [1, 2, 3]) {
        await client.publishAsync(`svc/echo/${i}`, `ping ${i}`, {
          qos: 1,
          properties: { responseTopic: 'clients/nrpc-req/replies', correlationData: Buffer.from(`req-${i}`) },
        });
      }
      await eventually(() => replies.length === 3, 15_000, 'three MQTT replies');
      // What the NATS responder saw.
      assert.deepEqual(
        responderSaw.map((s) => [s.subject, s.reply, s.data, s.headers]),
        [1, 2, 3].map((i) => [`svc.echo.${i}`, 'clients.nrpc-req.replies', `ping ${i}`, { 'Correlation-Id': [`req-${i}`] }]),
      );
      // What the MQTT requester got: its correlation data back, answered out of order.
      assert.deepEqual(
        replies.map((p) => [
          p.topic,
          p.payload.toString(),
          p.properties?.correlationData === undefined ? undefined : Buffer.from(p.properties.correlationData).toString(),
        ]),
        [3, 2, 1].map((i) => ['clients/nrpc-req/replies', `ping ${i}`, `req-${i}`]),
      );
    } finally {
      await client.endAsync();
      sub.unsubscribe();
    }
  });

  it('binary MQTT correlation data survives a round trip through a NATS responder that copies Correlation-Id', async () => {
    const sub = f.nc.subscribe('svc.bin', {
      callback: (err, m) => {
        if (err !== null) return;
        const h = natsHeaders();
        const corr = m.headers?.get('Correlation-Id');
        if (corr !== undefined && corr !== '') h.append('Correlation-Id', corr);
        m.respond(m.data, { headers: h });
      },
    });
    await f.nc.flush();
    const client = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, clientId: 'nrpc-bin', reconnectPeriod: 0 });
    try {
      const reply = new Promise<IPublishPacket>((resolve) => client.on('message', (_t, _p, packet) => resolve(packet)));
      await client.subscribeAsync('clients/nrpc-bin', { qos: 1 });
      const corr = Buffer.from([0x00, 0xff, 0x80, 0x7f, 0xc3, 0x28, 0x10]);
      await client.publishAsync('svc/bin', 'ping', { qos: 1, properties: { responseTopic: 'clients/nrpc-bin', correlationData: corr } });
      const got = await timeout(reply, 15_000, 'the echo');
      assert.equal(got.payload.toString(), 'ping');
      assert.deepEqual(Buffer.from(got.properties?.correlationData ?? []), corr);
    } finally {
      await client.endAsync();
      sub.unsubscribe();
    }
  });

  it('a NATS responder answers an amqplib requester: reply-to is its reply subject, correlation-id its Correlation-Id header', async () => {
    const responderSaw: unknown[] = [];
    const sub = f.nc.subscribe('svc.lower.*', {
      callback: (err, m) => {
        if (err !== null) return;
        const s = seen(m);
        responderSaw.push([s.subject, s.reply, s.headers]);
        const h = natsHeaders();
        const corr = m.headers?.get('Correlation-Id');
        if (corr !== undefined && corr !== '') h.append('Correlation-Id', corr);
        h.append('answeredBy', 'nats');
        m.respond(Buffer.from(m.data).toString().toLowerCase(), { headers: h });
      },
    });
    await f.nc.flush();
    const ch = await f.conn.createChannel();
    try {
      const { queue } = await ch.assertQueue('', { exclusive: true });
      await ch.bindQueue(queue, 'amq.topic', 'replies.nrpc-amqp');
      const replies: ConsumeMessage[] = [];
      await ch.consume(queue, (m) => void (m !== null && replies.push(m)), { noAck: true });
      for (const [i, c] of ['c-a', 'c-b'].entries()) {
        ch.publish('amq.topic', `svc.lower.v${i}`, Buffer.from(`WORD ${i}`), { replyTo: 'replies.nrpc-amqp', correlationId: c });
      }
      await eventually(() => replies.length === 2, 15_000, 'two AMQP replies');
      assert.deepEqual(responderSaw, [
        ['svc.lower.v0', 'replies.nrpc-amqp', { 'Correlation-Id': ['c-a'] }],
        ['svc.lower.v1', 'replies.nrpc-amqp', { 'Correlation-Id': ['c-b'] }],
      ]);
      assert.deepEqual(
        replies.map((m) => [m.fields.routingKey, m.content.toString(), m.properties.correlationId, m.properties.headers?.answeredBy]),
        [
          ['replies.nrpc-amqp', 'word 0', 'c-a', 'nats'],
          ['replies.nrpc-amqp', 'word 1', 'c-b', 'nats'],
        ],
      );
    } finally {
      await ch.close();
      sub.unsubscribe();
    }
  });

  it('no responders: a request nothing in any protocol receives fails with 503; one only an MQTT subscriber receives does not', async () => {
    await assert.rejects(f.nc.request('nobody.home', 'x', { timeout: 10_000 }), (e: NatsError) => e.code === ErrorCode.NoResponders);
    // An MQTT subscriber is a responder: the request waits for its answer instead of failing at once.
    const responder = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    responder.on('message', (_t, payload, packet) => void responder.publishAsync(packet.properties!.responseTopic!, `re: ${payload.toString()}`, { qos: 0 }));
    await responder.subscribeAsync('somebody/#', { qos: 0 });
    try {
      const r = await f.nc.request('somebody.home', 'x', { timeout: 10_000 });
      assert.equal(Buffer.from(r.data).toString(), 're: x');
    } finally {
      await responder.endAsync();
    }
  });
});
