// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Namespaces as tenants on a three-broker cluster (issue 29), with MQTT.js, KafkaJS and amqplib: no cluster code
 * knows namespaces, the names carry them (docs/namespaces.md "In a cluster"). Namespaces t1 (user ann) and t2 (bob)
 * are made through broker 1's admin API; each tenant makes the same names on other brokers than the other: a Kafka
 * topic (stream) `orders` bound to `orders/#`, an AMQP queue `orders` bound to amq.topic `orders.#`, a consumer
 * group `billing`, a retained `state/x`. MQTT publishes on a third broker reach exactly the tenant's own stream and
 * queue (a marker after them proves the other's did not come); Metadata, ListGroups and passive declares show only
 * the tenant's names; an AMQP client asking for the other tenant's vhost is refused with 530. With the `nats`
 * client (account = namespace): core NATS subscribers get their own tenant's MQTT publishes made on another broker,
 * and each tenant's JetStream stream `jorders` and durable consumer `billing`, made and read through other brokers
 * than the other tenant's, hold its own messages; stream and consumer listings show its own names only.
 * An AMQP requester of t1 on one broker gets its direct replies from a t1 MQTT v5 responder on another, and none from t2.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import kafkajsPkg, { type Kafka as KafkaClient } from 'kafkajs';
import mqtt, { type IPublishPacket, type MqttClient } from 'mqtt';
import { AckPolicy, connect as natsConnect, StringCodec, type NatsConnection } from 'nats';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { RawAmqp } from './amqp-helpers.js';
import { eventually, until } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const HOME = { ann: 't1', bob: 't2' } as const;
type User = keyof typeof HOME;
const USERS = Object.keys(HOME) as User[];
/** Where each tenant works: its definitions, its publishes, its readers (each a different broker than the other's). */
const AT: Record<User, { define: number; publish: number; read: number }> = {
  ann: { define: 1, publish: 3, read: 2 },
  bob: { define: 2, publish: 1, read: 3 },
};

describe('cluster: namespaces t1 and t2 with the same names on three brokers', { timeout: 120_000 }, () => {
  let c: TestCluster;
  const mqtts: MqttClient[] = [];
  const amqps: ChannelModel[] = [];

  const mq = async (u: User, broker: number): Promise<MqttClient> => {
    const m = await mqtt.connectAsync(c.broker(broker).mqttUrl, { username: u, password: `${u}-pw`, reconnectPeriod: 0, protocolVersion: 5 });
    mqtts.push(m);
    return m;
  };
  const amqpUrl = (u: User, broker: number, vhost: string) =>
    `amqp://${u}:${u}-pw@127.0.0.1:${c.broker(broker).proc.ports.amqp}/${encodeURIComponent(vhost)}?heartbeat=0`;
  const channel = async (u: User, broker: number): Promise<Channel> => {
    const conn = await amqp.connect(amqpUrl(u, broker, HOME[u]));
    conn.on('error', () => undefined);
    amqps.push(conn);
    const ch = await conn.createChannel();
    ch.on('error', () => undefined);
    return ch;
  };
  const kafka = (u: User, broker: number): KafkaClient =>
    new Kafka({
      clientId: `ns-${u}`,
      brokers: [c.broker(broker).kafka],
      sasl: { mechanism: 'plain', username: u, password: `${u}-pw` },
      logLevel: logLevel.NOTHING,
      retry: { retries: 5 },
    });

  before(async () => {
    c = await startCluster({ brokers: 3, haproxy: false, args: ['--kafka-group-initial-rebalance-delay', '0'] });
    const b1 = c.broker(1).proc;
    for (const ns of ['t1', 't2']) await b1.api('POST', '/api/v1/namespaces', { name: ns });
    await b1.api('POST', '/api/v1/users', { username: 'root', password: 'root-pw', groups: ['admins'] });
    for (const b of c.brokers) b.proc.credentials = { username: 'root', password: 'root-pw' };
    for (const u of USERS) await b1.api('POST', '/api/v1/users', { username: u, password: `${u}-pw`, namespace: HOME[u] });
    // The directory reaches the other brokers by notify: every tenant logs in everywhere before the scenario.
    await Promise.all(
      USERS.flatMap((u) =>
        [1, 2, 3].map((b) =>
          eventually(
            async () => {
              const m = await mq(u, b).catch(() => null);
              await m?.endAsync();
              return m !== null;
            },
            15_000,
            `${u} logs in on broker ${b}`,
          ),
        ),
      ),
    );
  });

  const natsConns: NatsConnection[] = [];
  const nats = async (u: User, broker: number): Promise<NatsConnection> => {
    const nc = await natsConnect({ servers: c.broker(broker).natsServer, user: u, pass: `${u}-pw`, reconnect: false });
    natsConns.push(nc);
    return nc;
  };

  after(async () => {
    for (const nc of natsConns) await nc.close().catch(() => undefined);
    for (const m of mqtts) m.end(true);
    for (const a of amqps) await a.close().catch(() => undefined);
    await c?.close();
  });

  test("each tenant's stream, queue, group and retained message hold exactly its own messages", async () => {
    const define = async (u: User) => {
      // The classic queue first: a vhost's Kafka topic `orders` is also its AMQP stream queue `orders` (as in `/`), and
      // a classic queue.declare of a stream queue's name is 406; a classic queue declared first keeps the name for AMQP.
      const ch = await channel(u, AT[u].define);
      await ch.assertQueue('orders', { durable: true });
      await ch.bindQueue('orders', 'amq.topic', 'orders.#');
      const admin = kafka(u, AT[u].define).admin();
      await admin.connect();
      await admin.createTopics({ topics: [{ topic: 'orders', numPartitions: 1 }], waitForLeaders: true });
      await admin.disconnect();
      // The admin API names streams as the core does (t1~orders); the binding stays inside the stream's namespace.
      await c.broker(AT[u].define).proc.api('PATCH', `/api/v1/streams/${HOME[u]}~orders`, { bindings: [`$ns/${HOME[u]}/orders/#`] });
    };
    await Promise.all(USERS.map(define));
    await c.waitCatalog({ streams: ['t1~orders', 't2~orders'], queues: ['$ns/t1/orders', '$ns/t2/orders'] });
    await Promise.all(
      [1, 2, 3].flatMap((b) =>
        ['t1', 't2'].map((ns) =>
          eventually(
            async () => (await c.api<{ bindings: string[] }>(`/api/v1/streams/${ns}~orders`, b)).bindings.join() === `$ns/${ns}/orders/#`,
            15_000,
            `broker ${b} knows ${ns}~orders's binding`,
          ),
        ),
      ),
    );
    await c.waitCatalog({ bindings: USERS.map((u) => ({ queue: `$ns/${HOME[u]}/orders`, key: `$ns.${HOME[u]}.orders.#` })) });

    for (const u of USERS) {
      const m = await mq(u, AT[u].publish);
      await m.publishAsync('orders/new', `order-${u}`, { qos: 1 });
      await m.publishAsync('state/x', `state-${u}`, { qos: 1, retain: true });
    }
    for (const u of USERS) await (await mq(u, AT[u].publish)).publishAsync('orders/end', 'end', { qos: 1 });

    // AMQP: each queue `orders` holds the tenant's order and its marker, nothing of the other's.
    const amqpReads = async (u: User) => {
      const ch = await channel(u, AT[u].read);
      const got: string[] = [];
      await ch.consume('orders', (msg) => msg !== null && got.push(`${msg.fields.routingKey}=${msg.content.toString()}`), { noAck: true });
      await until(() => assert.deepEqual(got, [`orders.new=order-${u}`, 'orders.end=end'], u), 15_000);
    };
    // Kafka: group `billing` of each tenant reads its own `orders` up to the marker.
    const kafkaReads = async (u: User) => {
      const consumer = kafka(u, AT[u].read).consumer({ groupId: 'billing', maxWaitTimeInMs: 100 });
      await consumer.connect();
      await consumer.subscribe({ topic: 'orders', fromBeginning: true });
      const got: string[] = [];
      await consumer.run({
        eachMessage: async ({ message }) => {
          got.push(message.value?.toString() ?? '');
        },
      });
      await until(() => assert.ok(got.includes('end'), `${u}: ${got.join()}`), 30_000);
      await consumer.disconnect();
      assert.deepEqual(got, [`order-${u}`, 'end'], u);
    };
    // Retained: once both tenants' state/x are on the reader's broker, a new subscriber there gets its own only.
    const retainedReads = async (u: User) => {
      await eventually(
        async () =>
          (await c.api<{ items: Array<{ topic: string }> }>(`/api/v1/mqtt/retained?filter=${encodeURIComponent('$ns/+/state/x')}`, AT[u].read)).items.length ===
          2,
        15_000,
        `broker ${AT[u].read} has both retained messages`,
      );
      const s = await mq(u, AT[u].read);
      const got: IPublishPacket[] = [];
      s.on('message', (_t, _p, packet) => got.push(packet));
      await s.subscribeAsync('state/#', { qos: 1 });
      await s.publishAsync('state/marker', 'm', { qos: 1 });
      await until(
        () =>
          assert.deepEqual(
            got.map((p) => `${p.topic}=${p.payload.toString()}`),
            [`state/x=state-${u}`, 'state/marker=m'],
            u,
          ),
        15_000,
      );
    };
    await Promise.all(USERS.flatMap((u) => [amqpReads(u), kafkaReads(u), retainedReads(u)]));
  });

  test("Metadata, ListGroups and passive declares show the tenant's own names only", async () => {
    for (const u of USERS) {
      const admin = kafka(u, AT[u].publish).admin();
      await admin.connect();
      const topics = await admin.listTopics();
      assert.ok(topics.includes('orders'), `${u}: ${topics.join()}`);
      assert.ok(!topics.some((t) => t.includes('~') || t.includes('$ns')), `${u}: ${topics.join()}`);
      assert.deepEqual(
        (await admin.listGroups()).groups.map((g) => g.groupId),
        ['billing'],
        u,
      );
      const [o] = await admin.fetchOffsets({ groupId: 'billing', topics: ['orders'] });
      assert.equal(o.partitions[0].offset, '2', u);
      await admin.disconnect();
    }
    const only = await channel('ann', 1);
    await only.assertQueue('only-t1', { durable: true });
    await only.assertExchange('only-t1-x', 'fanout', { durable: true });
    await c.waitCatalog({ queues: ['$ns/t1/only-t1'] });
    for (const b of [2, 3]) {
      const ch = await channel('bob', b);
      await assert.rejects(
        ch.checkQueue('only-t1'),
        (e: { code?: number; message: string }) => e.code === 404 && /no queue 'only-t1' in vhost 't2'/.test(e.message),
      );
      const ch2 = await channel('bob', b);
      await assert.rejects(ch2.checkExchange('only-t1-x'), (e: { code?: number; message: string }) => e.code === 404 && !e.message.includes('$ns'));
      // Its own `orders` is found, as ann's is on the same broker.
      assert.equal((await (await channel('bob', b)).checkQueue('orders')).queue, 'orders');
      assert.equal((await (await channel('ann', b)).checkQueue('only-t1')).queue, 'only-t1');
    }
  });

  test("an AMQP client asking for the other tenant's vhost is refused: 530 NOT_ALLOWED", async () => {
    for (const [u, vhost, b] of [
      ['ann', 't2', 2],
      ['bob', 't1', 3],
      ['bob', 'default', 1],
    ] as const) {
      // amqplib fails the connect without the close's code and text; the raw client (amqplib's codec) reads them.
      await assert.rejects(amqp.connect(amqpUrl(u, b, vhost)), /ConnectionClose/, `${u} in ${vhost}`);
      const raw = await RawAmqp.open(c.broker(b).proc.ports.amqp);
      raw.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'));
      assert.equal((await raw.method())?.method, 'ConnectionStart');
      raw.send('ConnectionStartOk', 0, { clientProperties: {}, mechanism: 'PLAIN', response: Buffer.from(`\0${u}\0${u}-pw`), locale: 'en_US' });
      const tune = await raw.method();
      raw.send('ConnectionTuneOk', 0, { channelMax: 0, frameMax: tune!.fields.frameMax, heartbeat: 0 });
      raw.send('ConnectionOpen', 0, { virtualHost: vhost, capabilities: '', insist: false });
      const close = await raw.method();
      raw.close();
      assert.equal(close?.method, 'ConnectionClose');
      assert.equal(close.fields.replyCode, 530);
      assert.equal(close.fields.replyText, `NOT_ALLOWED - access to vhost '${vhost}' refused for user '${u}'`);
    }
  });

  test("AMQP direct reply-to inside a tenant across brokers: its MQTT v5 responder answers, another tenant's publish reaches no one", async () => {
    // ann's requester on broker 1, ann's responder on broker 2, bob (who learnt the address) on broker 3.
    const responder = await mq('ann', 2);
    const addresses: string[] = [];
    responder.on('message', (_t, payload, packet) => {
      addresses.push(packet.properties!.responseTopic!);
      void responder.publishAsync(packet.properties!.responseTopic!, `mqtt:${payload.toString()}`, { qos: 1 });
    });
    await responder.subscribeAsync('rpc/echo', { qos: 1 });
    const ch = await channel('ann', 1);
    const replies: string[] = [];
    await ch.consume('amq.rabbitmq.reply-to', (m) => m !== null && replies.push(m.content.toString()), { noAck: true });
    // Until the cluster knows both ends (the responder's subscription at broker 1, the address at broker 2), a
    // request or a reply may go nowhere: ask again until an answer comes.
    const ask = async (body: string) => {
      for (let tries = 0; !replies.includes(`mqtt:${body}`); tries++) {
        assert.ok(tries < 40, `no reply to ${body}`);
        ch.publish('amq.topic', 'rpc.echo', Buffer.from(body), { replyTo: 'amq.rabbitmq.reply-to' });
        await until(() => assert.ok(replies.includes(`mqtt:${body}`)), 500).catch(() => undefined);
      }
    };
    await ask('first');
    assert.match(addresses[0] ?? '', /^amq\/rabbitmq\/reply-to\/[A-Za-z0-9_-]{24}$/);
    const stranger = await mq('bob', 3);
    await stranger.publishAsync(addresses[0]!, 'stranger', { qos: 1 });
    const strangerNats = await nats('bob', 3);
    strangerNats.publish(addresses[0]!.replaceAll('/', '.'), 'stranger-nats');
    await strangerNats.flush();
    // The marker: a later request of ann's is answered; bob's publishes never were.
    await ask('marker');
    assert.deepEqual(
      replies.filter((r) => r.startsWith('stranger')),
      [],
    );
  });

  test('NATS: core subscribers and JetStream streams and consumers of the same names, each tenant its own', async () => {
    const sc = StringCodec();
    // Core NATS: a subscriber of each tenant on its reader broker, an MQTT publisher of each on its publisher broker.
    const seen: Record<User, string[]> = { ann: [], bob: [] };
    for (const u of USERS) {
      const sub = (await nats(u, AT[u].read)).subscribe('live.>');
      void (async () => {
        for await (const m of sub) seen[u].push(`${m.subject}=${sc.decode(m.data)}`);
      })();
      await (await nats(u, AT[u].read)).flush();
    }
    // The interest reaches the publisher's broker asynchronously: warm-up publishes until each reader sees one.
    for (const u of USERS) {
      const m = await mq(u, AT[u].publish);
      await eventually(
        async () => {
          await m.publishAsync('live/warm', `warm-${u}`, { qos: 1 });
          await new Promise((r) => setTimeout(r, 50));
          return seen[u].includes(`live.warm=warm-${u}`);
        },
        15_000,
        `${u}'s subscriber on broker ${AT[u].read} sees its warm-up`,
      );
    }
    for (const u of USERS) seen[u].length = 0;
    for (const u of USERS) await (await mq(u, AT[u].publish)).publishAsync('live/order', `live-${u}`, { qos: 1 });
    for (const u of USERS) await (await mq(u, AT[u].publish)).publishAsync('live/end', 'end', { qos: 1 });
    for (const u of USERS) {
      await until(() => assert.ok(seen[u].includes('live.end=end'), `${u}: ${seen[u].join()}`), 15_000);
      assert.deepEqual(
        seen[u].filter((x) => !x.startsWith('live.warm')),
        [`live.order=live-${u}`, 'live.end=end'],
        u,
      );
    }

    // JetStream: the same stream and consumer names made through different brokers per tenant.
    for (const u of USERS) {
      const jsm = await (await nats(u, AT[u].define)).jetstreamManager();
      await jsm.streams.add({ name: 'jorders', subjects: ['jorders.>'] });
      await jsm.consumers.add('jorders', { durable_name: 'billing', ack_policy: AckPolicy.Explicit });
    }
    await c.waitCatalog({ streams: ['t1~jorders', 't2~jorders'] });
    for (const u of USERS) {
      const js = (await nats(u, AT[u].publish)).jetstream();
      const a = await js.publish('jorders.new', sc.encode(`j-${u}`));
      assert.equal(a.stream, 'jorders', u);
      assert.equal(a.seq, 1, `${u}: its own stream's first sequence`);
      await js.publish('jorders.end', sc.encode('end'));
    }
    for (const u of USERS) {
      const nc = await nats(u, AT[u].read);
      const cons = await nc.jetstream().consumers.get('jorders', 'billing');
      const got: string[] = [];
      while (!got.includes('end')) {
        const m = await cons.next({ expires: 5_000 });
        assert.ok(m !== null, `${u}: a message before the marker (${got.join()})`);
        got.push(sc.decode(m.data));
        m.ack();
      }
      assert.deepEqual(got, [`j-${u}`, 'end'], u);
      const jsm = await nc.jetstreamManager();
      const names: string[] = [];
      for await (const n of jsm.streams.names()) names.push(n);
      assert.ok(names.includes('jorders') && names.includes('orders'), `${u}: ${names.join()}`);
      assert.ok(!names.some((n) => n.includes('~') || n.includes('$ns')), `${u}: ${names.join()}`);
      const info = await jsm.streams.info('jorders');
      assert.equal(info.state.messages, 2, u);
      const consumers: string[] = [];
      for await (const ci of jsm.consumers.list('jorders')) consumers.push(ci.name);
      assert.deepEqual(consumers, ['billing'], u);
    }
    // A stream only t1 has is not found by t2, through any broker.
    await (await (await nats('ann', 2)).jetstreamManager()).streams.add({ name: 'only-t1-js', subjects: ['onlyt1.>'] });
    await c.waitCatalog({ streams: ['t1~only-t1-js'] });
    for (const b of [1, 2, 3]) {
      const jsm = await (await nats('bob', b)).jetstreamManager();
      await assert.rejects(jsm.streams.info('only-t1-js'), (e: { message: string }) => /stream not found/.test(e.message), `broker ${b}`);
    }
  });
});
