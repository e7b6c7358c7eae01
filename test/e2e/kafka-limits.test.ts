/**
 * What strangers can make a real `flowmq start` hold over Kafka: hundreds of connections announcing 16 MiB requests
 * and sending almost nothing, silent and half-open sockets, and, with a users file, oversized requests and
 * connections that never authenticate. The broker's own figures (`kafka.framePool` in /api/v1/broker) show the
 * memory, and KafkaJS and kcat keep working beside them.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { rmSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import kafkajsPkg, { type SASLOptions } from 'kafkajs';
import { FlowmqProcess, eventually, kcatConsume, run } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

interface FramePoolFigures {
  aheadBytes: number;
  aheadLimit: number;
  gathering: number;
  gathered: number;
  allocationFailures: number;
}

function kafka(broker: string, sasl?: SASLOptions) {
  return new Kafka({ clientId: 'limits-e2e', brokers: [broker], sasl, logLevel: logLevel.NOTHING, retry: { retries: 0 }, connectionTimeout: 3000 });
}

/** A socket that has sent `bytes`; `closed` settles when the broker closes it. */
async function rawSocket(port: number, bytes: Buffer): Promise<{ socket: Socket; closed: Promise<void> }> {
  const socket = await new Promise<Socket>((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s));
    s.once('error', reject);
  });
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  if (bytes.length > 0) socket.write(bytes);
  return { socket, closed };
}

/** A 16 MiB size prefix followed by 100 bytes of the request. */
const announce16MiB = (): Buffer => {
  const b = Buffer.alloc(104, 1);
  b.writeInt32BE(16 << 20, 0);
  return b;
};

async function framePool(broker: FlowmqProcess): Promise<FramePoolFigures> {
  return (await broker.api<{ kafka: { framePool: FramePoolFigures } }>('GET', '/api/v1/broker')).kafka.framePool;
}

/**
 * Waits for `p` at most `ms`; the timer is cleared when `p` settles (a timer left behind kept this file's process
 * alive for up to 20 s after its last test).
 */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(what)), ms)))]);
  } finally {
    clearTimeout(t);
  }
}

async function roundTrip(broker: FlowmqProcess, topic: string, sasl?: SASLOptions): Promise<void> {
  const k = kafka(broker.kafka, sasl);
  const p = k.producer();
  await p.connect();
  await p.send({ topic, messages: [{ value: 'still here' }] });
  await p.disconnect();
  const c = k.consumer({ groupId: `${topic}-g`, maxWaitTimeInMs: 100 });
  await c.connect();
  await c.subscribe({ topic, fromBeginning: true });
  const got = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('no message consumed')), 20_000);
    void c.run({
      eachMessage: async ({ message }) => {
        clearTimeout(t);
        resolve(String(message.value));
      },
    });
  });
  await c.disconnect();
  assert.equal(got, 'still here');
}

