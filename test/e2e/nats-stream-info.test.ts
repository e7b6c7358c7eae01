/**
 * JetStream stream info side by side: the same nats.js calls (jsm.streams.add/update/info with `subjects_filter`,
 * raw STREAM.INFO requests with `offset` and `deleted_details`, bad configurations) run against bin/flowmq and
 * against Debian's nats-server 2.9.10, and the two transcripts must be equal: `state.subjects` and `num_subjects`, the paging fields
 * (total, offset, limit), every configuration field as created and updated (description, memory storage, ...), and
 * the refusals' codes and texts. Absolute checks on the transcript make it fail should both be wrong the same way.
 * Overlapping subjects, bytes and account limits: nats-account.test.ts. Then FlowMQ alone: what a stream was
 * configured with and its subject counts hold over a restart.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, headers, StorageType, StringCodec, type Msg, type NatsConnection } from 'nats';
import { FlowmqProcess } from './harness.js';
import { sideBySide, step, type Entry } from './nats-side-by-side.js';

const sc = StringCodec();

/** A raw JetStream API request's answer. */
async function api(nc: NatsConnection, subject: string, body?: unknown): Promise<Record<string, unknown>> {
  const m = await nc.request(`$JS.API.${subject}`, sc.encode(body === undefined ? '' : JSON.stringify(body)), { timeout: 3000 });
  return JSON.parse(sc.decode(m.data)) as Record<string, unknown>;
}

/** The error of an answer as [code, err_code, description], or 'ok'. */
function outcome(r: Record<string, unknown>): unknown {
  const e = r.error as Record<string, unknown> | undefined;
  return e !== undefined ? [e.code, e.err_code, e.description] : 'ok';
}

/** A STREAM.INFO answer without its times: paging fields, and the state's counts and subjects. */
function infoFigures(r: Record<string, unknown>): unknown {
  if (r.error !== undefined) return outcome(r);
  const s = r.state as Record<string, unknown>;
  return {
    total: r.total,
    offset: r.offset,
    limit: r.limit,
    messages: s.messages,
    num_subjects: s.num_subjects,
    subjects: s.subjects,
  };
}

