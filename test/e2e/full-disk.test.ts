/**
 * A disk that fills up, end to end against the real `bin/flowmq` process and real clients.
 *
 * 1. The free-space reserve: a 64 MiB ballast file on the data directory's filesystem (a 256 MiB tmpfs of its own
 *    when the test runs as root, else the temporary directory's filesystem), and the broker started with
 *    `--min-free-disk` a few MiB below what is free, so that the reserve is reached after a few MiB of produce.
 *    KafkaJS (acks=-1, retries on) is answered KAFKA_STORAGE_ERROR and keeps retrying; MQTT.js 5.0 gets PUBACK 0x97;
 *    MQTT.js 3.1.1 sees its connection closed, logged as a storage condition (not a protocol error). The ballast is
 *    deleted: the pending produce completes and new ones are taken, without a restart, and every acknowledged
 *    message is consumed afterwards (kcat).
 * 2. A real ENOSPC: the data directory on a 32 MiB tmpfs the test mounts (needs root; when it cannot, the test is
 *    reported as skipped with the reason, and a "# NOT RUN" line says so), no reserve, a KafkaJS producer filling it
 *    until writes fail; a file the test put there is deleted and produce resumes by itself, also after kill -9.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import kafkajsPkg from 'kafkajs';
import mqtt from 'mqtt';
import { FlowmqProcess, eventually, kcatConsume, run } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;
const MiB = 1024 * 1024;

const freeBytes = (dir: string): number => {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
};

/** A KafkaJS client whose error log lines (its retries) are kept, so the test sees what the broker answered. */
function kafkaClient(broker: string, errors: string[]) {
  return new Kafka({
    brokers: [broker],
    clientId: 'full-disk',
    logLevel: logLevel.ERROR,
    logCreator: () => (entry) => {
      errors.push(`${entry.log.message} ${String((entry.log as { error?: string }).error ?? '')}`);
    },
  });
}

/**
 * Produces sends of 8 × 64 KiB (keys counted up) until one does not complete before `stalled()` (the broker refused
 * it and KafkaJS is retrying); returns that send, or null if none stalled within `maxSends`.
 */
async function produceUntilStalled(
  producer: ReturnType<ReturnType<typeof kafkaClient>['producer']>,
  topic: string,
  acked: Set<string>,
  next: { id: number },
  maxSends: number,
  stalled: () => boolean,
): Promise<{ pending: Promise<void> } | null> {
  for (let s = 0; s < maxSends; s++) {
    const ids = Array.from({ length: 8 }, () => `k${next.id++}`);
    const state: { done: boolean; err: unknown } = { done: false, err: null };
    const send = producer
      .send({ topic, acks: -1, messages: ids.map((id) => ({ key: id, value: Buffer.concat([Buffer.from(id + ':'), randomBytes(64 * 1024)]) })) })
      .then(() => {
        for (const id of ids) acked.add(id);
        state.done = true;
      });
    send.catch((err: unknown) => (state.err = err));
    await eventually(() => state.done || state.err !== null || stalled(), 60_000, 'the send to complete or be refused');
    if (state.err !== null) throw state.err;
    // Wrapped: an async function returning the promise itself would wait for it.
    if (!state.done) return { pending: send };
  }
  return null;
}

