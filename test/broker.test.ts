import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { decodeBatch, encodeBatch, Engine } from '../src/core/index.js';
import { PROTOCOL_MODULES, startBroker } from '../src/broker.js';
import { PROTOCOLS, loadConfig } from '../src/config/index.js';
import { LogManager } from '../src/storage/log/index.js';
import { SqliteMetastore } from '../src/storage/metastore/index.js';
import { FsObjectStore } from '../src/storage/objects/index.js';
import { FileWal, PartitionWal, type WriteAheadLog } from '../src/storage/wal/index.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

type Layout = 'shared' | 'partition';

/** Writes records through the storage a broker with `layout` uses, and "crashes": they stay in that WAL only. */
async function leaveInWal(dataDir: string, layout: Layout, n: number): Promise<void> {
  const metastore = SqliteMetastore.open(join(dataDir, 'metastore.db'));
  const wal: WriteAheadLog = layout === 'shared' ? await FileWal.open(join(dataDir, 'wal')) : await PartitionWal.open(join(dataDir, 'wal-partitions'));
  const log = await LogManager.open({
    wal,
    objects: new FsObjectStore(join(dataDir, 'objects')),
    metastore,
    logger: pino({ level: 'silent' }),
    options: { segmentBytes: 1 << 20, segmentMs: 3_600_000 },
  });
  const engine = new Engine(log, metastore);
  await engine.load();
  log.finishRecovery();
  await engine.createStream({ name: 'kept', partitions: 2 });
  for (let i = 0; i < n; i++) {
    await engine.produce('kept', i % 2, encodeBatch([{ key: null, value: Buffer.from(`v${i}`), headers: [], timestamp: 1000 + i }])).durable;
  }
  // No log.close(): it would seal everything. Only the files are closed.
  await wal.close();
  await metastore.close();
}

async function valuesOf(engine: Engine, partition: number): Promise<string[]> {
  const out: string[] = [];
  for (let offset = 0; ;) {
    const batches = await engine.read('kept', partition, offset, 1 << 20);
    if (batches.length === 0) return out;
    for (const b of batches) for (const r of decodeBatch(b)) if (r.offset >= offset) (out.push(r.value!.toString()), (offset = r.offset + 1));
  }
}

describe('broker storage start-up', () => {
  for (const [from, to] of [
    ['shared', 'partition'],
    ['partition', 'shared'],
  ] as const) {
    it(`seals what the ${from} WAL layout holds when started with --wal-layout ${to}`, async () => {
      const dataDir = mkdtempSync(join(tmpdir(), 'flowmq-broker-'));
      dirs.push(dataDir);
      await leaveInWal(dataDir, from, 40);
      const lines: Array<{ msg: string; from?: string }> = [];
      const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
      const flags = {
        'data-dir': dataDir,
        host: '127.0.0.1',
        'mqtt-port': '0',
        'mqtt-ws-port': '0',
        'kafka-port': '0',
        'amqp-port': '0',
        'nats-port': '0',
        'http-port': '0',
        'wal-layout': to,
      };
      const broker = await startBroker(loadConfig({ flags, env: {} }), logger);
      try {
        assert.ok(lines.some((l) => l.msg === 'WAL of the other layout sealed into segments' && l.from === from));
        assert.deepEqual(
          await valuesOf(broker.engine, 0),
          Array.from({ length: 20 }, (_, i) => `v${2 * i}`),
        );
        assert.deepEqual(
          await valuesOf(broker.engine, 1),
          Array.from({ length: 20 }, (_, i) => `v${2 * i + 1}`),
        );
        // The new layout takes over: appends continue after the sealed offsets.
        const r = broker.engine.produce('kept', 0, encodeBatch([{ key: null, value: Buffer.from('after'), headers: [], timestamp: 5000 }]));
        assert.equal(r.baseOffset, 20);
        await r.durable;
      } finally {
        await broker.close();
      }
    });
  }
});

function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'flowmq-broker-'));
  dirs.push(d);
  return d;
}

function listen(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}

const closeServer = (s: Server) => new Promise<void>((r) => s.close(() => r()));

