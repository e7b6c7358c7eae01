/**
 * Durable queues across broker restarts and crashes, with amqplib against the real `bin/flowmq` process, on the
 * embedded storage and on PostgreSQL + S3 (storage-configs.ts; the queue store is SQLite or PostgreSQL):
 * - persistent messages confirmed into a durable queue are all there after SIGTERM + restart, in order, with every
 *   property and header; transient ones are not (as RabbitMQ);
 * - the same after `kill -9` in the middle of a stream of confirmed publishes: every confirmed message is consumed
 *   after the restart, none twice, nothing that was not published;
 * - MQTT QoS 1 publishes and Kafka acks=all records routed into a durable queue are there after kill -9 once acked;
 * - acks, rejects, purges, dead letters and deleted queues stay so after a restart;
 * - unacked deliveries of a connection that dies (socket gone, no close) go to another consumer with
 *   redelivered=true; unacked deliveries of a broker killed with `kill -9` come back after its restart, redelivered;
 * - durable exchanges, queues (with their arguments) and bindings survive a restart and a kill -9; non-durable
 *   ones do not.
 * "Nothing else" is always proven by draining with basic.get to get-empty or by a marker, never by waiting.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import type { Channel, ChannelModel, ConfirmChannel, ConsumeMessage, GetMessage } from 'amqplib';
import { FlowmqProcess, eventually, kcatConsume } from './harness.js';
import { connectAmqp } from './amqp-helpers.js';
import { storageConfigs } from './storage-configs.js';

const { Kafka, logLevel } = kafkajsPkg;

const AMQP_ARGS = ['--protocols', 'mqtt,kafka,amqp', '--amqp-port', '0', '--amqp-heartbeat', '0'];

/** basic.get (auto-ack) until get-empty: everything ready in the queue, in order. */
async function drain(ch: Channel, queue: string): Promise<GetMessage[]> {
  const out: GetMessage[] = [];
  for (;;) {
    const m = await ch.get(queue, { noAck: true });
    if (m === false) return out;
    out.push(m);
  }
}

/** Resolves with the first `n` deliveries to a new consumer on `queue` (not acked), and the consumer's tag. */
function deliveries(ch: Channel, queue: string, n: number): Promise<ConsumeMessage[]> {
  return new Promise((resolve, reject) => {
    const got: ConsumeMessage[] = [];
    const timer = setTimeout(() => reject(new Error(`timed out: ${got.length} of ${n} deliveries from ${queue}`)), 15_000);
    ch.consume(queue, (m) => {
      if (m === null) return;
      got.push(m);
      if (got.length === n) {
        clearTimeout(timer);
        resolve(got);
      }
    }).catch(reject);
  });
}

/** Publishes and waits for every confirm; throws on a nack. */
async function publishConfirmed(ch: ConfirmChannel, queue: string, bodies: string[], persistent = true): Promise<void> {
  for (const b of bodies) ch.sendToQueue(queue, Buffer.from(b), { persistent, deliveryMode: persistent ? 2 : 1 });
  await ch.waitForConfirms();
}

function socketOf(conn: ChannelModel): Socket {
  return (conn as unknown as { connection: { stream: Socket } }).connection.stream;
}