describe('kafka limits without users', () => {
  let broker: FlowmqProcess;

  before(async () => {
    // No KIP-134 initial rebalance delay: each Kafka group here has one member; 3 s per group proves nothing.
    broker = await FlowmqProcess.start({ args: ['--kafka-connections-max-idle', '1s', '--protocols', 'kafka', '--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('200 connections announcing 16 MiB pin at most the frame reserve, and give it back when they go', async () => {
    const n = 200;
    const strangers = [];
    for (let i = 0; i < n; i++) strangers.push(await rawSocket(broker.ports.kafka, announce16MiB()));
    const limit = (await framePool(broker)).aheadLimit;
    assert.equal(limit, 64 << 20, 'the default reserve');
    // At most four 16 MiB frames fit the reserve; every other one is gathered from the bytes that arrived.
    const fit = Math.floor(limit / ((16 << 20) - 100));
    await eventually(async () => (await framePool(broker)).gathering === n - fit, 20_000, 'the frames beyond the reserve to be gathered');
    const held = await framePool(broker);
    assert.ok(held.aheadBytes <= limit, JSON.stringify(held));
    assert.ok(held.aheadBytes > limit - (16 << 20), `the reserve is used: ${JSON.stringify(held)}`);
    // kcat is served meanwhile.
    const md = await run('kcat', ['-b', broker.kafka, '-L', '-J'], { timeoutMs: 20_000 });
    assert.equal(md.code, 0, md.stderr);
    for (const s of strangers) s.socket.destroy();
    await eventually(
      async () => {
        const f = await framePool(broker);
        return f.gathering === 0 && f.aheadBytes === 0;
      },
      20_000,
      'the reserve to come back',
    );
  });

  it('closes a silent connection after --kafka-connections-max-idle, and KafkaJS and kcat go on', async () => {
    const silent = await rawSocket(broker.ports.kafka, Buffer.alloc(0));
    await within(silent.closed, 20_000, 'idle connection not closed');
    await roundTrip(broker, 'limits.plain');
    const r = await run('kcat', ['-b', broker.kafka, '-P', '-t', 'limits.kcat'], { input: 'one\ntwo\n', timeoutMs: 20_000 });
    assert.equal(r.code, 0, r.stderr);
    const msgs = await kcatConsume(broker.kafka, 'limits.kcat', ['-X', 'fetch.wait.max.ms=50']);
    assert.deepEqual(
      msgs.map((m) => m.payload),
      ['one', 'two'],
    );
  });
});

describe('kafka limits with a users file (SASL required)', () => {
  let dir = '';
  let broker: FlowmqProcess;
  const alice: SASLOptions = { mechanism: 'scram-sha-512', username: 'alice', password: 'wonder:land' };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-limits-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: "wonder:land"\n');
    broker = await FlowmqProcess.start({
      args: ['--users-file', join(dir, 'users.yaml'), '--kafka-auth-timeout', '1s', '--protocols', 'kafka', '--kafka-group-initial-rebalance-delay', '0'],
    });
    broker.credentials = { username: alice.username, password: alice.password };
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('closes strangers announcing 16 MiB at once, and ones that never authenticate after --kafka-auth-timeout', async () => {
    const strangers = [];
    for (let i = 0; i < 50; i++) strangers.push(await rawSocket(broker.ports.kafka, announce16MiB()));
    await Promise.all(strangers.map((s) => s.closed));
    const f = await framePool(broker);
    assert.deepEqual([f.aheadBytes, f.gathered], [0, 0], 'nothing was allocated or gathered for them');
    const refused = broker.logs.filter((l) => l.msg === 'request too large before SASL authentication: closing connection');
    assert.ok(refused.length >= 1 && refused.length <= 5, `logged at a bounded rate: ${refused.length} lines`);
    assert.equal(refused[0].max, 512 * 1024);
    const silent = await rawSocket(broker.ports.kafka, Buffer.alloc(0));
    await within(silent.closed, 20_000, 'unauthenticated connection not closed');
    await broker.waitForLog((l) => l.msg === 'no SASL authentication in time: closing connection', 5000);
  });

  it('KafkaJS with SCRAM and kcat with SASL_PLAINTEXT still produce and consume', async () => {
    await roundTrip(broker, 'limits.sasl', alice);
    const sasl = [
      '-X',
      'security.protocol=SASL_PLAINTEXT',
      '-X',
      'sasl.mechanisms=SCRAM-SHA-512',
      '-X',
      'sasl.username=alice',
      '-X',
      'sasl.password=wonder:land',
    ];
    const r = await run('kcat', ['-b', broker.kafka, '-P', '-t', 'limits.sasl.kcat', ...sasl], { input: 'a\nb\n', timeoutMs: 20_000 });
    assert.equal(r.code, 0, r.stderr);
    const msgs = await kcatConsume(broker.kafka, 'limits.sasl.kcat', [...sasl, '-X', 'fetch.wait.max.ms=50']);
    assert.deepEqual(
      msgs.map((m) => m.payload),
      ['a', 'b'],
    );
  });
});
