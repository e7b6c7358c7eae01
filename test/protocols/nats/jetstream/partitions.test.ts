/**
 * JetStream consumers over multi-partition streams (issue 28): the sequence mapping (partition-seq.ts) and the
 * service's consumers at the core's level, records put into chosen partitions as a keyed Kafka producer would.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { encodeBatch, makeMessage, messageToRecord, type Engine, type Message } from '../../../../src/core/index.js';
import { firstOffsetFrom, floorSeq, maxOffset, placeOf, seqOf } from '../../../../src/protocols/nats/jetstream/partition-seq.js';
import { ackSubject, natsSubject, ns, setup } from './harness.js';

describe('JetStream sequences over partitions (partition-seq.ts)', () => {
  it('numbers records interleaved by offset, one sequence per record, and back', () => {
    assert.deepEqual(
      [0, 1, 2].map((p) => [0, 1, 2].map((o) => seqOf(3, p, o))),
      [
        [1, 4, 7],
        [2, 5, 8],
        [3, 6, 9],
      ],
    );
    const seen = new Set<number>();
    for (const n of [1, 2, 3, 6, 7]) {
      for (let p = 0; p < n; p++) {
        for (let o = 0; o < 50; o++) {
          const s = seqOf(n, p, o);
          assert.deepEqual(placeOf(n, s), { partition: p, offset: o });
          if (n === 6) {
            assert.ok(!seen.has(s), 'no two records share a sequence');
            seen.add(s);
          }
        }
      }
    }
    // A single partition keeps JetStream's own numbering: offset + 1.
    for (let o = 0; o < 10; o++) assert.equal(seqOf(1, 0, o), o + 1);
    assert.equal(seqOf(6, 5, maxOffset(6)) <= Number.MAX_SAFE_INTEGER, true);
    assert.equal(seqOf(6, 5, maxOffset(6) + 1) > Number.MAX_SAFE_INTEGER, true);
  });

  it('opt_start_seq starts each partition at its first record numbered from it', () => {
    // 3 partitions: sequence 5 is partition 1 offset 1; partition 0 starts at offset 2 (7), partition 2 at 1 (6).
    assert.deepEqual(
      [0, 1, 2].map((p) => firstOffsetFrom(3, p, 5)),
      [2, 1, 1],
    );
    for (const n of [1, 3, 4]) {
      for (let s = 1; s < 40; s++) {
        for (let p = 0; p < n; p++) {
          const o = firstOffsetFrom(n, p, s);
          assert.ok(seqOf(n, p, o) >= s);
          assert.ok(o === 0 || seqOf(n, p, o - 1) < s);
        }
      }
    }
  });

  it('the ack floor is one below the lowest sequence not done in any partition', () => {
    assert.equal(floorSeq([4]), 4);
    // p0 done up to offset 2 (next 7), p1 up to 0 (next 2), p2 up to 5 (next 18): floor 1.
    assert.equal(floorSeq([2, 0, 5]), 1);
    assert.equal(floorSeq([2, 2, 2]), 6);
    assert.equal(floorSeq([3, 2, 2]), 7);
  });
});

const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of closers) await c();
});

/** Appends one record to partition `p` of stream `s` (as a Kafka producer with a key hashed there would). */
async function put(engine: Engine, s: string, p: number, payload: string, timestamp = Date.now(), topic = s.split('.').join('/')): Promise<void> {
  const msg = makeMessage(topic, Buffer.from(payload), { timestamp });
  await engine.produce(s, p, encodeBatch([messageToRecord(msg, s.split('.').join('/'))])).durable;
}

const sseqOf = (m: Message) => Number(ackSubject(m).split('.')[5]);
const field = (m: Message, i: number) => Number(ackSubject(m).split('.')[i]);

async function threeParts() {
  const e = await setup();
  closers.push(() => e.js.close());
  await e.engine.createStream({ name: 'P', partitions: 3, bindings: ['P'] });
  // p0: a0..a3, p1: b0 b1, p2: nothing yet.
  for (let i = 0; i < 4; i++) await put(e.engine, 'P', 0, `a${i}`);
  for (let i = 0; i < 2; i++) await put(e.engine, 'P', 1, `b${i}`);
  return e;
}

