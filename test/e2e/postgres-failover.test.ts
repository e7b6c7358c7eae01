// test-runner: alone (scripts/test.mjs): three PostgreSQL servers, their pg_autoctl keepers and a broker under load
/**
 * A highly available PostgreSQL under FlowMQ, its primary lost (issue 30, "Faults"): Debian's pg_auto_failover (a
 * monitor and two data nodes, the standby synchronous; test/helpers/pg-auto-failover.ts) under a broker started with
 * `--metastore <multi-host URL> --wal postgres`, the URL libpq's
 * `postgres://flowmq@127.0.0.1:p1,127.0.0.1:p2/db?target_session_attrs=read-write`.
 *
 * KafkaJS (acks=all, one partition) and amqplib (confirms, persistent messages into a durable queue) produce without
 * pause; the primary node is killed (kill -9 of its process group: the postmaster, its backends and the pg_autoctl
 * supervising it, which would otherwise restart it as the primary: a machine lost); pg_auto_failover promotes the
 * standby; the clients keep producing. Then everything is read back through the protocols, each up to a marker
 * sent after the last acknowledgement (the topic has one partition and the queue is FIFO, so the marker proves
 * absence): every acknowledged record is present. And records are acknowledged again after the failover: the broker
 * followed it to the new primary.
 *
 * Without the multi-host support this fails: the URL is refused at start (node-postgres takes one host), and a
 * broker given node1's URL alone never writes again after the failover (nothing acknowledged after it).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajs from 'kafkajs';
import amqp, { type ConfirmChannel, type ChannelModel } from 'amqplib';
import { FlowmqProcess, sleep } from './harness.js';
import { startHaPostgres, type HaPostgres } from '../helpers/pg-auto-failover.js';

const { Kafka, logLevel } = kafkajs;
const TOPIC = 'ha.orders';
const QUEUE = 'ha-jobs';

interface Acks {
  /** Record ids acknowledged, in acknowledgement order. */
  acked: string[];
  /** When each acknowledgement came (ms since epoch), same order. */
  at: number[];
  failures: number;
}

/** The longest time between two acknowledgements inside [from, to]: what a client saw of the failover. */
function longestGap(a: Acks, from: number, to: number): number {
  let gap = 0;
  let prev = from;
  for (const t of a.at) {
    if (t < from || t > to) continue;
    gap = Math.max(gap, t - prev);
    prev = t;
  }
  return Math.max(gap, to - prev);
}

