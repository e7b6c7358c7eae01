/**
 * nats.js JetStream consumers on a Kafka topic of 3 partitions written by KafkaJS (issue 28, docs/jetstream.md
 * "Multi-partition streams"): a record's stream sequence is offset * 3 + partition + 1; pull consumers (consume(),
 * fetch()), a push consumer and an ordered consumer (js.consumers.get) each see every record once (redeliveries
 * aside), every partition in its order; naks, ack_wait and max_deliver; a durable consumer's position over a restart;
 * an ordered consumer's reset after records arrived in a partition behind the others.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import { AckPolicy, consumerOpts, createInbox, nanos, StringCodec, type JsMsg, type NatsConnection } from 'nats';
import { eventually, type FlowmqProcess } from './harness.js';
import { connectNats, startNatsBroker } from './cross-nats-helpers.js';

const { Kafka, logLevel } = kafkajsPkg;
const sc = StringCodec();
const P = 3;
const STREAM = 'orders';

/** Where a delivery's stream sequence says its record is. */
const place = (m: JsMsg) => ({ partition: (m.seq - 1) % P, offset: Math.floor((m.seq - 1) / P) });

/** Every record once (by payload), and within each partition ascending offsets and ascending per-key indices. */
function assertOrderedOnce(got: JsMsg[], sent: string[], what: string): void {
  const payloads = got.map((m) => sc.decode(m.data));
  assert.deepEqual([...payloads].sort(), [...sent].sort(), `${what}: every record once`);
  const last = new Map<number, number>();
  const lastIndex = new Map<string, number>();
  for (const m of got) {
    const { partition, offset } = place(m);
    assert.ok((last.get(partition) ?? -1) < offset, `${what}: partition ${partition} in order`);
    last.set(partition, offset);
    const [key, i] = sc.decode(m.data).split(':');
    assert.ok((lastIndex.get(key) ?? -1) < Number(i), `${what}: key ${key} in order`);
    lastIndex.set(key, Number(i));
  }
}

