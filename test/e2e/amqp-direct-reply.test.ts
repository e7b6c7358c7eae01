/**
 * Direct reply-to (`amq.rabbitmq.reply-to`) with amqplib against bin/flowmq: an RPC client consumes the pseudo-queue
 * with noAck and sends requests with replyTo 'amq.rabbitmq.reply-to'; an RPC server on another connection answers to
 * the default exchange with the rewritten reply-to as routing key, and the reply reaches the client's consumer. The
 * replies stay out of every other destination: an MQTT `#`, a NATS `>` and an AMQP queue bound on amq.topic with `#`
 * see none of them (a marker published after the replies is the first thing each of them gets). An acking reply
 * consumer and a publish with the pseudo reply-to but no reply consumer are 406 PRECONDITION_FAILED, as RabbitMQ; a
 * reply to a requester that left is dropped (counted routed: confirm ack, no basic.return) and harms nothing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import { connect as natsConnect, type Msg } from 'nats';
import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import { connectAmqp, startAmqpBroker } from './amqp-helpers.js';
import type { FlowmqProcess } from './harness.js';

const PSEUDO = 'amq.rabbitmq.reply-to';

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms).unref())]);
}

/** A channel whose closing error (channel.close from the broker) is kept. */
async function channel(c: ChannelModel): Promise<Channel & { closedWith: Promise<Error> }> {
  const ch = (await c.createChannel()) as Channel & { closedWith: Promise<Error> };
  ch.closedWith = new Promise((resolve) => ch.on('error', resolve));
  return ch;
}

/** An RPC server on `conn`: answers each request on `queue` with its body upper-cased, to its reply-to. */
async function rpcServer(conn: ChannelModel, queue: string, seen: ConsumeMessage[]): Promise<Channel> {
  const ch = await conn.createChannel();
  await ch.assertQueue(queue, { durable: false });
  await ch.consume(queue, (m) => {
    if (m === null) return;
    seen.push(m);
    ch.sendToQueue(m.properties.replyTo as string, Buffer.from(m.content.toString().toUpperCase()), { correlationId: m.properties.correlationId as string });
    ch.ack(m);
  });
  return ch;
}

