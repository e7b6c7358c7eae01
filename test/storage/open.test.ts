/** openStorage: the queue store it opens beside each metastore, its figures, and its close. */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { loadConfig } from '../../src/config/index.js';
import { isFlowError } from '../../src/core/index.js';
import { openStorage } from '../../src/storage/open.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';

const logger = pino({ level: 'silent' });

describe('openStorage: queue store', () => {
  let root = '';
  let server: PostgresServer;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'flowmq-open-storage-'));
    server = await startPostgres();
  });
  after(async () => {
    await server.stop();
    await rm(root, { recursive: true, force: true });
  });

  it('embedded: SQLite queues.db in the data directory, kept across a reopen, closed with the storage', async () => {
    const dir = join(root, 'embedded');
    const config = loadConfig({ flags: { 'data-dir': dir }, env: {} });
    const s = await openStorage(config, dir, logger);
    assert.equal(s.queues.kind, 'sqlite');
    await s.queues.openQueue('q');
    await s.queues.append('q', [{ id: 1, data: Buffer.from('hello') }]);
    assert.ok(existsSync(join(dir, 'queues.db')));
    assert.equal((s.figures().queueStoreFigures as Record<string, unknown>).workerRunning, true);
    await s.close();
    await assert.rejects(s.queues.openQueue('q'), (e: unknown) => isFlowError(e) && e.code === 'CLOSED');

    const s2 = await openStorage(config, dir, logger);
    assert.deepEqual(await s2.queues.openQueue('q'), { count: 1, bytes: 5, maxId: 1 });
    await s2.close();
  });

  it('PostgreSQL metastore: the queue store is PostgreSQL too, nothing of it on the local disk', async () => {
    const dir = join(root, 'shared');
    const url = await server.createDatabase();
    const config = loadConfig({ flags: { 'data-dir': dir, metastore: url }, env: {} });
    const s = await openStorage(config, dir, logger);
    assert.equal(s.queues.kind, 'postgres');
    await s.queues.openQueue('q');
    await s.queues.append('q', [{ id: 1, data: Buffer.from('hello') }]);
    assert.ok(!existsSync(join(dir, 'queues.db')));
    assert.ok('queueStoreFigures' in s.figures());
    await s.close();

    const s2 = await openStorage(config, dir, logger);
    assert.deepEqual(await s2.queues.openQueue('q'), { count: 1, bytes: 5, maxId: 1 });
    await s2.close();
  });
});
