// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Stream partitions across brokers, as separate `bin/flowmq --cluster` processes (test/helpers/cluster.ts): a stream
 * created on one broker is known to the others at once; MQTT QoS 1 publishes on one broker captured by a stream whose
 * partitions are spread over three brokers (forwarded to their owners, PUBACK once durable there); kill -9 of an owner
 * in the middle of the run; then every acknowledged message is readable from any broker (at most the one in flight
 * at the kill twice), offsets contiguous, in publish order per topic.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import kafkajs from 'kafkajs';
import mqtt from 'mqtt';
import pg from 'pg';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { eventually } from './harness.js';

const { Kafka, logLevel } = kafkajs;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

const STREAM = 'orders';
const PARTITIONS = 6;
const TOPICS = 12;

interface Browse {
  items: Array<{ offset: number; topic: string; value: string }>;
  next: number | null;
  highWatermark: number;
}

/** The objects s3rver holds under `streams/<stream>/` (its files on disk: one directory per key). */
function objectsOf(c: TestCluster, stream: string): string[] {
  const found: string[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, e.name);
      if (e.isDirectory()) walk(path);
      else if (e.name.endsWith('._S3rver_object') && path.includes(`/streams/${stream}/`)) found.push(path);
    }
  };
  walk(c.s3.directory);
  return found;
}

async function walEntries(c: TestCluster, stream: string): Promise<number> {
  const db = new pg.Client({ connectionString: c.dbUrl });
  await db.connect();
  try {
    const r = await db.query<{ n: string }>("SELECT count(*) AS n FROM wal_entries WHERE key LIKE $1 || '@%'", [stream]);
    return Number(r.rows[0].n);
  } finally {
    await db.end();
  }
}

async function readPartition(c: TestCluster, via: number, p: number): Promise<Array<{ offset: number; topic: string; value: string }>> {
  const out: Browse['items'] = [];
  let offset = 0;
  for (;;) {
    const r = await c.broker(via).proc.api<Browse>('GET', `/api/v1/streams/${STREAM}/messages?partition=${p}&offset=${offset}&limit=1000`);
    out.push(...r.items);
    if (r.next === null || r.items.length === 0) return out;
    offset = r.next;
  }
}