for (const cfg of storageConfigs())
  describe(`e2e: durable queues across restarts and kill -9 [${cfg.name}]`, () => {
    let broker: FlowmqProcess;
    const open: ChannelModel[] = [];
    const connect = async () => {
      const c = await connectAmqp(broker);
      // A broker killed under the connection: amqplib reports it as an error event.
      c.on('error', () => undefined);
      open.push(c);
      return c;
    };
    const closeAll = async () => {
      // A connection whose socket is gone (destroyed, or its broker killed) never answers close: skip it.
      for (const c of open.splice(0)) if (!socketOf(c).destroyed) await c.close().catch(() => undefined);
    };
    const kill9 = async () => {
      const r = await broker.stop('SIGKILL');
      assert.equal(r.signal, 'SIGKILL');
      await closeAll();
      broker = await FlowmqProcess.start({ dataDir: broker.dataDir, args: broker.args });
    };
    const restart = async () => {
      await closeAll();
      broker = await broker.restart();
    };

    before(async () => {
      broker = await FlowmqProcess.start({ args: await cfg.brokerArgs(AMQP_ARGS) });
    });
    after(async () => {
      await closeAll();
      await broker?.stop();
      broker?.cleanup();
    });

    it('confirmed persistent messages survive SIGTERM + restart, in order; transient ones do not', async () => {
      const conn = await connect();
      const ch = await conn.createConfirmChannel();
      await ch.assertQueue('dur-restart', { durable: true });
      const persistent = Array.from({ length: 200 }, (_, i) => `p${i}`);
      // Transient messages interleaved with persistent ones (a durable queue keeps them in memory only).
      for (let i = 0; i < 200; i += 50) {
        await publishConfirmed(ch, 'dur-restart', persistent.slice(i, i + 50));
        await publishConfirmed(ch, 'dur-restart', [`t${i}`], false);
      }
      // One more with every property, a header table and a body above frame-max (several body frames).
      const big = Buffer.alloc(300_000, 7);
      const headers = { s: 'text', n: 42, big: 2 ** 40, b: true, nested: { a: [1, 'x'] }, bin: Buffer.from([0, 255]) };
      const props = {
        persistent: true,
        contentType: 'application/octet-stream',
        contentEncoding: 'identity',
        headers,
        priority: 3,
        correlationId: 'corr-d',
        replyTo: 'replies.d',
        messageId: 'id-d',
        type: 'blob',
        appId: 'dur-test',
      };
      ch.sendToQueue('dur-restart', big, props);
      await ch.waitForConfirms();
      assert.equal((await ch.checkQueue('dur-restart')).messageCount, 205);

      await restart();
      const ch2 = await (await connect()).createChannel();
      const q = await ch2.checkQueue('dur-restart');
      assert.equal(q.messageCount, 201);
      const got = await drain(ch2, 'dur-restart');
      const last = got.pop()!;
      assert.deepEqual(
        got.map((m) => m.content.toString()),
        persistent,
      );
      for (const m of got) assert.equal(m.properties.deliveryMode, 2);
      assert.ok(last.content.equals(big), 'the large body');
      const lp = last.properties;
      assert.deepEqual(
        [lp.deliveryMode, lp.contentType, lp.contentEncoding, lp.priority, lp.correlationId, lp.replyTo, lp.messageId, lp.type, lp.appId],
        [2, props.contentType, props.contentEncoding, props.priority, props.correlationId, props.replyTo, props.messageId, props.type, props.appId],
      );
      assert.deepEqual(lp.headers, headers);
      await ch2.deleteQueue('dur-restart');
    });

    it('kill -9 in the middle of confirmed publishing: every confirmed message is in both queues and the stream it was routed to, none twice', async (t) => {
      // amq.topic routes each publish to two durable queues and to the stream of the same name: a confirm means
      // durable in all three.
      await broker.api('POST', '/api/v1/streams', { name: 'dk.orders', partitions: 1 });
      const conn = await connect();
      const ch = await conn.createConfirmChannel();
      ch.on('error', () => undefined);
      await ch.assertQueue('dur-kill-a', { durable: true });
      await ch.assertQueue('dur-kill-b', { durable: true });
      await ch.bindQueue('dur-kill-a', 'amq.topic', 'dk.#');
      await ch.bindQueue('dur-kill-b', 'amq.topic', 'dk.orders');
      const confirmed = new Set<number>();
      let sent = 0;
      let killed = false;
      // A publisher with a window of 400 unconfirmed messages, killed in a confirm callback once 1500 are
      // confirmed: at that moment up to 400 are in flight (sent, partly stored, not confirmed).
      const killedAt = new Promise<{ confirmed: Set<number>; sent: number }>((resolve) => {
        let pumping = false;
        const pump = () => {
          pumping = false;
          while (!killed && sent - confirmed.size < 400) {
            const i = sent++;
            ch.publish('amq.topic', 'dk.orders', Buffer.from(`m${i}`), { persistent: true }, (err) => {
              if (err !== null && err !== undefined) return;
              confirmed.add(i);
              if (!killed && confirmed.size >= 1500) {
                broker.proc.kill('SIGKILL');
                killed = true;
                resolve({ confirmed: new Set(confirmed), sent });
              }
              if (!pumping) {
                pumping = true;
                setImmediate(pump);
              }
            });
          }
        };
        pump();
      });
      const atKill = await killedAt;
      const confirmedAtKill = atKill.confirmed;
      assert.ok(atKill.sent > confirmedAtKill.size, `publishes in flight at the kill (${atKill.sent} sent, ${confirmedAtKill.size} confirmed)`);
      await kill9();

      const ch2 = await (await connect()).createChannel();
      const stream = await kcatConsume(broker.kafka, 'dk.orders');
      for (const [where, bodies] of [
        ['dur-kill-a', (await drain(ch2, 'dur-kill-a')).map((m) => m.content.toString())],
        ['dur-kill-b', (await drain(ch2, 'dur-kill-b')).map((m) => m.content.toString())],
        ['stream dk.orders', stream.map((m) => m.payload ?? '')],
      ] as const) {
        const ids = bodies.map((b) => Number(b.slice(1)));
        assert.equal(new Set(ids).size, ids.length, `${where}: no message twice`);
        assert.ok(
          ids.every((i) => Number.isInteger(i) && i >= 0 && i < atKill.sent),
          `${where}: only published messages`,
        );
        assert.deepEqual(
          ids,
          [...ids].sort((a, b) => a - b),
          `${where}: in publish order`,
        );
        const have = new Set(ids);
        const missing = [...confirmedAtKill].filter((i) => !have.has(i));
        assert.deepEqual(missing, [], `${where}: confirmed before the kill but lost (${confirmedAtKill.size} confirmed, ${ids.length} recovered)`);
        t.diagnostic(`${where}: ${atKill.sent} sent, ${confirmedAtKill.size} confirmed at the kill, ${ids.length} recovered`);
      }
      await ch2.deleteQueue('dur-kill-a');
      await ch2.deleteQueue('dur-kill-b');
    });

    it('MQTT QoS 1 publishes and Kafka acks=all records routed into a durable queue on amq.topic survive kill -9 once acknowledged', async () => {
      await broker.api('POST', '/api/v1/streams', { name: 'xk.events', partitions: 2 });
      const ch = await (await connect()).createChannel();
      await ch.assertQueue('dur-xproto', { durable: true });
      await ch.bindQueue('dur-xproto', 'amq.topic', 'xm.#');
      await ch.bindQueue('dur-xproto', 'amq.topic', 'xk.events');
      // Every PUBACK / produce response received before the kill means: stored in the queue.
      const m = await mqtt.connectAsync(broker.mqttUrl, { reconnectPeriod: 0, clientId: 'dur-xproto-pub' });
      for (let i = 0; i < 50; i++) await m.publishAsync(`xm/${i % 5}`, `mqtt-${i}`, { qos: 1 });
      await m.endAsync();
      const kafka = new Kafka({ brokers: [broker.kafka], clientId: 'dur-xproto', logLevel: logLevel.NOTHING, retry: { retries: 2 } });
      const producer = kafka.producer();
      await producer.connect();
      for (let i = 0; i < 5; i++) {
        await producer.send({
          topic: 'xk.events',
          acks: -1,
          messages: Array.from({ length: 10 }, (_, j) => ({ key: `k${j % 3}`, value: `kafka-${i * 10 + j}` })),
        });
      }
      await producer.disconnect();
      await kill9();

      const ch2 = await (await connect()).createChannel();
      const got = (await drain(ch2, 'dur-xproto')).map((x) => x.content.toString());
      assert.deepEqual(
        got.filter((b) => b.startsWith('mqtt-')),
        Array.from({ length: 50 }, (_, i) => `mqtt-${i}`),
        'MQTT messages, in order',
      );
      assert.deepEqual(got.filter((b) => b.startsWith('kafka-')).sort(), Array.from({ length: 50 }, (_, i) => `kafka-${i}`).sort(), 'Kafka records');
      assert.equal(got.length, 100);
      await ch2.deleteQueue('dur-xproto');
    });

    it('acks, rejects, purges, dead-lettering and queue deletion are as durable as the messages (SIGTERM + restart)', async () => {
      const conn = await connect();
      const ch = await conn.createConfirmChannel();
      await ch.assertQueue('dur-acked', { durable: true });
      await ch.assertQueue('dur-purged', { durable: true });
      await ch.assertQueue('dur-deleted', { durable: true });
      await ch.assertQueue('dur-dlq', { durable: true });
      await ch.assertQueue('dur-dl-src', { durable: true, arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': 'dur-dlq' } });
      await ch.assertQueue('dur-dropped', { durable: true });
      await publishConfirmed(
        ch,
        'dur-acked',
        Array.from({ length: 50 }, (_, i) => `a${i}`),
      );
      await publishConfirmed(ch, 'dur-purged', ['x', 'y']);
      await publishConfirmed(ch, 'dur-deleted', ['gone']);
      await publishConfirmed(ch, 'dur-dl-src', ['dl0', 'dl1', 'dl2']);
      await publishConfirmed(ch, 'dur-dropped', ['dr0', 'dr1']);

      const c = await conn.createChannel();
      await c.prefetch(50);
      // 30 acked (one multiple ack for 0..19, single acks after), 5 left unacked, 15 never delivered.
      const got = await deliveries(c, 'dur-acked', 35);
      c.ack(got[19]!, true);
      for (const m of got.slice(20, 30)) c.ack(m);
      const dl = await deliveries(c, 'dur-dl-src', 3);
      c.nack(dl[1]!, false, false); // dead-lettered into dur-dlq
      const dr = await deliveries(c, 'dur-dropped', 2);
      c.reject(dr[0]!, false); // no dead-letter exchange: dropped
      await c.purgeQueue('dur-purged');
      await c.deleteQueue('dur-deleted');
      await eventually(async () => (await c.checkQueue('dur-dlq')).messageCount === 1, 10_000, 'the dead letter in dur-dlq');
      // A clean close (the unacked go back to their queues) and a clean stop.
      await restart();

      const ch2 = await (await connect()).createChannel();
      ch2.on('error', () => undefined);
      assert.deepEqual(
        (await drain(ch2, 'dur-acked')).map((m) => m.content.toString()),
        Array.from({ length: 20 }, (_, i) => `a${i + 30}`),
        'acked messages stay acked',
      );
      assert.deepEqual(await drain(ch2, 'dur-purged'), [], 'purged messages stay purged');
      assert.deepEqual(
        (await drain(ch2, 'dur-dl-src')).map((m) => m.content.toString()),
        ['dl0', 'dl2'],
      );
      const dead = await drain(ch2, 'dur-dlq');
      assert.deepEqual(
        dead.map((m) => m.content.toString()),
        ['dl1'],
      );
      assert.equal((dead[0]!.properties.headers?.['x-death'] as Array<{ reason: string; queue: string }>)[0]!.queue, 'dur-dl-src');
      assert.deepEqual(
        (await drain(ch2, 'dur-dropped')).map((m) => m.content.toString()),
        ['dr1'],
      );
      await assert.rejects(ch2.checkQueue('dur-deleted'), /404/, 'the deleted queue is not back');
      const ch3 = await (await connect()).createChannel();
      await ch3.assertQueue('dur-deleted', { durable: true });
      assert.deepEqual(await drain(ch3, 'dur-deleted'), [], 'a new queue of the same name starts empty');
      for (const q of ['dur-acked', 'dur-purged', 'dur-deleted', 'dur-dlq', 'dur-dl-src', 'dur-dropped']) await ch3.deleteQueue(q);
    });

    it('unacked deliveries of a connection that dies go to another consumer with redelivered=true', async () => {
      const a = await connect();
      const cha = await a.createConfirmChannel();
      await cha.assertQueue('dur-unacked', { durable: true });
      await publishConfirmed(cha, 'dur-unacked', ['u0', 'u1', 'u2', 'u3', 'u4', 'u5']);
      const consumer = await a.createChannel();
      await consumer.prefetch(4);
      const held = await deliveries(consumer, 'dur-unacked', 4);
      assert.deepEqual(
        held.map((m) => [m.content.toString(), m.fields.redelivered]),
        [
          ['u0', false],
          ['u1', false],
          ['u2', false],
          ['u3', false],
        ],
      );
      consumer.ack(held[1]!);
      // The ack makes room for one more delivery (prefetch 4): u4 is delivered to this consumer too (the array of
      // deliveries keeps growing after it resolved).
      await eventually(() => held.length === 5, 10_000, 'u4 delivered after the ack of u1');
      assert.equal(held[4]!.content.toString(), 'u4');

      // The client's socket goes away without connection.close (a crashed client).
      socketOf(a).destroy();

      const b = await connect();
      const chb = await b.createChannel();
      const got = await deliveries(chb, 'dur-unacked', 5);
      // u5 may come before the requeued ones (the broker may see the socket close after b's consume), hence sorted.
      assert.deepEqual(got.map((m) => [m.content.toString(), m.fields.redelivered]).sort(), [
        ['u0', true],
        ['u2', true],
        ['u3', true],
        ['u4', true],
        ['u5', false],
      ]);
      for (const m of got) chb.ack(m);
      await chb.close();
      const chc = await b.createChannel();
      assert.deepEqual(await drain(chc, 'dur-unacked'), [], 'all acked: nothing left');
      await chc.deleteQueue('dur-unacked');
    });

    it('unacked deliveries of a broker killed with kill -9 are redelivered after the restart', async () => {
      const a = await connect();
      const ch = await a.createConfirmChannel();
      await ch.assertQueue('dur-unacked-kill', { durable: true });
      await publishConfirmed(
        ch,
        'dur-unacked-kill',
        Array.from({ length: 10 }, (_, i) => `k${i}`),
      );
      const consumer = await a.createChannel();
      consumer.on('error', () => undefined);
      await consumer.prefetch(3);
      const held = await deliveries(consumer, 'dur-unacked-kill', 3);
      assert.deepEqual(
        held.map((m) => m.content.toString()),
        ['k0', 'k1', 'k2'],
      );

      await kill9();
      const ch2 = await (await connect()).createChannel();
      const got = await drain(ch2, 'dur-unacked-kill');
      assert.deepEqual(
        got.map((m) => m.content.toString()),
        Array.from({ length: 10 }, (_, i) => `k${i}`),
      );
      // The three that were delivered before the crash say so.
      for (const m of got.slice(0, 3)) assert.equal(m.fields.redelivered, true, m.content.toString());
      await ch2.deleteQueue('dur-unacked-kill');
    });

    for (const how of ['restart', 'kill -9'] as const) {
      it(`durable exchanges, queues (with arguments) and bindings survive a ${how}; non-durable ones do not`, async () => {
        const tag = how === 'restart' ? 'r' : 'k';
        const conn = await connect();
        const ch = await conn.createChannel();
        await ch.assertExchange(`defs-x-${tag}`, 'topic', { durable: true });
        await ch.assertExchange(`defs-fan-${tag}`, 'fanout', { durable: true });
        await ch.assertExchange(`defs-tx-${tag}`, 'direct', { durable: false });
        const args = { 'x-max-length': 100, 'x-message-ttl': 600_000, 'x-dead-letter-exchange': `defs-fan-${tag}` };
        await ch.assertQueue(`defs-q-${tag}`, { durable: true, arguments: args });
        await ch.assertQueue(`defs-dlq-${tag}`, { durable: true });
        await ch.assertQueue(`defs-tq-${tag}`, { durable: false });
        await ch.bindQueue(`defs-q-${tag}`, `defs-x-${tag}`, 'orders.*');
        await ch.bindQueue(`defs-q-${tag}`, 'amq.topic', `sensors.${tag}.#`);
        await ch.bindQueue(`defs-dlq-${tag}`, `defs-fan-${tag}`, '');
        await ch.bindExchange(`defs-fan-${tag}`, `defs-x-${tag}`, 'audit.#');
        await ch.bindQueue(`defs-tq-${tag}`, `defs-x-${tag}`, 'orders.*');
        // Everything above is answered (declare-ok, bind-ok) before the broker goes.
        if (how === 'restart') await restart();
        else await kill9();

        const c2 = await connect();
        const ch2 = await c2.createChannel();
        ch2.on('error', () => undefined);
        await ch2.checkExchange(`defs-x-${tag}`);
        await ch2.checkQueue(`defs-q-${tag}`);
        // Same arguments: an equivalent re-declaration is fine...
        await ch2.assertQueue(`defs-q-${tag}`, { durable: true, arguments: args });
        // ...and other arguments are refused (406), so they were kept.
        const c3 = await connect();
        const probe = await c3.createChannel();
        probe.on('error', () => undefined);
        await assert.rejects(probe.assertQueue(`defs-q-${tag}`, { durable: true, arguments: { ...args, 'x-max-length': 5 } }), /406|PRECONDITION_FAILED/);
        for (const [what, check] of [
          ['queue', (c: Channel) => c.checkQueue(`defs-tq-${tag}`)],
          ['exchange', (c: Channel) => c.checkExchange(`defs-tx-${tag}`)],
        ] as const) {
          const c = await c3.createChannel();
          c.on('error', () => undefined);
          await assert.rejects(check(c), /404/, `the non-durable ${what} is gone`);
        }

        // The bindings route: the exchange's, amq.topic's (an MQTT publish), exchange-to-exchange, and the DLX.
        ch2.publish(`defs-x-${tag}`, 'orders.new', Buffer.from('order'));
        ch2.publish(`defs-x-${tag}`, 'invoices.new', Buffer.from('not bound'));
        const pub = await mqtt.connectAsync(broker.mqttUrl, { reconnectPeriod: 0 });
        await pub.publishAsync(`sensors/${tag}/t1`, 'reading', { qos: 1 });
        await pub.endAsync();
        ch2.publish(`defs-x-${tag}`, 'audit.login', Buffer.from('audited'));
        ch2.publish(`defs-x-${tag}`, 'orders.end', Buffer.from('end'));
        await ch2.checkQueue(`defs-q-${tag}`); // a round trip after the publishes on this channel
        const got = (await drain(ch2, `defs-q-${tag}`)).map((m) => m.content.toString());
        assert.deepEqual(got, ['order', 'reading', 'end']);
        assert.deepEqual(
          (await drain(ch2, `defs-dlq-${tag}`)).map((m) => m.content.toString()),
          ['audited'],
        );
        // The dead-letter exchange argument works after the restart: a rejected message goes to the DLQ.
        ch2.publish(`defs-x-${tag}`, 'orders.bad', Buffer.from('rejected'));
        const [bad] = await deliveries(ch2, `defs-q-${tag}`, 1);
        ch2.nack(bad!, false, false);
        const dl = await deliveries(ch2, `defs-dlq-${tag}`, 1);
        assert.deepEqual(
          dl.map((m) => m.content.toString()),
          ['rejected'],
        );
        assert.equal((dl[0]!.properties.headers?.['x-death'] as Array<{ reason: string }>)[0]!.reason, 'rejected');
      });
    }
  });