describe('full disk e2e', () => {
  const cleanups: Array<() => void | Promise<void>> = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  /** A tmpfs of `mib` MiB mounted for the test (root only), or null with the reason it could not be. */
  const mountTmpfs = async (mib: number): Promise<{ dir: string } | { dir: null; why: string }> => {
    if (process.getuid?.() !== 0) return { dir: null, why: 'not root' };
    const dir = mkdtempSync(join(tmpdir(), 'flowmq-e2e-tmpfs-'));
    const m = await run('mount', ['-t', 'tmpfs', '-o', `size=${mib}m`, 'tmpfs', dir]);
    if (m.code !== 0) {
      rmSync(dir, { recursive: true, force: true });
      return { dir: null, why: `mount -t tmpfs failed: ${m.stderr.trim()}` };
    }
    cleanups.push(async () => {
      await run('umount', ['-l', dir]);
      rmSync(dir, { recursive: true, force: true });
    });
    return { dir };
  };

  test(
    'the free-space reserve: producers get retriable errors, and everything resumes without a restart once space returns',
    { timeout: 240_000 },
    async () => {
      // On a tmpfs of its own where it can (root): nothing else writes there, so the free space moves only with the
      // test. Elsewhere on the temporary directory's filesystem, which others may write to meanwhile.
      const fs = await mountTmpfs(256);
      if (fs.dir === null) console.log(`# the reserve test runs on ${tmpdir()}'s filesystem (no tmpfs of its own: ${fs.why})`);
      const dataDir = fs.dir === null ? mkdtempSync(join(tmpdir(), 'flowmq-e2e-disk-')) : join(fs.dir, 'data');
      const ballast = fs.dir === null ? `${dataDir}-ballast` : join(fs.dir, 'ballast');
      cleanups.push(() => rmSync(ballast, { force: true }));
      if (fs.dir !== null) mkdirSync(dataDir);
      const fa = await run('fallocate', ['-l', String(64 * MiB), ballast]);
      assert.equal(fa.code, 0, `fallocate: ${fa.stderr}`);
      const reserve = freeBytes(dataDir) - 8 * MiB;
      console.log(`# data dir ${dataDir}: ${freeBytes(dataDir)} bytes free, --min-free-disk ${reserve}`);
      const b = await FlowmqProcess.start({ dataDir, args: ['--min-free-disk', String(reserve), '--log-level', 'info'] });
      cleanups.push(async () => {
        await b.stop('SIGKILL');
        b.cleanup();
      });
      assert.equal((await b.cli(['stream', 'create', 'disk', '--partitions', '1'])).code, 0);

      const kafkaErrors: string[] = [];
      const kafka = kafkaClient(b.kafka, kafkaErrors);
      const producer = kafka.producer({ allowAutoTopicCreation: false, retry: { retries: 1000, initialRetryTime: 100, maxRetryTime: 1000 } });
      await producer.connect();
      cleanups.push(() => producer.disconnect());
      const acked = new Set<string>();
      const next = { id: 0 };
      const refused = () => kafkaErrors.some((e) => /Disk error when trying to access log file/.test(e));
      // A few MiB in, the reserve is reached: the broker answers KAFKA_STORAGE_ERROR and KafkaJS retries.
      const stalled = await produceUntilStalled(producer, 'disk', acked, next, 200, refused);
      assert.ok(stalled !== null, `the reserve was reached (${acked.size} messages acknowledged)`);
      const sentBefore = next.id;
      const broker = await b.api<{ storage: { disk: { refusingWrites: boolean; minFreeBytes: number; freeBytes: number } } }>('GET', '/api/v1/broker');
      assert.equal(broker.storage.disk.refusingWrites, true, JSON.stringify(broker.storage.disk));
      assert.equal(broker.storage.disk.minFreeBytes, reserve);
      await b.waitForLog((l) => l.msg.startsWith('free disk space below the reserve'));

      // MQTT 5.0: PUBACK 0x97 Quota exceeded; the connection stays.
      const m5 = await mqtt.connectAsync(b.mqttUrl, { protocolVersion: 5, clientId: 'disk-v5', reconnectPeriod: 0 });
      cleanups.push(() => m5.endAsync(true));
      await assert.rejects(m5.publishAsync('disk', 'refused', { qos: 1 }), (e: { code?: number }) => e.code === 0x97);
      assert.equal(m5.connected, true);
      // MQTT 3.1.1: no negative PUBACK, the connection is closed (the client resends on reconnect), logged as storage.
      const m4 = await mqtt.connectAsync(b.mqttUrl, { protocolVersion: 4, clientId: 'disk-v4', reconnectPeriod: 0 });
      cleanups.push(() => m4.endAsync(true));
      const closed = new Promise<void>((resolve) => m4.once('close', () => resolve()));
      m4.publish('disk', 'refused', { qos: 1 });
      await closed;
      await b.waitForLog((l) => l.msg.startsWith('mqtt publish could not be stored') && l.clientId === 'disk-v4');
      assert.ok(!b.logs.some((l) => /protocol error/.test(l.msg)), 'not logged as a protocol error');

      // Space returns: the retried produce completes, new ones are taken, MQTT publishes are acknowledged.
      assert.equal(acked.size, sentBefore - 8, 'the refused send is not acknowledged while the reserve holds');
      rmSync(ballast);
      await stalled.pending;
      await b.waitForLog((l) => l.msg.startsWith('free disk space above the reserve again'), 10_000);
      for (let s = 0; s < 3; s++) {
        const ids = Array.from({ length: 4 }, () => `k${next.id++}`);
        await producer.send({ topic: 'disk', acks: -1, messages: ids.map((id) => ({ key: id, value: `${id}:after` })) });
        for (const id of ids) acked.add(id);
      }
      const ack = await m5.publishAsync('disk', 'accepted', { qos: 1 });
      assert.ok(ack === undefined || (ack as { reasonCode?: number }).reasonCode === undefined || (ack as { reasonCode?: number }).reasonCode === 0);

      // Every acknowledged message is there; nothing refused was stored.
      const got = await kcatConsume(b.kafka, 'disk');
      const keys = new Set(got.map((m) => m.key));
      const missing = [...acked].filter((id) => !keys.has(id));
      assert.deepEqual(missing, [], 'acknowledged messages missing');
      const payloads = got.filter((m) => m.key === null).map((m) => m.payload);
      assert.deepEqual(payloads, ['accepted'], 'MQTT: the refused publishes were not stored, the accepted one was');
      console.log(`# ${acked.size} Kafka messages acknowledged (${next.id} sent), all consumed; ${kafkaErrors.length} KafkaJS retry lines`);
    },
  );

  test('a real ENOSPC (a 32 MiB tmpfs): writes fail, the partition backs off, and resumes by itself once space is freed', { timeout: 240_000 }, async (t) => {
    // Mounting needs root (CAP_SYS_ADMIN). Whenever it cannot run, the output says why, in a line of its own.
    const cannot = (why: string): void => {
      console.log(`# NOT RUN: the tmpfs ENOSPC test cannot run here: ${why}`);
      t.skip(`cannot mount a tmpfs: ${why}`);
    };
    const fs = await mountTmpfs(32);
    if (fs.dir === null) return cannot(fs.why);
    const mnt = fs.dir;
    // A spacer deleted later frees room; the broker has no reserve, so its writes run into ENOSPC for real.
    const spacer = join(mnt, 'spacer');
    assert.equal((await run('fallocate', ['-l', String(6 * MiB), spacer])).code, 0);
    const dataDir = join(mnt, 'data');
    const b = await FlowmqProcess.start({ dataDir, args: ['--min-free-disk', '0', '--log-level', 'info'] });
    cleanups.push(async () => {
      await b.stop('SIGKILL');
    });
    assert.equal((await b.cli(['stream', 'create', 'enospc', '--partitions', '1'])).code, 0);
    const kafkaErrors: string[] = [];
    const producer = kafkaClient(b.kafka, kafkaErrors).producer({
      allowAutoTopicCreation: false,
      retry: { retries: 1000, initialRetryTime: 100, maxRetryTime: 1000 },
    });
    await producer.connect();
    cleanups.push(() => producer.disconnect());
    const acked = new Set<string>();
    const next = { id: 0 };
    const refused = () => kafkaErrors.some((e) => /Disk error when trying to access log file/.test(e));
    const stalled = await produceUntilStalled(producer, 'enospc', acked, next, 100, refused);
    assert.ok(stalled !== null, `the disk filled up (${acked.size} messages acknowledged)`);
    await b.waitForLog((l) => l.msg.startsWith('WAL append failed'));
    console.log(`# tmpfs full after ${acked.size} acknowledged messages of 64 KiB; free ${freeBytes(mnt)} bytes`);

    rmSync(spacer);
    await stalled.pending;
    await b.waitForLog((l) => l.msg === 'partition writes again after a storage failure', 10_000);
    const ids = Array.from({ length: 4 }, () => `k${next.id++}`);
    await producer.send({ topic: 'enospc', acks: -1, messages: ids.map((id) => ({ key: id, value: `${id}:after` })) });
    for (const id of ids) acked.add(id);
    const check = async (broker: FlowmqProcess, when: string): Promise<void> => {
      const keys = new Set((await kcatConsume(broker.kafka, 'enospc')).map((x) => x.key));
      assert.deepEqual(
        [...acked].filter((id) => !keys.has(id)),
        [],
        `acknowledged messages missing ${when}`,
      );
    };
    await check(b, 'after space returned');
    // And after a kill -9: the WAL that ran into ENOSPC recovers exactly what was acknowledged.
    await b.stop('SIGKILL');
    const b2 = await FlowmqProcess.start({ dataDir, args: ['--min-free-disk', '0'] });
    cleanups.push(async () => {
      await b2.stop('SIGKILL');
    });
    await check(b2, 'after kill -9 and restart');
    console.log(`# ${acked.size} acknowledged messages, all consumed, also after kill -9`);
  });
});
