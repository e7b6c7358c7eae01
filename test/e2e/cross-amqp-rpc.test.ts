/**
 * Request/response across AMQP and MQTT v5 with real clients against bin/flowmq. An MQTT v5 request carries a
 * Response Topic and Correlation Data; an AMQP one reply-to and correlation-id. FlowMQ maps one onto the other
 * (reply-to is the response topic with its separators swapped, correlation-id the correlation data as UTF-8), so a
 * responder of either protocol answers a requester of the other, as RabbitMQ's MQTT plugin does: an AMQP responder
 * to an MQTT requester publishes its answer on amq.topic with the reply-to as routing key, and an AMQP requester
 * waiting for an MQTT responder binds its reply queue on amq.topic with its reply-to key. Each side checks that the
 * correlation survives, for several requests in flight at once (answered out of order), and binary correlation data
 * (no valid AMQP shortstr) travels in the header x-correlation-id, as RabbitMQ maps it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type IPublishPacket } from 'mqtt';
import type { Channel, ConsumeMessage } from 'amqplib';
import { amqpFixture } from './amqp-helpers.js';

function timeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms).unref())]);
}

describe('e2e: RPC between AMQP and MQTT v5', () => {
  const f = amqpFixture({ connect: true });

  it('an MQTT v5 requester (response topic + correlation data) is answered by an amqplib RPC server (reply-to + correlation-id)', async () => {
    // The amqplib server: a durable work queue bound on amq.topic, one request at a time.
    const server: Channel = await f.conn.createChannel();
    await server.assertQueue('rpc-square', { durable: false, autoDelete: true });
    await server.bindQueue('rpc-square', 'amq.topic', 'svc.square');
    await server.prefetch(1);
    const seen: ConsumeMessage[] = [];
    const held: ConsumeMessage[] = [];
    await server.consume('rpc-square', (m) => {
      if (m === null) return;
      seen.push(m);
      held.push(m);
      // Answer the three requests together, last first: the requester must match by correlation, not order.
      if (held.length < 3) {
        server.ack(m); // prefetch 1: the next request comes once this one is acked
        return;
      }
      for (const r of held.reverse()) {
        const n = Number(r.content.toString());
        server.publish('amq.topic', r.properties.replyTo as string, Buffer.from(String(n * n)), {
          correlationId: r.properties.correlationId as string,
          contentType: 'text/plain',
        });
      }
      server.ack(m);
    });

    const client = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, clientId: 'rpc-req', reconnectPeriod: 0 });
    try {
      const replies: IPublishPacket[] = [];
      const three = new Promise<void>((resolve) =>
        client.on('message', (_t, _p, packet) => {
          replies.push(packet);
          if (replies.length === 3) resolve();
        }),
      );
      await client.subscribeAsync('clients/rpc-req/replies', { qos: 1 });
      const requests = [
        { n: 3, corr: Buffer.from('req-3') },
        { n: 4, corr: Buffer.from('req-4') },
        { n: 5, corr: Buffer.from('req-5') },
      ];
      for (const r of requests) {
        await client.publishAsync('svc/square', String(r.n), {
          qos: 1,
          properties: { responseTopic: 'clients/rpc-req/replies', correlationData: r.corr, contentType: 'text/plain' },
        });
      }
      await timeout(three, 15_000, 'three replies');

      // What the AMQP server saw: reply-to is the response topic as a routing key, correlation-id the data.
      assert.deepEqual(
        seen.map((m) => [m.fields.routingKey, m.content.toString(), m.properties.replyTo, m.properties.correlationId]),
        [
          ['svc.square', '3', 'clients.rpc-req.replies', 'req-3'],
          ['svc.square', '4', 'clients.rpc-req.replies', 'req-4'],
          ['svc.square', '5', 'clients.rpc-req.replies', 'req-5'],
        ],
      );
      // What the MQTT requester got: each answer on its response topic with its request's correlation data.
      assert.deepEqual(
        replies.map((p) => [p.topic, p.payload.toString(), Buffer.from(p.properties!.correlationData!).toString(), p.properties?.contentType]),
        [
          ['clients/rpc-req/replies', '25', 'req-5', 'text/plain'],
          ['clients/rpc-req/replies', '16', 'req-4', 'text/plain'],
          ['clients/rpc-req/replies', '9', 'req-3', 'text/plain'],
        ],
      );
      for (const p of replies) assert.ok(Buffer.isBuffer(p.properties?.correlationData));
    } finally {
      await client.endAsync();
      await server.close();
    }
  });

  it('an amqplib requester (reply-to + correlation-id) is answered by an MQTT v5 responder (response topic + correlation data)', async () => {
    const responder = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, clientId: 'rpc-resp', reconnectPeriod: 0 });
    const seen: IPublishPacket[] = [];
    const held: IPublishPacket[] = [];
    responder.on('message', (_t, _payload, packet) => {
      seen.push(packet);
      held.push(packet);
      if (held.length < 3) return;
      // Out of order again, each answer to the request's response topic with its correlation data.
      for (const r of held.reverse()) {
        void responder.publishAsync(r.properties!.responseTopic!, r.payload.toString().toUpperCase(), {
          qos: 1,
          properties: { correlationData: r.properties!.correlationData, userProperties: { answeredBy: 'mqtt' } },
        });
      }
    });
    await responder.subscribeAsync('svc/upper/+', { qos: 1 });

    const ch = await f.conn.createChannel();
    try {
      // The requester's reply queue is server-named and exclusive, bound on amq.topic with its reply-to key.
      const { queue } = await ch.assertQueue('', { exclusive: true });
      await ch.bindQueue(queue, 'amq.topic', 'replies.amqp-client');
      const replies: ConsumeMessage[] = [];
      const three = new Promise<void>((resolve) => {
        void ch.consume(
          queue,
          (m) => {
            if (m === null) return;
            replies.push(m);
            if (replies.length === 3) resolve();
          },
          { noAck: true },
        );
      });
      const corr = ['c-a', 'c-b', 'c-c'];
      for (const [i, c] of corr.entries()) {
        ch.publish('amq.topic', `svc.upper.v${i}`, Buffer.from(`word ${i}`), { replyTo: 'replies.amqp-client', correlationId: c, deliveryMode: 2 });
      }
      await timeout(three, 15_000, 'three replies');

      // What the MQTT responder saw: the AMQP reply-to as a response topic, the correlation id as bytes.
      assert.deepEqual(
        seen.map((p) => [p.topic, p.payload.toString(), p.properties?.responseTopic, Buffer.from(p.properties!.correlationData!).toString()]),
        corr.map((c, i) => [`svc/upper/v${i}`, `word ${i}`, 'replies/amqp-client', c]),
      );
      // What the AMQP requester got back.
      assert.deepEqual(
        replies.map((m) => [m.fields.exchange, m.fields.routingKey, m.content.toString(), m.properties.correlationId, m.properties.headers?.answeredBy]),
        [
          ['amq.topic', 'replies.amqp-client', 'WORD 2', 'c-c', 'mqtt'],
          ['amq.topic', 'replies.amqp-client', 'WORD 1', 'c-b', 'mqtt'],
          ['amq.topic', 'replies.amqp-client', 'WORD 0', 'c-a', 'mqtt'],
        ],
      );
    } finally {
      await responder.endAsync();
      await ch.close();
    }
  });

  it('binary MQTT correlation data survives a round trip through an AMQP responder', async () => {
    // MQTT v5 correlation data is binary [MQTT-3.3.2.3.6]; requesters often send random bytes, not text.
    const server = await f.conn.createChannel();
    await server.assertQueue('rpc-echo', { durable: false, autoDelete: true });
    await server.bindQueue('rpc-echo', 'amq.topic', 'svc.echo');
    const seen: ConsumeMessage[] = [];
    await server.consume('rpc-echo', (m) => {
      if (m === null) return;
      seen.push(m);
      // An echo server that copies correlation-id and headers, as RabbitMQ's docs advise for MQTT requesters.
      server.publish('amq.topic', m.properties.replyTo as string, m.content, {
        correlationId: m.properties.correlationId as string,
        headers: m.properties.headers,
      });
      server.ack(m);
    });
    const client = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, clientId: 'rpc-bin', reconnectPeriod: 0 });
    try {
      const reply = new Promise<IPublishPacket>((resolve) => client.on('message', (_t, _p, packet) => resolve(packet)));
      await client.subscribeAsync('clients/rpc-bin', { qos: 1 });
      const corr = Buffer.from([0x00, 0xff, 0x80, 0x7f, 0xc3, 0x28, 0x10]);
      await client.publishAsync('svc/echo', 'ping', { qos: 1, properties: { responseTopic: 'clients/rpc-bin', correlationData: corr } });
      const got = await timeout(reply, 15_000, 'the echo');
      assert.equal(got.payload.toString(), 'ping');
      // The AMQP server saw no correlation-id (the bytes are no shortstr) but the header x-correlation-id.
      assert.equal(seen[0]!.properties.correlationId, undefined);
      assert.deepEqual(seen[0]!.properties.headers?.['x-correlation-id'], corr);
      // The requester gets its bytes back as correlation data, not as a user property.
      assert.deepEqual(Buffer.from(got.properties?.correlationData ?? []), corr);
      assert.equal(got.properties?.userProperties?.['x-correlation-id'], undefined);
    } finally {
      await client.endAsync();
      await server.close();
    }
  });
});