describe('JetStream consumers on a multi-partition stream', () => {
  it('delivers every record once, in ascending stream sequence, each partition in order; acks, naks, info', async () => {
    const { c, js } = await threeParts();
    const cr = await c.api('$JS.API.CONSUMER.CREATE.P.k', { stream_name: 'P', config: { durable_name: 'k', ack_policy: 'explicit', ack_wait: ns(30_000) } });
    assert.equal(cr.error, undefined);
    assert.equal(cr.num_pending, 6);
    const got = await c.fetch('P', 'k', { batch: 10, no_wait: true }, 7);
    const msgs = got.filter((m) => m.status === undefined);
    assert.equal(got.at(-1)!.status, '408 Request Timeout', 'what there is, then the end of the no_wait request');
    assert.deepEqual(
      msgs.map((m) => m.payload.toString()),
      ['a0', 'b0', 'a1', 'b1', 'a2', 'a3'],
    );
    assert.deepEqual(msgs.map(sseqOf), [1, 2, 4, 5, 7, 10]);
    assert.deepEqual(
      msgs.map((m) => field(m, 6)),
      [1, 2, 3, 4, 5, 6],
      'consumer sequences are contiguous',
    );
    assert.deepEqual(
      msgs.map((m) => field(m, 8)),
      [5, 4, 3, 2, 1, 0],
      'pending in the ack subject',
    );
    assert.equal(natsSubject(msgs[0]), 'P');

    await c.ackSync(msgs[0]);
    await c.ackSync(msgs[2]);
    await c.ackSync(msgs[1], '-NAK');
    let info = await c.api('$JS.API.CONSUMER.INFO.P.k');
    assert.equal(info.delivered.consumer_seq, 6);
    assert.equal(info.delivered.stream_seq, 10);
    assert.equal(info.num_ack_pending, 4);
    assert.equal(info.num_pending, 0);
    // p0 done up to offset 1 (next: 7), p1 up to 0 (b0 naked: next 2), p2 nothing (next 3): floor 1.
    assert.equal(info.ack_floor.stream_seq, 1);

    // The nak: b0 again, second delivery, same stream sequence, next consumer sequence.
    const again = (await c.fetch('P', 'k', { batch: 1, expires: ns(2000) }, 1))[0];
    assert.equal(again.payload.toString(), 'b0');
    assert.deepEqual([field(again, 4), field(again, 5), field(again, 6)], [2, 2, 7]);
    for (const m of [again, msgs[3], msgs[4], msgs[5]]) await c.ackSync(m);
    info = await c.api('$JS.API.CONSUMER.INFO.P.k');
    assert.equal(info.num_ack_pending, 0);
    assert.equal(info.num_redelivered, 0);
    // Everything stored is done; partition 2 has no record yet: the floor is below its next sequence (3).
    assert.equal(info.ack_floor.stream_seq, 2);

    // The admin API's consumer groups: one offset row per partition (offsets done, end, lag).
    const group = await js.groupAdmin().describe('k');
    assert.deepEqual(
      group?.offsets.map((o) => [o.partition, o.committed, o.end, o.lag]),
      [
        [0, 4, 4, 0],
        [1, 2, 2, 0],
        [2, 0, 0, 0],
      ],
    );
    // A record arriving in the partition behind the others is delivered with its own (lower) sequence.
    const live = c.pull('P', 'k', { batch: 2, expires: ns(5000) });
    await put(c.engine, 'P', 2, 'c0');
    await put(c.engine, 'P', 0, 'a4');
    const more = (await live.waitFor(2)).slice(0, 2);
    assert.deepEqual(
      more.map((m) => [m.payload.toString(), sseqOf(m), field(m, 6)]),
      [
        ['c0', 3, 8],
        ['a4', 13, 9],
      ],
    );
    c.engine.unsubscribe(live.sub);

    // STREAM.INFO: first and last in the same numbering (p0 holds a0..a4: 13 is the highest).
    const st = (await c.api('$JS.API.STREAM.INFO.P')).state;
    assert.deepEqual([st.messages, st.first_seq, st.last_seq], [8, 1, 13]);
    // STREAM.MSG.GET names a record by the same sequence.
    const get = await c.api('$JS.API.STREAM.MSG.GET.P', { seq: 5 });
    assert.equal(Buffer.from(get.message.data, 'base64').toString(), 'b1');
    assert.equal(get.message.seq, 5);
    assert.equal((await c.api('$JS.API.STREAM.MSG.GET.P', { seq: 6 })).error.err_code, 10037, 'a number no record has');
  });

  it('deliver policies: by_start_sequence, new, by_start_time, last, last_per_subject', async () => {
    const { c, engine } = await threeParts();
    const pull = async (name: string, config: Record<string, unknown>, n: number) => {
      const cr = await c.api(`$JS.API.CONSUMER.CREATE.P.${name}`, { stream_name: 'P', config: { durable_name: name, ack_policy: 'explicit', ...config } });
      assert.equal(cr.error, undefined, JSON.stringify(cr.error));
      const got = await c.fetch('P', name, { batch: 10, no_wait: true }, n + 1);
      return got.filter((m) => m.status === undefined).map((m) => `${m.payload.toString()}@${sseqOf(m)}`);
    };
    assert.deepEqual(await pull('s5', { deliver_policy: 'by_start_sequence', opt_start_seq: 5 }, 3), ['b1@5', 'a2@7', 'a3@10']);
    assert.deepEqual(await pull('s3', { deliver_policy: 'by_start_sequence', opt_start_seq: 3 }, 4), ['a1@4', 'b1@5', 'a2@7', 'a3@10']);
    const t0 = Date.now() + 10_000;
    await put(engine, 'P', 2, 'c0', t0);
    await put(engine, 'P', 1, 'b2', t0 + 5);
    await put(engine, 'P', 0, 'a4', t0 + 3);
    assert.deepEqual(await pull('t', { deliver_policy: 'by_start_time', opt_start_time: new Date(t0 + 1).toISOString() }, 2), ['b2@8', 'a4@13']);
    // The stream's last message is the latest by timestamp: b2 (not a4, whose sequence is higher).
    assert.deepEqual(await pull('l', { deliver_policy: 'last' }, 1), ['b2@8']);
    const n = await c.api('$JS.API.CONSUMER.CREATE.P.n', { stream_name: 'P', config: { durable_name: 'n', ack_policy: 'explicit', deliver_policy: 'new' } });
    assert.equal(n.num_pending, 0);
    // Every record has the stream's own subject: one subject, its last message.
    assert.deepEqual(await pull('lps', { deliver_policy: 'last_per_subject' }, 1), ['b2@8']);
    await put(engine, 'P', 2, 'c1');
    const fresh = (await c.fetch('P', 'n', { batch: 1, expires: ns(2000) }, 1))[0];
    assert.equal(`${fresh.payload.toString()}@${sseqOf(fresh)}`, 'c1@6');
    const lpsNext = (await c.fetch('P', 'lps', { batch: 1, expires: ns(2000) }, 1))[0];
    assert.equal(lpsNext.payload.toString(), 'c1', 'after its choice, last_per_subject goes on with what is new');
  });

  it('max_deliver and ack_wait: a message not acked comes again until max_deliver, then is passed', async () => {
    const { c } = await threeParts();
    await c.api('$JS.API.CONSUMER.CREATE.P.w', {
      stream_name: 'P',
      config: { durable_name: 'w', ack_policy: 'explicit', ack_wait: ns(150), max_deliver: 2, filter_subject: 'P' },
    });
    const first = (await c.fetch('P', 'w', { batch: 6, no_wait: true }, 6)).filter((m) => m.status === undefined);
    for (const m of first) if (m.payload.toString() !== 'a1') await c.ackSync(m);
    const second = (await c.fetch('P', 'w', { batch: 1, expires: ns(3000) }, 1))[0];
    assert.deepEqual([second.payload.toString(), field(second, 4), sseqOf(second)], ['a1', 2, 4]);
    // Not acked again: max_deliver reached, it leaves the pending set; the consumer is done with everything.
    const deadline = Date.now() + 5000;
    let info = await c.api('$JS.API.CONSUMER.INFO.P.w');
    while (info.num_ack_pending > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      info = await c.api('$JS.API.CONSUMER.INFO.P.w');
    }
    assert.equal(info.num_ack_pending, 0);
    assert.equal(info.ack_floor.stream_seq, 2, 'every stored record done; partition 2 empty (next 3)');
  });

  it('refuses consumers where the stream keeps a view (limits, deletes, retention) over more than one partition', async () => {
    const { c, engine, js } = await setup();
    closers.push(() => js.close());
    await c.api('$JS.API.STREAM.CREATE.V', { name: 'V', subjects: ['v.>'], max_msgs: 10 });
    await c.api('$JS.API.CONSUMER.CREATE.V.old', { stream_name: 'V', config: { durable_name: 'old', ack_policy: 'explicit' } });
    await c.publish('v.1', 'one');
    await c.publish('v.1', 'two');
    await engine.addPartitions('V', 3);
    // A consumer made before the stream grew goes on over partition 0, numbered offset + 1, as the view is (a tick,
    // which makes a consumer whose stream grew again, changes nothing for it).
    js.tick();
    const old = await c.fetch('V', 'old', { batch: 2, expires: ns(2000) }, 2);
    assert.deepEqual(
      old.map((m) => `${m.payload.toString()}@${sseqOf(m)}`),
      ['one@1', 'two@2'],
    );
    const r = await c.api('$JS.API.CONSUMER.CREATE.V.k', { stream_name: 'V', config: { durable_name: 'k', ack_policy: 'explicit' } });
    assert.equal(r.error.code, 400);
    assert.match(r.error.description, /stream has 3 partitions and JetStream limits/);
  });
});