describe('e2e: nats.js JetStream consumers on a 3-partition Kafka topic', () => {
  let broker: FlowmqProcess;
  let nc: NatsConnection;
  const kafka = () => new Kafka({ brokers: [broker.kafka], clientId: 'jsp', logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
  const sent: string[] = [];
  let next = 0;
  /**
   * KafkaJS produces `n` keyed records (key k<i mod 5>, value "<key>:<i>"); to `partition` when given, with the key
   * `late` (one partition for a key: its records in order).
   */
  async function produce(n: number, partition?: number): Promise<string[]> {
    const producer = kafka().producer();
    await producer.connect();
    const batch: string[] = [];
    try {
      const messages = [];
      for (let j = 0; j < n; j++, next++) {
        const key = partition === undefined ? `k${next % 5}` : 'late';
        batch.push(`${key}:${next}`);
        messages.push({ key, value: `${key}:${next}`, ...(partition !== undefined ? { partition } : {}) });
      }
      await producer.send({ topic: STREAM, acks: -1, messages });
    } finally {
      await producer.disconnect();
    }
    sent.push(...batch);
    return batch;
  }

  before(async () => {
    broker = await startNatsBroker();
    const admin = kafka().admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: STREAM, numPartitions: P }] });
    await admin.disconnect();
    nc = await connectNats(broker, { name: 'jsp' });
    await produce(30);
  });
  after(async () => {
    await nc?.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
  });

  it('pull consume(): every record once, partitions in order, a nak and an ack_wait expiry redelivered, max_deliver', async () => {
    const jsm = await nc.jetstreamManager();
    await jsm.consumers.add(STREAM, { durable_name: 'pull', ack_policy: AckPolicy.Explicit, ack_wait: nanos(1000), max_deliver: 2 });
    const c = await nc.jetstream().consumers.get(STREAM, 'pull');
    const first: JsMsg[] = [];
    const again: JsMsg[] = [];
    const messages = await c.consume({ max_messages: 10, expires: 2000 });
    const done = (async () => {
      for await (const m of messages) {
        const i = Number(sc.decode(m.data).split(':')[1]);
        if (m.info.redeliveryCount === 1) first.push(m);
        else again.push(m);
        // Record 3: nak'd; record 4: never acked (ack_wait, then max_deliver 2: delivered twice only); others acked.
        if (i === 3 && m.info.redeliveryCount === 1) m.nak();
        else if (i !== 4) m.ack();
        if (first.length === sent.length && again.length >= 2) break;
      }
    })();
    await done;
    assertOrderedOnce(first, sent, 'first deliveries');
    assert.deepEqual(first.map((m) => m.info.deliverySequence).slice(0, 5), [1, 2, 3, 4, 5]);
    assert.ok(
      first.every((m, k) => k === 0 || m.seq > first[k - 1].seq),
      'the backlog in ascending stream sequence',
    );
    assert.deepEqual(again.map((m) => [sc.decode(m.data).split(':')[1], m.info.redeliveryCount]).sort(), [
      ['3', 2],
      ['4', 2],
    ]);
    await eventually(
      async () => {
        const info = await jsm.consumers.info(STREAM, 'pull');
        return info.num_ack_pending === 0 && info.num_pending === 0 && info.delivered.consumer_seq === sent.length + 2;
      },
      5000,
      'nothing pending once record 4 reached max_deliver',
    );
  });

  it('push consumers, with acks and ordered: every record once, partitions in order', async () => {
    const inbox = createInbox();
    const opts = consumerOpts().durable('push').deliverTo(inbox).ackExplicit().deliverAll().bindStream(STREAM);
    const sub = await nc.jetstream().subscribe(STREAM, opts);
    const got: JsMsg[] = [];
    for await (const m of sub) {
      got.push(m);
      m.ack();
      if (got.length === sent.length) break;
    }
    assertOrderedOnce(got, sent, 'push');
    const info = await (await nc.jetstreamManager()).consumers.info(STREAM, 'push');
    assert.equal(info.num_pending, 0);
    // nats.js's ordered push consumer (flow control, heartbeats, no acks) too.
    const ordered = await nc.jetstream().subscribe(STREAM, consumerOpts().orderedConsumer().bindStream(STREAM));
    const seen: JsMsg[] = [];
    for await (const m of ordered) {
      seen.push(m);
      if (seen.length === sent.length) break;
    }
    assertOrderedOnce(seen, sent, 'ordered push');
  });

  it('ordered consumer (js.consumers.get): reset after records arrived in a partition behind: nothing skipped, nothing twice', async () => {
    const oc = await nc.jetstream().consumers.get(STREAM);
    const got: JsMsg[] = [];
    const jsm = await nc.jetstreamManager();
    const messages = await oc.consume({ max_messages: 20, expires: 2000 });
    const until = (n: number) => eventually(() => got.length >= n, 10_000, `${n} ordered deliveries (have ${got.length})`);
    const reading = (async () => {
      for await (const m of messages) got.push(m);
    })();
    await until(sent.length);
    // The partition with the fewest records gets two: numbered below what was delivered last.
    const sizes = [0, 1, 2].map((p) => got.filter((m) => place(m).partition === p).length);
    const behind = sizes.indexOf(Math.min(...sizes));
    const maxSeq = Math.max(...got.map((m) => m.seq));
    await produce(2, behind);
    await until(sent.length);
    assert.ok(
      got.slice(-2).every((m) => m.seq < maxSeq),
      'the late records have sequences below the highest delivered',
    );
    // The server-side consumer goes: the client resets from its last stream sequence + 1.
    const [name] = (await jsm.consumers.list(STREAM).next()).map((ci) => ci.name).filter((n) => !['pull', 'push', 'fetch'].includes(n));
    await jsm.consumers.delete(STREAM, name);
    await produce(6);
    await until(sent.length);
    messages.stop();
    await reading;
    assertOrderedOnce(got, sent, 'ordered');
  });

  it('fetch() with a durable consumer over a broker restart: acked stays acked, unacked comes again', async () => {
    const jsm = await nc.jetstreamManager();
    await jsm.consumers.add(STREAM, { durable_name: 'fetch', ack_policy: AckPolicy.Explicit, ack_wait: nanos(30_000) });
    const fetch = async (conn: NatsConnection, max: number) => {
      const c = await conn.jetstream().consumers.get(STREAM, 'fetch');
      const out: JsMsg[] = [];
      for await (const m of await c.fetch({ max_messages: max, expires: 1500 })) out.push(m);
      return out;
    };
    const a = await fetch(nc, 12);
    assert.equal(a.length, 12);
    for (const m of a.slice(0, 10)) await m.ackAck();
    const before = await jsm.consumers.info(STREAM, 'fetch');
    assert.equal(before.num_ack_pending, 2);
    await nc.close();

    broker = await broker.restart();
    nc = await connectNats(broker, { name: 'jsp-2' });
    const info = await (await nc.jetstreamManager()).consumers.info(STREAM, 'fetch');
    assert.equal(info.delivered.consumer_seq, 12);
    // Delivered and not acked before the restart: to be delivered again, so pending again (as on one partition).
    assert.equal(info.num_pending, sent.length - 10);
    const b = await fetch(nc, sent.length);
    assert.equal(b.length, sent.length - 10);
    // The two not acked first, delivered again (count 2, same stream sequences), then the rest.
    assert.deepEqual(
      b.slice(0, 2).map((m) => [m.seq, m.info.redeliveryCount]),
      a.slice(10).map((m) => [m.seq, 2]),
    );
    assert.deepEqual(b[0].info.deliverySequence, 13);
    for (const m of b) await m.ackAck();
    assertOrderedOnce([...a.slice(0, 10), ...b], sent, 'fetch over a restart');
    const end = await (await nc.jetstreamManager()).consumers.info(STREAM, 'fetch');
    assert.deepEqual([end.num_pending, end.num_ack_pending], [0, 0]);
  });
});
