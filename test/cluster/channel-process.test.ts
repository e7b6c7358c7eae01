/**
 * The channel in real broker processes: `bin/flowmq start --cluster` over PostgreSQL and s3rver comes up with its
 * channel, answers an authenticated peer (a Cluster + channel in this process, registered in the same database),
 * refuses one with another secret, and shuts down cleanly. The multi-process cluster tests (forwarding, failover)
 * are the harness part's.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { Cluster, startChannel } from '../../src/cluster/index.js';
import { PostgresClusterStore } from '../../src/cluster/pg-store.js';
import { FlowError } from '../../src/core/index.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { startS3, type S3TestServer } from '../helpers/s3.js';

const BIN = fileURLToPath(new URL('../../../bin/flowmq', import.meta.url));
const SECRET = 'process-test-secret-0123';
const logger = pino({ level: 'silent' });

interface Proc {
  child: ChildProcess;
  out: string;
  exited: Promise<number | null>;
}

function run(args: string[]): Proc {
  const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const p: Proc = { child, out: '', exited: new Promise((r) => child.on('exit', (code) => r(code))) };
  child.stdout!.on('data', (d: Buffer) => (p.out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (p.out += d.toString()));
  return p;
}

async function until(cond: () => boolean, what: string, ms = 60_000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('cluster channel in broker processes', () => {
  let pg: PostgresServer;
  let s3: S3TestServer;
  const dirs: string[] = [];
  const procs: Proc[] = [];

  before(async () => {
    [pg, s3] = await Promise.all([startPostgres(), startS3()]);
  });

  after(async () => {
    for (const p of procs) if (p.child.exitCode === null) p.child.kill('SIGKILL');
    await Promise.all([pg?.stop(), s3?.close(), ...dirs.map((d) => rm(d, { recursive: true, force: true }))]);
  });

  async function broker(db: string, id: number, extra: string[] = []): Promise<Proc> {
    const dir = await mkdtemp(join(tmpdir(), 'flowmq-chan-'));
    dirs.push(dir);
    // `--cluster true`: the bare flag is read as true once h-harness's bareBooleans is merged.
    const p = run([
      'start',
      '--cluster',
      'true',
      '--broker-id',
      String(id),
      '--cluster-secret',
      SECRET,
      '--cluster-port',
      '0',
      '--cluster-lease',
      '2s',
      '--data-dir',
      dir,
      '--host',
      '127.0.0.1',
      '--mqtt-port',
      '0',
      '--mqtt-ws-port',
      '0',
      '--kafka-port',
      '0',
      '--amqp-port',
      '0',
      '--nats-port',
      '0',
      '--http-port',
      '0',
      '--metastore',
      db,
      '--wal',
      'postgres',
      '--object-store',
      `s3://${s3.bucket}/b${id}`,
      '--s3-endpoint',
      s3.endpoint,
      '--s3-region',
      s3.region,
      '--s3-access-key-id',
      s3.accessKeyId,
      '--s3-secret-access-key',
      s3.secretAccessKey,
      ...extra,
    ]);
    procs.push(p);
    await until(() => p.out.includes('listening (admin API)') || p.child.exitCode !== null, `broker ${id} to start`);
    assert.equal(p.child.exitCode, null, `broker ${id} is running:\n${p.out}`);
    return p;
  }

  it('brokers started with --cluster serve the channel to an authenticated peer and close cleanly', { timeout: 120_000 }, async () => {
    const db = await pg.createDatabase();
    const [b1, b2] = await Promise.all([broker(db, 1), broker(db, 2)]);
    // A third member in this process, over the same database.
    const store = await PostgresClusterStore.open({ url: db, statementTimeoutMs: 10_000, logger });
    const me = await Cluster.start({ store, info: { id: 9, version: 'test', endpoints: {} }, leaseMs: 5000, logger });
    // The brokers' channel is TLS-PSK by default (--cluster-tls auto without certificates): so is this member's.
    const ch = await startChannel({ cluster: me, host: '127.0.0.1', port: 0, secret: SECRET, tls: { mode: 'psk' }, logger });
    me.channel = ch;
    await me.advertise({ cluster: { host: '127.0.0.1', port: ch.address().port } });
    const wrongStore = await PostgresClusterStore.open({ url: db, statementTimeoutMs: 10_000, logger });
    const intruder = await Cluster.start({ store: wrongStore, info: { id: 8, version: 'test', endpoints: {} }, leaseMs: 5000, logger });
    const bad = await startChannel({ cluster: intruder, host: '127.0.0.1', port: 0, secret: 'not-the-cluster-secret', tls: { mode: 'psk' }, logger });
    try {
      for (const id of [1, 2]) {
        const pong = JSON.parse((await ch.request(id, 'channel.ping', Buffer.alloc(0))).toString()) as { id: number; incarnation: string };
        assert.equal(pong.id, id);
        assert.ok(pong.incarnation.length > 0);
      }
      assert.deepEqual(ch.connected(), [1, 2]);
      await assert.rejects(
        bad.request(1, 'channel.ping', Buffer.alloc(0)),
        (e: unknown) => e instanceof FlowError && e.code === 'UNAVAILABLE' && /refused our TLS pre-shared key/.test(e.message),
      );
      await until(() => /cluster channel: TLS handshake with a dialer failed/.test(b1.out), "the refusal in broker 1's log");
      assert.match(b1.out, /pre-shared key differs: its --cluster-secret is not ours/);
      assert.match(b1.out, /"tls":"psk".*cluster channel: listening|cluster channel: listening.*"tls":"psk"/);
    } finally {
      await bad.close();
      await intruder.close();
      await wrongStore.close();
      await me.close();
      await ch.close();
      await store.close();
    }
    for (const p of [b1, b2]) p.child.kill('SIGTERM');
    assert.equal(await b1.exited, 0, b1.out);
    assert.equal(await b2.exited, 0, b2.out);
    for (const p of [b1, b2]) {
      const errors = p.out.split('\n').filter((l) => /"level":(50|60)/.test(l));
      assert.deepEqual(errors, [], 'no error in the log');
    }
  });
});