describe('STREAM.MSG.GET by subject on a multi-partition stream', () => {
  it('last_by_subj is the latest record of the subject by timestamp; next_by_subj the lowest sequence from a sequence', async () => {
    const e = await setup();
    closers.push(() => e.js.close());
    const { c, engine } = e;
    await engine.createStream({ name: 'S', partitions: 3, bindings: ['s/#'] });
    const t0 = Date.now();
    await put(engine, 'S', 0, 'a1', t0, 's/a');
    await put(engine, 'S', 1, 'b1', t0 + 1, 's/b');
    await put(engine, 'S', 2, 'a2', t0 + 3, 's/a');
    await put(engine, 'S', 0, 'a3', t0 + 2, 's/a');
    const get = async (req: Record<string, unknown>) => {
      const r = await c.api('$JS.API.STREAM.MSG.GET.S', req);
      return r.error !== undefined ? r.error.err_code : `${Buffer.from(r.message.data, 'base64').toString()}@${r.message.seq}:${r.message.subject}`;
    };
    assert.equal(await get({ last_by_subj: 's.a' }), 'a2@3:s.a', 'a2 is the latest by time though a3 (4) has the higher sequence');
    assert.equal(await get({ last_by_subj: 's.b' }), 'b1@2:s.b');
    assert.equal(await get({ next_by_subj: 's.a' }), 'a1@1:s.a');
    assert.equal(await get({ next_by_subj: 's.a', seq: 2 }), 'a2@3:s.a');
    assert.equal(await get({ next_by_subj: 's.a', seq: 4 }), 'a3@4:s.a');
    assert.equal(await get({ next_by_subj: 's.b', seq: 3 }), 10037);
    assert.equal(await get({ last_by_subj: 's.c' }), 10037);
  });
});

