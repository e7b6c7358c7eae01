/**
 * The JetStream account side by side: the same nats.js scenario runs against bin/flowmq and against Debian's
 * nats-server 2.9.10, and the two transcripts must be equal: `$JS.API.INFO` (jsm.getAccountInfo) with its usage and
 * limits, `state.bytes` of file, memory and limited streams (with and without headers), subjects overlapping another
 * stream's refused on create and update (10065), a mirror's mirror_direct and the direct gets it answers for its
 * origin, and an account's limits (FlowMQ: the namespace's quotas; nats-server: the account's `jetstream` block)
 * refused with nats-server's codes and texts. Absolute checks on the transcript make it fail should both be wrong
 * the same way. Then FlowMQ alone: a stream bound by another protocol may share filters with a JetStream stream.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, headers, StringCodec, type NatsConnection } from 'nats';
import { eventually, FlowmqProcess } from './harness.js';
import { startNatsServerJs, step, type Entry, type NatsServerJs } from './nats-side-by-side.js';

const sc = StringCodec();

/**
 * nats-server: anonymous clients in account A (no limits), user t in account T with these JetStream limits, user u
 * in account U with only a storage limit.
 */
const ACCOUNTS = `no_auth_user: a
accounts {
  A: { jetstream: enabled, users: [{ user: a, password: a }] }
  T: {
    jetstream: { max_streams: 2, max_consumers: 1, max_file: 2000, max_mem: 1000, max_bytes_required: true,
                 store_max_stream_bytes: 1500, memory_max_stream_bytes: 1500, max_ack_pending: 50 }
    users: [{ user: t, password: t }]
  }
  U: { jetstream: { max_file: 300 }, users: [{ user: u, password: u }] }
}
`;

/** FlowMQ: the same limits as quotas of namespaces `team` (user t) and `small` (user u). */
const QUOTAS = { maxStreams: 2, maxConsumers: 1, maxStorageBytes: 2000, maxMemoryBytes: 1000, maxBytesRequired: 1, maxStreamBytes: 1500, maxAckPending: 50 };

async function api(nc: NatsConnection, subject: string, body?: unknown): Promise<Record<string, unknown>> {
  const m = await nc.request(`$JS.API.${subject}`, sc.encode(body === undefined ? '' : JSON.stringify(body)), { timeout: 3000 });
  return JSON.parse(sc.decode(m.data)) as Record<string, unknown>;
}

function outcome(r: Record<string, unknown>): unknown {
  const e = r.error as Record<string, unknown> | undefined;
  return e !== undefined ? [e.code, e.err_code, e.description] : 'ok';
}

/** An account info answer without its API counters (they count different requests: nats.js's own look-ups). */
function account(r: Record<string, unknown>): unknown {
  const { api: _a, type: _t, ...rest } = r;
  return rest;
}

async function pub(nc: NatsConnection, subject: string, data: string, hdrs?: Record<string, string>): Promise<void> {
  const h = headers();
  for (const [k, v] of Object.entries(hdrs ?? {})) h.set(k, v);
  await nc.request(subject, sc.encode(data), { timeout: 3000, ...(hdrs !== undefined ? { headers: h } : {}) });
}

/** A JetStream publish's answer: its sequence, or its error. */
async function pubAck(nc: NatsConnection, subject: string, data: string): Promise<unknown> {
  const j = JSON.parse(sc.decode((await nc.request(subject, sc.encode(data), { timeout: 3000 })).data)) as Record<string, unknown>;
  return j.error !== undefined ? [j.stream, outcome(j)] : j.seq;
}

/** A direct get's answer: [Nats-Stream, Nats-Sequence, data], or the status it failed with. */
async function directGet(nc: NatsConnection, stream: string, seq: number): Promise<unknown> {
  try {
    const m = await nc.request(`$JS.API.DIRECT.GET.${stream}`, sc.encode(JSON.stringify({ seq })), { timeout: 3000 });
    if (m.headers?.hasError) return m.headers.code;
    return [m.headers?.get('Nats-Stream'), m.headers?.get('Nats-Sequence'), sc.decode(m.data)];
  } catch (err) {
    return (err as { code?: string }).code;
  }
}

async function bytes(nc: NatsConnection, stream: string): Promise<unknown> {
  return ((await api(nc, `STREAM.INFO.${stream}`)).state as { bytes: number }).bytes;
}

