/**
 * The PostgreSQL pool with a multi-host URL (libpq's behaviour, src/storage/postgres-util.ts) against two real
 * servers, one made read-only as a standby is (default_transaction_read_only): the pool opens on the read-write one
 * whatever the order; when roles swap, the first write fails (SQLSTATE 25006, STORAGE_ERROR: not acknowledged) and
 * the next runs on the new read-write server; a server that dies is left the same way. The whole failover under a
 * broker, with pg_auto_failover, is test/e2e/postgres-failover.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { FlowError } from '../../src/core/index.js';
import { connectClient, createPool } from '../../src/storage/postgres-util.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';

async function sql(s: PostgresServer, text: string): Promise<void> {
  const c = new pg.Client({ connectionString: s.url() });
  await c.connect();
  try {
    await c.query(text);
  } finally {
    await c.end();
  }
}

/** Makes a server read-only (as a standby answers) or read-write, for sessions old and new. */
async function readOnly(s: PostgresServer, on: boolean): Promise<void> {
  await sql(s, `ALTER SYSTEM SET default_transaction_read_only = ${on ? 'on' : 'off'}`);
  await sql(s, 'SELECT pg_reload_conf()');
}

describe('PostgreSQL pool over a multi-host URL', () => {
  let a: PostgresServer;
  let b: PostgresServer;
  before(async () => {
    [a, b] = await Promise.all([startPostgres(), startPostgres()]);
    for (const s of [a, b]) await sql(s, 'CREATE TABLE mh (i int)');
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('opens on the read-write host, follows a swap of roles (25006) and a dead server', async () => {
    await readOnly(a, true);
    const url = `postgres://flowmq@127.0.0.1:${a.port},127.0.0.1:${b.port}/postgres?target_session_attrs=read-write`;
    const p = createPool({ url, poolSize: 3 }, 'test');
    const port = async (): Promise<number> => (await p.query<{ port: number }>('port', 'SELECT inet_server_port() AS port')).rows[0].port;
    assert.equal(await port(), b.port, 'the second host: the first is read-only');
    await p.query('write', 'INSERT INTO mh VALUES (1)');
    assert.equal(p.endpoint, `127.0.0.1:${a.port},127.0.0.1:${b.port}`);

    // The roles swap while the pool holds connections to b.
    await readOnly(b, true);
    await readOnly(a, false);
    let failed: unknown = null;
    for (let i = 0; i < 50 && failed === null; i++) {
      failed = await p.query('write', 'INSERT INTO mh VALUES (2)').then(
        () => null,
        (e: unknown) => e,
      );
      if (failed === null) await new Promise((r) => setTimeout(r, 50)); // the reload reaches b's sessions
    }
    assert.ok(failed instanceof FlowError && failed.code === 'STORAGE_ERROR', `a write on the demoted server fails: ${String(failed)}`);
    await p.query('write', 'INSERT INTO mh VALUES (3)');
    assert.equal(await port(), a.port, 'the pool found the new read-write server');
    assert.equal(p.stats.failovers, 1);

    // The read-write server dies; the other is made read-write: the pool leaves the dead one.
    await readOnly(b, false);
    await a.stopServer();
    // The pool's idle connections died with the server ('error' on the pool): that alone may have sent it looking
    // again; otherwise the first statement fails (STORAGE_ERROR) and the next one does.
    const err = await p.query('write', 'INSERT INTO mh VALUES (4)').then(
      () => null,
      (e: unknown) => e,
    );
    if (err !== null && !(err instanceof FlowError && err.code === 'STORAGE_ERROR')) assert.fail(`unexpected: ${String(err)}`);
    await p.query('write', 'INSERT INTO mh VALUES (5)');
    assert.equal(await port(), b.port);
    assert.equal(p.stats.failovers, 2);

    // No read-write server at all: a retriable error naming every host.
    await readOnly(b, true);
    await b.restart(); // cuts the pool's connections
    const none = await p.query('write', 'INSERT INTO mh VALUES (6)').catch((e: unknown) => e);
    assert.ok(none instanceof FlowError && none.code === 'STORAGE_ERROR');
    const again = await p.query('write', 'INSERT INTO mh VALUES (7)').catch((e: unknown) => e);
    assert.match(
      String(again),
      new RegExp(`no read-write PostgreSQL server among .*127\\.0\\.0\\.1:${b.port}: a standby \\(read-only\\)|127\\.0\\.0\\.1:${b.port}: read-only`),
    );
    await p.end();
    await a.startServer();
    await readOnly(b, false);
  });

  it('connectClient (the LISTEN connection) takes the first read-write host too', async () => {
    await readOnly(a, true);
    const c = await connectClient(`postgres://flowmq@127.0.0.1:${a.port},127.0.0.1:${b.port}/postgres`);
    try {
      assert.equal((await c.query<{ port: number }>('SELECT inet_server_port() AS port')).rows[0].port, b.port);
    } finally {
      await c.end();
      await readOnly(a, false);
    }
  });
});
