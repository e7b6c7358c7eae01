// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Durable queues across `bin/flowmq --cluster` processes (PostgreSQL + s3rver, three brokers): publish with
 * confirms on one broker and consume with acks on another, competing consumers on two brokers, the consumer's
 * broker killed (its unacked messages redelivered elsewhere), the queue's owner killed (the queue continues on
 * another broker with everything confirmed), MQTT `$queue/<name>` on a broker that does not own the queue.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import amqp from 'amqplib';
import mqtt from 'mqtt';
import { rendezvous } from '../../src/cluster/index.js';
import { startCluster, type TestCluster } from '../helpers/cluster.js';

type Conn = Awaited<ReturnType<typeof amqp.connect>>;
type Channel = Awaited<ReturnType<Conn['createChannel']>>;
type Message = NonNullable<Parameters<Parameters<Channel['consume']>[1]>[0]>;

const closedChannels = new WeakSet<Channel>();
const watched = new WeakSet<Channel>();
/**
 * Acks `m` after `ms`, unless its channel closed meanwhile: amqplib throws synchronously from `ack` on a closed
 * channel, and a test that ends (closing its connections) while an ack is still pending must not fail its file with
 * that throw from a timer.
 */
function ackLater(ch: Channel, m: Message, ms: number): void {
  if (!watched.has(ch)) {
    watched.add(ch);
    ch.once('close', () => closedChannels.add(ch));
  }
  setTimeout(() => {
    if (closedChannels.has(ch)) return;
    try {
      ch.ack(m);
    } catch (err) {
      // The test ended and its connection is closing, before the channel's close event: the ack has nowhere to go.
      if (!(err instanceof Error && /Connection closing|Channel closed/.test(err.message))) throw err;
    }
  }, ms);
}

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('cluster queues: amqplib and MQTT across brokers', { timeout: 240_000 }, () => {
  let c: TestCluster;
  const conns: Conn[] = [];
  const open = async (id: number): Promise<Conn> => {
    const conn = await amqp.connect(c.broker(id).amqpUrl);
    conn.on('error', () => undefined);
    conns.push(conn);
    return conn;
  };
  /** A queue name placed at `owner` among the live brokers `ids`. */
  const placed = (owner: number, ids: number[], prefix: string): string => {
    for (let i = 0; ; i++) if (rendezvous('queue', `${prefix}-${i}`, ids) === owner) return `${prefix}-${i}`;
  };
  const owned = (name: string, id: number) => until(`${name} owned by ${id}`, async () => (await c.ownerOf('queue', name)) === id);

  before(async () => {
    c = await startCluster({ brokers: 3, leaseMs: 1500, haproxy: false });
  });
  after(async () => {
    for (const conn of conns) await conn.close().catch(() => undefined);
    await c?.close();
  });

  it('publish with confirms on broker 2, consume with acks on broker 3, the queue owned by broker 1', async () => {
    const name = placed(1, [1, 2, 3], 'orders');
    const pub = await (await open(2)).createConfirmChannel();
    await pub.assertQueue(name, { durable: true });
    await owned(name, 1);
    for (let i = 0; i < 50; i++) pub.sendToQueue(name, Buffer.from(`m${i}`), { persistent: true });
    await pub.waitForConfirms();
    // The admin API of the brokers that do not own the queue shows the owner's counts.
    for (const id of [2, 3]) {
      const one = await c.broker(id).proc.api<{ messages: number }>('GET', `/api/v1/queues/${name}`);
      assert.equal(one.messages, 50, `GET /api/v1/queues/${name} on broker ${id}`);
    }
    const list = await c.broker(3).proc.api<{ items: Array<{ name: string; messages: number }> }>('GET', '/api/v1/queues?limit=1000');
    assert.equal(list.items.find((x) => x.name === name)?.messages, 50, 'GET /api/v1/queues on broker 3');
    const ch = await (await open(3)).createChannel();
    const q = await ch.checkQueue(name);
    assert.equal(q.messageCount, 50, 'declare-ok counts the messages at the owner');
    await ch.prefetch(10);
    const got: string[] = [];
    await ch.consume(name, (m) => {
      if (!m) return;
      got.push(m.content.toString());
      ch.ack(m);
    });
    await until('50 consumed', () => got.length === 50);
    assert.deepEqual(
      got,
      Array.from({ length: 50 }, (_, i) => `m${i}`),
      'in order, each once',
    );
    await until('acked at the owner', async () => (await (await open(1)).createChannel().then((x) => x.checkQueue(name))).messageCount === 0);
  });

  it('competing consumers on two brokers get each message once', async () => {
    const name = placed(1, [1, 2, 3], 'work');
    const pub = await (await open(1)).createConfirmChannel();
    await pub.assertQueue(name, { durable: true });
    const seen: Record<string, number> = {};
    const per = { b2: 0, b3: 0 };
    for (const [id, k] of [
      [2, 'b2'],
      [3, 'b3'],
    ] as const) {
      const ch = await (await open(id)).createChannel();
      await ch.prefetch(1);
      await ch.consume(name, (m) => {
        if (!m) return;
        const body = m.content.toString();
        seen[body] = (seen[body] ?? 0) + 1;
        per[k]++;
        ackLater(ch, m, 2);
      });
    }
    await owned(name, 1);
    const n = 200;
    for (let i = 0; i < n; i++) pub.sendToQueue(name, Buffer.from(`w${i}`), { persistent: true });
    await pub.waitForConfirms();
    await until('every message consumed', () => Object.keys(seen).length === n);
    assert.ok(
      Object.values(seen).every((x) => x === 1),
      'each message once',
    );
    assert.ok(per.b2 > 0 && per.b3 > 0, `both brokers' consumers got some (${per.b2}/${per.b3})`);
  });

  it('MQTT $queue/<name> on a broker that does not own the queue', async () => {
    const name = placed(3, [1, 2, 3], 'mq');
    const ch = await (await open(2)).createConfirmChannel();
    await ch.assertQueue(name, { durable: true });
    await owned(name, 3);
    // Broker 1 knows the queue (a passive declare there loads the catalog if its notification is still on its way).
    await (await (await open(1)).createChannel()).checkQueue(name);
    const client = await mqtt.connectAsync(c.broker(1).mqttUrl, { clientId: 'qsub', protocolVersion: 5 });
    try {
      const got: string[] = [];
      client.on('message', (_t, payload) => got.push(payload.toString()));
      const g = await client.subscribeAsync(`$queue/${name}`, { qos: 1 });
      assert.equal(g[0].qos, 1);
      for (let i = 0; i < 5; i++) ch.sendToQueue(name, Buffer.from(`q${i}`), { persistent: true });
      await ch.waitForConfirms();
      await until('5 over MQTT', () => got.length === 5);
      assert.deepEqual(got, ['q0', 'q1', 'q2', 'q3', 'q4']);
    } finally {
      await client.endAsync();
    }
  });

  it('direct reply-to across brokers: AMQP and MQTT 5 responders on other brokers answer an AMQP requester', async () => {
    const work = placed(3, [1, 2, 3], 'rpc');
    const requester = await (await open(1)).createChannel();
    await requester.assertQueue(work, { durable: true });
    const replies = new Map<string, string[]>();
    await requester.consume(
      'amq.rabbitmq.reply-to',
      (m) => {
        if (!m) return;
        const id = String(m.properties.correlationId);
        replies.set(id, [...(replies.get(id) ?? []), m.content.toString()]);
      },
      { noAck: true },
    );
    // The AMQP responder on broker 2 consumes the queue (owned by broker 3) and answers on the default exchange.
    const responder = await (await open(2)).createChannel();
    let address = '';
    await responder.consume(work, (m) => {
      if (!m) return;
      address = String(m.properties.replyTo);
      responder.publish('', address, Buffer.from(`re:${m.content.toString()}`), { correlationId: m.properties.correlationId });
      responder.ack(m);
    });
    // The MQTT 5 responder on broker 3 answers on the Response Topic an amq.topic publish carries.
    const mq = await mqtt.connectAsync(c.broker(3).mqttUrl, { clientId: 'rpc-responder', protocolVersion: 5 });
    try {
      mq.on('message', (_t, payload, packet) => {
        const p = packet.properties ?? {};
        if (p.responseTopic)
          void mq.publishAsync(p.responseTopic, `mqtt:${payload.toString()}`, { qos: 0, properties: { correlationData: p.correlationData } });
      });
      await mq.subscribeAsync('rpc/mqtt', { qos: 0 });
      /** Sends request `id` (again every second: the first ones may pass the brokers' interest exchange) until answered. */
      const call = async (id: string, send: () => void) => {
        for (let tries = 0; !replies.has(id); tries++) {
          assert.ok(tries < 30, `no reply to ${id}`);
          send();
          await until(`a reply to ${id}`, () => replies.has(id), 1000).catch(() => undefined);
        }
      };
      const toQueue = (id: string) => () => requester.sendToQueue(work, Buffer.from(id), { correlationId: id, replyTo: 'amq.rabbitmq.reply-to' });
      const toMqtt = (id: string) => () => requester.publish('amq.topic', 'rpc.mqtt', Buffer.from(id), { correlationId: id, replyTo: 'amq.rabbitmq.reply-to' });
      await call('warm-amqp', toQueue('warm-amqp'));
      await call('warm-mqtt', toMqtt('warm-mqtt'));
      // Both paths established: every request is answered once, with no retry.
      for (let i = 0; i < 20; i++) toQueue(`a${i}`)();
      for (let i = 0; i < 20; i++) toMqtt(`m${i}`)();
      await until('40 replies', () => [...replies.keys()].filter((k) => !k.startsWith('warm')).length === 40);
      for (let i = 0; i < 20; i++) {
        assert.deepEqual(replies.get(`a${i}`), [`re:a${i}`]);
        assert.deepEqual(replies.get(`m${i}`), [`mqtt:m${i}`]);
      }
      // A responder on another broker may check that the requester is still there before long work (as RabbitMQ
      // allows): 1 consumer; a made-up address of the same form is 404.
      const check = await (await open(2)).createChannel();
      assert.equal((await check.checkQueue(address)).consumerCount, 1);
      await assert.rejects(check.checkQueue(`amq.rabbitmq.reply-to.${'x'.repeat(24)}`), /404/);
    } finally {
      await mq.endAsync();
    }
  });

  it("the consumer's broker killed: its unacked messages are redelivered to a consumer on another broker", async () => {
    const name = placed(1, [1, 2, 3], 'redeliver');
    const pub = await (await open(1)).createConfirmChannel();
    await pub.assertQueue(name, { durable: true });
    await owned(name, 1);
    const doomed = await (await open(3)).createChannel();
    const held: string[] = [];
    await doomed.consume(name, (m) => {
      if (m) held.push(m.content.toString()); // never acked
    });
    for (let i = 0; i < 20; i++) pub.sendToQueue(name, Buffer.from(`r${i}`), { persistent: true });
    await pub.waitForConfirms();
    await until('20 held unacked on broker 3', () => held.length === 20);
    await c.kill(3);
    const ch = await (await open(2)).createChannel();
    const got: Array<{ body: string; redelivered: boolean }> = [];
    await ch.consume(name, (m) => {
      if (!m) return;
      got.push({ body: m.content.toString(), redelivered: m.fields.redelivered });
      ch.ack(m);
    });
    await until('20 redelivered on broker 2', () => got.length === 20);
    assert.deepEqual(got.map((g) => g.body).sort(), held.slice().sort());
    assert.ok(
      got.every((g) => g.redelivered),
      'flagged redelivered',
    );
  });

  it("the queue's owner killed: the queue continues on another broker with every confirmed message", async () => {
    // Brokers 1 and 2 are left; the queue is placed at 1, clients on 2.
    const name = placed(1, [1, 2], 'failover');
    const pub = await (await open(2)).createConfirmChannel();
    await pub.assertQueue(name, { durable: true });
    await owned(name, 1);
    const confirmed: string[] = [];
    let i = 0;
    let stop = false;
    const publishing = (async () => {
      while (!stop) {
        const body = `f${i++}`;
        const ok = await new Promise<boolean>((resolve) => pub.sendToQueue(name, Buffer.from(body), { persistent: true }, (err) => resolve(!err)));
        if (ok) confirmed.push(body);
      }
    })();
    await until('some confirmed', () => confirmed.length >= 50);
    await c.kill(1);
    await until('confirms again after the failover', () => confirmed.length >= 150, 60_000);
    stop = true;
    await publishing;
    await owned(name, 2);
    const ch = await (await open(2)).createChannel();
    const got = new Set<string>();
    await ch.consume(name, (m) => {
      if (!m) return;
      got.add(m.content.toString());
      ch.ack(m);
    });
    await until('every confirmed message consumed', () => confirmed.every((b) => got.has(b)), 60_000);
    assert.ok(confirmed.length >= 150);
  });

  it('a joining broker takes the queues placed at it and a graceful stop hands them back, consumers following, nothing lost', async () => {
    // Broker 2 is alone; broker 4 joins. The queue is placed at 4 once it is there.
    const name = placed(4, [2, 4], 'moving');
    const pub = await (await open(2)).createConfirmChannel();
    await pub.assertQueue(name, { durable: true });
    await owned(name, 2);
    for (let i = 0; i < 30; i++) pub.sendToQueue(name, Buffer.from(`j${i}`), { persistent: true });
    await pub.waitForConfirms();
    const ch = await (await open(2)).createChannel();
    await ch.prefetch(5);
    const got = new Set<string>();
    await ch.consume(name, (m) => {
      if (!m) return;
      got.add(m.content.toString());
      ackLater(ch, m, 20);
    });
    await c.startBroker({ id: 4 });
    await owned(name, 4);
    for (let i = 30; i < 60; i++) pub.sendToQueue(name, Buffer.from(`j${i}`), { persistent: true });
    await pub.waitForConfirms();
    await c.stop(4);
    await owned(name, 2);
    for (let i = 60; i < 90; i++) pub.sendToQueue(name, Buffer.from(`j${i}`), { persistent: true });
    await pub.waitForConfirms();
    await until('all 90 consumed on broker 2 across both moves', () => got.size === 90, 60_000);
  });
});