async function scenario(server: string): Promise<Entry[]> {
  const nc = await connect({ servers: server });
  const jsm = await nc.jetstreamManager();
  const out: Entry[] = [];
  const log = (label: string, v: unknown): void => void out.push([label, v]);
  const raw = async (label: string, subject: string, body?: unknown): Promise<void> => log(label, outcome(await api(nc, subject, body)));
  try {
    // ---------------------------------------------------------------- state.subjects and paging
    await jsm.streams.add({ name: 'SI', subjects: ['si.>'] });
    for (const s of ['si.a', 'si.b', 'si.a', 'si.c.d', 'si.a', 'si.b']) await nc.request(s, sc.encode(s), { timeout: 3000 });
    log('info', infoFigures(await api(nc, 'STREAM.INFO.SI')));
    log('info >', infoFigures(await api(nc, 'STREAM.INFO.SI', { subjects_filter: '>' })));
    log('info si.*', infoFigures(await api(nc, 'STREAM.INFO.SI', { subjects_filter: 'si.*' })));
    log('info si.a', infoFigures(await api(nc, 'STREAM.INFO.SI', { subjects_filter: 'si.a' })));
    log('info no match', infoFigures(await api(nc, 'STREAM.INFO.SI', { subjects_filter: 'other.x' })));
    log('info > offset 1', infoFigures(await api(nc, 'STREAM.INFO.SI', { subjects_filter: '>', offset: 1 })));
    log('info > offset 9', infoFigures(await api(nc, 'STREAM.INFO.SI', { subjects_filter: '>', offset: 9 })));
    log('info offset without filter', infoFigures(await api(nc, 'STREAM.INFO.SI', { offset: 2 })));
    const si = await jsm.streams.info('SI', { subjects_filter: '>' });
    log('jsm info subjects', [si.state.subjects, si.state.num_subjects]);
    await jsm.streams.purge('SI', { filter: 'si.b' });
    log('info > after purge si.b', infoFigures(await api(nc, 'STREAM.INFO.SI', { subjects_filter: '>' })));
    const dd = (await api(nc, 'STREAM.INFO.SI', { deleted_details: true })).state as Record<string, unknown>;
    log('info deleted_details', [dd.first_seq, dd.last_seq, dd.num_deleted, dd.deleted]);
    await jsm.streams.purge('SI');
    log('info > after purge', infoFigures(await api(nc, 'STREAM.INFO.SI', { subjects_filter: '>' })));
    await nc.request('si.z', sc.encode('z'), { timeout: 3000 });
    log('info > after purge and publish', infoFigures(await api(nc, 'STREAM.INFO.SI', { subjects_filter: '>' })));

    // ---------------------------------------------------------------- configuration kept
    const created = await jsm.streams.add({ name: 'CF', subjects: ['cf.a'], description: 'first text', storage: StorageType.Memory });
    log('create config', created.config);
    log('info config', (await jsm.streams.info('CF')).config);
    const updated = await jsm.streams.update('CF', { ...created.config, description: 'second text', subjects: ['cf.a', 'cf.b'] });
    log('update config', updated.config);
    log('info config after update', (await jsm.streams.info('CF')).config);
    log('create again same', outcome(await api(nc, 'STREAM.CREATE.CF', { ...updated.config })));
    log('update without description', (await jsm.streams.update('CF', { ...updated.config, description: undefined })).config);
    const listed = (await api(nc, 'STREAM.LIST')).streams as Array<{ config: { name: string } }>;
    log('list config', listed.find((s) => s.config.name === 'CF')?.config);
    await raw('update storage', 'STREAM.UPDATE.CF', { ...updated.config, storage: 'file' });
    const wide = {
      name: 'WI',
      subjects: ['wi.>'],
      description: 'wide',
      max_msgs: 100,
      max_bytes: 0,
      max_age: 3_600_000_000_000,
      max_msgs_per_subject: 5,
      max_msg_size: 0,
      discard: 'new',
      discard_new_per_subject: true,
      duplicate_window: 30_000_000_000,
      allow_direct: true,
      allow_rollup_hdrs: true,
      deny_delete: true,
      num_replicas: 0,
    };
    log('wide create', (await api(nc, 'STREAM.CREATE.WI', wide)).config);
    const wu = await api(nc, 'STREAM.UPDATE.WI', { ...wide, description: '', max_msgs: 0, deny_purge: true, max_age: 0 });
    log('wide update rollup and deny purge', [outcome(wu), wu.config]);
    const wu2 = await api(nc, 'STREAM.UPDATE.WI', { ...wide, description: '', max_msgs: 0, max_age: 0, allow_rollup_hdrs: false });
    log('wide update', [outcome(wu2), wu2.config]);
    log('wide info', ((await api(nc, 'STREAM.INFO.WI')) as { config: unknown }).config);

    // ---------------------------------------------------------------- republish and no_ack
    const rp = await jsm.streams.add({ name: 'RP', subjects: ['rp.>'], republish: { src: 'rp.*', dest: 'out.{{wildcard(1)}}' } });
    log('republish create', rp.config.republish);
    const got: Msg[] = [];
    const sub = nc.subscribe('out.>', { max: 3, callback: (_e, m) => void got.push(m) });
    const h = headers();
    h.set('X-Own', 'kept');
    nc.publish('rp.a', sc.encode('one'), { headers: h });
    await nc.request('rp.b', sc.encode('two'), { timeout: 3000 });
    // Not matching src (two tokens under rp): stored, not republished.
    await nc.request('rp.c.d', sc.encode('three'), { timeout: 3000 });
    await raw('republish update refused', 'STREAM.UPDATE.RP', { ...rp.config, republish: { src: '>', dest: 'out.x' } });
    const up = await jsm.streams.update('RP', { ...rp.config, description: 'kept' });
    log('republish update', up.config.republish);
    log('republish info', (await jsm.streams.info('RP')).config.republish);
    const ho = await jsm.streams.add({ name: 'HO', subjects: ['ho.*'], republish: { src: 'ho.*', dest: 'out.{{wildcard(1)}}', headers_only: true } });
    log('republish headers_only', ho.config.republish);
    await nc.request('ho.e', sc.encode('four'), { timeout: 3000 });
    await sub.closed;
    const keys = ['Nats-Stream', 'Nats-Subject', 'Nats-Sequence', 'Nats-Last-Sequence', 'Nats-Msg-Size', 'X-Own'];
    log(
      'republished',
      got.map((m) => [m.subject, sc.decode(m.data), keys.map((k) => m.headers?.get(k) ?? '')]),
    );
    await raw('republish cycle', 'STREAM.CREATE.RC', { name: 'RC', subjects: ['rc.>'], republish: { src: '>', dest: 'rc.x' } });
    await raw('republish bad transform', 'STREAM.CREATE.RT', { name: 'RT', subjects: ['rt.>'], republish: { src: 'rt.*', dest: 'o.*.*' } });
    // Republished into a KV bucket's subjects: a direct get (nats.js reads the last Nats-Subject) finds the key.
    await jsm.streams.add({ name: 'RK', subjects: ['rk.>'], republish: { src: '>', dest: '$KV.RKV.>' } });
    const kv = await nc.jetstream().views.kv('RKV');
    nc.publish('rk.orange', sc.encode('hey'));
    await nc.request('rk.tomato', sc.encode('hello'), { timeout: 3000 });
    const entries: unknown[] = [];
    for (const key of ['rk.orange', 'rk.tomato']) {
      // Republished after the store (FlowMQ: by the stream's republisher): polled with a deadline.
      let e = await kv.get(key);
      for (const end = Date.now() + 3000; e === null && Date.now() < end; e = await kv.get(key)) await new Promise((r) => setTimeout(r, 20));
      entries.push(e === null ? null : [e.key, sc.decode(e.value), e.operation]);
    }
    log('republished into kv', entries);
    const na = await jsm.streams.add({ name: 'NA', subjects: ['na'], no_ack: true });
    log('no_ack create', na.config.no_ack);
    nc.publish('na', sc.encode('x'));
    await nc.flush();
    // Stored asynchronously: polled with a deadline.
    let stored = 0;
    for (const end = Date.now() + 3000; stored === 0 && Date.now() < end;) {
      stored = (await jsm.streams.info('NA')).state.messages;
      if (stored === 0) await new Promise((r) => setTimeout(r, 20));
    }
    log('no_ack stored', stored);

    // ---------------------------------------------------------------- refusals
    await raw('update missing stream', 'STREAM.UPDATE.NOPE', { name: 'NOPE', subjects: ['nope'] });
    await raw('info missing stream', 'STREAM.INFO.NOPE', { subjects_filter: '>' });
    await raw('create replicas 3', 'STREAM.CREATE.R3', { name: 'R3', subjects: ['r3'], num_replicas: 3 });
    await raw('create replicas 9', 'STREAM.CREATE.R9', { name: 'R9', subjects: ['r9'], num_replicas: 9 });
    await raw('create dup window over max age', 'STREAM.CREATE.DW', { name: 'DW', subjects: ['dw'], max_age: 1e9, duplicate_window: 5e9 });
    await raw('create api subject', 'STREAM.CREATE.API', { name: 'API', subjects: ['$JS.API.>'] });
    await raw('create repeated subject', 'STREAM.CREATE.RS', { name: 'RS', subjects: ['rs.a', 'rs.a'] });
    await raw('create bad subject', 'STREAM.CREATE.BS', { name: 'BS', subjects: ['bs..a'] });
    await raw('create name mismatch', 'STREAM.CREATE.NM', { name: 'OTHER', subjects: ['nm'] });
    await raw('create negative max age', 'STREAM.CREATE.NA', { name: 'NA', subjects: ['na'], max_age: -1 });
  } finally {
    await nc.close();
  }
  return out;
}

