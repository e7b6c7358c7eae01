/**
 * The password verifier (scrypt on worker threads, bounded queue) and the guard in front of it: right and wrong
 * passwords, 'busy' at once when the queue is full, priority checks taking an ordinary one's place, a clean close,
 * and the guard's answers for users, unknown users and throttled addresses.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, scryptSync } from 'node:crypto';
import { MemoryUserStore, PasswordGuard, PasswordVerifier, type PasswordHash } from '../../src/control/index.js';

/** A cheap scrypt cost for the verifier's own tests (the cost is the verifier's option). */
const CHEAP = { N: 1024, r: 8, p: 1 };

function hashOf(password: string): PasswordHash {
  const salt = randomBytes(16);
  return { salt, hash: scryptSync(password, salt, 32, CHEAP) };
}

describe('PasswordVerifier', () => {
  const made: PasswordVerifier[] = [];
  const verifier = (o: ConstructorParameters<typeof PasswordVerifier>[0] = {}) => {
    const v = new PasswordVerifier({ scrypt: CHEAP, ...o });
    made.push(v);
    return v;
  };
  after(() => Promise.all(made.map((v) => v.close())));

  it('tells the right password from wrong ones, on a thread started by the first check', async () => {
    const v = verifier();
    assert.equal(v.stats.workersStarted, 0, 'no thread before the first check');
    const h = hashOf('correct horse');
    assert.equal(await v.verify('correct horse', h), 'ok');
    assert.equal(await v.verify(Buffer.from('correct horse'), h), 'ok');
    assert.equal(await v.verify('correct horsf', h), 'bad');
    assert.equal(await v.verify('', h), 'bad');
    assert.equal(v.stats.workersStarted, 1);
    assert.equal(v.stats.checked, 4);
  });

  it('answers busy at once when every thread works and the queue is full', async () => {
    const v = verifier({ threads: 1, maxQueue: 2 });
    const h = hashOf('pw');
    const all = Array.from({ length: 6 }, (_, i) => v.verify(i % 2 ? 'pw' : 'nope', h));
    assert.equal(v.running + v.queued, 3, 'one computing, two waiting');
    // The refused ones are settled before any check can have finished: they never waited for the thread.
    const first = await Promise.race([all[3], all[0].then(() => 'computed')]);
    assert.equal(first, 'busy');
    assert.deepEqual(await Promise.all(all), ['bad', 'ok', 'bad', 'busy', 'busy', 'busy']);
    assert.equal(v.stats.busy, 3);
    assert.equal(await v.verify('pw', h), 'ok', 'room again once the queue drained');
  });

  it('lets a priority check take the place of the newest ordinary one', async () => {
    const v = verifier({ threads: 1, maxQueue: 2 });
    const h = hashOf('pw');
    const ordinary = [v.verify('x', h), v.verify('y', h), v.verify('z', h)];
    const vip = v.verify('pw', h, true);
    const late = v.verify('w', h, false);
    assert.deepEqual(await Promise.all([...ordinary, vip, late]), ['bad', 'bad', 'busy', 'ok', 'busy']);
  });

  it('closes cleanly: waiting and running checks are answered busy, the threads end, later checks are busy', async () => {
    const v = new PasswordVerifier({ scrypt: { N: 16384, r: 8, p: 1 }, threads: 2, maxQueue: 4 });
    const h = { salt: randomBytes(16), hash: randomBytes(32) };
    const pending = Array.from({ length: 5 }, () => v.verify('pw', h));
    assert.equal(v.stats.workersStarted, 2);
    await v.close();
    assert.deepEqual(await Promise.all(pending), ['busy', 'busy', 'busy', 'busy', 'busy']);
    assert.equal(v.running + v.queued, 0);
    assert.equal(await v.verify('pw', h), 'busy');
  });

  it('hash() makes a salted scrypt hash on its threads that verify() accepts, the same as node:crypto computes', async () => {
    const v = verifier();
    const a = await v.hash('pässword ✓');
    const b = await v.hash('pässword ✓');
    assert.equal(a.salt.length, 16);
    assert.equal(a.hash.length, 32);
    assert.notDeepEqual(a.salt, b.salt, 'a fresh salt each time');
    assert.notDeepEqual(a.hash, b.hash);
    assert.deepEqual(a.hash, scryptSync('pässword ✓', a.salt, 32, CHEAP), "scrypt of the UTF-8 password with the verifier's cost");
    assert.equal(await v.verify('pässword ✓', a), 'ok');
    assert.equal(await v.verify('password ✓', a), 'bad');
    assert.equal(v.stats.workersStarted, 1, "hashed on the verifier's own thread");
    // Hashes queue behind checks and are never refused for a full queue.
    const tight = verifier({ threads: 1, maxQueue: 0 });
    const many = await Promise.all(Array.from({ length: 5 }, (_, i) => tight.hash(`p${i}`)));
    assert.equal(await tight.verify('p4', many[4]), 'ok');
    await v.close();
    await assert.rejects(v.hash('x'), /closed/);
  });
});

describe('PasswordGuard', () => {
  let store: MemoryUserStore;
  const guards: PasswordGuard[] = [];
  after(() => Promise.all(guards.map((g) => g.close())));
  const guard = (o: ConstructorParameters<typeof PasswordGuard>[1] = {}) => {
    const g = new PasswordGuard(store, o);
    guards.push(g);
    return g;
  };

  it('answers ok for the right password, bad for a wrong one or an unknown user (after the same work)', async () => {
    store = await MemoryUserStore.fromPasswords([{ username: 'alice', password: 'wonderland' }]);
    const g = guard();
    assert.equal(await g.check('alice', 'wonderland', '10.0.0.1'), 'ok');
    assert.equal(await g.check('alice', 'wonderland!', '10.0.0.1'), 'bad');
    assert.equal(await g.check('mallory', 'wonderland', '10.0.0.1'), 'bad');
    assert.equal(await g.check('alice', null, '10.0.0.1'), 'bad');
    assert.equal(g.verifier.stats.checked, 3, 'the unknown user cost a check too; the missing password none');
    assert.equal(g.throttle.failures('address', '10.0.0.1'), 3);
    assert.equal(await g.check('alice', 'wonderland', '10.0.0.1'), 'ok');
    assert.equal(g.throttle.failures('address', '10.0.0.1'), 0, 'a success forgets the address');
  });

  it('answers busy without checking when an address is booked out, and counts SCRAM-style failures', async () => {
    const g = guard({ throttle: { freeFailures: 1, baseDelayMs: 10_000, maxDelayMs: 10_000 }, now: () => 0 });
    g.failed('alice', '10.0.0.5', 'scram');
    g.failed('alice', '10.0.0.5', 'scram');
    // Spacing 10 s: the next attempt waits 10 s (not awaited here), the one after would be 20 s ahead: past the cap.
    const waiting = g.admit('bob', '10.0.0.5');
    assert.equal(await g.check('alice', 'wonderland', '10.0.0.5'), 'busy');
    assert.equal(g.verifier.stats.checked, 0);
    assert.equal(g.stats.throttled, 1);
    await g.close();
    assert.equal(await waiting, false, 'a waiting attempt ends busy when the guard closes');
    assert.equal(await g.check('alice', 'wonderland', '10.0.0.6'), 'busy');
  });
});
