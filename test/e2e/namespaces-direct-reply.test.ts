/**
 * AMQP direct reply-to inside a namespace (issue 29): a requester of vhost t1 (amqplib) is answered by t1's MQTT v5
 * and NATS responders on the reply address they were given, and by nobody of another namespace. One broker with
 * `default` (dee), `t1` (ann) and `t2` (bob). No wildcard subscriber of t1 sees a reply; a t2 or default client that
 * publishes on the same reply address (its token learnt from t1) reaches no one: the requester gets only the reply of
 * its own responder sent after it (the marker).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import amqp, { type ChannelModel, type ConsumeMessage } from 'amqplib';
import mqtt, { type MqttClient } from 'mqtt';
import { connect as natsConnect, type Msg, type NatsConnection } from 'nats';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';

const PSEUDO = 'amq.rabbitmq.reply-to';

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms).unref())]);
}

describe('e2e: AMQP direct reply-to inside a namespace (MQTT v5 and NATS responders)', { timeout: 30_000 }, () => {
  let dir = '';
  let broker: Broker;
  let amqpPort = 0;
  let mqttUrl = '';
  let natsUrl = '';
  const amqpConns: ChannelModel[] = [];
  const mqttClients: MqttClient[] = [];
  const natsConns: NatsConnection[] = [];

  async function mqttAs(user: string, clientId: string): Promise<MqttClient> {
    const c = await mqtt.connectAsync(mqttUrl, { clientId, username: user, password: `${user}-pw`, protocolVersion: 5, reconnectPeriod: 0 });
    mqttClients.push(c);
    return c;
  }

  async function natsAs(user: string): Promise<NatsConnection> {
    const nc = await natsConnect({ servers: natsUrl, user, pass: `${user}-pw`, reconnect: false });
    natsConns.push(nc);
    return nc;
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-direct-'));
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: dee, password: dee-pw}',
        '  - {username: ann, password: ann-pw, namespace: t1}',
        '  - {username: bob, password: bob-pw, namespace: t2}',
        'namespaces:',
        '  - {name: t1}',
        '  - {name: t2}',
        '',
      ].join('\n'),
    );
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'mqtt,amqp,nats',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'amqp-port': '0',
      'nats-port': '0',
      'nats-ws-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    amqpPort = broker.listeners.get('amqp')!.address().port;
    mqttUrl = `mqtt://127.0.0.1:${broker.listeners.get('mqtt')!.address().port}`;
    natsUrl = `127.0.0.1:${broker.listeners.get('nats')!.address().port}`;
  });

  after(async () => {
    for (const c of mqttClients) await c.endAsync().catch(() => undefined);
    for (const nc of natsConns) await nc.close().catch(() => undefined);
    for (const c of amqpConns) await c.close().catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("a tenant's MQTT and NATS responders answer its AMQP requester; other namespaces reach no one", async () => {
    // t1's wildcard listeners: they see the requests and the marker, never a reply.
    const tap = await mqttAs('ann', 'ann-tap');
    const tapped: string[] = [];
    const tapMarker = new Promise<void>((resolve) =>
      tap.on('message', (topic) => {
        tapped.push(topic);
        if (topic === 'marker/done') resolve();
      }),
    );
    await tap.subscribeAsync(['#', 'amq/rabbitmq/reply-to/#'], { qos: 0 });
    const natsTap = await natsAs('ann');
    const natsTapped: string[] = [];
    let natsDone!: () => void;
    const natsMarker = new Promise<void>((resolve) => (natsDone = resolve));
    natsTap.subscribe('>', {
      callback: (_e, msg: Msg) => {
        natsTapped.push(msg.subject);
        if (msg.subject === 'marker.done') natsDone();
      },
    });
    await natsTap.flush();

    // t1's responders: MQTT v5 answers on the Response Topic, NATS on the reply subject.
    const responder = await mqttAs('ann', 'ann-responder');
    const responseTopics: string[] = [];
    responder.on('message', (_t, payload, packet) => {
      responseTopics.push(packet.properties!.responseTopic!);
      void responder.publishAsync(packet.properties!.responseTopic!, `mqtt:${payload.toString()}`, {
        qos: 1,
        properties: { correlationData: packet.properties!.correlationData },
      });
    });
    await responder.subscribeAsync('svc/mqtt-echo', { qos: 1 });
    const natsResponder = await natsAs('ann');
    natsResponder.subscribe('svc.nats-echo', { callback: (_e, msg: Msg) => msg.respond(Buffer.from(`nats:${msg.string()}`)) });
    await natsResponder.flush();

    // t1's requester (vhost t1).
    const conn = await amqp.connect(`amqp://ann:ann-pw@127.0.0.1:${amqpPort}/t1?heartbeat=0`);
    amqpConns.push(conn);
    const ch = await conn.createChannel();
    const replies: ConsumeMessage[] = [];
    const waiters: { n: number; resolve: () => void }[] = [];
    await ch.consume(
      PSEUDO,
      (r) => {
        if (r === null) return;
        replies.push(r);
        for (const w of waiters) if (replies.length >= w.n) w.resolve();
      },
      { noAck: true },
    );
    const repliesReach = (n: number) => new Promise<void>((resolve) => (replies.length >= n ? resolve() : waiters.push({ n, resolve })));

    ch.publish('amq.topic', 'svc.mqtt-echo', Buffer.from('one'), { replyTo: PSEUDO, correlationId: 'to-mqtt' });
    ch.publish('amq.topic', 'svc.nats-echo', Buffer.from('two'), { replyTo: PSEUDO, correlationId: 'to-nats' });
    await within(repliesReach(2), 10_000, "replies from t1's MQTT and NATS responders");
    assert.deepEqual(replies.map((r) => r.content.toString()).sort(), ['mqtt:one', 'nats:two']);
    assert.equal(replies.find((r) => r.content.toString() === 'mqtt:one')!.properties.correlationId, 'to-mqtt');
    for (const r of replies) assert.match(r.fields.routingKey, /^amq\.rabbitmq\.reply-to\.[A-Za-z0-9_-]{24}$/);
    // The MQTT responder saw the address inside its namespace (no `$ns/` prefix).
    assert.match(responseTopics[0] ?? '', /^amq\/rabbitmq\/reply-to\/[A-Za-z0-9_-]{24}$/);

    // Strangers who learnt the address: t2's and default's MQTT and NATS clients publish on it.
    const address = responseTopics[0]!;
    const subject = address.replaceAll('/', '.');
    for (const user of ['bob', 'dee']) {
      const m = await mqttAs(user, `${user}-stranger`);
      await m.publishAsync(address, `stranger-mqtt-${user}`, { qos: 1 });
      const nc = await natsAs(user);
      nc.publish(subject, Buffer.from(`stranger-nats-${user}`));
      await nc.flush();
    }
    // Then the marker: t1's responder answers a third request; the requester gets exactly that one more.
    ch.publish('amq.topic', 'svc.mqtt-echo', Buffer.from('three'), { replyTo: PSEUDO, correlationId: 'marker' });
    await within(repliesReach(3), 10_000, 'the marker reply');
    assert.deepEqual(
      replies.map((r) => r.content.toString()),
      [...replies.slice(0, 2).map((r) => r.content.toString()), 'mqtt:three'],
    );

    const pub = await mqttAs('ann', 'ann-marker');
    await pub.publishAsync('marker/done', 'end', { qos: 1 });
    await within(tapMarker, 10_000, 'MQTT marker');
    await within(natsMarker, 10_000, 'NATS marker');
    assert.deepEqual(
      tapped.filter((t) => t.startsWith('amq/')),
      [],
    );
    assert.deepEqual(
      natsTapped.filter((t) => t.startsWith('amq.')),
      [],
    );
    assert.ok(tapped.includes('svc/mqtt-echo') && natsTapped.includes('svc.nats-echo'), 'the taps saw the requests (they are listening)');
    await ch.close();
  });
});