describe('e2e: JetStream stream info, configuration and refusals beside nats-server 2.9.10', () => {
  const t = sideBySide('nats-server-info-', scenario);

  it('answers every step as nats-server does', () => {
    if (process.env.INFO_DEBUG)
      for (let i = 0; i < t.theirs.length; i++) console.log(`OURS   ${JSON.stringify(t.ours[i])}\nTHEIRS ${JSON.stringify(t.theirs[i])}`);
    assert.deepEqual(t.ours, t.theirs);
  });

  it('reports state.subjects by subjects_filter, num_subjects, and pages them as nats-server 2.9 does', () => {
    assert.deepEqual(step(t.ours, 'info'), { total: 0, offset: 0, limit: 0, messages: 6, num_subjects: 3, subjects: undefined });
    assert.deepEqual(step(t.ours, 'info >'), {
      total: 3,
      offset: 0,
      limit: 100000,
      messages: 6,
      num_subjects: 3,
      subjects: { 'si.a': 3, 'si.b': 2, 'si.c.d': 1 },
    });
    assert.deepEqual(step(t.ours, 'info si.*'), { total: 2, offset: 0, limit: 100000, messages: 6, num_subjects: 3, subjects: { 'si.a': 3, 'si.b': 2 } });
    assert.deepEqual(step(t.ours, 'info no match'), { total: 0, offset: 0, limit: 0, messages: 6, num_subjects: 3, subjects: undefined });
    assert.deepEqual(step(t.ours, 'info > offset 1'), {
      total: 3,
      offset: 1,
      limit: 100000,
      messages: 6,
      num_subjects: 3,
      subjects: { 'si.b': 2, 'si.c.d': 1 },
    });
    assert.deepEqual(step(t.ours, 'info > offset 9'), { total: 3, offset: 3, limit: 100000, messages: 6, num_subjects: 3, subjects: undefined });
    assert.deepEqual(step(t.ours, 'jsm info subjects'), [{ 'si.a': 3, 'si.b': 2, 'si.c.d': 1 }, 3]);
    assert.deepEqual((step(t.ours, 'info > after purge si.b') as { subjects: unknown }).subjects, { 'si.a': 3, 'si.c.d': 1 });
    assert.deepEqual(step(t.ours, 'info deleted_details'), [1, 6, 2, [2, 6]]);
    assert.deepEqual((step(t.ours, 'info > after purge and publish') as { subjects: unknown }).subjects, { 'si.z': 1 });
  });

  it('keeps description and memory storage through create, update, info and list', () => {
    const cfg = (label: string) => step(t.ours, label) as { description?: string; storage: string; subjects: string[] };
    assert.deepEqual([cfg('create config').description, cfg('create config').storage], ['first text', 'memory']);
    assert.deepEqual([cfg('info config').description, cfg('info config').storage], ['first text', 'memory']);
    assert.deepEqual([cfg('update config').description, cfg('update config').storage], ['second text', 'memory']);
    assert.deepEqual([cfg('info config after update').description, cfg('info config after update').subjects], ['second text', ['cf.a', 'cf.b']]);
    assert.deepEqual([cfg('update without description').description, cfg('list config').storage], [undefined, 'memory']);
    assert.deepEqual([cfg('wide create').description, (step(t.ours, 'wide info') as { description?: string }).description], ['wide', undefined]);
    assert.deepEqual(step(t.ours, 'update storage'), [500, 10052, 'stream configuration update can not change storage type']);
  });

  it('republishes stored messages with the stream headers, keeps the configuration, and stores no_ack streams', () => {
    assert.deepEqual(step(t.ours, 'republish create'), { src: 'rp.*', dest: 'out.{{wildcard(1)}}' });
    assert.deepEqual(step(t.ours, 'republish info'), { src: 'rp.*', dest: 'out.{{wildcard(1)}}' });
    assert.deepEqual(step(t.ours, 'republish update refused'), [500, 10052, 'stream configuration for republish not valid']);
    assert.deepEqual(step(t.ours, 'republished'), [
      ['out.a', 'one', ['RP', 'rp.a', '1', '0', '', 'kept']],
      ['out.b', 'two', ['RP', 'rp.b', '2', '0', '', '']],
      ['out.e', '', ['HO', 'ho.e', '1', '0', '4', '']],
    ]);
    assert.deepEqual(step(t.ours, 'republish cycle'), [500, 10052, 'stream configuration for republish destination forms a cycle']);
    assert.deepEqual([step(t.ours, 'no_ack create'), step(t.ours, 'no_ack stored')], [true, 1]);
    assert.deepEqual(step(t.ours, 'republished into kv'), [
      ['rk.orange', 'hey', 'PUT'],
      ['rk.tomato', 'hello', 'PUT'],
    ]);
  });

  it('refuses bad configurations with nats-server’s codes and texts', () => {
    assert.deepEqual(step(t.ours, 'create replicas 3'), [500, 10074, 'replicas > 1 not supported in non-clustered mode']);
    assert.deepEqual(step(t.ours, 'create replicas 9'), [500, 10052, 'maximum replicas is 5']);
    assert.deepEqual(step(t.ours, 'create dup window over max age'), [500, 10052, 'duplicates window can not be larger then max age']);
    assert.deepEqual(step(t.ours, 'create api subject'), [500, 10052, 'subjects overlap with jetstream api']);
    assert.deepEqual(step(t.ours, 'create repeated subject'), [500, 10052, 'duplicate subjects detected']);
    assert.deepEqual(step(t.ours, 'create bad subject'), [500, 10052, 'invalid subject']);
    assert.deepEqual(step(t.ours, 'create negative max age'), [500, 10052, 'duplicates window can not be negative']);
    assert.deepEqual(step(t.ours, 'wide update rollup and deny purge'), [[500, 10052, 'roll-ups require the purge permission'], undefined]);
  });
});

describe('e2e: FlowMQ stream configuration and subject counts over a restart', () => {
  let broker: FlowmqProcess;
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('keeps description, memory storage and the counts per subject', async () => {
    broker = await FlowmqProcess.start();
    let nc = await connect({ servers: broker.natsServer });
    let jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: 'RR', subjects: ['rr.*'], description: 'kept', storage: StorageType.Memory });
    for (const s of ['rr.a', 'rr.b', 'rr.a']) await nc.request(s, sc.encode(s), { timeout: 3000 });
    await nc.close();
    broker = await broker.restart();
    nc = await connect({ servers: broker.natsServer });
    jsm = await nc.jetstreamManager();
    await nc.request('rr.c', sc.encode('c'), { timeout: 3000 });
    const si = await jsm.streams.info('RR', { subjects_filter: '>' });
    assert.deepEqual(
      [si.config.description, si.config.storage, si.state.num_subjects, si.state.subjects],
      ['kept', 'memory', 3, { 'rr.a': 2, 'rr.b': 1, 'rr.c': 1 }],
    );
    await nc.close();
  });
});