/** Waits for `p` at most `ms`: then fails with `why`, or (why null) just returns. The timer never outlives the wait. */
async function within(p: Promise<unknown>, ms: number, why: string | null): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve, reject) => {
    timer = setTimeout(() => (why === null ? resolve() : reject(new Error(why))), ms);
  });
  try {
    await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** KafkaJS, acks=all: batches of 20 awaited one after another; a batch that fails is given up (maybe written). */
async function kafkaLoad(broker: string, stop: () => boolean): Promise<Acks> {
  const kafka = new Kafka({
    brokers: [broker],
    clientId: 'ha-producer',
    logLevel: logLevel.NOTHING,
    retry: { retries: 3, initialRetryTime: 200, maxRetryTime: 2000 },
  });
  const producer = kafka.producer({ allowAutoTopicCreation: false, retry: { retries: 3, initialRetryTime: 200, maxRetryTime: 2000 } });
  await producer.connect();
  const out: Acks = { acked: [], at: [], failures: 0 };
  let n = 0;
  while (!stop()) {
    const ids = Array.from({ length: 20 }, () => `k${n++}`);
    try {
      await producer.send({ topic: TOPIC, acks: -1, timeout: 10_000, messages: ids.map((id) => ({ key: id, value: id })) });
      const now = Date.now();
      for (const id of ids) {
        out.acked.push(id);
        out.at.push(now);
      }
    } catch {
      out.failures++;
      await sleep(100);
    }
  }
  await producer.disconnect().catch(() => undefined);
  return out;
}

/** amqplib with confirms: 50 unconfirmed at most; a channel or connection lost is opened again. */
async function amqpLoad(url: string, stop: () => boolean): Promise<Acks> {
  const out: Acks = { acked: [], at: [], failures: 0 };
  let n = 0;
  while (!stop()) {
    let conn: ChannelModel | null = null;
    try {
      conn = await amqp.connect(url);
      conn.on('error', () => undefined);
      const ch: ConfirmChannel = await conn.createConfirmChannel();
      let broken = false;
      ch.on('error', () => (broken = true));
      ch.on('close', () => (broken = true));
      while (!stop() && !broken) {
        const batch: Promise<void>[] = [];
        for (let i = 0; i < 50; i++) {
          const id = `a${n++}`;
          batch.push(
            new Promise<void>((resolve) => {
              ch.sendToQueue(QUEUE, Buffer.from(id), { persistent: true }, (err: unknown) => {
                if (err) out.failures++;
                else {
                  out.acked.push(id);
                  out.at.push(Date.now());
                }
                resolve();
              });
            }),
          );
        }
        // A broken channel never confirms what it had: stop waiting for those after a while (not acknowledged).
        await within(Promise.all(batch), 15_000, null);
      }
    } catch {
      out.failures++;
      await sleep(200);
    } finally {
      await conn?.close().catch(() => undefined);
    }
  }
  return out;
}

describe('e2e: pg_auto_failover under the broker, the primary killed', () => {
  let ha: HaPostgres;
  let broker: FlowmqProcess | undefined;
  before(async () => {
    ha = await startHaPostgres();
  });
  after(async () => {
    await broker?.stop('SIGKILL');
    broker?.cleanup();
    await ha?.stop();
  });

  it('Kafka acks=all and AMQP confirms through a failover: every acknowledged record is read back', async (t) => {
    const url = await ha.createDatabase();
    broker = await FlowmqProcess.start({
      args: ['--protocols', 'kafka,amqp', '--amqp-heartbeat', '0', '--metastore', url, '--wal', 'postgres'],
      startTimeoutMs: 60_000,
    });
    const b = broker;
    const kafka = new Kafka({ brokers: [b.kafka], clientId: 'ha-check', logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 1 }] });
    await admin.disconnect();
    const amqpUrl = `amqp://guest:guest@127.0.0.1:${b.ports.amqp}`;
    const setup = await amqp.connect(amqpUrl);
    await (await setup.createChannel()).assertQueue(QUEUE, { durable: true });
    await setup.close();

    let stopping = false;
    const loads = Promise.all([kafkaLoad(b.kafka, () => stopping), amqpLoad(amqpUrl, () => stopping)]);
    await sleep(3000);
    const was = await ha.killPrimary();
    const killedAt = Date.now();
    const failover = await ha.waitForFailover(was);
    t.diagnostic(`node${was + 1} killed; node${failover.index + 1} read-write ${failover.ms} ms later`);
    // Produce until both loads had acknowledgements after the failover, and 5 s more.
    const promotedAt = Date.now();
    await sleep(5000);
    stopping = true;
    const [k, a] = await loads;

    // Markers after the last acknowledgement: reading up to them proves absence.
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic: TOPIC, acks: -1, messages: [{ key: 'marker', value: 'marker' }] });
    await producer.disconnect();
    const conn = await amqp.connect(amqpUrl);
    const ch = await conn.createConfirmChannel();
    ch.sendToQueue(QUEUE, Buffer.from('marker'), { persistent: true });
    await ch.waitForConfirms();

    // Read back: Kafka from the beginning up to the marker.
    const kafkaGot = new Map<string, number>();
    const consumer = kafka.consumer({ groupId: `ha-check-${Date.now()}` });
    await consumer.connect();
    await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
    let kafkaDone!: () => void;
    const kafkaMarker = new Promise<void>((r) => (kafkaDone = r));
    await consumer.run({
      eachMessage: async ({ message }) => {
        const v = message.value?.toString() ?? '';
        if (v === 'marker') kafkaDone();
        else kafkaGot.set(v, (kafkaGot.get(v) ?? 0) + 1);
      },
    });
    await within(kafkaMarker, 60_000, 'the Kafka marker was not read within 60 s');
    await consumer.disconnect();
    // AMQP: the queue up to the marker.
    const amqpGot = new Map<string, number>();
    let amqpDone!: () => void;
    const amqpMarker = new Promise<void>((r) => (amqpDone = r));
    await ch.prefetch(500);
    await ch.consume(QUEUE, (m) => {
      if (!m) return;
      const v = m.content.toString();
      if (v === 'marker') amqpDone();
      else amqpGot.set(v, (amqpGot.get(v) ?? 0) + 1);
      ch.ack(m);
    });
    await within(amqpMarker, 60_000, 'the AMQP marker was not read within 60 s');
    await conn.close();

    const report = (name: string, acks: Acks, got: Map<string, number>): { lost: string[]; after: number } => {
      const lost = acks.acked.filter((id) => !got.has(id));
      const afterFailover = acks.at.filter((at) => at > killedAt + failover.ms).length;
      const dup = [...got.values()].filter((c) => c > 1).length;
      t.diagnostic(
        `${name}: ${acks.acked.length} acknowledged (${afterFailover} after the promotion), ${lost.length} lost, ` +
          `${got.size} read, ${dup} duplicated, ${acks.failures} failed sends; longest wait for an acknowledgement ` +
          `${longestGap(acks, killedAt - 1000, promotedAt + 5000)} ms`,
      );
      return { lost, after: afterFailover };
    };
    const kr = report('kafka', k, kafkaGot);
    const ar = report('amqp', a, amqpGot);
    assert.ok(k.acked.length > 0 && a.acked.length > 0, 'both loads ran');
    assert.deepEqual(kr.lost.slice(0, 10), [], `Kafka records acknowledged and lost (${kr.lost.length})`);
    assert.deepEqual(ar.lost.slice(0, 10), [], `AMQP messages confirmed and lost (${ar.lost.length})`);
    assert.ok(kr.after > 0, 'Kafka records were acknowledged after the failover (the broker found the new primary)');
    assert.ok(ar.after > 0, 'AMQP messages were confirmed after the failover (the broker found the new primary)');
    const figures = await b.api<{ storage: Record<string, unknown> }>('GET', '/api/v1/broker');
    t.diagnostic(`storage figures: ${JSON.stringify(figures.storage).slice(0, 600)}`);
  });
});