describe('an ordered consumer reset on a multi-partition stream', () => {
  it('a consumer without acks from the last sequence + 1 of a deleted one continues it: nothing skipped, nothing twice', async () => {
    const { c, engine } = await threeParts();
    const make = async (name: string, config: Record<string, unknown>) => {
      const cr = await c.api(`$JS.API.CONSUMER.CREATE.P.${name}`, { stream_name: 'P', config: { name, ack_policy: 'none', max_deliver: 1, ...config } });
      assert.equal(cr.error, undefined, JSON.stringify(cr.error));
    };
    const take = async (name: string, n: number) =>
      (await c.fetch('P', name, { batch: n, expires: ns(3000) }, n)).map((m) => `${m.payload.toString()}@${sseqOf(m)}`);
    await make('o1', { deliver_policy: 'by_start_sequence', opt_start_seq: 1 });
    assert.deepEqual(await take('o1', 6), ['a0@1', 'b0@2', 'a1@4', 'b1@5', 'a2@7', 'a3@10']);
    // Partition 2 (behind) gets a record numbered below what was delivered; then partition 0 one above.
    await put(engine, 'P', 2, 'c0');
    await put(engine, 'P', 0, 'a4');
    assert.deepEqual(await take('o1', 2), ['c0@3', 'a4@13']);
    await put(engine, 'P', 2, 'c1');
    await put(engine, 'P', 1, 'b2');
    assert.deepEqual(await take('o1', 1), ['c1@6']);
    // The client saw up to 6; the reset deletes o1 and makes o2 from 7: b2 (8) is what it has not seen.
    assert.equal((await c.api('$JS.API.CONSUMER.DELETE.P.o1')).success, true);
    await make('o2', { deliver_policy: 'by_start_sequence', opt_start_seq: 7 });
    await put(engine, 'P', 0, 'a5');
    assert.deepEqual(await take('o2', 2), ['b2@8', 'a5@16']);
    // No consumer delivered 9 last: "every record from 10 on", partition by partition.
    await make('o3', { deliver_policy: 'by_start_sequence', opt_start_seq: 10 });
    assert.deepEqual(await take('o3', 3), ['a3@10', 'a4@13', 'a5@16']);
  });
});

