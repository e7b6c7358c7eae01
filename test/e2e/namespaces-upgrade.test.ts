/**
 * Upgrading a data directory made before namespaces (issue 29): test/fixtures/pre-namespaces-data/ is an embedded data
 * directory (SQLite metastore, queue store, object store; ~160 KB) written by `bin/flowmq start` of commit b57870c, the parent of
 * 781ad57 that brought namespaces in, through real clients: kafkajs made topic `legacy-orders` with records o1, o2, o3
 * and committed offset 2 for group `legacy-billing`; amqplib declared the durable queue `legacy-jobs` and published
 * job-1 and job-2 persistent; MQTT.js retained `on` on `legacy/state`. Today's broker starts on a copy of it and the
 * same clients find everything in the `default` namespace.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import amqp from 'amqplib';
import { Kafka, logLevel } from 'kafkajs';
import mqtt from 'mqtt';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { eventually } from './harness.js';

/** The fixture (this file runs as dist/test/e2e/namespaces-upgrade.test.js). */
const FIXTURE = fileURLToPath(new URL('../../../test/fixtures/pre-namespaces-data', import.meta.url));

describe('e2e: a data directory made before namespaces', { timeout: 60_000 }, () => {
  let dir = '';
  let broker: Broker;
  const port = (p: string) => broker.listeners.get(p)!.address().port;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-upgrade-'));
    cpSync(FIXTURE, join(dir, 'data'), { recursive: true });
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'mqtt,kafka,amqp',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'kafka-port': '0',
      'amqp-port': '0',
      'http-port': '0',
      'kafka-group-initial-rebalance-delay': '0',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
  });
  after(async () => {
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the stream, its group offset, the queue and the retained message are all there', async () => {
    const k = new Kafka({ clientId: 'upgrade', brokers: [`127.0.0.1:${port('kafka')}`], logLevel: logLevel.NOTHING });
    const admin = k.admin();
    await admin.connect();
    try {
      assert.ok((await admin.listTopics()).includes('legacy-orders'));
      assert.deepEqual(
        (await admin.fetchOffsets({ groupId: 'legacy-billing', topics: ['legacy-orders'] }))[0]!.partitions.map((p) => p.offset),
        ['2'],
      );
    } finally {
      await admin.disconnect();
    }
    // The group resumes at its offset: o3 only; a new group reads all three.
    const read = async (groupId: string, last: string) => {
      const consumer = k.consumer({ groupId, maxWaitTimeInMs: 200 });
      const values: string[] = [];
      await consumer.connect();
      try {
        await consumer.subscribe({ topic: 'legacy-orders', fromBeginning: true });
        await consumer.run({ eachMessage: async ({ message }) => void values.push(message.value?.toString() ?? '') });
        await eventually(() => values.includes(last), 15_000, `${groupId}: ${JSON.stringify(values)}`);
      } finally {
        await consumer.disconnect();
      }
      return values;
    };
    assert.deepEqual(await read('legacy-billing', 'o3'), ['o3']);
    assert.deepEqual(await read('fresh-reader', 'o3'), ['o1', 'o2', 'o3']);

    const conn = await amqp.connect(`amqp://guest:guest@127.0.0.1:${port('amqp')}`);
    try {
      const ch = await conn.createChannel();
      const got: string[] = [];
      for (;;) {
        const m = await ch.get('legacy-jobs', { noAck: true });
        if (m === false) break;
        got.push(m.content.toString());
      }
      assert.deepEqual(got, ['job-1', 'job-2']);
    } finally {
      await conn.close();
    }

    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port('mqtt')}`, { reconnectPeriod: 0 });
    try {
      const seen: Array<[string, string]> = [];
      c.on('message', (t, p) => seen.push([t, p.toString()]));
      await c.subscribeAsync(['legacy/#'], { qos: 1 });
      // Retained messages come before a live marker published after the SUBACK.
      await c.publishAsync('legacy/marker', 'm', { qos: 1 });
      await eventually(() => seen.some(([t]) => t === 'legacy/marker'), 5_000, JSON.stringify(seen));
      assert.deepEqual(seen, [
        ['legacy/state', 'on'],
        ['legacy/marker', 'm'],
      ]);
    } finally {
      await c.endAsync();
    }
  });
});