/** FlowMQ's sequences where they differ from nats-server's (see the scenario). */
const seqs: unknown[] = [];

async function scenario(server: string): Promise<Entry[]> {
  const out: Entry[] = [];
  const log = (label: string, v: unknown): void => void out.push([label, v]);
  const nc = await connect({ servers: server });
  const raw = async (label: string, subject: string, body?: unknown): Promise<void> => log(label, outcome(await api(nc, subject, body)));
  try {
    const jsm = await nc.jetstreamManager();
    log('account empty', account((await api(nc, 'INFO')) as Record<string, unknown>));

    // ---------------------------------------------------------------- state.bytes, account storage and memory
    await raw('create file', 'STREAM.CREATE.BY', { name: 'BY', subjects: ['by.>'] });
    await raw('create memory', 'STREAM.CREATE.BM', { name: 'BM', subjects: ['bm.>'], storage: 'memory' });
    await raw('create limited', 'STREAM.CREATE.BL', { name: 'BL', subjects: ['bl.>'], max_msgs: 2 });
    for (const p of ['by', 'bm', 'bl']) {
      await pub(nc, `${p}.a`, 'hello');
      await pub(nc, `${p}.bb`, 'with headers', { 'X-One': '1', 'X-Two': 'two' });
      await pub(nc, `${p}.c`, '');
    }
    for (const s of ['BY', 'BM', 'BL']) log(`bytes ${s}`, await bytes(nc, s));
    const ai = await jsm.getAccountInfo();
    log('jsm account info', [ai.memory, ai.storage, ai.streams, ai.consumers, ai.limits]);

    // ---------------------------------------------------------------- overlapping subjects
    await raw('create overlapping one subject', 'STREAM.CREATE.OV', { name: 'OV', subjects: ['by.x'] });
    await raw('create overlapping wildcard', 'STREAM.CREATE.OV', { name: 'OV', subjects: ['ov', '*.q'] });
    await raw('create beside', 'STREAM.CREATE.OV', { name: 'OV', subjects: ['by'] });
    await raw('update overlapping', 'STREAM.UPDATE.OV', { name: 'OV', subjects: ['by', 'bm.>'] });
    await raw('update beside', 'STREAM.UPDATE.OV', { name: 'OV', subjects: ['by', 'ov.z'] });
    await raw('update own subjects again', 'STREAM.UPDATE.BY', { name: 'BY', subjects: ['by.>'] });

    // ---------------------------------------------------------------- mirror_direct
    await raw('mirror direct without mirror', 'STREAM.CREATE.MX', { name: 'MX', subjects: ['mx'], mirror_direct: true });
    await raw('create direct origin', 'STREAM.CREATE.DG', { name: 'DG', subjects: ['dg.>'], allow_direct: true });
    for (const d of ['1', '2', '3']) await pub(nc, 'dg.a', d);
    const dgm = await api(nc, 'STREAM.CREATE.DGM', { name: 'DGM', mirror: { name: 'DG' } });
    log('mirror of a direct origin', (dgm.config as { mirror_direct: unknown }).mirror_direct);
    const byn = await api(nc, 'STREAM.CREATE.BYM', { name: 'BYM', mirror: { name: 'BY' }, mirror_direct: true });
    log('mirror of a plain origin', (byn.config as { mirror_direct: unknown }).mirror_direct);
    await eventually(async () => ((await api(nc, 'STREAM.INFO.DGM')).state as { messages: number }).messages === 3, 10_000, 'mirror DGM copied');
    const asked = await directGet(nc, 'DG', 2);
    log('direct get from origin or mirror', Array.isArray(asked) && ['DG', 'DGM'].includes(asked[0] as string) ? asked.slice(1) : asked);
    const dg = (await api(nc, 'STREAM.INFO.DG')).config as Record<string, unknown>;
    await raw('origin stops direct gets', 'STREAM.UPDATE.DG', { ...dg, allow_direct: false });
    log('direct get answered by the mirror', await directGet(nc, 'DG', 2));
    log('mirror after origin update', ((await api(nc, 'STREAM.INFO.DGM')).config as { mirror_direct: unknown }).mirror_direct);
  } finally {
    await nc.close();
  }

  // ---------------------------------------------------------------- an account with limits
  const tc = await connect({ servers: server, user: 't', pass: 't' });
  const rawT = async (label: string, subject: string, body?: unknown): Promise<void> => log(label, outcome(await api(tc, subject, body)));
  try {
    log('limited account', account(await api(tc, 'INFO')));
    await rawT('without max_bytes', 'STREAM.CREATE.L1', { name: 'L1', subjects: ['l1'] });
    await rawT('over stream bytes', 'STREAM.CREATE.L1', { name: 'L1', subjects: ['l1'], max_bytes: 1600 });
    await rawT('create L1', 'STREAM.CREATE.L1', { name: 'L1', subjects: ['l1'], max_bytes: 1200 });
    await rawT('over storage', 'STREAM.CREATE.L2', { name: 'L2', subjects: ['l2'], max_bytes: 1000 });
    await rawT('create L2', 'STREAM.CREATE.L2', { name: 'L2', subjects: ['l2'], max_bytes: 800 });
    await rawT('third stream', 'STREAM.CREATE.L3', { name: 'L3', subjects: ['l3'], max_bytes: 10 });
    await rawT('delete L2', 'STREAM.DELETE.L2');
    await rawT('over memory', 'STREAM.CREATE.M1', { name: 'M1', subjects: ['m1'], max_bytes: 1200, storage: 'memory' });
    await rawT('create M1', 'STREAM.CREATE.M1', { name: 'M1', subjects: ['m1'], max_bytes: 900, storage: 'memory' });
    await rawT('update over stream bytes', 'STREAM.UPDATE.L1', { name: 'L1', subjects: ['l1'], max_bytes: 2500 });
    await rawT('update without max_bytes', 'STREAM.UPDATE.L1', { name: 'L1', subjects: ['l1'] });
    await rawT('update L1', 'STREAM.UPDATE.L1', { name: 'L1', subjects: ['l1'], max_bytes: 1400 });
    const cc = (name: string, extra: Record<string, unknown> = {}) => ({
      stream_name: 'L1',
      config: { durable_name: name, ack_policy: 'explicit', ...extra },
    });
    await rawT('consumer over max ack pending', 'CONSUMER.DURABLE.CREATE.L1.C1', cc('C1', { max_ack_pending: 100 }));
    const c1 = await api(tc, 'CONSUMER.DURABLE.CREATE.L1.C1', cc('C1'));
    log('consumer with the account max ack pending', [outcome(c1), (c1.config as { max_ack_pending?: number } | undefined)?.max_ack_pending]);
    await rawT('consumer again', 'CONSUMER.DURABLE.CREATE.L1.C1', cc('C1', { max_ack_pending: 50 }));
    await rawT('second consumer', 'CONSUMER.DURABLE.CREATE.L1.C2', cc('C2'));
    log('limited account after', account(await api(tc, 'INFO')));
  } finally {
    await tc.close();
  }

  // ---------------------------------------------------------------- publishes over the account's storage
  const uc = await connect({ servers: server, user: 'u', pass: 'u' });
  try {
    log('create U1', outcome(await api(uc, 'STREAM.CREATE.U1', { name: 'U1', subjects: ['u1.*'] })));
    const acks: unknown[] = [];
    // 84 bytes each (22 + 4 + 50 + 8): three fit in 300, the fourth is refused; a 35-byte one still fits.
    for (let i = 0; i < 4; i++) acks.push(await pubAck(uc, 'u1.a', 'x'.repeat(50)));
    log('publishes over max_storage', acks);
    // nats-server stored the refused message before removing it: its sequence is a gap; FlowMQ did not store it.
    const next = await pubAck(uc, 'u1.b', 'y');
    log('publish after the refusal', typeof next === 'number' ? 'stored' : next);
    seqs.push(next);
    const st = (await api(uc, 'STREAM.INFO.U1')).state as { messages: number; bytes: number };
    log('stream over max_storage', [st.messages, st.bytes]);
    log('account over max_storage', account(await api(uc, 'INFO')));
  } finally {
    await uc.close();
  }
  return out;
}

