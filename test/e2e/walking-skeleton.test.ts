/**
 * The walking skeleton end to end, with real clients only: the flowmq CLI, mosquitto_pub, MQTT.js, kcat and
 * KafkaJS against a real `flowmq start` process, once on the embedded default storage and once on PostgreSQL
 * (metastore and WAL) + S3 (s3rver), see storage-configs.ts.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect as netConnect } from 'node:net';
import { readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import { eventually, FLOWMQ_BIN, FlowmqProcess, kcatConsume, run, type KcatMessage } from './harness.js';
import { listObjects, storageConfigs, type StorageFigures } from './storage-configs.js';

const { Kafka, logLevel } = kafkajsPkg;

const DEVICES = 5;
const PER_DEVICE = 20;

function mqttConnect(url: string, opts: mqtt.IClientOptions = {}): Promise<mqtt.MqttClient> {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, { protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 5000, ...opts });
    c.once('connect', () => resolve(c));
    c.once('error', reject);
  });
}

/** mosquitto_pub -q 1, one process per device, each sending its lines in order. */
async function publishTelemetry(port: number, from: number, count: number): Promise<void> {
  await Promise.all(
    Array.from({ length: DEVICES }, async (_, d) => {
      const lines = Array.from({ length: count }, (_, i) => `d${d}:${from + i}`).join('\n') + '\n';
      const r = await run(
        'mosquitto_pub',
        ['-h', '127.0.0.1', '-p', String(port), '-V', 'mqttv311', '-q', '1', '-i', `pub-d${d}`, '-t', `factory/l1/d${d}/telemetry`, '-l'],
        { input: lines },
      );
      assert.equal(r.code, 0, `mosquitto_pub failed: ${r.stderr}`);
    }),
  );
}

/** Every device's sequence numbers must come out in order within its partition, with none missing. */
function assertComplete(msgs: KcatMessage[], perDevice: number): void {
  const seen = new Map<string, number[]>();
  const partOf = new Map<string, number>();
  for (const m of msgs) {
    const [dev, seq] = String(m.payload).split(':');
    if (partOf.has(dev)) assert.equal(partOf.get(dev), m.partition, `device ${dev} stays in one partition`);
    partOf.set(dev, m.partition);
    const list = seen.get(dev) ?? [];
    list.push(Number(seq));
    seen.set(dev, list);
  }
  assert.equal(seen.size, DEVICES);
  for (const [dev, list] of seen) {
    assert.deepEqual(
      list,
      Array.from({ length: perDevice }, (_, i) => i),
      `device ${dev} in order, complete`,
    );
  }
  const byPartition = new Map<number, number[]>();
  for (const m of msgs) byPartition.set(m.partition, [...(byPartition.get(m.partition) ?? []), m.offset]);
  for (const offsets of byPartition.values())
    assert.deepEqual(
      offsets,
      offsets.map((_, i) => i),
      'offsets are dense from 0',
    );
}

