/**
 * Two brokers' directories on one PostgreSQL metastore: a user and a policy added through one reach the other by
 * its polling of controlVersion (startPolling), with no restart; a user deleted through it is gone on the other.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Directory, PasswordVerifier } from '../../src/control/index.js';
import { PostgresMetastore } from '../../src/storage/metastore/index.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';

let pgServer: PostgresServer;
const verifier = new PasswordVerifier({ scrypt: { N: 1024, r: 8, p: 1 } });
before(async () => {
  pgServer = await startPostgres();
});
after(async () => {
  await verifier.close();
  await pgServer.stop();
});

/** Resolves once `cond()` holds, checked at each directory change (a safety-net timeout fails the test). */
function until(d: Directory, cond: () => boolean, what: string): Promise<void> {
  if (cond()) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), 20_000);
    const off = d.onChange(() => {
      if (!cond()) return;
      clearTimeout(timer);
      off();
      resolve();
    });
  });
}

describe('Directory on PostgreSQL: two brokers', () => {
  it('changes made through one broker reach the other by polling', async () => {
    const url = await pgServer.createDatabase();
    const [ma, mb] = await Promise.all([PostgresMetastore.open({ url }), PostgresMetastore.open({ url })]);
    const hasher = (p: string) => verifier.hash(p);
    const a = await Directory.open({ store: ma, hasher });
    const b = await Directory.open({ store: mb, hasher });
    b.startPolling(50);
    try {
      await a.addUser({ username: 'alice', password: 'pw', groups: ['ops'] });
      await a.putPolicy({ name: 'ops', effect: 'allow', actions: ['publish'], resources: ['topic:a/#'], principals: ['group:ops'] });
      await until(b, () => b.lookup('alice') !== undefined && b.policies.size === 1, 'alice and the policy on b');
      assert.equal(await verifier.verify('pw', b.lookup('alice')!.passwordHash), 'ok');
      assert.equal(b.policies.allows(b.principal('alice'), 'publish', 'topic', 'a/x'), true);
      await a.deleteUser('alice');
      await until(b, () => b.lookup('alice') === undefined, 'alice gone on b');
    } finally {
      a.close();
      b.close();
      await ma.close();
      await mb.close();
    }
  });
});