describe('e2e: JetStream account info, limits, bytes, overlapping subjects and mirror_direct beside nats-server 2.9.10', () => {
  let broker: FlowmqProcess;
  let server: NatsServerJs | undefined;
  let ours: Entry[];
  let theirs: Entry[];

  before(async () => {
    broker = await FlowmqProcess.start();
    // Nobody exists yet: loopback may use the admin API to make the first user, an admin who makes the rest.
    await broker.api('POST', '/api/v1/users', { username: 'admin', password: 'admin-pw', groups: ['admins'] });
    broker.credentials = { username: 'admin', password: 'admin-pw' };
    await broker.api('POST', '/api/v1/namespaces', { name: 'team', quotas: QUOTAS });
    await broker.api('POST', '/api/v1/users', { username: 't', password: 't', namespace: 'team' });
    await broker.api('POST', '/api/v1/namespaces', { name: 'small', quotas: { maxStorageBytes: 300 } });
    await broker.api('POST', '/api/v1/users', { username: 'u', password: 'u', namespace: 'small' });
    server = await startNatsServerJs('nats-server-account-', ACCOUNTS);
    ours = await scenario(broker.natsServer);
    theirs = await scenario(server.url);
  });
  after(async () => {
    server?.stop();
    await broker?.stop();
    broker?.cleanup();
  });

  it('answers every step as nats-server does', () => {
    if (process.env.INFO_DEBUG) for (let i = 0; i < theirs.length; i++) console.log(`OURS   ${JSON.stringify(ours[i])}\nTHEIRS ${JSON.stringify(theirs[i])}`);
    assert.deepEqual(ours, theirs);
  });

  it('counts bytes as nats-server 2.9 does: file records, memory records, only what a limited stream keeps', () => {
    // The header block nats.js sends for two headers: NATS/1.0, two header lines, the empty line.
    const hdr = 'NATS/1.0\r\nX-One: 1\r\nX-Two: two\r\n\r\n'.length;
    const file = (subj: string, h: number, data: string) => 22 + subj.length + (h > 0 ? 4 + h : 0) + data.length + 8;
    const mem = (subj: string, h: number, data: string) => subj.length + h + data.length + 16;
    const by = file('by.a', 0, 'hello') + file('by.bb', hdr, 'with headers') + file('by.c', 0, '');
    const bm = mem('bm.a', 0, 'hello') + mem('bm.bb', hdr, 'with headers') + mem('bm.c', 0, '');
    const bl = file('bl.bb', hdr, 'with headers') + file('bl.c', 0, '');
    assert.deepEqual([step(ours, 'bytes BY'), step(ours, 'bytes BM'), step(ours, 'bytes BL')], [by, bm, bl]);
    assert.deepEqual((step(ours, 'jsm account info') as unknown[]).slice(0, 4), [bm, by + bl, 3, 0]);
  });

  it('refuses overlapping subjects and answers direct gets from a mirror_direct mirror', () => {
    const overlap = [400, 10065, 'subjects overlap with an existing stream'];
    for (const l of ['create overlapping one subject', 'create overlapping wildcard', 'update overlapping']) assert.deepEqual(step(ours, l), overlap);
    for (const l of ['create beside', 'update beside', 'update own subjects again']) assert.equal(step(ours, l), 'ok');
    assert.deepEqual([step(ours, 'mirror of a direct origin'), step(ours, 'mirror of a plain origin')], [true, false]);
    assert.deepEqual(step(ours, 'direct get answered by the mirror'), ['DGM', '2', '2']);
  });

  it('takes the namespace quotas as the account limits, with nats-server errors', () => {
    const limited = step(ours, 'limited account after') as { streams: number; consumers: number; limits: Record<string, unknown> };
    assert.deepEqual([limited.streams, limited.consumers, limited.limits.max_streams, limited.limits.max_bytes_required], [2, 1, 2, true]);
    assert.deepEqual(step(ours, 'without max_bytes'), [400, 10113, 'account requires a stream config to have max bytes set']);
    assert.deepEqual(step(ours, 'over storage'), [500, 10047, 'insufficient storage resources available']);
    assert.deepEqual(step(ours, 'over memory'), [500, 10028, 'insufficient memory resources available']);
    assert.deepEqual(step(ours, 'third stream'), [400, 10027, 'maximum number of streams reached']);
    assert.deepEqual(step(ours, 'second consumer'), [400, 10026, 'maximum consumers limit reached']);
    assert.deepEqual(step(ours, 'consumer with the account max ack pending'), ['ok', 50]);
    const over = ['U1', [400, 10002, 'resource limits exceeded for account']];
    assert.deepEqual(step(ours, 'publishes over max_storage'), [1, 2, 3, over]);
    assert.deepEqual([step(ours, 'publish after the refusal'), seqs], ['stored', [4, 5]]);
    assert.deepEqual(step(ours, 'stream over max_storage'), [4, 3 * 84 + 35]);
  });
});
