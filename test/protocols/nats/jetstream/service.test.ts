/**
 * The JetStream API service at the core's level (src/protocols/nats/jetstream/): requests as core messages with a
 * response topic, answers collected on an inbox subscriber, JSON shapes and errors as nats-server 2.9.10 gives them.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { makeMessage } from '../../../../src/core/index.js';
import { GatedStreams } from '../../../helpers/memory-storage.js';
import { ackSubject, hdr, Inbox, natsSubject, ns, setup } from './harness.js';

const h = (key: string, value: string) => ({ key, value: Buffer.from(value) });
const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of closers) await c();
});
async function env(opts = {}, store?: GatedStreams) {
  const e = await setup(opts, store);
  closers.push(() => e.js.close());
  return e;
}

describe('JetStream API: account and streams', () => {
  it('answers account info, stream create/info/names/list/delete as nats-server does', async () => {
    const { c } = await env();
    const info = await c.api('$JS.API.INFO');
    assert.equal(info.type, 'io.nats.jetstream.api.v1.account_info_response');
    assert.equal(info.streams, 0);
    assert.equal(info.limits.max_streams, -1);
    assert.deepEqual(info.api, { total: 1, errors: 0 });

    const created = await c.api('$JS.API.STREAM.CREATE.S1', {
      name: 'S1',
      subjects: ['s1.>', 'x.*.y'],
      max_age: ns(60_000),
      storage: 'memory',
      num_replicas: 1,
    });
    assert.equal(created.type, 'io.nats.jetstream.api.v1.stream_create_response');
    assert.equal(created.did_create, true);
    assert.deepEqual(created.config.subjects, ['s1.>', 'x.*.y']);
    assert.equal(created.config.max_age, ns(60_000));
    assert.equal(created.config.retention, 'limits');
    assert.equal(created.config.duplicate_window, ns(60_000), 'a max_age below 2 min caps the duplicate window, as in nats-server');
    assert.deepEqual(created.state, {
      messages: 0,
      bytes: 0,
      first_seq: 0,
      first_ts: '0001-01-01T00:00:00Z',
      last_seq: 0,
      last_ts: '0001-01-01T00:00:00Z',
      consumer_count: 0,
    });

    // Same config again: fine; another config: nats-server's 10058.
    assert.equal(
      (await c.api('$JS.API.STREAM.CREATE.S1', { name: 'S1', subjects: ['s1.>', 'x.*.y'], max_age: ns(60_000), storage: 'memory' })).did_create,
      true,
    );
    assert.deepEqual((await c.api('$JS.API.STREAM.CREATE.S1', { name: 'S1', subjects: ['s1.x'] })).error, {
      code: 400,
      err_code: 10058,
      description: 'stream name already in use with a different configuration',
    });
    assert.equal((await c.api('$JS.API.STREAM.CREATE.S2', { name: 'S1' })).error.err_code, 10056);
    assert.deepEqual((await c.api('$JS.API.STREAM.CREATE.S4', 'not json')).error, { code: 400, err_code: 10025, description: 'invalid JSON' });
    const mirror = await c.api('$JS.API.STREAM.CREATE.S5', { name: 'S5', subjects: ['s5'], mirror: { name: 'S1' } });
    assert.deepEqual(mirror.error, { code: 400, err_code: 10034, description: 'stream mirrors can not contain subjects' });
    // A republish destination inside the stream's own subjects (here its name) would loop.
    const republish = await c.api('$JS.API.STREAM.CREATE.S5', { name: 'S5', republish: { src: '>', dest: 'S5' } });
    assert.deepEqual(republish.error, { code: 500, err_code: 10052, description: 'stream configuration for republish destination forms a cycle' });
    assert.deepEqual((await c.api('$JS.API.STREAM.CREATE.S6', { name: 'S6', sealed: true })).error, {
      code: 500,
      err_code: 10052,
      description: 'stream configuration for create can not be sealed',
    });

    await c.api('$JS.API.STREAM.CREATE.S7', { name: 'S7' });
    const names = await c.api('$JS.API.STREAM.NAMES');
    assert.deepEqual(names, { type: 'io.nats.jetstream.api.v1.stream_names_response', total: 2, offset: 0, limit: 1024, streams: ['S1', 'S7'] });
    assert.deepEqual((await c.api('$JS.API.STREAM.NAMES', { subject: 's1.q' })).streams, ['S1']);
    const list = await c.api('$JS.API.STREAM.LIST', { offset: 1 });
    assert.equal(list.total, 2);
    assert.deepEqual(
      list.streams.map((s: any) => s.config.name),
      ['S7'],
    );
    assert.deepEqual(list.streams[0].config.subjects, ['S7'], 'a stream created without subjects binds its own name');

    const si = await c.api('$JS.API.STREAM.INFO.S1');
    assert.equal(si.type, 'io.nats.jetstream.api.v1.stream_info_response');
    assert.equal(si.config.name, 'S1');
    assert.deepEqual((await c.api('$JS.API.STREAM.INFO.nope')).error, { code: 404, err_code: 10059, description: 'stream not found' });

    assert.deepEqual(await c.api('$JS.API.STREAM.DELETE.S7'), { type: 'io.nats.jetstream.api.v1.stream_delete_response', success: true });
    assert.equal((await c.api('$JS.API.STREAM.DELETE.S7')).error.err_code, 10059);
    const after = await c.api('$JS.API.INFO');
    assert.equal(after.streams, 1);
    assert.ok(after.api.errors >= 5);
  });

  it('answers requests outside the subset with an error, never silence', async () => {
    const { c } = await env();
    const r = await c.api('$JS.API.STREAM.SNAPSHOT.S1', {});
    assert.equal(r.error.code, 400);
    assert.match(r.error.description, /not supported by FlowMQ/);
    assert.equal((await c.api('$JS.API.FOO')).error.code, 400);
    await c.api('$JS.API.STREAM.CREATE.S', { name: 'S' });
    assert.equal((await c.api('$JS.API.STREAM.MSG.DELETE.S', { seq: 1 })).error.err_code, 10057);
  });

  it('answers every API subject with JSON whatever the body (hostile or malformed requests)', async () => {
    const { c } = await env();
    await c.api('$JS.API.STREAM.CREATE.H', { name: 'H' });
    await c.api('$JS.API.CONSUMER.CREATE.H.k', { stream_name: 'H', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const subjects = [
      '$JS.API.INFO',
      '$JS.API.STREAM.CREATE.H2',
      '$JS.API.STREAM.UPDATE.H',
      '$JS.API.STREAM.NAMES',
      '$JS.API.STREAM.LIST',
      '$JS.API.STREAM.INFO.H',
      '$JS.API.STREAM.PURGE.H',
      '$JS.API.STREAM.MSG.GET.H',
      '$JS.API.CONSUMER.CREATE.H',
      '$JS.API.CONSUMER.CREATE.H.x',
      '$JS.API.CONSUMER.DURABLE.CREATE.H.x',
      '$JS.API.CONSUMER.NAMES.H',
      '$JS.API.CONSUMER.LIST.H',
      '$JS.API.CONSUMER.INFO.H.k',
    ];
    const bodies = [
      '',
      'null',
      '[]',
      '7',
      '"s"',
      '{',
      '{"config":null}',
      '{"config":[]}',
      '{"name":5,"subjects":"x","offset":-1,"seq":"a"}',
      '{"stream_name":"H","config":{"ack_wait":"x"}}',
    ];
    for (const s of subjects) {
      for (const b of bodies) {
        const r = await c.api(s, b);
        assert.equal(typeof r, 'object', `${s} ${b}`);
        assert.ok(r.error === undefined || (typeof r.error.code === 'number' && typeof r.error.description === 'string'), `${s} ${b}`);
      }
    }
    assert.deepEqual((await c.api('$JS.API.CONSUMER.CREATE.H', '[]')).error, { code: 400, err_code: 10025, description: 'invalid JSON' });
  });

  it('maps subjects to bindings and back: `*`/`>` are `+`/`#`, a `/` in a token is a `.` in a level', async () => {
    const { c, engine } = await env();
    const r = await c.api('$JS.API.STREAM.CREATE.M', { name: 'M', subjects: ['a.*.c', 'x/y.>'] });
    assert.deepEqual(r.config.subjects, ['a.*.c', 'x/y.>']);
    assert.deepEqual(engine.getStream('M')!.def.bindings, ['a/+/c', 'x.y/#']);
    assert.deepEqual(await c.publish('x/y.z', 'v'), { stream: 'M', seq: 1 });
  });

  it('publishes with a PubAck once durable and drops a repeated Nats-Msg-Id within the window', async () => {
    const { c, engine } = await env();
    await c.api('$JS.API.STREAM.CREATE.S1', { name: 'S1', subjects: ['s1.>'] });
    assert.deepEqual(await c.publish('s1.a', 'one'), { stream: 'S1', seq: 1 });
    assert.deepEqual(await c.publish('s1.b', 'two', [h('Nats-Msg-Id', 'x1')]), { stream: 'S1', seq: 2 });
    assert.deepEqual(await c.publish('s1.b', 'two', [h('Nats-Msg-Id', 'x1')]), { stream: 'S1', seq: 2, duplicate: true });
    assert.deepEqual(await c.publish('s1.b', 'three', [h('Nats-Msg-Id', 'x2')]), { stream: 'S1', seq: 3 });
    assert.equal(engine.offsets('S1', 0).highWatermark, 3, 'the duplicate was not stored');
    assert.deepEqual((await c.publish('s1.b', 'x', [h('Nats-Expected-Stream', 'S9')])).error.err_code, 10060);
    assert.deepEqual((await c.publish('s1.b', 'x', [h('Nats-Expected-Last-Sequence', '1')])).error, {
      code: 400,
      err_code: 10071,
      description: 'wrong last sequence: 3',
    });
    assert.deepEqual(await c.publish('s1.b', 'four', [h('Nats-Expected-Last-Sequence', '3')]), { stream: 'S1', seq: 4 });

    const si = await c.api('$JS.API.STREAM.INFO.S1');
    assert.equal(si.state.messages, 4);
    assert.equal(si.state.first_seq, 1);
    assert.equal(si.state.last_seq, 4);
    assert.notEqual(si.state.last_ts, '0001-01-01T00:00:00Z');

    const got = await c.api('$JS.API.STREAM.MSG.GET.S1', { seq: 2 });
    assert.equal(got.type, 'io.nats.jetstream.api.v1.stream_msg_get_response');
    assert.equal(got.message.subject, 's1.b');
    assert.equal(got.message.seq, 2);
    assert.equal(Buffer.from(got.message.data, 'base64').toString(), 'two');
    assert.equal(Buffer.from(got.message.hdrs, 'base64').toString(), 'NATS/1.0\r\nNats-Msg-Id: x1\r\n\r\n');
    assert.deepEqual((await c.api('$JS.API.STREAM.MSG.GET.S1', { seq: 99 })).error, { code: 404, err_code: 10037, description: 'no message found' });
    const lastA = await c.api('$JS.API.STREAM.MSG.GET.S1', { last_by_subj: 's1.a' });
    assert.deepEqual([lastA.message.subject, lastA.message.seq], ['s1.a', 1]);
    assert.equal((await c.api('$JS.API.STREAM.MSG.GET.S1', { last_by_subj: 's1.*' })).message.seq, 4);
    assert.equal((await c.api('$JS.API.STREAM.MSG.GET.S1', { last_by_subj: 's1.zz' })).error.err_code, 10037);

    assert.deepEqual(await c.api('$JS.API.STREAM.PURGE.S1', { keep: 1 }), { type: 'io.nats.jetstream.api.v1.stream_purge_response', success: true, purged: 3 });
    assert.deepEqual(await c.api('$JS.API.STREAM.PURGE.S1'), { type: 'io.nats.jetstream.api.v1.stream_purge_response', success: true, purged: 1 });
    const purged = await c.api('$JS.API.STREAM.INFO.S1');
    assert.equal(purged.state.messages, 0);
    assert.equal(purged.state.first_seq, 5);
    assert.equal(purged.state.last_seq, 4);
  });

  it('remembers at most maxDedupIds ids per stream: past it the oldest are forgotten first', async () => {
    const { c, engine } = await env({ maxDedupIds: 2 });
    await c.api('$JS.API.STREAM.CREATE.D', { name: 'D', subjects: ['d.>'] });
    for (const id of ['i1', 'i2', 'i3']) await c.publish('d.x', id, [h('Nats-Msg-Id', id)]);
    assert.deepEqual(await c.publish('d.x', 'again', [h('Nats-Msg-Id', 'i3')]), { stream: 'D', seq: 3, duplicate: true });
    assert.deepEqual(await c.publish('d.x', 'again', [h('Nats-Msg-Id', 'i2')]), { stream: 'D', seq: 2, duplicate: true });
    assert.deepEqual(await c.publish('d.x', 'again', [h('Nats-Msg-Id', 'i1')]), { stream: 'D', seq: 4 }, 'i1 was forgotten');
    assert.equal(engine.offsets('D', 0).highWatermark, 4);
  });

  it('updates max_age and subjects (the stream captures the new subjects from then on)', async () => {
    const { c, engine } = await env();
    await c.api('$JS.API.STREAM.CREATE.U', { name: 'U', subjects: ['u.>'] });
    const r = await c.api('$JS.API.STREAM.UPDATE.U', { name: 'U', subjects: ['u.>'], max_age: ns(3_600_000) });
    assert.equal(r.type, 'io.nats.jetstream.api.v1.stream_update_response');
    assert.equal(r.config.max_age, ns(3_600_000));
    assert.equal(engine.getStream('U')!.def.retentionMs, 3_600_000);
    await c.publish('u.1', 'before');
    const moved = await c.api('$JS.API.STREAM.UPDATE.U', { name: 'U', subjects: ['v.*'], max_age: ns(3_600_000) });
    assert.deepEqual(moved.config.subjects, ['v.*']);
    assert.deepEqual(engine.getStream('U')!.def.bindings, ['v/+']);
    // u.2 is no stream's any more: a plain publish (no PubAck to wait for), then v.1 as the marker after it.
    await engine.publish(makeMessage('u/2', Buffer.from('not captured any more')));
    await c.publish('v.1', 'captured');
    const info = await c.api('$JS.API.STREAM.INFO.U', {});
    assert.equal(info.state.messages, 2, 'u.1 from before the update and v.1');
    assert.equal(info.state.last_seq, 2);
    assert.ok((await c.api('$JS.API.STREAM.UPDATE.U', { name: 'U', subjects: ['v.>.x'] })).error, 'an invalid subject is refused');
    assert.deepEqual(engine.getStream('U')!.def.bindings, ['v/+'], 'and changes nothing');
  });
});

describe('JetStream API: pull consumers', () => {
  async function withMessages(n: number, opts = {}) {
    const e = await env(opts);
    await e.c.api('$JS.API.STREAM.CREATE.A', { name: 'A', subjects: ['a.>'] });
    for (let i = 1; i <= n; i++) await e.c.publish(`a.${i}`, `m${i}`);
    return e;
  }

  it('creates a durable consumer, fetches with explicit acks, reports delivered, ack floor and pending', async () => {
    const { c } = await withMessages(5);
    const cr = await c.api('$JS.API.CONSUMER.CREATE.A.k', {
      stream_name: 'A',
      config: { durable_name: 'k', ack_policy: 'explicit', ack_wait: ns(30_000) },
      action: 'create',
    });
    assert.equal(cr.type, 'io.nats.jetstream.api.v1.consumer_create_response');
    assert.deepEqual(cr.config, {
      durable_name: 'k',
      name: 'k',
      deliver_policy: 'all',
      ack_policy: 'explicit',
      ack_wait: ns(30_000),
      max_deliver: -1,
      replay_policy: 'instant',
      max_waiting: 512,
      max_ack_pending: 1000,
      num_replicas: 0,
    });
    assert.equal(cr.num_pending, 5);
    assert.deepEqual(cr.delivered, { consumer_seq: 0, stream_seq: 0 });

    const msgs = await c.fetch('A', 'k', { batch: 3, expires: ns(5000) }, 3);
    assert.deepEqual(msgs.map(natsSubject), ['a.1', 'a.2', 'a.3']);
    assert.deepEqual(
      msgs.map((m) => m.payload.toString()),
      ['m1', 'm2', 'm3'],
    );
    const [, , , , dc, sseq, cseq, tsNs, pending] = ackSubject(msgs[0]).split('.');
    assert.deepEqual(ackSubject(msgs[0]).split('.').slice(0, 4), ['$JS', 'ACK', 'A', 'k']);
    assert.equal(dc, '1');
    assert.equal(sseq, '1');
    assert.equal(cseq, '1');
    assert.equal(pending, '4');
    assert.ok(Math.abs(Number(BigInt(tsNs) / 1_000_000n) - Date.now()) < 60_000);

    const ackd = await c.ackSync(msgs[0]);
    assert.equal(ackd.payload.length, 0, 'an ack with a reply is confirmed with an empty message');
    assert.equal((await c.ackSync(msgs[0])).payload.length, 0, 'a repeated ack is confirmed too');
    c.ack(msgs[2]);
    const info = await c.api('$JS.API.CONSUMER.INFO.A.k');
    assert.equal(info.type, 'io.nats.jetstream.api.v1.consumer_info_response');
    assert.deepEqual({ c: info.delivered.consumer_seq, s: info.delivered.stream_seq }, { c: 3, s: 3 });
    assert.equal(info.ack_floor.stream_seq, 1);
    assert.equal(info.num_ack_pending, 1);
    assert.equal(info.num_pending, 2);
    assert.equal(info.num_redelivered, 0);

    assert.deepEqual((await c.api('$JS.API.CONSUMER.NAMES.A')).consumers, ['k']);
    const list = await c.api('$JS.API.CONSUMER.LIST.A');
    assert.equal(list.type, 'io.nats.jetstream.api.v1.consumer_list_response');
    assert.equal(list.consumers[0].name, 'k');
    assert.deepEqual((await c.api('$JS.API.CONSUMER.INFO.A.zz')).error, { code: 404, err_code: 10014, description: 'consumer not found' });
    assert.deepEqual(await c.api('$JS.API.CONSUMER.DELETE.A.k'), { type: 'io.nats.jetstream.api.v1.consumer_delete_response', success: true });
    assert.equal((await c.api('$JS.API.CONSUMER.DELETE.A.k')).error.err_code, 10014);
  });

  it('no_wait: what is there, then 408 with what is left; 404 No Messages when there is nothing', async () => {
    const { c } = await withMessages(2);
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const got = await c.fetch('A', 'k', { batch: 5, no_wait: true }, 3);
    assert.deepEqual(got.slice(0, 2).map(natsSubject), ['a.1', 'a.2']);
    assert.equal(got[2].status, '408 Request Timeout');
    assert.equal(hdr(got[2], 'Nats-Pending-Messages'), '3');
    assert.equal(hdr(got[2], 'Nats-Pending-Bytes'), '0');
    const none = await c.fetch('A', 'k', { batch: 5, no_wait: true }, 1);
    assert.equal(none[0].status, '404 No Messages');
    assert.equal(none[0].payload.length, 0);
  });

  it('a waiting pull gets a message published later, and expires with 408 and the pending count', async () => {
    const { c } = await withMessages(0);
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const inbox = c.pull('A', 'k', { batch: 2, expires: ns(1500) });
    assert.equal((await c.api('$JS.API.CONSUMER.INFO.A.k')).num_waiting, 1);
    await c.publish('a.late', 'late');
    const got = await inbox.waitFor(2);
    assert.equal(natsSubject(got[0]), 'a.late');
    assert.equal(got[1].status, '408 Request Timeout');
    assert.equal(hdr(got[1], 'Nats-Pending-Messages'), '1');
  });

  it('a pull whose client left takes nothing: the next pull gets the message (before the ticker looks)', async () => {
    // The ticker never runs in this test: what it would catch late is checked at delivery, as nats-server does.
    const { c, engine } = await withMessages(0, { tickMs: 600_000 });
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const left = c.pull('A', 'k', { batch: 1, expires: ns(30_000) });
    engine.unsubscribe(left.sub);
    await c.publish('a.1', 'one');
    const got = await c.fetch('A', 'k', { batch: 1, no_wait: true }, 1);
    assert.equal(natsSubject(got[0]), 'a.1');
    assert.equal(left.got.length, 0);
  });

  it('a pull past its expiry takes nothing: it ends with 408 at the next delivery, which goes to the next pull', async () => {
    const { c } = await withMessages(0, { tickMs: 600_000 });
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const late = c.pull('A', 'k', { batch: 1, expires: ns(50) });
    await new Promise((r) => setTimeout(r, 100)); // past its expiry (the point of the test is time passing)
    assert.equal(late.got.length, 0);
    await c.publish('a.1', 'one');
    const got = await c.fetch('A', 'k', { batch: 1, no_wait: true }, 1);
    assert.equal(natsSubject(got[0]), 'a.1');
    assert.deepEqual(
      late.got.map((m) => m.status),
      ['408 Request Timeout'],
    );
  });

  it('sends idle heartbeats while a pull waits', async () => {
    const { c } = await withMessages(0);
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const inbox = c.pull('A', 'k', { batch: 1, expires: ns(5000), idle_heartbeat: ns(100) });
    const got = await inbox.waitFor(1);
    assert.equal(got[0].status, '100 Idle Heartbeat');
    assert.equal(hdr(got[0], 'Nats-Last-Consumer'), '0');
  });

  it('answers bad pull requests with 400 and a pull for a missing consumer with 503', async () => {
    const { c } = await withMessages(1);
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const bad = await c.fetch('A', 'k', '{bad', 1);
    assert.match(bad[0].status!, /^400 Bad Request/);
    const missing = await c.fetch('A', 'nope', { batch: 1 }, 1);
    assert.equal(missing[0].status, '503');
    const plain = await c.fetch('A', 'k', '', 1);
    assert.equal(natsSubject(plain[0]), 'a.1', 'an empty pull body asks for one message');
  });

  it('nak redelivers (with a delay when asked), term drops, working extends the ack wait', async () => {
    const { c } = await withMessages(4);
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit', ack_wait: ns(60_000) } });
    const first = await c.fetch('A', 'k', { batch: 4, no_wait: true }, 4);
    c.ack(first[0], '-NAK');
    c.ack(first[1], '+TERM');
    c.ack(first[2], `-NAK ${JSON.stringify({ delay: ns(300) })}`);
    assert.equal((await c.ackSync(first[3], '+WPI')).payload.length, 0);
    const again = await c.fetch('A', 'k', { batch: 2, expires: ns(8000) }, 2);
    assert.deepEqual(again.map(natsSubject), ['a.1', 'a.3']);
    for (const m of again) assert.equal(ackSubject(m).split('.')[4], '2', 'delivery count 2');
    const info = await c.api('$JS.API.CONSUMER.INFO.A.k');
    assert.equal(info.num_redelivered, 2);
    assert.equal(info.num_ack_pending, 3, 'a.1 and a.3 again, a.4 still being worked on');
    assert.equal(info.delivered.consumer_seq, 6);
    for (const m of again) c.ack(m);
    c.ack(first[3]);
    const done = await c.api('$JS.API.CONSUMER.INFO.A.k');
    assert.equal(done.num_ack_pending, 0);
    assert.equal(done.ack_floor.stream_seq, 4);
    assert.equal(done.ack_floor.consumer_seq, 6);
  });

  it('redelivers after ack_wait until max_deliver, then gives up', async () => {
    const { c } = await withMessages(1);
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit', ack_wait: ns(200), max_deliver: 2 } });
    const one = await c.fetch('A', 'k', { batch: 1, expires: ns(5000) }, 1);
    assert.equal(ackSubject(one[0]).split('.')[4], '1');
    const two = await c.fetch('A', 'k', { batch: 1, expires: ns(5000) }, 1);
    assert.equal(natsSubject(two[0]), 'a.1');
    assert.equal(ackSubject(two[0]).split('.')[4], '2');
    // No third delivery: the pull ends with 408 (expiry) and nothing else; the message left the pending set.
    const end = await c.fetch('A', 'k', { batch: 1, expires: ns(1200) }, 1);
    assert.equal(end[0].status, '408 Request Timeout');
    assert.equal((await c.api('$JS.API.CONSUMER.INFO.A.k')).num_ack_pending, 0);
  });

  it('deliver policies: last, new, by_start_sequence, by_start_time; filter_subject', async () => {
    const { c } = await withMessages(4);
    await new Promise((r) => setTimeout(r, 5));
    const mid = Date.now();
    await new Promise((r) => setTimeout(r, 5));
    await c.publish('a.x', 'late-x');
    await c.publish('a.5', 'm5');
    const make = (name: string, cfg: object) =>
      c.api(`$JS.API.CONSUMER.CREATE.A.${name}`, { stream_name: 'A', config: { durable_name: name, ack_policy: 'explicit', ...cfg } });
    await make('last', { deliver_policy: 'last' });
    await make('new', { deliver_policy: 'new' });
    const seqc = await make('seq', { deliver_policy: 'by_start_sequence', opt_start_seq: 4 });
    assert.equal(seqc.config.opt_start_seq, 4);
    await make('time', { deliver_policy: 'by_start_time', opt_start_time: new Date(mid).toISOString() });
    await make('filt', { filter_subject: 'a.x' });
    await make('lastx', { deliver_policy: 'last', filter_subject: 'a.3' });
    const first = async (name: string) => natsSubject((await c.fetch('A', name, { batch: 1, expires: ns(3000) }, 1))[0]);
    assert.equal(await first('last'), 'a.5');
    assert.equal(await first('seq'), 'a.4');
    assert.equal(await first('time'), 'a.x');
    assert.equal(await first('filt'), 'a.x');
    assert.equal(await first('lastx'), 'a.3');
    const inbox = c.pull('A', 'new', { batch: 1, expires: ns(5000) });
    await c.publish('a.6', 'm6');
    assert.equal(natsSubject((await inbox.waitFor(1))[0]), 'a.6');

    assert.equal((await make('bad', { deliver_policy: 'by_start_sequence' })).error.err_code, 10094);
    assert.equal((await make('bad2', { filter_subject: 'zz.a' })).error.err_code, 10093);
    assert.equal((await make('push', { deliver_subject: 'p.*' })).error.err_code, 10112);
    assert.equal((await make('hb', { idle_heartbeat: ns(1000) })).error.err_code, 10088); // nats-server 2.9.10: consumer idle heartbeat requires a push based consumer
  });

  it('checks names and filters of the create subjects like nats-server', async () => {
    const { c } = await withMessages(0);
    const r1 = await c.api('$JS.API.CONSUMER.CREATE.A.x', { stream_name: 'A', config: { durable_name: 'y', ack_policy: 'explicit' } });
    assert.equal(r1.error.err_code, 10017);
    const r2 = await c.api('$JS.API.CONSUMER.CREATE.A.x.a.b', { stream_name: 'A', config: { name: 'x', filter_subject: 'a.c' } });
    assert.equal(r2.error.err_code, 10131);
    const r3 = await c.api('$JS.API.CONSUMER.CREATE.A', { stream_name: 'A', config: { durable_name: 'y' } });
    assert.equal(r3.error.err_code, 10020);
    const r4 = await c.api('$JS.API.CONSUMER.CREATE.nope.x', { stream_name: 'nope', config: { name: 'x' } });
    assert.equal(r4.error.err_code, 10059);
    const ok = await c.api('$JS.API.CONSUMER.DURABLE.CREATE.A.d', {
      stream_name: 'A',
      config: { durable_name: 'd', ack_policy: 'explicit', ack_wait: ns(1000) },
    });
    assert.equal(ok.name, 'd');
    const upd = await c.api('$JS.API.CONSUMER.CREATE.A.d', { stream_name: 'A', config: { durable_name: 'd', ack_policy: 'explicit', ack_wait: ns(2000) } });
    assert.equal(upd.config.ack_wait, ns(2000), 'ack_wait may change');
    const fixed = await c.api('$JS.API.CONSUMER.CREATE.A.d', {
      stream_name: 'A',
      config: { durable_name: 'd', ack_policy: 'explicit', deliver_policy: 'new' },
    });
    assert.deepEqual(fixed.error, { code: 500, err_code: 10012, description: 'deliver policy can not be updated' });
  });

  it('ephemeral consumers get a generated name and vanish after inactive_threshold', async () => {
    const { c } = await withMessages(1);
    const r = await c.api('$JS.API.CONSUMER.CREATE.A', { stream_name: 'A', config: { ack_policy: 'explicit', inactive_threshold: ns(150) } });
    assert.match(r.name, /^[A-Za-z0-9]{8}$/);
    assert.equal(r.config.inactive_threshold, ns(150));
    assert.equal(r.config.durable_name, undefined);
    const deadline = Date.now() + 10_000;
    while ((await c.api(`$JS.API.CONSUMER.INFO.A.${r.name}`)).error === undefined) {
      assert.ok(Date.now() < deadline, 'the ephemeral consumer should have gone');
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.equal((await c.api(`$JS.API.CONSUMER.INFO.A.${r.name}`)).error.err_code, 10014);
  });

  it('makes consumers on a multi-partition stream too (partitions.test.ts has the rest)', async () => {
    const { c, engine } = await env();
    await engine.createStream({ name: 'P', partitions: 3, bindings: ['p/#'] });
    const info = await c.api('$JS.API.STREAM.INFO.P');
    assert.equal(info.config.name, 'P');
    const r = await c.api('$JS.API.CONSUMER.CREATE.P.k', { stream_name: 'P', config: { durable_name: 'k', ack_policy: 'explicit' } });
    assert.equal(r.error, undefined);
    assert.equal(r.name, 'k');
  });

  it("refuses consumers past the limit with nats-server's 10026", async () => {
    const { c } = await env({ maxConsumers: 2 });
    await c.api('$JS.API.STREAM.CREATE.A', { name: 'A' });
    for (let i = 0; i < 2; i++) assert.equal((await c.api('$JS.API.CONSUMER.CREATE.A', { stream_name: 'A', config: {} })).error, undefined);
    assert.deepEqual((await c.api('$JS.API.CONSUMER.CREATE.A', { stream_name: 'A', config: {} })).error, {
      code: 400,
      err_code: 10026,
      description: 'maximum consumers limit reached',
    });
  });

  it('ack_policy none: nothing waits for an ack', async () => {
    const { c } = await withMessages(2);
    await c.api('$JS.API.CONSUMER.CREATE.A.n', { stream_name: 'A', config: { durable_name: 'n' } });
    await c.fetch('A', 'n', { batch: 2, no_wait: true }, 2);
    const info = await c.api('$JS.API.CONSUMER.INFO.A.n');
    assert.equal(info.config.ack_policy, 'none');
    assert.equal(info.num_ack_pending, 0);
    assert.equal(info.ack_floor.stream_seq, 2);
  });

  it('ack_policy all: one ack covers every earlier delivery', async () => {
    const { c } = await withMessages(3);
    await c.api('$JS.API.CONSUMER.CREATE.A.al', { stream_name: 'A', config: { durable_name: 'al', ack_policy: 'all' } });
    const got = await c.fetch('A', 'al', { batch: 3, no_wait: true }, 3);
    c.ack(got[1]);
    const info = await c.api('$JS.API.CONSUMER.INFO.A.al');
    assert.equal(info.num_ack_pending, 1);
    assert.equal(info.ack_floor.stream_seq, 2);
  });

  it('headers_only: deliveries carry the headers and Nats-Msg-Size, no payload', async () => {
    const { c } = await withMessages(1);
    const r = await c.api('$JS.API.CONSUMER.CREATE.A.h', {
      stream_name: 'A',
      config: { durable_name: 'h', ack_policy: 'explicit', headers_only: true, mem_storage: true },
    });
    assert.equal(r.config.headers_only, true);
    const [m] = await c.fetch('A', 'h', { batch: 1, no_wait: true }, 1);
    assert.equal(m.payload.length, 0);
    assert.equal(hdr(m, 'Nats-Msg-Size'), '2');
  });

  it('push consumers deliver to their subject while someone listens there, with idle heartbeats', async () => {
    const { c, engine } = await withMessages(2);
    const r = await c.api('$JS.API.CONSUMER.CREATE.A.p', {
      stream_name: 'A',
      config: { durable_name: 'p', ack_policy: 'explicit', deliver_subject: 'push.in', idle_heartbeat: ns(100), flow_control: true },
    });
    assert.equal(r.config.deliver_subject, 'push.in');
    assert.equal(r.config.max_waiting, undefined);
    assert.equal(r.push_bound, undefined, 'nobody listens yet');
    const inbox = new Inbox(engine, 'push');
    const got = await inbox.waitFor(2);
    const msgs = got.filter((m) => m.status === undefined);
    assert.deepEqual(msgs.slice(0, 2).map(natsSubject), ['a.1', 'a.2']);
    for (const m of msgs) c.ack(m);
    await c.publish('a.3', 'm3');
    await inbox.waitFor(3);
    const info = await c.api('$JS.API.CONSUMER.INFO.A.p');
    assert.equal(info.push_bound, true);
    const deadline = Date.now() + 10_000;
    while (!inbox.got.some((m) => m.status === '100 Idle Heartbeat')) {
      assert.ok(Date.now() < deadline, 'an idle heartbeat should come');
      await inbox.waitFor(inbox.got.length + 1);
    }
    assert.equal((await c.fetch('A', 'p', { batch: 1 }, 1))[0].status, '409 Consumer is push based');
    assert.equal(
      (await c.api('$JS.API.CONSUMER.CREATE.A.p', { stream_name: 'A', config: { durable_name: 'p', ack_policy: 'explicit' } })).error.err_code,
      10012,
    );
    engine.unsubscribe(inbox.sub);
  });

  it('+NXT acks and asks for the next message on the same reply', async () => {
    const { c, engine } = await withMessages(2);
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const inbox = c.pull('A', 'k', { batch: 1, no_wait: true });
    const [m1] = await inbox.waitFor(1);
    engine.publish(makeMessage(m1.responseTopic!, Buffer.from('+NXT {"batch":1}'), { responseTopic: `${inbox.id.replace('.', '/')}/x` }));
    const got = await inbox.waitFor(2);
    assert.equal(natsSubject(got[1]), 'a.2');
    assert.equal((await c.api('$JS.API.CONSUMER.INFO.A.k')).ack_floor.stream_seq, 1);
  });

  it('deleting the stream deletes its consumers and ends waiting pulls with 409', async () => {
    const { c, engine } = await withMessages(0);
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const inbox = c.pull('A', 'k', { batch: 1, expires: ns(30_000) });
    await c.api('$JS.API.CONSUMER.INFO.A.k');
    await c.api('$JS.API.STREAM.DELETE.A');
    const [end] = await inbox.waitFor(1);
    assert.equal(end.status, '409 Consumer Deleted');
    assert.deepEqual(await engine.store.listConsumers('A'), []);
  });

  it('a stored NATS header block comes back byte for byte in deliveries and STREAM.MSG.GET, rendered again for headers_only', async () => {
    const { c, js } = await env();
    await c.api('$JS.API.STREAM.CREATE.A', { name: 'A', subjects: ['a.>'] });
    const block = Buffer.from('NATS/1.0\r\nX-Key:   spaced  \r\n\r\n');
    const inbox = new Inbox(c.engine, '_INBOX.hb');
    js.publish(
      makeMessage('a/1', Buffer.from('m1'), { headers: [{ key: 'X-Key', value: Buffer.from('spaced') }], natsHeaders: block, responseTopic: '_INBOX/hb/x' }),
      '_INBOX.hb.x',
    );
    assert.equal(JSON.parse((await inbox.waitFor(1))[0].payload.toString()).seq, 1);
    c.engine.unsubscribe(inbox.sub);
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    const [m] = await c.fetch('A', 'k', { batch: 1, no_wait: true }, 1);
    assert.deepEqual(m.natsHeaders, block);
    const got = await c.api('$JS.API.STREAM.MSG.GET.A', { seq: 1 });
    assert.equal(Buffer.from(got.message.hdrs as string, 'base64').toString('latin1'), block.toString('latin1'));
    await c.api('$JS.API.CONSUMER.CREATE.A.h', { stream_name: 'A', config: { durable_name: 'h', ack_policy: 'explicit', headers_only: true } });
    const [h] = await c.fetch('A', 'h', { batch: 1, no_wait: true }, 1);
    assert.equal(h.natsHeaders, undefined);
    assert.equal(hdr(h, 'Nats-Msg-Size'), '2');
  });

  it('a delivery also captured by a stream bound to the inbox arrives when that stream cannot store it; the failure is not left unhandled', async () => {
    const store = new GatedStreams();
    const { c } = await env({}, store);
    await c.api('$JS.API.STREAM.CREATE.A', { name: 'A', subjects: ['a.>'] });
    await c.publish('a.1', 'm1');
    await c.api('$JS.API.CONSUMER.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    await c.api('$JS.API.STREAM.CREATE.IN', { name: 'IN', subjects: ['_INBOX.>'] });
    // Every append fails from here on (a full disk, a fenced owner): the deliveries and API answers to inboxes are
    // captured by IN and its writes are refused.
    store.fail = true;
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown) => unhandled.push(err);
    process.on('unhandledRejection', onUnhandled);
    try {
      const msgs = await c.fetch('A', 'k', { batch: 1, no_wait: true }, 1);
      assert.equal(msgs[0].payload.toString(), 'm1');
      // An API answer after the delivery, also captured by IN, marks that both failed writes have been settled.
      assert.equal((await c.api('$JS.API.CONSUMER.INFO.A.k')).delivered.stream_seq, 1);
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});

describe('JetStream consumer state', () => {
  it('survives a restart: acked messages stay acked, unacked ones come again, the consumer sequence goes on', async () => {
    const first = await setup();
    const { c, m } = first;
    await c.api('$JS.API.STREAM.CREATE.R', { name: 'R', subjects: ['r.>'] });
    for (let i = 1; i <= 5; i++) await c.publish(`r.${i}`, `m${i}`);
    await c.api('$JS.API.CONSUMER.CREATE.R.d', { stream_name: 'R', config: { durable_name: 'd', ack_policy: 'explicit' } });
    const got = await c.fetch('R', 'd', { batch: 4, no_wait: true }, 4);
    c.ack(got[0]);
    c.ack(got[2]);
    await first.js.close();
    first.engine.close();
    const rec = await m.getConsumer('R', 'd');
    assert.deepEqual(
      { floor: rec!.ackFloor, acked: rec!.acked, delivered: rec!.deliveredSeq, cseq: rec!.deliveredConsumerSeq },
      { floor: 1, acked: [3], delivered: 4, cseq: 4 },
    );

    const second = await setup({}, m);
    closers.push(() => second.js.close());
    const info = await second.c.api('$JS.API.CONSUMER.INFO.R.d');
    assert.equal(info.config.durable_name, 'd');
    assert.equal(info.ack_floor.stream_seq, 1);
    const again = await second.c.fetch('R', 'd', { batch: 3, no_wait: true }, 3);
    assert.deepEqual(again.map(natsSubject), ['r.2', 'r.4', 'r.5']);
    assert.deepEqual(
      again.map((x) => ackSubject(x).split('.')[4]),
      ['2', '2', '1'],
      'redeliveries count as such',
    );
    assert.equal(ackSubject(again[0]).split('.')[6], '5', 'consumer sequence continues');
  });
});
