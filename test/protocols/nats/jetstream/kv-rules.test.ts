/**
 * The stream-layer rules key-value buckets rely on (stream-view.ts), at the core's level: max_msgs_per_subject,
 * Nats-Rollup with allow_rollup_hdrs, Nats-Expected-Last-Subject-Sequence, discard new per subject, deny_delete and
 * deny_purge, purge by subject / keep / seq, STREAM.MSG.DELETE, last_by_subj, direct get, deliver last_per_subject,
 * and the same state after a restart. Errors as nats-server 2.9 gives them.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { hdr, Inbox, natsSubject, setup } from './harness.js';

const h = (key: string, value: string) => ({ key, value: Buffer.from(value) });
const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of closers) await c();
});
async function env(store?: Parameters<typeof setup>[1]) {
  const e = await setup({}, store);
  closers.push(() => e.js.close());
  return e;
}
const KV = { max_msgs_per_subject: 2, allow_rollup_hdrs: true, allow_direct: true, discard: 'new' };

describe('JetStream stream rules for key-value buckets', () => {
  it('keeps max_msgs_per_subject messages per subject; older ones are gaps, sequences stay', async () => {
    const { c } = await env();
    const cr = await c.api('$JS.API.STREAM.CREATE.K', { name: 'K', subjects: ['k.>'], ...KV });
    assert.equal(cr.config.max_msgs_per_subject, 2);
    assert.equal(cr.config.allow_rollup_hdrs, true);
    assert.equal(cr.config.discard, 'new');
    for (const v of ['a1', 'a2', 'a3']) await c.publish('k.a', v);
    await c.publish('k.b', 'b1');
    const st = (await c.api('$JS.API.STREAM.INFO.K')).state;
    assert.equal(st.messages, 3);
    assert.equal(st.first_seq, 2);
    assert.equal(st.last_seq, 4);
    assert.equal(st.num_subjects, 2);
    assert.equal((await c.api('$JS.API.STREAM.MSG.GET.K', { seq: 1 })).error.err_code, 10037);
    const last = await c.api('$JS.API.STREAM.MSG.GET.K', { last_by_subj: 'k.a' });
    assert.equal(last.message.seq, 3);
    assert.equal(Buffer.from(last.message.data, 'base64').toString(), 'a3');
    assert.deepEqual(await c.publish('k.a', 'a4'), { stream: 'K', seq: 5 });
    // Lowering the limit applies to what the stream holds.
    await c.api('$JS.API.STREAM.UPDATE.K', { name: 'K', subjects: ['k.>'], ...KV, max_msgs_per_subject: 1 });
    assert.equal((await c.api('$JS.API.STREAM.INFO.K')).state.messages, 2);
    assert.equal((await c.api('$JS.API.STREAM.MSG.GET.K', { seq: 3 })).error.err_code, 10037);
  });

  it('rolls up a subject or the stream with Nats-Rollup, only where allowed', async () => {
    const { c } = await env();
    await c.api('$JS.API.STREAM.CREATE.P', { name: 'P', subjects: ['p.>'] });
    const refused = await c.publish('p.a', 'x', [h('Nats-Rollup', 'sub')]);
    assert.deepEqual(refused.error, { code: 500, err_code: 10111, description: 'rollup not permitted' });
    await c.api('$JS.API.STREAM.CREATE.R', { name: 'R', subjects: ['r.>'], allow_rollup_hdrs: true });
    const bad = await c.publish('r.a', 'x', [h('Nats-Rollup', 'some')]);
    assert.deepEqual(bad.error, { code: 500, err_code: 10111, description: 'rollup value invalid: "some"' });
    for (const s of ['r.b', 'r.a', 'r.a']) await c.publish(s, 'v');
    assert.equal((await c.publish('r.a', 'sum', [h('Nats-Rollup', 'sub')])).seq, 4);
    let st = (await c.api('$JS.API.STREAM.INFO.R')).state;
    assert.equal(st.messages, 2, 'r.b and the rollup');
    assert.equal(st.first_seq, 1);
    assert.equal(st.num_deleted, 2, 'the gaps between the first and the last');
    await c.publish('r.c', 'all', [h('Nats-Rollup', 'all')]);
    st = (await c.api('$JS.API.STREAM.INFO.R')).state;
    assert.equal(st.messages, 1);
    assert.equal(st.first_seq, 5);
  });

  it('checks Nats-Expected-Last-Subject-Sequence, one concurrent create wins', async () => {
    const { c } = await env();
    await c.api('$JS.API.STREAM.CREATE.E', { name: 'E', subjects: ['e.>'], ...KV });
    const exp = (n: number) => [h('Nats-Expected-Last-Subject-Sequence', String(n))];
    assert.deepEqual(await c.publish('e.a', 'v1', exp(0)), { stream: 'E', seq: 1 });
    await c.publish('e.b', 'other');
    const wrong = await c.publish('e.a', 'v2', exp(0));
    assert.deepEqual(wrong.error, { code: 400, err_code: 10071, description: 'wrong last sequence: 1' });
    assert.deepEqual(await c.publish('e.a', 'v2', exp(1)), { stream: 'E', seq: 3 });
    // Five creates of the same key at once: exactly one is stored.
    const answers = await Promise.all([1, 2, 3, 4, 5].map((i) => c.publish('e.new', `c${i}`, exp(0))));
    assert.equal(answers.filter((a) => a.error === undefined).length, 1);
    assert.equal(answers.filter((a) => a.error?.err_code === 10071).length, 4);
    // A plain stream (no view) checks by reading the log.
    await c.api('$JS.API.STREAM.CREATE.PL', { name: 'PL', subjects: ['pl.>'] });
    await c.publish('pl.a', '1');
    assert.equal((await c.publish('pl.a', '2', exp(0))).error.err_code, 10071);
    assert.deepEqual(await c.publish('pl.a', '2', exp(1)), { stream: 'PL', seq: 2 });
  });

  it('refuses a publish past max_msgs_per_subject with discard_new_per_subject', async () => {
    const { c } = await env();
    const bad = await c.api('$JS.API.STREAM.CREATE.D', { name: 'D', subjects: ['d.>'], discard_new_per_subject: true, max_msgs_per_subject: 1 });
    assert.equal(bad.error.description, 'discard new per subject requires discard new policy to be set');
    await c.api('$JS.API.STREAM.CREATE.D', { name: 'D', subjects: ['d.>'], discard: 'new', discard_new_per_subject: true, max_msgs_per_subject: 1 });
    await c.publish('d.a', '1');
    assert.deepEqual((await c.publish('d.a', '2')).error, { code: 503, err_code: 10077, description: 'maximum messages per subject exceeded' });
    assert.equal((await c.publish('d.b', '1')).seq, 2);
  });

  it('applies max_msgs and max_bytes: the oldest go (discard old) or the publish is refused (discard new)', async () => {
    const { c } = await env();
    await c.api('$JS.API.STREAM.CREATE.MO', { name: 'MO', subjects: ['mo.>'], max_msgs: 2 });
    for (let i = 1; i <= 4; i++) await c.publish(`mo.${i}`, 'x');
    let st = (await c.api('$JS.API.STREAM.INFO.MO')).state;
    assert.equal(st.messages, 2);
    assert.equal(st.first_seq, 3);
    // Each message counts subject + headers + payload + 30 bytes, as nats-server's file store does.
    assert.equal(st.bytes, 2 * (4 + 1 + 30));
    const cr = await c.api('$JS.API.STREAM.CREATE.MB', { name: 'MB', subjects: ['mb.>'], max_bytes: 120, discard: 'new' });
    assert.equal(cr.config.max_bytes, 120);
    assert.equal((await c.publish('mb.a', 'x'.repeat(40))).seq, 1);
    assert.deepEqual((await c.publish('mb.b', 'x'.repeat(40))).error, { code: 503, err_code: 10077, description: 'maximum bytes exceeded' });
    assert.equal((await c.publish('mb.c', 'x')).seq, 2);
    await c.api('$JS.API.STREAM.CREATE.MN', { name: 'MN', subjects: ['mn'], max_msgs: 1, discard: 'new' });
    await c.publish('mn', '1');
    assert.equal((await c.publish('mn', '2')).error.description, 'maximum messages exceeded');
    st = (await c.api('$JS.API.STREAM.INFO.MN')).state;
    assert.equal(st.messages, 1);
  });

  it('purges by subject, with keep and below a sequence; deletes single messages; deny_* refuse', async () => {
    const { c } = await env();
    await c.api('$JS.API.STREAM.CREATE.U', { name: 'U', subjects: ['u.>'] });
    for (let i = 1; i <= 4; i++) await c.publish('u.a', `a${i}`);
    for (let i = 1; i <= 3; i++) await c.publish('u.b', `b${i}`);
    assert.deepEqual(await c.api('$JS.API.STREAM.PURGE.U', { filter: 'u.a', keep: 1 }), {
      type: 'io.nats.jetstream.api.v1.stream_purge_response',
      success: true,
      purged: 3,
    });
    assert.equal((await c.api('$JS.API.STREAM.PURGE.U', { filter: 'u.b', seq: 6 })).purged, 1);
    let st = (await c.api('$JS.API.STREAM.INFO.U')).state;
    assert.equal(st.messages, 3);
    assert.equal(st.first_seq, 4);
    assert.equal((await c.api('$JS.API.STREAM.MSG.DELETE.U', { seq: 6 })).success, true);
    assert.deepEqual((await c.api('$JS.API.STREAM.MSG.DELETE.U', { seq: 6 })).error, { code: 400, err_code: 10067, description: 'sequence 6 not found' });
    assert.equal((await c.api('$JS.API.STREAM.MSG.DELETE.U', { seq: 99 })).error.err_code, 10057);
    st = (await c.api('$JS.API.STREAM.INFO.U')).state;
    assert.equal(st.messages, 2);
    assert.equal(st.last_seq, 7);
    await c.api('$JS.API.STREAM.CREATE.N', { name: 'N', subjects: ['n'], deny_delete: true, deny_purge: true });
    await c.publish('n', '1');
    assert.deepEqual((await c.api('$JS.API.STREAM.MSG.DELETE.N', { seq: 1 })).error, {
      code: 500,
      err_code: 10057,
      description: 'message delete not permitted',
    });
    assert.deepEqual((await c.api('$JS.API.STREAM.PURGE.N', {})).error, { code: 500, err_code: 10110, description: 'stream purge not permitted' });
  });

  it('keeps deletes and limits across a restart (rules with the definition, the rest replayed from the log)', async () => {
    const first = await env();
    const { c } = first;
    await c.api('$JS.API.STREAM.CREATE.S', { name: 'S', subjects: ['s.>'], ...KV });
    for (const v of ['1', '2', '3']) await c.publish('s.a', v);
    await c.publish('s.b', 'b');
    await c.api('$JS.API.STREAM.MSG.DELETE.S', { seq: 4 });
    const before = (await c.api('$JS.API.STREAM.INFO.S')).state;
    await first.js.close();
    const again = await env(first.m);
    const after_ = (await again.c.api('$JS.API.STREAM.INFO.S')).state;
    assert.deepEqual(after_, before);
    assert.equal(after_.messages, 2);
    assert.equal((await again.c.api('$JS.API.STREAM.MSG.GET.S', { seq: 4 })).error.err_code, 10037);
    assert.equal((await again.c.api('$JS.API.STREAM.INFO.S')).config.max_msgs_per_subject, 2);
  });

  it('answers direct gets with the message and its Nats-* headers, or a status', async () => {
    const { c } = await env();
    await c.api('$JS.API.STREAM.CREATE.G', { name: 'G', subjects: ['g.>'], ...KV });
    await c.publish('g.a', 'v1', [h('KV-Operation', 'PUT')]);
    await c.publish('g.a', 'v2');
    const bySubject = await c.request('$JS.API.DIRECT.GET.G.g.a', '');
    assert.equal(bySubject.payload.toString(), 'v2');
    assert.equal(hdr(bySubject, 'Nats-Stream'), 'G');
    assert.equal(hdr(bySubject, 'Nats-Subject'), 'g.a');
    assert.equal(hdr(bySubject, 'Nats-Sequence'), '2');
    assert.ok(Number.isFinite(Date.parse(hdr(bySubject, 'Nats-Time-Stamp')!)));
    const bySeq = await c.request('$JS.API.DIRECT.GET.G', JSON.stringify({ seq: 1 }));
    assert.equal(bySeq.payload.toString(), 'v1');
    assert.equal(hdr(bySeq, 'KV-Operation'), 'PUT');
    assert.equal((await c.request('$JS.API.DIRECT.GET.G.g.zz', '')).status, '404 Message Not Found');
    assert.equal((await c.request('$JS.API.DIRECT.GET.G', '{')).status, '408 Bad Request');
    await c.api('$JS.API.STREAM.CREATE.NG', { name: 'NG', subjects: ['ng'] });
    assert.equal((await c.request('$JS.API.DIRECT.GET.NG', JSON.stringify({ seq: 1 }))).status, '503');
  });

  it('delivers the last message per subject, then new ones, with num_pending counting live messages only', async () => {
    const { c, engine } = await env();
    await c.api('$JS.API.STREAM.CREATE.W', { name: 'W', subjects: ['w.>'], ...KV });
    for (const [s, v] of [
      ['w.a', 'a1'],
      ['w.b', 'b1'],
      ['w.a', 'a2'],
      ['w.a', 'a3'],
      ['w.c', 'c1'],
    ])
      await c.publish(s, v);
    const inbox = new Inbox(engine, '_INBOX.push1');
    const cr = await c.api('$JS.API.CONSUMER.CREATE.W', {
      stream_name: 'W',
      config: { deliver_policy: 'last_per_subject', ack_policy: 'none', deliver_subject: '_INBOX.push1.d', filter_subject: 'w.>' },
    });
    assert.equal(cr.error, undefined);
    assert.equal(cr.num_pending, 3);
    const got = await inbox.waitFor(3);
    assert.deepEqual(
      got.map((m) => `${natsSubject(m)}=${m.payload.toString()}`),
      ['w.b=b1', 'w.a=a3', 'w.c=c1'],
    );
    // The reply subject's last token: what is left to deliver after each one.
    assert.deepEqual(
      got.map((m) => m.responseTopic!.split('/').pop()),
      ['2', '1', '0'],
    );
    await c.publish('w.b', 'b2');
    const more = await inbox.waitFor(4);
    assert.equal(more[3].payload.toString(), 'b2');
    engine.unsubscribe(inbox.sub);
  });

  it('counts num_pending over live messages only, past a thousand sequences, whole-stream, literal and wildcard filters', async () => {
    const { c } = await env();
    await c.api('$JS.API.STREAM.CREATE.NP', { name: 'NP', subjects: ['np.>'], max_msgs_per_subject: 1 });
    for (let i = 0; i < 1500; i++) await c.publish(`np.${i % 2 === 0 ? 'even' : 'odd'}.k${i % 10}`, String(i));
    const pending = async (cfg: Record<string, unknown>) =>
      (await c.api('$JS.API.CONSUMER.CREATE.NP', { stream_name: 'NP', config: { ack_policy: 'none', deliver_policy: 'all', ...cfg } })).num_pending;
    assert.equal(await pending({}), 10);
    assert.equal(await pending({ filter_subject: 'np.>' }), 10);
    assert.equal(await pending({ filter_subject: 'np.odd.k3' }), 1);
    assert.equal(await pending({ filter_subject: 'np.even.*' }), 5);
    assert.equal(await pending({ deliver_policy: 'by_start_sequence', opt_start_seq: 1495 }), 6);
    assert.equal((await c.api('$JS.API.STREAM.INFO.NP')).state.messages, 10);
  });
});