describe('broker protocol modules', () => {
  it('has one module per implemented protocol, each named as in --protocols', () => {
    assert.deepEqual(PROTOCOL_MODULES.map((m) => m.name).sort(), [...PROTOCOLS].sort());
  });

  it('starts the enabled modules: their listeners, and their figures under their names in GET /api/v1/broker', async () => {
    const base = { host: '127.0.0.1', 'mqtt-port': '0', 'mqtt-ws-port': '0', 'kafka-port': '0', 'amqp-port': '0', 'nats-port': '0', 'http-port': '0' };
    const silent = pino({ level: 'silent' });
    const both = await startBroker(loadConfig({ flags: { ...base, 'data-dir': freshDir() }, env: {} }), silent);
    try {
      assert.deepEqual([...both.listeners.keys()], ['mqtt', 'mqtt-ws', 'kafka', 'amqp', 'nats']);
      const info = (await (await fetch(`http://127.0.0.1:${both.ports().http}/api/v1/broker`)).json()) as Record<string, Record<string, unknown>>;
      assert.deepEqual(Object.keys(info.listeners), ['mqtt', 'mqtt-ws', 'kafka', 'amqp', 'nats']);
      assert.equal(typeof info.amqp, 'object');
      assert.equal(typeof info.nats, 'object');
      assert.deepEqual(Object.keys(info.kafka), ['produceLatency', 'framePool', 'histogramBoundsMs']);
      assert.equal(info.mqtt.connected, 0);
      assert.equal(info.mqtt.slowConsumerPolicy, 'drop');
      assert.equal(typeof info.mqtt.dropped, 'object');
    } finally {
      await both.close();
    }
    const kafkaOnly = await startBroker(loadConfig({ flags: { ...base, 'data-dir': freshDir(), protocols: 'kafka' }, env: {} }), silent);
    try {
      assert.deepEqual([...kafkaOnly.listeners.keys()], ['kafka']);
      const info = (await (await fetch(`http://127.0.0.1:${kafkaOnly.ports().http}/api/v1/broker`)).json()) as Record<string, unknown>;
      assert.equal(info.mqtt, undefined);
      assert.ok(info.kafka);
    } finally {
      await kafkaOnly.close();
    }
  });

  it('a module that fails to start closes the modules started before it, and the data directory is free again', async () => {
    // The Kafka port is taken: the MQTT module has started by then, and must be closed again.
    const taken = await listen(0);
    const dataDir = freshDir();
    const lines: Array<{ msg: string; protocol?: string; address?: string }> = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    const flags = { 'data-dir': dataDir, host: '127.0.0.1', 'mqtt-port': '0', 'mqtt-ws-port': '0', 'amqp-port': '0', 'nats-port': '0', 'http-port': '0' };
    try {
      const kafkaPort = String((taken.address() as { port: number }).port);
      await assert.rejects(startBroker(loadConfig({ flags: { ...flags, 'kafka-port': kafkaPort }, env: {} }), logger), /EADDRINUSE/);
    } finally {
      await closeServer(taken);
    }
    const mqttLine = lines.find((l) => l.msg === 'listening' && l.protocol === 'mqtt');
    assert.ok(mqttLine?.address, 'the MQTT module had started');
    // Its port can be bound again, and another broker can take the data directory.
    await closeServer(await listen(Number(mqttLine.address.split(':').pop())));
    const again = await startBroker(loadConfig({ flags: { ...flags, 'kafka-port': '0' }, env: {} }), pino({ level: 'silent' }));
    await again.close();
  });

  it('a WebSocket port in use (MQTT, NATS) fails the start with EADDRINUSE, not an unhandled error event', async () => {
    const taken = await listen(0);
    const port = String((taken.address() as { port: number }).port);
    const flags = { host: '127.0.0.1', 'mqtt-port': '0', 'kafka-port': '0', 'amqp-port': '0', 'nats-port': '0', 'http-port': '0', 'mqtt-ws-port': '0' };
    try {
      // Before, ws re-emitted the listen error on its WebSocketServer, unhandled: the process threw (a test's
      // in-process start hung).
      await assert.rejects(
        startBroker(loadConfig({ flags: { ...flags, 'data-dir': freshDir(), 'mqtt-ws-port': port }, env: {} }), pino({ level: 'silent' })),
        /EADDRINUSE/,
      );
      await assert.rejects(
        startBroker(loadConfig({ flags: { ...flags, 'data-dir': freshDir(), protocols: 'nats', 'nats-ws-port': port }, env: {} }), pino({ level: 'silent' })),
        /EADDRINUSE/,
      );
    } finally {
      await closeServer(taken);
    }
  });

  it('a half-configured MQTT TLS listener stops the start before any listener opens', async () => {
    const lines: Array<{ msg: string }> = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    const flags = {
      'data-dir': freshDir(),
      host: '127.0.0.1',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'kafka-port': '0',
      'amqp-port': '0',
      'nats-port': '0',
      'http-port': '0',
      'mqtt-tls-cert': '/nonexistent.pem',
    };
    await assert.rejects(startBroker(loadConfig({ flags, env: {} }), logger), /needs both mqtt-tls-cert and mqtt-tls-key/);
    assert.equal(lines.filter((l) => l.msg === 'listening').length, 0);
  });

  it('a half-configured NATS TLS setting stops the start before any listener opens, even in a Config built by hand', async () => {
    const lines: Array<{ msg: string }> = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    const flags = {
      'data-dir': freshDir(),
      host: '127.0.0.1',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'kafka-port': '0',
      'amqp-port': '0',
      'nats-port': '0',
      'http-port': '0',
    };
    const config = { ...loadConfig({ flags, env: {} }), protocols: ['nats' as const], natsTlsKey: '/nonexistent.pem' };
    await assert.rejects(startBroker(config, logger), /needs both nats-tls-cert and nats-tls-key/);
    const required = { ...loadConfig({ flags: { ...flags, 'data-dir': freshDir() }, env: {} }), protocols: ['nats' as const], natsTlsRequired: true };
    await assert.rejects(startBroker(required, logger), /need nats-tls-cert and nats-tls-key/);
    const wss = { ...loadConfig({ flags: { ...flags, 'data-dir': freshDir() }, env: {} }), protocols: ['nats' as const], natsWsPort: 0, natsWsTls: true };
    await assert.rejects(startBroker(wss, logger), /need nats-tls-cert and nats-tls-key/);
    assert.equal(lines.filter((l) => l.msg === 'listening').length, 0);
  });
});