describe('AMQP direct reply-to (amqplib, bin/flowmq)', { timeout: 60_000 }, () => {
  let broker: FlowmqProcess;
  let server: ChannelModel;
  let client: ChannelModel;
  const seen: ConsumeMessage[] = [];

  before(async () => {
    broker = await startAmqpBroker(['--protocols', 'mqtt,kafka,amqp,nats']);
    server = await connectAmqp(broker);
    client = await connectAmqp(broker);
    await rpcServer(server, 'dr-rpc', seen);
  });

  after(async () => {
    await client?.close().catch(() => undefined);
    await server?.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
  });

  it('delivers replies straight to the requester, and to nobody else (MQTT #, NATS >, amq.topic #)', async () => {
    // Wildcard listeners on every protocol, each stopped by a marker published after the replies.
    const m = await mqtt.connectAsync(broker.mqttUrl, { clientId: 'dr-hash', reconnectPeriod: 0 });
    const mqttGot: string[] = [];
    const mqttMarker = new Promise<void>((resolve) =>
      m.on('message', (topic) => {
        mqttGot.push(topic);
        if (topic === 'dr-marker/done') resolve();
      }),
    );
    await m.subscribeAsync('#', { qos: 0 });
    const nc = await natsConnect({ servers: broker.natsServer, reconnect: false });
    const natsGot: string[] = [];
    let natsDone!: () => void;
    const natsMarker = new Promise<void>((resolve) => (natsDone = resolve));
    nc.subscribe('>', {
      callback: (_e, msg: Msg) => {
        natsGot.push(msg.subject);
        if (msg.subject === 'dr-marker.done') natsDone();
      },
    });
    await nc.flush();
    const tap = await client.createChannel();
    await tap.assertQueue('dr-tap', { exclusive: true });
    await tap.bindQueue('dr-tap', 'amq.topic', '#');

    const ch = await client.createChannel();
    const replies: ConsumeMessage[] = [];
    let three!: () => void;
    const gotThree = new Promise<void>((resolve) => (three = resolve));
    const ok = await ch.consume(
      PSEUDO,
      (r) => {
        if (r === null) return;
        replies.push(r);
        if (replies.length === 3) three();
      },
      { noAck: true },
    );
    for (const word of ['alpha', 'beta', 'gamma']) ch.sendToQueue('dr-rpc', Buffer.from(word), { replyTo: PSEUDO, correlationId: `c-${word}` });
    await within(gotThree, 10_000, 'three replies');

    // The server saw the rewritten, opaque reply address; the client got each reply with its correlation.
    const addr = seen[0]!.properties.replyTo as string;
    assert.match(addr, /^amq\.rabbitmq\.reply-to\.[A-Za-z0-9_-]{24}$/);
    for (const s of seen) assert.equal(s.properties.replyTo, addr, 'one address per channel');
    assert.deepEqual(
      replies.map((r) => [r.properties.correlationId, r.content.toString()]),
      [
        ['c-alpha', 'ALPHA'],
        ['c-beta', 'BETA'],
        ['c-gamma', 'GAMMA'],
      ],
    );
    for (const r of replies) {
      assert.equal(r.fields.consumerTag, ok.consumerTag);
      assert.equal(r.fields.exchange, '');
      assert.equal(r.fields.routingKey, addr);
    }
    // A responder may check that the requester is still there: passive declare of the address (1 consumer).
    const probe = await server.createChannel();
    const q = await probe.checkQueue(addr);
    assert.equal(q.consumerCount, 1);
    await probe.close();

    // Someone else cannot consume the address: it is no queue.
    const stranger = await channel(server);
    await assert.rejects(
      stranger.consume(addr, () => undefined, { noAck: true }),
      /404/,
    );

    // The marker, through the topic space, after the replies: each wildcard listener's first message.
    const pub = await mqtt.connectAsync(broker.mqttUrl, { clientId: 'dr-marker', reconnectPeriod: 0 });
    await pub.publishAsync('dr-marker/done', 'end', { qos: 1 });
    await within(mqttMarker, 10_000, 'MQTT marker');
    await within(natsMarker, 10_000, 'NATS marker');
    const tapped: string[] = [];
    await within(
      new Promise<void>(
        (resolve) =>
          void tap.consume(
            'dr-tap',
            (t) => {
              if (t === null) return;
              tapped.push(t.fields.routingKey);
              if (t.fields.routingKey === 'dr-marker.done') resolve();
            },
            { noAck: true },
          ),
      ),
      10_000,
      'amq.topic # marker',
    );
    assert.deepEqual(mqttGot, ['dr-marker/done']);
    assert.deepEqual(natsGot, ['dr-marker.done']);
    assert.deepEqual(tapped, ['dr-marker.done']);
    await pub.endAsync();
    await m.endAsync();
    await nc.close();
    await ch.close();
  });

  it('refuses an acking reply consumer, a second one, and the pseudo reply-to without one (406 PRECONDITION_FAILED)', async () => {
    const a = await channel(client);
    await assert.rejects(
      a.consume(PSEUDO, () => undefined, { noAck: false }),
      /406/,
    );
    assert.match((await a.closedWith).message, /PRECONDITION_FAILED - reply consumer cannot acknowledge/);

    const b = await channel(client);
    await b.consume(PSEUDO, () => undefined, { noAck: true });
    await assert.rejects(
      b.consume(PSEUDO, () => undefined, { noAck: true }),
      /406/,
    );
    assert.match((await b.closedWith).message, /PRECONDITION_FAILED - reply consumer already set/);

    const c = await channel(client);
    c.sendToQueue('dr-rpc', Buffer.from('x'), { replyTo: PSEUDO });
    assert.match((await c.closedWith).message, /PRECONDITION_FAILED - fast reply consumer does not exist/);

    // The connection stays.
    const d = await client.createChannel();
    await d.checkQueue('dr-rpc');
    await d.close();
  });

  it('drops a reply to a requester that left: routed for the responder (confirm ack, no return), nothing harmed', async () => {
    // A requester that sends and leaves before the answer.
    const gone = await connectAmqp(broker);
    const gch = await gone.createChannel();
    await gch.consume(PSEUDO, () => undefined, { noAck: true });
    const work = await server.createChannel();
    await work.assertQueue('dr-slow', { durable: false });
    gch.sendToQueue('dr-slow', Buffer.from('late'), { replyTo: PSEUDO, correlationId: 'late' });
    const req = await within(
      new Promise<ConsumeMessage>((resolve) => void work.consume('dr-slow', (m) => m !== null && resolve(m), { noAck: true })),
      10_000,
      'the request',
    );
    const addr = req.properties.replyTo as string;
    await gone.close();
    // The address is gone with it.
    const probe = await channel(server);
    await assert.rejects(probe.checkQueue(addr), /404/);

    // The late reply, mandatory and confirmed: acked, not returned.
    const conf = await server.createConfirmChannel();
    const returned: unknown[] = [];
    conf.on('return', (r) => returned.push(r));
    await new Promise<void>((resolve, reject) =>
      conf.sendToQueue(addr, Buffer.from('too late'), { mandatory: true, correlationId: 'late' }, (err) => (err ? reject(err as Error) : resolve())),
    );
    // A later RPC from a new requester works through the same server, and gets a fresh address.
    const next = await connectAmqp(broker);
    try {
      const nch = await next.createChannel();
      const got = new Promise<ConsumeMessage>((resolve) => void nch.consume(PSEUDO, (r) => r !== null && resolve(r), { noAck: true }));
      nch.sendToQueue('dr-rpc', Buffer.from('again'), { replyTo: PSEUDO, correlationId: 'again' });
      const r = await within(got, 10_000, 'the reply to a new requester');
      assert.equal(r.content.toString(), 'AGAIN');
      assert.notEqual(r.fields.routingKey, addr);
      assert.deepEqual(returned, [], 'no basic.return for a reply to a gone requester');
    } finally {
      await next.close();
    }
  });

  it('takes replies from MQTT v5 and NATS responders on the reply address, which no subscriber can tap', async () => {
    // Listeners that must see nothing of the replies: MQTT `#` and the reply prefix itself, NATS `>`.
    const tapper = await mqtt.connectAsync(broker.mqttUrl, { clientId: 'dr-tapper', protocolVersion: 5, reconnectPeriod: 0 });
    const tapped: string[] = [];
    const tapMarker = new Promise<void>((resolve) =>
      tapper.on('message', (topic) => {
        tapped.push(topic);
        if (topic === 'dr-marker/two') resolve();
      }),
    );
    await tapper.subscribeAsync(['#', 'amq/rabbitmq/reply-to/#', 'amq/+/+/+'], { qos: 0 });
    const nc = await natsConnect({ servers: broker.natsServer, reconnect: false });
    const natsTapped: string[] = [];
    let natsDone!: () => void;
    const natsMarker = new Promise<void>((resolve) => (natsDone = resolve));
    nc.subscribe('>', {
      callback: (_e, msg: Msg) => {
        natsTapped.push(msg.subject);
        if (msg.subject === 'dr-marker.two') natsDone();
      },
    });
    // The responders: MQTT v5 answers on the Response Topic, NATS on the reply subject.
    const responder = await mqtt.connectAsync(broker.mqttUrl, { clientId: 'dr-mqtt-responder', protocolVersion: 5, reconnectPeriod: 0 });
    responder.on('message', (_t, payload, packet) => {
      void responder.publishAsync(packet.properties!.responseTopic!, `mqtt:${payload.toString()}`, {
        qos: 1,
        properties: { correlationData: packet.properties!.correlationData },
      });
    });
    await responder.subscribeAsync('svc/mqtt-echo', { qos: 1 });
    nc.subscribe('svc.nats-echo', { callback: (_e, msg: Msg) => msg.respond(Buffer.from(`nats:${msg.string()}`)) });
    await nc.flush();

    const ch = await client.createChannel();
    const replies: ConsumeMessage[] = [];
    let two!: () => void;
    const gotTwo = new Promise<void>((resolve) => (two = resolve));
    await ch.consume(
      PSEUDO,
      (r) => {
        if (r === null) return;
        replies.push(r);
        if (replies.length === 2) two();
      },
      { noAck: true },
    );
    ch.publish('amq.topic', 'svc.mqtt-echo', Buffer.from('one'), { replyTo: PSEUDO, correlationId: 'to-mqtt' });
    ch.publish('amq.topic', 'svc.nats-echo', Buffer.from('two'), { replyTo: PSEUDO, correlationId: 'to-nats' });
    await within(gotTwo, 10_000, 'replies from MQTT and NATS');
    const bodies = replies.map((r) => r.content.toString()).sort();
    assert.deepEqual(bodies, ['mqtt:one', 'nats:two']);
    const fromMqtt = replies.find((r) => r.content.toString() === 'mqtt:one')!;
    assert.equal(fromMqtt.properties.correlationId, 'to-mqtt');
    for (const r of replies) assert.match(r.fields.routingKey, /^amq\.rabbitmq\.reply-to\.[A-Za-z0-9_-]{24}$/);

    const pub = await mqtt.connectAsync(broker.mqttUrl, { clientId: 'dr-marker-2', reconnectPeriod: 0 });
    await pub.publishAsync('dr-marker/two', 'end', { qos: 1 });
    await within(tapMarker, 10_000, 'MQTT marker');
    await within(natsMarker, 10_000, 'NATS marker');
    // The wildcards saw the requests and the marker, never a reply.
    assert.deepEqual(
      tapped.filter((t) => t.startsWith('amq/')),
      [],
    );
    assert.deepEqual(
      natsTapped.filter((t) => t.startsWith('amq.')),
      [],
    );
    assert.ok(tapped.includes('svc/mqtt-echo'), 'the MQTT tap saw the request (it is listening)');
    await Promise.all([pub.endAsync(), tapper.endAsync(), responder.endAsync()]);
    await nc.close();
    await ch.close();
  });
});