describe('cluster streams across broker processes', { timeout: 180_000 }, () => {
  let c: TestCluster;
  before(async () => {
    c = await startCluster({ brokers: 3, leaseMs: 1500, haproxy: false });
  });
  after(async () => {
    await c?.close();
  });

  it('a stream created on broker 1 is known to the others at once and its partitions get owners on every broker', async () => {
    await c.broker(1).proc.api('POST', '/api/v1/streams', { name: STREAM, partitions: PARTITIONS, bindings: ['orders/#'] });
    for (const id of [2, 3]) {
      const deadline = Date.now() + 5000;
      for (;;) {
        const r = await fetch(`${c.broker(id).http}/api/v1/streams/${STREAM}`);
        if (r.status === 200) break;
        if (Date.now() > deadline) throw new Error(`broker ${id} does not know the stream`);
        await new Promise((res) => setTimeout(res, 20));
      }
    }
    const rows = await c.waitSettled({ kinds: ['partition'], min: { partition: PARTITIONS } });
    const owners = new Set(rows.map((r) => r.owner));
    assert.ok(owners.size >= 2, `partitions spread over brokers: ${JSON.stringify(rows.map((r) => [r.name, r.owner]))}`);
  });

  it('kill -9 of a partition owner during a QoS 1 run: every acknowledged message is read, in order', async () => {
    const rows = await c.waitSettled({ kinds: ['partition'], min: { partition: PARTITIONS } });
    // The publisher is on broker 1; the victim is another broker that owns partitions.
    const victim = [2, 3].find((id) => rows.some((r) => r.owner === id));
    assert.ok(victim, 'a broker other than 1 owns a partition');
    const client = await mqtt.connectAsync(c.broker(1).mqttUrl, { clientId: 'cluster-streams-pub', protocolVersion: 4, reconnectPeriod: 0 });
    const acked: Array<{ topic: string; value: string }> = [];
    const failed: string[] = [];
    try {
      // One publish in flight at a time (MQTT QoS 1 from one client, in order); the kill lands while one is in flight.
      for (let i = 0; i < 600; i++) {
        const topic = `orders/t${i % TOPICS}`;
        const value = `m-${String(i).padStart(4, '0')}`;
        if (i === 200) void c.kill(victim);
        try {
          await client.publishAsync(topic, value, { qos: 1 });
          acked.push({ topic, value });
        } catch {
          failed.push(value);
        }
      }
    } finally {
      await client.endAsync().catch(() => undefined);
    }
    assert.ok(acked.length > 500, `most publishes acknowledged (${acked.length}, failed ${failed.length})`);
    await c.waitSettled({ kinds: ['partition'], min: { partition: PARTITIONS } });
    // Read every partition through broker 1 (remote partitions are read at their owners).
    const seen = new Map<string, number>();
    const perTopic = new Map<string, string[]>();
    for (let p = 0; p < PARTITIONS; p++) {
      const items = await readPartition(c, 1, p);
      assert.deepEqual(
        items.map((x) => x.offset),
        items.map((_, i) => i),
        `partition ${p}: offsets contiguous from 0`,
      );
      for (const x of items) {
        seen.set(x.value, (seen.get(x.value) ?? 0) + 1);
        const list = perTopic.get(x.topic) ?? [];
        list.push(x.value);
        perTopic.set(x.topic, list);
      }
    }
    for (const a of acked) assert.ok((seen.get(a.value) ?? 0) >= 1, `${a.value} acknowledged: read`);
    // A forwarded append whose owner died after its commit but before its reply is retried at the new owner (at least
    // once, as MQTT QoS 1 is): with one publish in flight, at most one message twice.
    const twice = [...seen].filter(([, n]) => n > 1);
    assert.ok(twice.length <= 1 && twice.every(([, n]) => n === 2), `duplicates: ${JSON.stringify(twice)}`);
    for (const [topic, values] of perTopic) assert.deepEqual(values, [...values].sort(), `${topic}: in publish order`);
  });

  it("a stream deleted while a partition's owner is dead: its segment objects and WAL entries are collected", async () => {
    const GONE = 'gone';
    const PARTS = 4;
    await c.broker(1).proc.api('POST', '/api/v1/streams', { name: GONE, partitions: PARTS, bindings: [] });
    const live = c.brokers.filter((b) => b.state === 'running').map((b) => b.id);
    const rows = (await c.waitSettled({ kinds: ['partition'], min: { partition: PARTITIONS + PARTS } })).filter((r) => r.name.startsWith(`${GONE}/`));
    const victim = live.find((id) => id !== 1 && rows.some((r) => r.owner === id));
    assert.ok(victim, `a live broker other than 1 owns a partition of ${GONE}: ${JSON.stringify(rows.map((r) => [r.name, r.owner]))}`);
    const kafka = new Kafka({ clientId: 'cluster-streams-gone', brokers: [c.broker(1).kafka], logLevel: logLevel.NOTHING });
    const producer = kafka.producer();
    await producer.connect();
    const batch = (tag: string) => Array.from({ length: PARTS * 20 }, (_, i) => ({ partition: i % PARTS, value: `${tag}-${i}-${'x'.repeat(2000)}` }));
    try {
      // Sealed into segment objects (a flush asked of broker 1 reaches every owner), then more that only the WAL holds.
      await producer.send({ topic: GONE, acks: -1, messages: batch('sealed') });
      await c.broker(1).proc.api('POST', `/api/v1/streams/${GONE}/flush`);
      await producer.send({ topic: GONE, acks: -1, messages: batch('unsealed') });
    } finally {
      await producer.disconnect();
    }
    assert.ok(objectsOf(c, GONE).length >= PARTS, `segment objects of ${GONE} in S3: ${objectsOf(c, GONE).length}`);
    assert.ok((await walEntries(c, GONE)) >= PARTS, 'WAL entries of the unsealed records');
    // The owner dies; the stream is deleted before its lease runs out, while its partitions have no live owner.
    await c.kill(victim);
    await c.broker(1).proc.api('DELETE', `/api/v1/streams/${GONE}`);
    await eventually(async () => objectsOf(c, GONE).length === 0 && (await walEntries(c, GONE)) === 0, 30_000, `nothing of ${GONE} left in S3 and the WAL`);
    const figures = await c.broker(1).proc.api<{ storage: { log: Record<string, number> } }>('GET', '/api/v1/broker');
    assert.ok(figures.storage.log.deletedStreamObjects > 0, `broker 1 collected the dead owner's objects: ${JSON.stringify(figures.storage.log)}`);
  });
});
