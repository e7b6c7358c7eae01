/**
 * The per-subject tally of streams without a view (subject-tally.ts): counts as STREAM.INFO reports them, read
 * incrementally, started over when the log start moves, and not waited for by a request that did not ask for
 * subjects while a long backlog is left to read.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SubjectTally, subjectTotals } from '../../../../src/protocols/nats/jetstream/subject-tally.js';
import { setup } from './harness.js';

const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of closers) await c();
});

describe('JetStream subject tally', () => {
  it('counts per subject, reads on from where it was, starts over after a purge, answers soon() only for a short backlog', async () => {
    const { engine, js, c } = await setup();
    closers.push(() => js.close());
    await c.api('$JS.API.STREAM.CREATE.T', { name: 'T', subjects: ['t.>'] });
    for (const s of ['t.a', 't.b', 't.a', 't.c.d']) await c.publish(s, s);
    const tally = new SubjectTally(engine.getStream('T')!.def, engine);
    assert.equal(await tally.soon(3), null, 'four messages to read: more than a backlog of 3');
    const counts = await tally.current();
    assert.deepEqual(Object.fromEntries(subjectTotals(counts, '>')), { 't.a': 2, 't.b': 1, 't.c.d': 1 });
    await c.publish('t.b', 'x');
    assert.deepEqual(Object.fromEntries(subjectTotals((await tally.soon(1))!, 't.*')), { 't.a': 2, 't.b': 2 });
    await engine.deleteRecords('T', 0, 3);
    // Offsets 0-2 gone: t.c.d and the last t.b are left.
    assert.deepEqual(Object.fromEntries(subjectTotals(await tally.current(), '>')), { 't.c.d': 1, 't.b': 1 });
  });
});