for (const cfg of storageConfigs())
  describe(`walking skeleton: MQTT in, Kafka out, through ${cfg.name} storage`, () => {
    let broker: FlowmqProcess;
    let sub: mqtt.MqttClient;
    const live: Array<{ topic: string; payload: string }> = [];

    before(async () => {
      broker = await FlowmqProcess.start({ args: await cfg.brokerArgs(['--kafka-group-initial-rebalance-delay', '0']) });
    });
    after(async () => {
      sub?.end(true);
      await broker?.stop();
      broker?.cleanup();
    });

    it('creates a stream bound to a topic filter with the CLI', async () => {
      const r = await broker.cli(['stream', 'create', 'telemetry', '--partitions', '3', '--bind', 'factory/+/+/telemetry']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /created stream telemetry: 3 partition\(s\), bound to factory\/\+\/\+\/telemetry/);
      const again = await broker.cli(['stream', 'create', 'telemetry', '--partitions', '3']);
      assert.equal(again.code, 1);
      assert.match(again.stderr, /already exists \(ALREADY_EXISTS\)/);
      const list = await broker.cli(['stream', 'list']);
      assert.match(list.stdout, /telemetry\s+3\s+forever\s+factory\/\+\/\+\/telemetry/);
      const bad = await broker.cli(['stream', 'create', 'x', '--partitions', '1', '--bind', 'a/#/b']);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /INVALID_FILTER/);
    });

    it('captures mosquitto_pub QoS 1 publishes; MQTT.js gets them live and kcat reads them in order', async () => {
      sub = await mqttConnect(broker.mqttUrl, { clientId: 'live-sub' });
      sub.on('message', (topic, payload) => live.push({ topic, payload: payload.toString() }));
      await sub.subscribeAsync('factory/#', { qos: 1 });
      await publishTelemetry(broker.ports.mqtt, 0, PER_DEVICE);
      await eventually(() => live.length === DEVICES * PER_DEVICE, 10_000, 'live delivery');
      assert.ok(live.every((m) => /^factory\/l1\/d\d\/telemetry$/.test(m.topic)));
      const msgs = await kcatConsume(broker.kafka, 'telemetry');
      assert.equal(msgs.length, DEVICES * PER_DEVICE);
      assertComplete(msgs, PER_DEVICE);
      // The MQTT topic travels with the record as a header, since the stream gathers many topics.
      assert.ok(msgs[0].headers?.includes('flowmq.topic'), JSON.stringify(msgs[0]));
      const described = await broker.cli(['stream', 'describe', 'telemetry']);
      assert.equal(described.code, 0);
      assert.match(described.stdout, /HIGHWATERMARK/);
    });

    it('kcat -L lists the stream as a Kafka topic with three partitions', async () => {
      const r = await run('kcat', ['-b', broker.kafka, '-L', '-J'], { timeoutMs: 20_000 });
      assert.equal(r.code, 0, r.stderr);
      const meta = JSON.parse(r.stdout) as { topics: Array<{ topic: string; partitions: unknown[] }> };
      const t = meta.topics.find((x) => x.topic === 'telemetry');
      assert.ok(t);
      assert.equal(t.partitions.length, 3);
    });

    it('a KafkaJS produce reaches an MQTT subscriber (alerts.fire -> alerts/#)', async () => {
      const got: string[] = [];
      const alerts = await mqttConnect(broker.mqttUrl, { clientId: 'alerts-sub' });
      alerts.on('message', (topic, payload) => got.push(`${topic}=${payload.toString()}`));
      await alerts.subscribeAsync('alerts/#', { qos: 1 });
      const kafka = new Kafka({ brokers: [broker.kafka], clientId: 'e2e', logLevel: logLevel.NOTHING, retry: { retries: 3 } });
      const producer = kafka.producer({ allowAutoTopicCreation: true });
      await producer.connect();
      const res = await producer.send({ topic: 'alerts.fire', acks: -1, messages: [{ key: 'zone-4', value: 'smoke detected', headers: { sev: 'high' } }] });
      assert.equal(res[0].errorCode, 0);
      await producer.disconnect();
      // The broker times its own share of every acks=all produce.
      const figures = await broker.api<{ kafka: { produceLatency: { count: number; buckets: number[] } } }>('GET', '/api/v1/broker');
      assert.ok(figures.kafka.produceLatency.count >= 1);
      assert.equal(
        figures.kafka.produceLatency.buckets.reduce((a, b) => a + b, 0),
        figures.kafka.produceLatency.count,
      );
      await eventually(() => got.length === 1, 5000, 'MQTT delivery of the Kafka record');
      assert.deepEqual(got, ['alerts/fire=smoke detected']);
      alerts.end(true);
      const back = await kcatConsume(broker.kafka, 'alerts.fire');
      assert.equal(back.length, 1);
      assert.equal(back[0].key, 'zone-4');
      assert.deepEqual(back[0].headers, ['sev', 'high']);
    });

    it('keeps every acknowledged message across a clean restart and a kill -9', async () => {
      sub.end(true);
      broker = await broker.restart();
      let msgs = await kcatConsume(broker.kafka, 'telemetry');
      assertComplete(msgs, PER_DEVICE);

      await publishTelemetry(broker.ports.mqtt, PER_DEVICE, PER_DEVICE);
      // mosquitto_pub has its PUBACKs: now crash without any chance to flush.
      const crashed = await broker.stop('SIGKILL');
      assert.equal(crashed.signal, 'SIGKILL');
      broker = await FlowmqProcess.start({ dataDir: broker.dataDir, args: broker.args });
      msgs = await kcatConsume(broker.kafka, 'telemetry');
      assertComplete(msgs, 2 * PER_DEVICE);
      assert.ok(
        broker.logs.some((l) => l.msg.startsWith('storage ready') && Number(l.recoveredBatches) > 0),
        'the WAL tail was replayed',
      );
    });

    it('serves old offsets from the object store after segments are flushed and the WAL trimmed', async () => {
      // The default WAL layout keeps a directory of files per partition; the PostgreSQL WAL counts what it holds.
      const walDir = join(broker.dataDir, 'wal-partitions');
      const walBytes = async () =>
        cfg.shared
          ? (await broker.api<StorageFigures>('GET', '/api/v1/broker')).storage.walBytes
          : readdirSync(walDir, { recursive: true })
              .map((f) => statSync(join(walDir, String(f))))
              .reduce((n, st) => n + (st.isFile() ? st.size : 0), 0);
      const before = await walBytes();
      const d = await broker.api<{ partitionDetails: Array<{ flushedOffset: number; highWatermark: number; segments: number; tailBytes: number }> }>(
        'POST',
        '/api/v1/streams/telemetry/flush',
      );
      for (const p of d.partitionDetails) {
        assert.equal(p.flushedOffset, p.highWatermark);
        assert.equal(p.tailBytes, 0);
      }
      assert.ok(d.partitionDetails.some((p) => p.segments > 0));
      const objects = cfg.shared
        ? await listObjects(await cfg.services(), broker.args)
        : readdirSync(join(broker.dataDir, 'objects'), { recursive: true }).map(String);
      const segs = objects.filter((f) => f.endsWith('.seg'));
      assert.ok(segs.length >= 3, `segment objects written: ${objects.join(', ')}`);
      const trimmed = await walBytes();
      assert.ok(trimmed < before, `WAL trimmed (${before} -> ${trimmed} bytes)`);
      const info0 = await broker.api<StorageFigures>('GET', '/api/v1/broker');
      if (cfg.shared) {
        assert.equal(info0.storage.wal, 'postgres');
        assert.equal(trimmed, 0, 'nothing left in the PostgreSQL WAL');
        assert.ok(info0.storage.log.sealedSegments > 0, 'the tails were uploaded as segments');
      } else {
        assert.ok(info0.storage.log.adoptedSegments > 0, 'WAL files became segment objects');
      }
      const msgs = await kcatConsume(broker.kafka, 'telemetry');
      assertComplete(msgs, 2 * PER_DEVICE);
      const info1 = await broker.api<StorageFigures>('GET', '/api/v1/broker');
      assert.ok(info1.storage.log.objectReads > info0.storage.log.objectReads, 'reads went to the object store');
      // ...and still after a restart, when nothing is in memory at all.
      broker = await broker.restart();
      assertComplete(await kcatConsume(broker.kafka, 'telemetry'), 2 * PER_DEVICE);
      if (cfg.shared) {
        // Nothing in memory and nothing in the WAL: every record came from S3 by ranged GETs.
        const info2 = await broker.api<StorageFigures>('GET', '/api/v1/broker');
        const gets = info2.storage.objectFigures?.inner?.operations.get;
        assert.ok(gets !== undefined && gets.requests > 0 && gets.bytes > 0, `segments read back from S3: ${JSON.stringify(gets)}`);
        assert.equal(info2.storage.walBytes, 0);
      }
    });

    it('a KafkaJS consumer reads a partition from a chosen offset (served from the object store)', async () => {
      const all = await kcatConsume(broker.kafka, 'telemetry');
      const p = all[0].partition;
      const inP = all.filter((m) => m.partition === p);
      const from = Math.floor(inP.length / 2);
      const kafka = new Kafka({ brokers: [broker.kafka], clientId: 'e2e-seek', logLevel: logLevel.NOTHING });
      const consumer = kafka.consumer({ groupId: 'e2e-seek', sessionTimeout: 10_000, heartbeatInterval: 500, rebalanceTimeout: 10_000 });
      await consumer.connect();
      await consumer.subscribe({ topics: ['telemetry'], fromBeginning: false });
      const got: Array<{ offset: number; value: string }> = [];
      await consumer.run({
        eachMessage: async ({ partition, message }) => {
          if (partition === p) got.push({ offset: Number(message.offset), value: message.value?.toString() ?? '' });
        },
      });
      consumer.seek({ topic: 'telemetry', partition: p, offset: String(from) });
      try {
        await eventually(() => got.length >= inP.length - from, 20_000, 'KafkaJS consumption from the sought offset');
      } finally {
        await consumer.disconnect();
      }
      assert.deepEqual(
        got.slice(0, inP.length - from),
        inP.slice(from).map((m) => ({ offset: m.offset, value: String(m.payload) })),
      );
    });

    it('closes only the connection that sends a malformed frame, logs why, and carries on', async () => {
      const other = await mqttConnect(broker.mqttUrl, { clientId: 'bystander' });
      const got: string[] = [];
      other.on('message', (_t, p) => got.push(p.toString()));
      await other.subscribeAsync('factory/#', { qos: 0 });

      const garbage = async (port: number, bytes: Buffer) =>
        new Promise<void>((resolve, reject) => {
          const s = netConnect(port, '127.0.0.1', () => s.write(bytes));
          // Cleared at the close: left armed, the last one kept the file's process alive a few seconds more.
          const t = setTimeout(() => reject(new Error('connection was not closed')), 5000);
          s.on('close', () => {
            clearTimeout(t);
            resolve();
          });
          s.on('error', () => undefined);
        });
      // MQTT: a PUBLISH with QoS 3 is malformed [MQTT-3.3.1-4].
      await garbage(broker.ports.mqtt, Buffer.from([0x36, 0x05, 0x00, 0x01, 0x61, 0x00, 0x01]));
      // Kafka: a negative request size.
      await garbage(broker.ports.kafka, Buffer.from([0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 0]));
      await broker.waitForLog((l) => l.protocol === 'mqtt' && l.level >= 40);
      await broker.waitForLog((l) => l.protocol === 'kafka' && l.level >= 40);

      await publishTelemetry(broker.ports.mqtt, 2 * PER_DEVICE, 1);
      await eventually(() => got.length === DEVICES, 5000, 'bystander still receives');
      other.end(true);
      assertComplete(await kcatConsume(broker.kafka, 'telemetry'), 2 * PER_DEVICE + 1);
    });

    it('refuses a second broker on the same data directory', async () => {
      // On shared storage too: the data directory holds the lock whatever the backends.
      const r = await run(
        process.execPath,
        [FLOWMQ_BIN, 'start', '--data-dir', broker.dataDir, '--mqtt-port', '0', '--kafka-port', '0', '--http-port', '0', '--mqtt-ws-port', '0'],
        { timeoutMs: 10_000 },
      );
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, new RegExp(`data directory .* is in use by another broker \\(pid ${broker.proc.pid}\\)`));
    });

    it('is one process: bin/flowmq execs Node.js in place, with V8 set for a busy broker', () => {
      // The launcher is a shell script that replaces itself: the pid we spawned is the broker (signals and
      // kill -9 reach it, and the lock test above sees this very pid).
      assert.match(readlinkSync(`/proc/${broker.proc.pid}/exe`), /node/);
      const argv = readFileSync(`/proc/${broker.proc.pid}/cmdline`, 'utf8').split('\0');
      assert.ok(argv.includes('--initial-old-space-size=128'), argv.join(' '));
    });

    it('stops cleanly on SIGTERM with exit code 0', async () => {
      const r = await broker.stop('SIGTERM');
      assert.equal(r.code, 0);
      assert.ok(broker.logs.some((l) => l.msg === 'stopped'));
    });
  });

describe('flowmq start: configuration errors', () => {
  it('exits 2 with one line naming the key and the problem', async () => {
    const r = await run(process.execPath, [FLOWMQ_BIN, 'start', '--mqtt-port', 'abc'], { timeoutMs: 10_000 });
    assert.equal(r.code, 2);
    assert.equal(r.stderr.trim(), 'flowmq: invalid --mqtt-port: expected an integer (got "abc")');
    const e = await run(process.execPath, [FLOWMQ_BIN, 'start'], { env: { FLOWMQ_PROTOCOLS: 'mqtt,gopher' }, timeoutMs: 10_000 });
    assert.equal(e.code, 2);
    assert.match(e.stderr, /FLOWMQ_PROTOCOLS: unknown protocol "gopher"/);
    const u = await run(process.execPath, [FLOWMQ_BIN, 'start', '--users-file', '/nonexistent/users.yaml', '--data-dir', '/tmp/flowmq-never-started'], {
      timeoutMs: 10_000,
    });
    assert.equal(u.code, 2, u.stderr);
    assert.match(u.stderr, /^flowmq: users file \/nonexistent\/users.yaml: /);
  });
});