describe('a multi-partition stream growing (Kafka CreatePartitions)', () => {
  it('a running consumer is numbered anew over the new count, keeping its place in each partition', async () => {
    const e = await setup();
    closers.push(() => e.js.close());
    const { c, engine } = e;
    await engine.createStream({ name: 'G', partitions: 2, bindings: ['G'] });
    await put(engine, 'G', 0, 'x0');
    await put(engine, 'G', 0, 'x1');
    await put(engine, 'G', 1, 'y0');
    await c.api('$JS.API.CONSUMER.CREATE.G.g', { stream_name: 'G', config: { durable_name: 'g', ack_policy: 'explicit', ack_wait: ns(60_000) } });
    const got = await c.fetch('G', 'g', { batch: 3, no_wait: true }, 3);
    assert.deepEqual(
      got.map((m) => `${m.payload.toString()}@${sseqOf(m)}`),
      ['x0@1', 'y0@2', 'x1@3'],
    );
    await c.ackSync(got[0]);
    await c.ackSync(got[1]);
    await engine.addPartitions('G', 3);
    await put(engine, 'G', 2, 'z0');
    // Over 3 partitions: z0 is 3, x1 (delivered, not acked) 4, delivered again.
    const next = await c.fetch('G', 'g', { batch: 2, expires: ns(3000) }, 2);
    assert.deepEqual(
      next.map((m) => `${m.payload.toString()}@${sseqOf(m)}x${field(m, 4)}`),
      ['z0@3x1', 'x1@4x2'],
    );
    assert.deepEqual([field(next[0], 6), field(next[1], 6)], [4, 5], 'the consumer sequence goes on');
    for (const m of next) await c.ackSync(m);
    const info = await c.api('$JS.API.CONSUMER.INFO.G.g');
    assert.deepEqual([info.num_ack_pending, info.num_pending, info.delivered.stream_seq], [0, 0, 4]);
  });
});
