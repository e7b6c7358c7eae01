/**
 * The PostgreSQL WAL sharded over two real PostgreSQL servers (src/storage/wal/sharded-wal.ts, shard-list.ts):
 * where keys land (each shard's own table, queried directly), recovery of every key from its shard after a
 * reopen, fencing kept per shard, and the shard list recorded in the metastore's database (a broker given another
 * list, another order, one database twice, or a list over a WAL that still holds entries, is refused).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { isFlowError } from '../../../src/core/index.js';
import { keyHash, openPostgresWal, PostgresWal, shardOf, ShardedWal, type WalEntry, type WriteAheadLog } from '../../../src/storage/wal/index.js';
import { startPostgres, type PostgresServer } from '../../helpers/postgres.js';

async function rows(url: string, sql: string): Promise<Array<Record<string, unknown>>> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(sql)).rows as Array<Record<string, unknown>>;
  } finally {
    await c.end();
  }
}

const KEYS = Array.from({ length: 12 }, (_, p) => `orders@1765000000000/${p}`);
const entry = (key: string, base: number, epoch = 1): WalEntry => ({ key, baseOffset: base, endOffset: base + 1, epoch, data: Buffer.from(`${key}#${base}`) });

describe('PostgreSQL WAL sharded over two servers', () => {
  let a: PostgresServer;
  let b: PostgresServer;
  before(async () => {
    [a, b] = await Promise.all([startPostgres(), startPostgres()]);
  });
  after(async () => {
    await Promise.all([a.stop(), b.stop()]);
  });

  it('places keys by a stable hash of the partition key (FNV-1a 32) modulo the shard count', () => {
    // FNV-1a's published test vectors: the hash is part of where data lives, it must never change.
    assert.equal(keyHash(''), 0x811c9dc5);
    assert.equal(keyHash('a'), 0xe40c292c);
    assert.equal(keyHash('foobar'), 0xbf9cf968);
    for (const k of KEYS) assert.equal(shardOf(k, 2), keyHash(k) % 2);
    assert.equal(shardOf('anything/0', 1), 0);
    // The twelve partitions of one stream spread over both shards.
    const per = [0, 0];
    for (const k of KEYS) per[shardOf(k, 2)]++;
    assert.ok(per[0] > 0 && per[1] > 0, `spread ${per.join('/')}`);
  });

  it('writes each key to its shard only, and reads every key back from its shard after a reopen', async () => {
    const metastore = await a.createDatabase();
    const shards = [await a.createDatabase(), await b.createDatabase()];
    const wal = await openPostgresWal({ metastoreUrl: metastore, shards, pg: {} });
    assert.ok(wal instanceof ShardedWal);
    const written: WalEntry[] = [];
    // Not awaited one by one: the two shards commit their groups at once.
    const pending: Array<Promise<void>> = [];
    for (let i = 0; i < 5; i++)
      for (const k of KEYS) {
        const e = entry(k, i);
        written.push(e);
        pending.push(wal.append(e));
      }
    await Promise.all(pending);
    await wal.close();

    for (let s = 0; s < 2; s++) {
      const held = await rows(shards[s], 'SELECT key, count(*)::int AS n FROM wal_entries GROUP BY key ORDER BY key');
      const want = KEYS.filter((k) => shardOf(k, 2) === s).sort();
      assert.deepEqual(
        held.map((r) => r.key),
        want,
        `shard ${s} holds exactly its keys`,
      );
      for (const r of held) assert.equal(r.n, 5);
    }
    // The metastore's database holds the list, not entries.
    assert.deepEqual(await rows(metastore, "SELECT to_regclass('wal_entries') AS t"), [{ t: null }]);
    const list = await rows(metastore, 'SELECT position, endpoint FROM wal_shard_list ORDER BY position');
    assert.deepEqual(
      list.map((r) => r.endpoint),
      [`127.0.0.1:${a.port}`, `127.0.0.1:${b.port}`],
    );

    // Recovery: replay (one broker) and replayKey (a broker taking a partition over) read each key from its shard.
    const again = await openPostgresWal({ metastoreUrl: metastore, shards, pg: {} });
    const replayed: WalEntry[] = [];
    await again.replay((e) => replayed.push(e));
    assert.equal(replayed.length, written.length);
    for (const k of KEYS) {
      assert.deepEqual(
        replayed.filter((e) => e.key === k).map((e) => e.data.toString()),
        written.filter((e) => e.key === k).map((e) => e.data.toString()),
        `${k} in append order`,
      );
      const one: string[] = [];
      await again.replayKey!(k, (e) => one.push(e.data.toString()), 2);
      assert.deepEqual(one, [`${k}#2`, `${k}#3`, `${k}#4`]);
    }
    assert.ok(again.size() > 0);
    // Trim reaches every shard.
    const released = await again.trim(() => 5);
    assert.ok(released > 0);
    assert.equal(again.size(), 0);
    for (const url of shards) assert.deepEqual(await rows(url, 'SELECT count(*)::int AS n FROM wal_entries'), [{ n: 0 }]);
    await again.close();
  });

  it("fences a key on its own shard: another broker's stale epoch is refused there", async () => {
    const metastore = await a.createDatabase();
    const shards = [await a.createDatabase(), await b.createDatabase()];
    const [w1, w2] = await Promise.all([
      openPostgresWal({ metastoreUrl: metastore, shards, pg: {} }),
      openPostgresWal({ metastoreUrl: metastore, shards, pg: {} }),
    ]);
    for (const k of KEYS.slice(0, 4)) {
      await w1.append(entry(k, 0, 1));
      // The second broker takes the partition over with epoch 2.
      await w2.fence(k, 2);
      await assert.rejects(w1.append(entry(k, 1, 1)), (e: unknown) => isFlowError(e) && e.code === 'FENCED');
      await w2.append(entry(k, 1, 2));
      const epochs = await rows(shards[shardOf(k, 2)], `SELECT epoch::int AS epoch FROM wal_epochs WHERE key = '${k}'`);
      assert.deepEqual(epochs, [{ epoch: 2 }], `${k}'s fence is on its shard`);
      const other = await rows(shards[1 - shardOf(k, 2)], `SELECT count(*)::int AS n FROM wal_epochs WHERE key = '${k}'`);
      assert.deepEqual(other, [{ n: 0 }]);
    }
    await Promise.all([w1.close(), w2.close()]);
  });

  it('refuses a broker given another shard list than the one recorded, naming both', async () => {
    const metastore = await a.createDatabase();
    const s0 = await a.createDatabase();
    const s1 = await b.createDatabase();
    const first = await openPostgresWal({ metastoreUrl: metastore, shards: [s0, s1], pg: {} });
    const refused = async (shards: string[], re: RegExp): Promise<void> => {
      await assert.rejects(
        openPostgresWal({ metastoreUrl: metastore, shards, pg: {} }),
        (e: unknown) => isFlowError(e) && e.code === 'CONFIG_ERROR' && re.test(e.message),
        shards.join(' '),
      );
    };
    const recorded = /shard list recorded in the metastore is \[0: 127\.0\.0\.1:\d+ \(\w+\), 1: 127\.0\.0\.1:\d+ .*this broker was given \[/;
    await refused([s1, s0], recorded); // another order
    await refused([s0], recorded); // a shard less
    await refused([], recorded); // the metastore's database alone
    await refused([s0, s1, await b.createDatabase()], recorded); // a shard more
    // One database under two URLs (localhost and 127.0.0.1): its identity, not its URL, counts.
    await refused([s0, s0.replace('127.0.0.1', 'localhost')], /are the same database/);
    // The recorded list still opens (a second broker of the cluster).
    const second = await openPostgresWal({ metastoreUrl: metastore, shards: [s0, s1], pg: {} });
    await Promise.all([first.close(), second.close()]);
  });

  it("refuses sharding over a WAL in the metastore's database that still holds entries", async () => {
    const metastore = await a.createDatabase();
    // A deployment from before sharding: the WAL in the metastore's database, no list recorded.
    const old = await PostgresWal.open({ url: metastore });
    await old.append(entry(KEYS[0], 0));
    await old.close();
    const shards = [await a.createDatabase(), await b.createDatabase()];
    await assert.rejects(
      openPostgresWal({ metastoreUrl: metastore, shards, pg: {} }),
      (e: unknown) => isFlowError(e) && e.code === 'CONFIG_ERROR' && /metastore's database still holds entries/.test(e.message),
    );
    // Without --wal-shard it opens as before, and its entries are there.
    const same: WriteAheadLog = await openPostgresWal({ metastoreUrl: metastore, shards: [], pg: {} });
    assert.ok(same instanceof PostgresWal);
    const got: WalEntry[] = [];
    await same.replay((e) => got.push(e));
    assert.equal(got.length, 1);
    await same.close();
  });
});
