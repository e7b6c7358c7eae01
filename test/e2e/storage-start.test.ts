/**
 * Starting on shared backends that are misconfigured or unreachable: one clear line on stderr, exit 2 for a
 * malformed value (nothing was tried), exit 1 for a service that cannot be reached (naming it).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { FLOWMQ_BIN, run } from './harness.js';

/** A loopback port with nothing listening on it (bound, read, released). */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

async function start(args: string[]) {
  const dataDir = mkdtempSync(join(tmpdir(), 'flowmq-start-'));
  try {
    return await run(
      process.execPath,
      [
        FLOWMQ_BIN,
        'start',
        '--data-dir',
        dataDir,
        '--host',
        '127.0.0.1',
        '--mqtt-port',
        '0',
        '--mqtt-ws-port',
        '0',
        '--kafka-port',
        '0',
        '--nats-port',
        '0',
        '--amqp-port',
        '0',
        '--http-port',
        '0',
        ...args,
      ],
      {
        timeoutMs: 60_000,
      },
    );
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const lines = (s: string): string[] => s.split('\n').filter((l) => l.trim() !== '');

describe('starting on shared storage backends', () => {
  it('exits 2 with one line for a malformed backend setting', async () => {
    for (const [args, want] of [
      [['--metastore', 'mongodb://x'], /invalid --metastore/],
      [['--wal', 'postgres'], /wal postgres .* needs --metastore postgres/],
      [['--object-store', 's3:/bucket'], /invalid --object-store/],
    ] as const) {
      const r = await start([...args]);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.equal(lines(r.stderr).length, 1, r.stderr);
      assert.match(r.stderr, want);
    }
  });

  it('exits 1 naming PostgreSQL when the metastore cannot be reached, without printing its password', async () => {
    const port = await closedPort();
    const r = await start(['--metastore', `postgres://flowmq:hunter2@127.0.0.1:${port}/flowmq`, '--log-level', 'silent']);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(lines(r.stderr).length, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`cannot open the PostgreSQL metastore at postgres://flowmq:\\*\\*\\*@127\\.0\\.0\\.1:${port}/flowmq`));
    assert.doesNotMatch(r.stderr + r.stdout, /hunter2/);
  });

  it('exits 1 naming the S3 store when its endpoint cannot be reached', async () => {
    const port = await closedPort();
    const r = await start([
      '--object-store',
      's3://flowmq-test/segments',
      '--s3-endpoint',
      `http://127.0.0.1:${port}`,
      '--s3-access-key-id',
      'S3RVER',
      '--s3-secret-access-key',
      'S3RVER',
      '--s3-max-attempts',
      '1',
      '--log-level',
      'silent',
    ]);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(lines(r.stderr).length, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`cannot open the S3 object store s3://flowmq-test/segments at http://127\\.0\\.0\\.1:${port}`));
  });
});
