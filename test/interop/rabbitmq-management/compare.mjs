// Side-by-side shapes of the RabbitMQ management API: the same objects are made on RabbitMQ and on FlowMQ with
// amqplib, then every endpoint's JSON is compared field by field (names and JSON types; values are not, they
// differ by nature: ports, names, times). Prints one line per difference and a summary; exit 1 on a status
// mismatch or a field FlowMQ lacks that is not listed in KNOWN_ABSENT (the documented gaps of docs/amqp.md).
//
//   node compare.mjs <rabbit http base> <rabbit amqp url> <flowmq http base> <flowmq amqp url>
//   (http bases with credentials: http://guest:guest@localhost:15672)
import amqp from 'amqplib';

const [rabbitHttp, rabbitAmqp, flowHttp, flowAmqp] = process.argv.slice(2);
if (!flowAmqp) {
  console.error('usage: node compare.mjs <rabbit http> <rabbit amqp> <flowmq http> <flowmq amqp>');
  process.exit(2);
}

/**
 * Fields RabbitMQ 3.10 has and FlowMQ does not report, as docs/amqp.md lists them: Erlang runtime internals
 * (garbage collection, reductions, memory per process, mnesia, message store and queue index I/O, context switches),
 * churn and per-object-kind creation counters, paging (RAM/disk message split), per-exchange and per-channel
 * message_stats, consumer utilisation, and a few node fields (files, applications, cluster links).
 */
const KNOWN_ABSENT = new Set([
  'garbage_collection',
  'reductions',
  'reductions_details',
  'memory',
  'backing_queue_status',
  'idle_since',
  'head_message_timestamp',
  'recoverable_slaves',
  'consumer_capacity',
  'consumer_utilisation',
  'deliveries',
  'incoming',
  'outgoing',
  'messages_paged_out',
  'messages_persistent',
  'messages_ram',
  'messages_ready_ram',
  'messages_unacknowledged_ram',
  'message_bytes_paged_out',
  'message_bytes_persistent',
  'message_bytes_ram',
  'message_stats',
  'disk_reads',
  'disk_reads_details',
  'disk_writes',
  'disk_writes_details',
  'recv_oct',
  'recv_oct_details',
  'send_oct',
  'send_oct_details',
  'sample_retention_policies',
  'churn_rates',
  'release_series_support_status',
  'mem_calculation_strategy',
  'mem_used_details',
  'fd_used_details',
  'sockets_used_details',
  'proc_used_details',
  'disk_free_details',
  'io_*',
  'mnesia_*',
  'msg_store_*',
  'queue_index_*',
  'gc_*',
  'context_switches',
  'context_switches_details',
  'connection_created',
  'connection_created_details',
  'connection_closed',
  'connection_closed_details',
  'channel_created',
  'channel_created_details',
  'channel_closed',
  'channel_closed_details',
  'queue_declared',
  'queue_declared_details',
  'queue_created',
  'queue_created_details',
  'queue_deleted',
  'queue_deleted_details',
  'metrics_gc_queue_length',
  'applications',
  'contexts',
  'log_files',
  'config_files',
  'db_dir',
  'cluster_links',
  'ra_open_file_metrics',
  // cluster_state is keyed by node name, which differs by nature.
  'rabbit@*',
  'rmqcmp@*',
]);
// What is truly reported as absent is printed; the set above only decides the exit status.

const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
const diffs = [];
let hardFailures = 0;

function compare(path, r, f, depth = 0) {
  if (typeOf(r) !== typeOf(f)) {
    // RabbitMQ reports a rate as 0.0 (a float) and FlowMQ as 0: both are JSON numbers; null vs a value is noted.
    diffs.push(`${path}: RabbitMQ ${typeOf(r)}, FlowMQ ${typeOf(f)}`);
    return;
  }
  if (typeOf(r) !== 'object' || depth > 2) return;
  for (const k of Object.keys(r)) {
    if (!(k in f)) {
      const known = KNOWN_ABSENT.has(k) || [...KNOWN_ABSENT].some((p) => p.endsWith('*') && k.startsWith(p.slice(0, -1)));
      diffs.push(`${path}.${k}: absent in FlowMQ${known ? ' (documented)' : ''}`);
      if (!known) hardFailures++;
      continue;
    }
    compare(`${path}.${k}`, r[k], f[k], depth + 1);
  }
  for (const k of Object.keys(f)) if (!(k in r) && !k.includes('@')) diffs.push(`${path}.${k}: FlowMQ only`);
}

async function setUp(url) {
  const conn = await amqp.connect(url, { clientProperties: { connection_name: 'shape-compare' } });
  const ch = await conn.createChannel();
  await ch.assertExchange('cmp-x', 'topic', { durable: true });
  await ch.assertQueue('cmp-q', { durable: true });
  await ch.purgeQueue('cmp-q');
  await ch.bindQueue('cmp-q', 'cmp-x', 'a.*');
  for (let i = 0; i < 3; i++) ch.publish('cmp-x', 'a.b', Buffer.from(`m${i}`));
  await ch.assertQueue('cmp-q'); // a round trip: the publishes are in
  // A stream queue and a super stream laid out as `rabbitmq-streams add_super_stream cmp-ss --partitions 2` does.
  const conf = await conn.createConfirmChannel();
  await conf.assertQueue('cmp-sq', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '7D' } });
  await conf.assertExchange('cmp-ss', 'direct', { durable: true, arguments: { 'x-super-stream': true } });
  for (const i of [0, 1]) {
    await conf.assertQueue(`cmp-ss-${i}`, { durable: true, arguments: { 'x-queue-type': 'stream' } });
    await conf.bindQueue(`cmp-ss-${i}`, 'cmp-ss', String(i), { 'x-stream-partition-order': i });
  }
  for (let i = 0; i < 3; i++) conf.sendToQueue('cmp-sq', Buffer.from(`s${i}`));
  conf.publish('cmp-ss', '1', Buffer.from('p1'));
  await conf.waitForConfirms();
  await conf.close();
  const sub = await conn.createChannel();
  await sub.prefetch(1);
  await sub.consume('cmp-q', () => undefined, { consumerTag: 'cmp-tag' });
  await new Promise((r) => setTimeout(r, 6000)); // two management samples (RabbitMQ collects every 5 s)
  return conn;
}

function split(base) {
  const u = new URL(base);
  const auth = 'Basic ' + Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64');
  u.username = '';
  u.password = '';
  return { origin: u.origin, auth };
}

async function get(base, path, method = 'GET', body) {
  const { origin, auth } = split(base);
  const res = await fetch(origin + path, {
    method,
    headers: { authorization: auth, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let json = null;
  try {
    json = text === '' ? null : JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json };
}

const pick = (json, pred) => (Array.isArray(json) ? (json.find(pred) ?? json[0]) : json);

const CASES = [
  ['/api/overview'],
  ['/api/queues', (x) => x.name === 'cmp-q'],
  ['/api/queues/%2F/cmp-q'],
  ['/api/exchanges', (x) => x.name === 'cmp-x'],
  ['/api/exchanges/%2F/cmp-x'],
  ['/api/bindings', (x) => x.source === 'cmp-x'],
  ['/api/bindings/%2F', (x) => x.source === ''],
  ['/api/connections', (x) => x.client_properties?.connection_name === 'shape-compare'],
  ['/api/channels', (x) => x.consumer_count === 1],
  ['/api/consumers', (x) => x.consumer_tag === 'cmp-tag'],
  ['/api/vhosts'],
  ['/api/nodes'],
  ['/api/whoami'],
  ['/api/aliveness-test/%2F'],
  ['/api/health/checks/alarms'],
  ['/api/health/checks/local-alarms'],
  ['/api/health/checks/virtual-hosts'],
  ['/api/health/checks/protocol-listener/amqp'],
  ['/api/health/checks/protocol-listener/stomp'],
  ['/api/health/checks/port-listener/1'],
  ['/api/queues', (x) => x.name === 'cmp-sq'],
  ['/api/queues/%2F/cmp-sq'],
  ['/api/queues', (x) => x.name === 'cmp-ss-0'],
  ['/api/queues/%2F/cmp-ss-1'],
  ['/api/queues/%2F/cmp-ss'],
  ['/api/exchanges/%2F/cmp-ss/bindings/source'],
  ['/api/bindings', (x) => x.source === 'cmp-ss'],
  ['/api/queues/%2F/no-such-queue'],
  ['/api/queues/no-such-vhost/cmp-q'],
];

/** A hash RabbitMQ 3.10.8 made of the password "p1" (GET /api/users after PUT {"password":"p1"}). */
const RABBIT_HASH = 'xLrBTbVBTCuLhgwbkwg8NhbGn/frG7EittRDT58aXCv2kAhg';
const DEFINITIONS = {
  users: [{ name: 'cmp-imp', password_hash: RABBIT_HASH, hashing_algorithm: 'rabbit_password_hashing_sha256', tags: ['management'] }],
  vhosts: [{ name: '/' }],
  permissions: [{ user: 'cmp-imp', vhost: '/', configure: '', write: '', read: '^cmp-iq$' }],
  topic_permissions: [{ user: 'cmp-imp', vhost: '/', exchange: 'amq.topic', write: '^a', read: '^b' }],
  policies: [{ vhost: '/', name: 'cmp-ip', pattern: '^cmp-iq$', 'apply-to': 'queues', definition: { 'max-length': 3 }, priority: 0 }],
  queues: [
    { name: 'cmp-iq', vhost: '/', durable: true, auto_delete: false, arguments: {} },
    { name: 'cmp-is', vhost: '/', durable: true, auto_delete: false, arguments: { 'x-queue-type': 'stream', 'x-max-age': '7D' } },
  ],
  exchanges: [{ name: 'cmp-ix', vhost: '/', type: 'fanout', durable: true, auto_delete: false, internal: false, arguments: {} }],
  bindings: [
    { source: 'cmp-ix', vhost: '/', destination: 'cmp-iq', destination_type: 'queue', routing_key: '', arguments: {} },
    { source: 'cmp-nox', vhost: '/', destination: 'cmp-iq', destination_type: 'queue', routing_key: '', arguments: {} },
  ],
};

/**
 * A max-length policy as amqplib sees it: 5 publishes to a queue the policy (max-length 2, operator max-length 5)
 * matches, one whose own x-max-length 4 is larger; the counts left and the policy fields /api/queues shows.
 */
async function policyEffect(amqpUrl, httpBase) {
  const conn = await amqp.connect(amqpUrl);
  try {
    const ch = await conn.createConfirmChannel();
    await ch.assertQueue('cmp-pq2', { durable: true });
    for (let i = 0; i < 5; i++) {
      ch.sendToQueue('cmp-pq1', Buffer.from(`m${i}`));
      ch.sendToQueue('cmp-pq2', Buffer.from(`m${i}`));
    }
    await ch.waitForConfirms();
    const counts = [(await ch.checkQueue('cmp-pq1')).messageCount, (await ch.checkQueue('cmp-pq2')).messageCount];
    await new Promise((r) => setTimeout(r, 5500)); // RabbitMQ's management figures are sampled every 5 s
    const q = (await get(httpBase, '/api/queues/%2F/cmp-pq1')).json;
    return { counts, policy: q.policy, operator_policy: q.operator_policy, effective_policy_definition: q.effective_policy_definition };
  } finally {
    await conn.close();
  }
}

/** Logs in over AMQP as a user the definitions import made (RabbitMQ's hash of "p1"): true when it works. */
async function importedLogin(amqpUrl) {
  const u = new URL(amqpUrl);
  u.username = 'cmp-imp';
  u.password = 'p1';
  try {
    await (await amqp.connect(u.toString())).close();
    return true;
  } catch {
    return false;
  }
}

/**
 * Topic permissions as amqplib sees them: a user with every permission and topic permissions on amq.topic
 * (`^{username}\.`), a topic exchange (`^ok\.`) and a direct one (where they do not apply) binds and publishes;
 * each step's outcome (ok or the channel's error text), what reached the queue, and an AMQP login refused at
 * connection.open to a user without permissions.
 */
async function topicEffect(amqpUrl, httpBase) {
  const json = (method, path, body) => get(httpBase, path, method, body);
  await json('PUT', '/api/users/cmp-t', { password: 'cmp-t-pw', tags: '' });
  await json('PUT', '/api/users/cmp-t0', { password: 'cmp-t-pw', tags: '' });
  await json('PUT', '/api/permissions/%2F/cmp-t', { configure: '.*', write: '.*', read: '.*' });
  for (const [exchange, re] of [
    ['amq.topic', '^{username}\\.'],
    ['cmp-tx', '^ok\\.'],
    ['cmp-tdx', '^ok\\.'],
  ])
    await json('PUT', '/api/topic-permissions/%2F/cmp-t', { exchange, write: re, read: re });
  const admin = await amqp.connect(amqpUrl);
  const as = (user) => {
    const u = new URL(amqpUrl);
    u.username = user;
    u.password = 'cmp-t-pw';
    return u.toString();
  };
  const out = [];
  try {
    const a = await admin.createChannel();
    await a.assertExchange('cmp-tx', 'topic', { durable: true });
    await a.assertExchange('cmp-ty', 'topic', { durable: true });
    await a.assertExchange('cmp-tdx', 'direct', { durable: true });
    await a.assertQueue('cmp-tq', { durable: true });
    await a.bindQueue('cmp-tq', 'cmp-tdx', 'bad.1');
    const t = await amqp.connect(as('cmp-t'));
    const attempt = async (what, fn) => {
      const c = await t.createChannel();
      c.on('error', () => undefined);
      try {
        await fn(c);
        await c.close();
        out.push(`${what}: ok`);
      } catch (e) {
        out.push(`${what}: ${e.message}`);
      }
    };
    await attempt('bind cmp-tx ok.#', (c) => c.bindQueue('cmp-tq', 'cmp-tx', 'ok.#'));
    await attempt('bind cmp-tx bad.#', (c) => c.bindQueue('cmp-tq', 'cmp-tx', 'bad.#'));
    await attempt('bind amq.topic cmp-t.#', (c) => c.bindQueue('cmp-tq', 'amq.topic', 'cmp-t.#'));
    await attempt('bind amq.topic other.#', (c) => c.bindQueue('cmp-tq', 'amq.topic', 'other.#'));
    await attempt('bind cmp-ty any.#', (c) => c.bindQueue('cmp-tq', 'cmp-ty', 'any.#'));
    await attempt('unbind cmp-tx bad.#', (c) => c.unbindQueue('cmp-tq', 'cmp-tx', 'bad.#'));
    await attempt('exchange.bind from cmp-tx bad.#', (c) => c.bindExchange('cmp-ty', 'cmp-tx', 'bad.#'));
    for (const [x, k] of [
      ['cmp-tx', 'ok.1'],
      ['cmp-tx', 'bad.1'],
      ['amq.topic', 'cmp-t.1'],
      ['amq.topic', 'other.1'],
      ['cmp-ty', 'any.1'],
      ['cmp-tdx', 'bad.1'],
    ])
      await attempt(`publish ${x} ${k}`, async (c) => {
        c.publish(x, k, Buffer.from(`${x}/${k}`));
        await c.checkQueue('cmp-tq');
      });
    await t.close();
    out.push(`cmp-tq holds ${(await a.checkQueue('cmp-tq')).messageCount}`);
    await a.deleteQueue('cmp-tq');
    try {
      await (await amqp.connect(as('cmp-t0'))).close();
      out.push('login without permissions: opened');
    } catch (e) {
      out.push(`login without permissions: ${e.message}`);
    }
  } finally {
    await admin.close();
    await json('DELETE', '/api/users/cmp-t');
    await json('DELETE', '/api/users/cmp-t0');
  }
  return out;
}

/**
 * Definitions per vhost: queue, exchange and binding imported into vhost cmp-v (a FlowMQ namespace) by the whole
 * document and by the per-vhost one, exported by both, refused for an unknown vhost; amqplib uses them in cmp-v, and
 * a passive declare from `/` gets 404. Every line must be the same on both (JSON with sorted keys).
 */
async function vhostDefinitions(amqpUrl, httpBase) {
  const json = (method, path, body) => get(httpBase, path, method, body);
  const canon = (v) =>
    JSON.stringify(v, (_k, x) =>
      x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : 1))) : x,
    );
  const out = [];
  const show = (what, r) => out.push(`${what}: ${r.status} ${canon(r.json)}`);
  // By name: RabbitMQ's order of a definitions list is its tables' (not stable from one run to the next).
  const mine = (doc) => ({
    queues: (doc.queues ?? []).filter((q) => q.name.startsWith('cmp-d')).sort((a, b) => (a.name < b.name ? -1 : 1)),
    exchanges: (doc.exchanges ?? []).filter((x) => x.name.startsWith('cmp-d')),
    bindings: (doc.bindings ?? []).filter((b) => b.source.startsWith('cmp-d')),
  });
  show(
    'POST /api/definitions (cmp-v objects)',
    await json('POST', '/api/definitions', {
      exchanges: [{ name: 'cmp-dx', vhost: 'cmp-v', type: 'direct', durable: true, auto_delete: false, internal: false, arguments: {} }],
      queues: [{ name: 'cmp-dq', vhost: 'cmp-v', durable: true, auto_delete: false, arguments: {} }],
      bindings: [{ source: 'cmp-dx', vhost: 'cmp-v', destination: 'cmp-dq', destination_type: 'queue', routing_key: 'k', arguments: {} }],
    }),
  );
  show(
    'POST /api/definitions/cmp-v (a queue naming /)',
    await json('POST', '/api/definitions/cmp-v', { queues: [{ name: 'cmp-dq2', vhost: '/', durable: true, auto_delete: false, arguments: {} }] }),
  );
  show('GET /api/queues/cmp-v/cmp-dq2 status', { status: (await json('GET', '/api/queues/cmp-v/cmp-dq2')).status, json: null });
  show('GET /api/queues/%2F/cmp-dq2 status', { status: (await json('GET', '/api/queues/%2F/cmp-dq2')).status, json: null });
  const one = await json('GET', '/api/definitions/cmp-v');
  show('GET /api/definitions/cmp-v', { status: one.status, json: mine(one.json) });
  const all = await json('GET', '/api/definitions');
  show('GET /api/definitions (cmp-d*)', { status: all.status, json: mine(all.json) });
  show('POST /api/definitions/cmp-nope', await json('POST', '/api/definitions/cmp-nope', { queues: [] }));
  show('GET /api/definitions/cmp-nope', await json('GET', '/api/definitions/cmp-nope'));
  const c = await amqp.connect(`${amqpUrl}/cmp-v`);
  try {
    const ch = await c.createChannel();
    ch.publish('cmp-dx', 'k', Buffer.from('cmp-d'));
    let m = false;
    for (let i = 0; i < 50 && m === false; i++) {
      m = await ch.get('cmp-dq', { noAck: true });
      if (m === false) await new Promise((r) => setTimeout(r, 50));
    }
    out.push(`amqplib in cmp-v: get cmp-dq after publishing to cmp-dx: ${m === false ? 'nothing' : m.content.toString()}`);
  } finally {
    await c.close().catch(() => undefined);
  }
  const root = await amqp.connect(amqpUrl);
  try {
    const ch = await root.createChannel();
    ch.on('error', () => undefined);
    const r = await ch.checkQueue('cmp-dq').then(
      () => 'found',
      (e) => /; (\d{3} \([A-Z-]+\))/.exec(e.message)?.[1] ?? e.message,
    );
    out.push(`amqplib in /: passive declare of cmp-dq: ${r}`);
  } finally {
    await root.close().catch(() => undefined);
  }
  return out;
}

/**
 * Policies per vhost and vhosts made and deleted: a policy and an operator policy of vhost cmp-v (listed, read,
 * exported per vhost), RabbitMQ's answers for a vhost nobody has, what amqplib sees of the policy in cmp-v (max-length
 * 2 dead-lettering into cmp-v's cmp-vdead) and in `/` (none); a definitions file naming vhost cmp-w makes it with its
 * policy and queue; DELETE /api/vhosts/cmp-w takes its policy with it. Every line must be the same on both.
 */
async function vhostPolicies(amqpUrl, httpBase) {
  const json = (method, path, body) => get(httpBase, path, method, body);
  const canon = (v) =>
    JSON.stringify(v, (_k, x) =>
      x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : 1))) : x,
    );
  const out = [];
  const show = (what, r) => out.push(`${what}: ${r.status} ${canon(r.json)}`);
  // RabbitMQ shows a new queue's policy fields once its stats are collected (every 5 s): up to 12 s.
  const queueWithStats = async (path) => {
    let r = await json('GET', path);
    for (let i = 0; i < 60 && r.status === 200 && r.json?.policy === undefined; i++) {
      await new Promise((done) => setTimeout(done, 200));
      r = await json('GET', path);
    }
    return r;
  };
  const sorted = (list) => [...(list ?? [])].sort((a, b) => (`${a.vhost}/${a.name}` < `${b.vhost}/${b.name}` ? -1 : 1));
  const pol = {
    pattern: '^cmp-vpq$',
    'apply-to': 'queues',
    priority: 1,
    definition: { 'max-length': 2, 'dead-letter-exchange': '', 'dead-letter-routing-key': 'cmp-vdead' },
  };
  show('PUT /api/policies/cmp-v/cmp-vp', await json('PUT', '/api/policies/cmp-v/cmp-vp', pol));
  show('PUT /api/policies/cmp-v/cmp-vp again', await json('PUT', '/api/policies/cmp-v/cmp-vp', pol));
  show(
    'PUT /api/operator-policies/cmp-v/cmp-vop',
    await json('PUT', '/api/operator-policies/cmp-v/cmp-vop', { pattern: '^cmp-vpq$', definition: { 'message-ttl': 600000 } }),
  );
  show('GET /api/policies/cmp-v', await json('GET', '/api/policies/cmp-v'));
  show('GET /api/policies/cmp-v/cmp-vp', await json('GET', '/api/policies/cmp-v/cmp-vp'));
  show('GET /api/operator-policies/cmp-v', await json('GET', '/api/operator-policies/cmp-v'));
  const all = await json('GET', '/api/policies');
  show('GET /api/policies (cmp-v)', { status: all.status, json: sorted(all.json).filter((p) => p.vhost === 'cmp-v') });
  for (const [method, path, body] of [
    ['GET', '/api/policies/cmp-nope'],
    ['GET', '/api/policies/cmp-nope/cmp-vp'],
    ['PUT', '/api/policies/cmp-nope/cmp-vp', pol],
    ['DELETE', '/api/policies/cmp-nope/cmp-vp'],
    ['GET', '/api/operator-policies/cmp-nope'],
    ['PUT', '/api/operator-policies/cmp-nope/cmp-vop', { pattern: '^x', definition: { 'max-length': 1 } }],
    ['GET', '/api/policies/cmp-v/no-such-policy'],
    ['DELETE', '/api/policies/cmp-v/no-such-policy'],
  ])
    show(`${method} ${path}`, await json(method, path, body));
  const one = await json('GET', '/api/definitions/cmp-v');
  show('GET /api/definitions/cmp-v (policies, parameters)', { status: one.status, json: { policies: one.json?.policies, parameters: one.json?.parameters } });

  // Four messages into cmp-vpq in cmp-v (the policy's: 2 kept, 2 dead-lettered to cmp-v's cmp-vdead) and in `/` (none).
  for (const vhost of ['cmp-v', '/']) {
    const c = await amqp.connect(vhost === '/' ? amqpUrl : `${amqpUrl}/${vhost}`);
    try {
      const ch = await c.createConfirmChannel();
      await ch.assertQueue('cmp-vdead', { durable: true });
      await ch.assertQueue('cmp-vpq', { durable: true });
      for (let i = 0; i < 4; i++) ch.sendToQueue('cmp-vpq', Buffer.from(`m${i}`));
      await ch.waitForConfirms();
      let counts = [];
      for (let i = 0; i < 40; i++) {
        counts = [(await ch.checkQueue('cmp-vpq')).messageCount, (await ch.checkQueue('cmp-vdead')).messageCount];
        if (counts[0] + counts[1] === 4) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      out.push(`amqplib in ${vhost}: 4 sent to cmp-vpq: cmp-vpq ${counts[0]}, cmp-vdead ${counts[1]}`);
      await ch.deleteQueue('cmp-vpq');
      await ch.deleteQueue('cmp-vdead');
    } finally {
      await c.close().catch(() => undefined);
    }
  }
  // (after the deletes above) a queue made by the API sees the same policy fields.
  await json('PUT', '/api/queues/cmp-v/cmp-vpq', { durable: true });
  const q = (await queueWithStats('/api/queues/cmp-v/cmp-vpq')).json ?? {};
  out.push(`GET /api/queues/cmp-v/cmp-vpq: policy ${q.policy}, operator_policy ${q.operator_policy}, effective ${canon(q.effective_policy_definition)}`);
  await json('DELETE', '/api/queues/cmp-v/cmp-vpq');
  show('DELETE /api/policies/cmp-v/cmp-vp', await json('DELETE', '/api/policies/cmp-v/cmp-vp'));
  show('DELETE /api/operator-policies/cmp-v/cmp-vop', await json('DELETE', '/api/operator-policies/cmp-v/cmp-vop'));
  show('GET /api/policies/cmp-v after', await json('GET', '/api/policies/cmp-v'));

  // A definitions file makes vhost cmp-w with a policy and a queue; deleting the vhost takes them with it.
  show('GET /api/vhosts/cmp-w before', await json('GET', '/api/vhosts/cmp-w'));
  show(
    'POST /api/definitions (vhost cmp-w)',
    await json('POST', '/api/definitions', {
      vhosts: [{ name: 'cmp-w' }],
      policies: [{ vhost: 'cmp-w', name: 'cmp-wp', pattern: '^cmp-wq$', 'apply-to': 'queues', definition: { 'max-length': 1 }, priority: 0 }],
      queues: [{ name: 'cmp-wq', vhost: 'cmp-w', durable: true, auto_delete: false, arguments: {} }],
    }),
  );
  const w = await json('GET', '/api/vhosts/cmp-w');
  out.push(`GET /api/vhosts/cmp-w: ${w.status} ${w.json?.name}`);
  show('GET /api/policies/cmp-w', await json('GET', '/api/policies/cmp-w'));
  const wq = await queueWithStats('/api/queues/cmp-w/cmp-wq');
  out.push(`GET /api/queues/cmp-w/cmp-wq: ${wq.status} policy ${wq.json?.policy}`);
  // An AMQP connection open in cmp-w when it is deleted.
  show('PUT /api/permissions/cmp-w/guest', await json('PUT', '/api/permissions/cmp-w/guest', { configure: '.*', write: '.*', read: '.*' }));
  const wc = await amqp.connect(`${amqpUrl}/cmp-w`);
  wc.on('error', () => undefined);
  const wclosed = new Promise((resolve) => wc.on('close', (e) => resolve(e?.message ?? 'closed without an error')));
  show('DELETE /api/vhosts/cmp-w', await json('DELETE', '/api/vhosts/cmp-w'));
  out.push(`amqplib connection in cmp-w: ${await Promise.race([wclosed, new Promise((r) => setTimeout(() => r('still open after 5 s'), 5000))])}`);
  await wc.close().catch(() => undefined);
  show('DELETE /api/vhosts/cmp-w again', await json('DELETE', '/api/vhosts/cmp-w'));
  show('GET /api/vhosts/cmp-w after', await json('GET', '/api/vhosts/cmp-w'));
  show('GET /api/queues/cmp-w/cmp-wq after', await json('GET', '/api/queues/cmp-w/cmp-wq'));
  const left = await json('GET', '/api/policies');
  out.push(`GET /api/policies after: cmp-w's ${(left.json ?? []).filter((p) => p.vhost === 'cmp-w').length}`);
  show('PUT /api/vhosts/cmp-w2', await json('PUT', '/api/vhosts/cmp-w2'));
  show('PUT /api/vhosts/cmp-w2 again', await json('PUT', '/api/vhosts/cmp-w2'));
  show('DELETE /api/vhosts/cmp-w2', await json('DELETE', '/api/vhosts/cmp-w2'));
  return out;
}

/**
 * A policymaker guest: user cmp-pm with the tag policymaker and a read permission in vhost cmp-v only (on FlowMQ a user
 * of `default`, a guest of namespace cmp-v) manages cmp-v's policies through the management API, as cmp-pm.
 */
async function guestPolicymaker(httpBase) {
  const admin = (method, path, body) => get(httpBase, path, method, body);
  const u = new URL(httpBase);
  u.username = 'cmp-pm';
  u.password = 'cmp-pm-pw';
  const pm = (method, path, body) => get(u.href.replace(/\/$/, ''), path, method, body);
  const out = [];
  const show = (what, r) => out.push(`${what}: ${r.status} ${JSON.stringify(r.json)}`);
  show('PUT /api/users/cmp-pm (policymaker)', await admin('PUT', '/api/users/cmp-pm', { password: 'cmp-pm-pw', tags: 'policymaker' }));
  show('PUT /api/permissions/cmp-v/cmp-pm', await admin('PUT', '/api/permissions/cmp-v/cmp-pm', { configure: '', write: '', read: '.*' }));
  const pol = { pattern: '^cmp-pmq$', definition: { 'max-length': 3 }, 'apply-to': 'queues', priority: 1 };
  show('as cmp-pm: PUT /api/policies/cmp-v/cmp-pmp', await pm('PUT', '/api/policies/cmp-v/cmp-pmp', pol));
  show('as cmp-pm: PUT /api/policies/cmp-v/cmp-pmp again', await pm('PUT', '/api/policies/cmp-v/cmp-pmp', pol));
  const one = await pm('GET', '/api/policies/cmp-v');
  out.push(`as cmp-pm: GET /api/policies/cmp-v: ${one.status} ${JSON.stringify((one.json ?? []).map((p) => [p.vhost, p.name, p.definition]))}`);
  const mine = await pm('GET', '/api/policies/cmp-v/cmp-pmp');
  out.push(`as cmp-pm: GET /api/policies/cmp-v/cmp-pmp: ${mine.status} ${mine.json?.vhost} ${mine.json?.name} ${mine.json?.pattern}`);
  const all = await pm('GET', '/api/policies');
  out.push(`as cmp-pm: GET /api/policies: ${all.status} cmp-v's ${JSON.stringify((all.json ?? []).filter((p) => p.vhost === 'cmp-v').map((p) => p.name))}`);
  show('as cmp-pm: DELETE /api/policies/cmp-v/cmp-pmp', await pm('DELETE', '/api/policies/cmp-v/cmp-pmp'));
  show('as cmp-pm: DELETE /api/policies/cmp-v/cmp-pmp again', await pm('DELETE', '/api/policies/cmp-v/cmp-pmp'));
  show('DELETE /api/users/cmp-pm', await admin('DELETE', '/api/users/cmp-pm'));
  return out;
}

/**
 * Per-vhost permissions: user cmp-g has permissions in vhost cmp-v only (made by run.sh on both: a RabbitMQ vhost, a
 * FlowMQ namespace), none in `/`. The management API's answers and what amqplib may do in cmp-v, step by step.
 */
async function vhostEffect(amqpUrl, httpBase) {
  const json = (method, path, body) => get(httpBase, path, method, body);
  const out = [];
  const show = (what, r) => out.push(`${what}: ${r.status} ${JSON.stringify(r.json)}`);
  const mine = (r) => ({ status: r.status, json: Array.isArray(r.json) ? r.json.filter((p) => p.user === 'cmp-g') : r.json });
  await json('PUT', '/api/users/cmp-g', { password: 'cmp-g-pw', tags: '' });
  const perm = { configure: '^g-', write: '^(g-.*|amq\\.default)$', read: '^g-' };
  show('PUT /api/permissions/cmp-v/cmp-g', await json('PUT', '/api/permissions/cmp-v/cmp-g', perm));
  show('PUT /api/permissions/cmp-v/cmp-g again', await json('PUT', '/api/permissions/cmp-v/cmp-g', perm));
  show('PUT /api/permissions/cmp-nope/cmp-g', await json('PUT', '/api/permissions/cmp-nope/cmp-g', perm));
  show('GET /api/permissions/cmp-v/cmp-g', await json('GET', '/api/permissions/cmp-v/cmp-g'));
  show('GET /api/permissions/%2F/cmp-g', await json('GET', '/api/permissions/%2F/cmp-g'));
  show('GET /api/users/cmp-g/permissions', await json('GET', '/api/users/cmp-g/permissions'));
  show('GET /api/vhosts/cmp-v/permissions (cmp-g)', mine(await json('GET', '/api/vhosts/cmp-v/permissions')));
  show('GET /api/permissions (cmp-g)', mine(await json('GET', '/api/permissions')));
  const tp = { exchange: 'amq.topic', write: '^g\\.', read: '^g\\.' };
  show('PUT /api/topic-permissions/cmp-v/cmp-g', await json('PUT', '/api/topic-permissions/cmp-v/cmp-g', tp));
  show('GET /api/topic-permissions/cmp-v/cmp-g', await json('GET', '/api/topic-permissions/cmp-v/cmp-g'));
  show('GET /api/topic-permissions/%2F/cmp-g', await json('GET', '/api/topic-permissions/%2F/cmp-g'));
  show('GET /api/vhosts/cmp-v/topic-permissions', await json('GET', '/api/vhosts/cmp-v/topic-permissions'));
  const defs = (await json('GET', '/api/definitions')).json;
  out.push(`definitions: permissions ${JSON.stringify(defs.permissions.filter((p) => p.user === 'cmp-g'))}`);
  out.push(`definitions: topic_permissions ${JSON.stringify(defs.topic_permissions.filter((p) => p.user === 'cmp-g'))}`);
  const as = (vhost) => {
    const u = new URL(amqpUrl);
    u.username = 'cmp-g';
    u.password = 'cmp-g-pw';
    u.pathname = `/${encodeURIComponent(vhost)}`;
    return u.toString();
  };
  const open = async (vhost) => {
    try {
      const c = await amqp.connect(as(vhost));
      c.on('error', () => undefined);
      out.push(`open ${vhost}: opened`);
      return c;
    } catch (e) {
      out.push(`open ${vhost}: ${e.message}`);
      return null;
    }
  };
  try {
    await open('/');
    const g = await open('cmp-v');
    const attempt = async (what, fn) => {
      const c = await g.createChannel();
      c.on('error', () => undefined);
      try {
        await fn(c);
        await c.close();
        out.push(`${what}: ok`);
      } catch (e) {
        out.push(`${what}: ${e.message}`);
      }
    };
    await attempt('declare g-q', (c) => c.assertQueue('g-q', { durable: false }));
    await attempt('declare other', (c) => c.assertQueue('cmp-other', { durable: false }));
    await attempt('declare exchange g-x', (c) => c.assertExchange('g-x', 'topic', { durable: false }));
    await attempt('bind g-q to g-x', (c) => c.bindQueue('g-q', 'g-x', 'k'));
    await attempt('bind g-q to amq.topic g.#', (c) => c.bindQueue('g-q', 'amq.topic', 'g.#'));
    await attempt('publish to g-q', async (c) => {
      c.sendToQueue('g-q', Buffer.from('x'));
      await c.checkQueue('g-q');
    });
    await attempt('publish to amq.topic g.1', async (c) => {
      c.publish('amq.topic', 'g.1', Buffer.from('x'));
      await c.checkQueue('g-q');
    });
    await attempt('get g-q', async (c) => out.push(`got ${(await c.get('g-q', { noAck: true })) === false ? 'nothing' : 'a message'}`));
    await attempt('delete g-x', (c) => c.deleteExchange('g-x'));
    await attempt('delete g-q', (c) => c.deleteQueue('g-q'));
    show('DELETE /api/permissions/cmp-v/cmp-g', await json('DELETE', '/api/permissions/cmp-v/cmp-g'));
    show('DELETE /api/permissions/cmp-v/cmp-g again', await json('DELETE', '/api/permissions/cmp-v/cmp-g'));
    await attempt('declare g-q after the DELETE', (c) => c.assertQueue('g-q', { durable: false }));
    await g.close().catch(() => undefined);
    (await open('cmp-v'))?.close();
  } finally {
    await json('DELETE', '/api/users/cmp-g');
  }
  return out;
}

const [rc, fc] = [await setUp(rabbitAmqp), await setUp(flowAmqp)];
try {
  for (const [path, pred] of CASES) {
    const [r, f] = [await get(rabbitHttp, path), await get(flowHttp, path)];
    if (r.status !== f.status) {
      diffs.push(`${path}: status RabbitMQ ${r.status}, FlowMQ ${f.status}`);
      hardFailures++;
    }
    compare(path, pick(r.json, pred ?? (() => true)), pick(f.json, pred ?? (() => true)));
  }
  // The stream queues' figures and the partition bindings, value by value (not only names and types).
  const streamFigures = async (base) => {
    const qs = (await get(base, '/api/queues')).json;
    const out = {};
    for (const n of ['cmp-sq', 'cmp-ss-0', 'cmp-ss-1']) {
      const q = qs.find((x) => x.name === n);
      out[n] = q && {
        type: q.type,
        arguments: q.arguments,
        durable: q.durable,
        messages: q.messages,
        ready: q.messages_ready,
        unacked: q.messages_unacknowledged,
      };
    }
    out.listed = qs.filter((x) => x.name.startsWith('cmp-s')).map((x) => x.name);
    out.bindings = (await get(base, '/api/exchanges/%2F/cmp-ss/bindings/source')).json.map((b) => [
      b.destination,
      b.destination_type,
      b.routing_key,
      b.arguments,
    ]);
    const d = (await get(base, '/api/definitions')).json;
    out.definitions = d.queues
      .filter((x) => x.name.startsWith('cmp-s'))
      .map((x) => [x.name, x.arguments])
      .sort();
    out.definitionBindings = d.bindings.filter((x) => x.source === 'cmp-ss').map((x) => [x.destination, x.destination_type, x.arguments]);
    return out;
  };
  const [rs, fs] = [await streamFigures(rabbitHttp), await streamFigures(flowHttp)];
  for (const k of Object.keys(rs)) {
    const same = JSON.stringify(rs[k]) === JSON.stringify(fs[k]);
    diffs.push(`stream figures ${k}: RabbitMQ ${JSON.stringify(rs[k])}, FlowMQ ${same ? 'the same' : JSON.stringify(fs[k])}`);
    if (!same) hardFailures++;
  }
  // Status codes of the write calls.
  const writes = [
    ['PUT', '/api/queues/%2F/cmp-w', { durable: true }],
    ['PUT', '/api/queues/%2F/cmp-w', { durable: true }],
    ['PUT', '/api/queues/%2F/cmp-w', { durable: false }],
    ['PUT', '/api/exchanges/%2F/cmp-wx', { type: 'direct' }],
    ['PUT', '/api/exchanges/%2F/cmp-wx', { type: 'direct' }],
    ['POST', '/api/bindings/%2F/e/cmp-wx/q/cmp-w', { routing_key: 'k' }],
    ['POST', '/api/exchanges/%2F/cmp-wx/publish', { routing_key: 'k', payload: 'p', payload_encoding: 'string', properties: {} }],
    ['POST', '/api/queues/%2F/cmp-w/get', { count: 2, ackmode: 'ack_requeue_false', encoding: 'auto' }],
    ['DELETE', '/api/bindings/%2F/e/cmp-wx/q/cmp-w/k'],
    ['DELETE', '/api/queues/%2F/cmp-w'],
    ['DELETE', '/api/queues/%2F/cmp-w'],
    ['DELETE', '/api/exchanges/%2F/cmp-wx'],
    ['DELETE', '/api/queues/%2F/cmp-ss-0'],
    ['GET', '/api/queues/%2F/cmp-ss-0'],
    ['DELETE', '/api/queues/%2F/cmp-sq'],
    ['DELETE', '/api/queues/%2F/cmp-sq'],
    // Stream queues made by PUT.
    ['PUT', '/api/queues/%2F/cmp-ws', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '1D' } }],
    ['PUT', '/api/queues/%2F/cmp-ws', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '1D' } }],
    ['PUT', '/api/queues/%2F/cmp-ws2', { durable: false, arguments: { 'x-queue-type': 'stream' } }],
    ['PUT', '/api/queues/%2F/cmp-ws2', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-length': 5 } }],
    ['GET', '/api/queues/%2F/cmp-ws2'],
    ['DELETE', '/api/queues/%2F/cmp-ws'],
    // Users, permissions, policies and definitions (the calls of docs/amqp.md "Users, permissions, policies").
    ['PUT', '/api/users/cmp-u', { password: 'cmp-pw', tags: 'monitoring' }],
    ['PUT', '/api/users/cmp-u', { password: 'cmp-pw', tags: ['monitoring', 'policymaker'] }],
    ['PUT', '/api/users/cmp-u2', { password: 'p' }],
    ['PUT', '/api/users/cmp-u3', { password: 'p', password_hash: RABBIT_HASH, tags: '' }],
    ['PUT', '/api/users/cmp-u4', { password_hash: RABBIT_HASH, hashing_algorithm: 'rabbit_password_hashing_sha256', tags: '' }],
    ['PUT', '/api/users/cmp-u5', { password_hash: 'abc', tags: '' }],
    ['GET', '/api/users/cmp-u'],
    ['GET', '/api/users/cmp-u4'],
    ['GET', '/api/users/no-such-user'],
    ['GET', '/api/users'],
    ['PUT', '/api/permissions/%2F/cmp-u', { configure: '^cmp-', write: '.*', read: '' }],
    ['PUT', '/api/permissions/%2F/cmp-u', { configure: '^cmp-', write: '.*', read: '^cmp-q$' }],
    ['PUT', '/api/permissions/%2F/no-such-user', { configure: '.*', write: '.*', read: '.*' }],
    ['PUT', '/api/permissions/%2F/cmp-u', { configure: '(', write: '.*', read: '.*' }],
    ['PUT', '/api/permissions/%2F/cmp-u', { configure: '.*' }],
    ['PUT', '/api/permissions/no-such-vhost/cmp-u', { configure: '.*', write: '.*', read: '.*' }],
    ['GET', '/api/permissions/%2F/cmp-u'],
    ['GET', '/api/permissions/%2F/cmp-u4'],
    ['GET', '/api/users/cmp-u/permissions'],
    ['GET', '/api/users/no-such-user/permissions'],
    ['GET', '/api/permissions'],
    // Topic permissions (docs/amqp.md "Topic permissions become deny policies").
    ['GET', '/api/topic-permissions/%2F/cmp-u'],
    ['PUT', '/api/topic-permissions/%2F/cmp-u', { exchange: 'amq.topic', write: '^{username}\\.', read: '.*' }],
    ['PUT', '/api/topic-permissions/%2F/cmp-u', { exchange: 'amq.topic', write: '^{username}\\.', read: '.*' }],
    ['PUT', '/api/topic-permissions/%2F/cmp-u', { write: 'a', read: 'b' }],
    ['PUT', '/api/topic-permissions/%2F/cmp-u', { exchange: 'cmp-x', read: 'b' }],
    ['PUT', '/api/topic-permissions/%2F/cmp-u', { exchange: 'cmp-x', write: '(', read: 'b' }],
    ['PUT', '/api/topic-permissions/%2F/no-such-user', { exchange: 'cmp-x', write: 'a', read: 'b' }],
    ['PUT', '/api/topic-permissions/no-such-vhost/cmp-u', { exchange: 'cmp-x', write: 'a', read: 'b' }],
    ['GET', '/api/topic-permissions'],
    ['GET', '/api/topic-permissions/%2F/cmp-u'],
    ['GET', '/api/users/cmp-u/topic-permissions'],
    ['GET', '/api/vhosts/%2F/topic-permissions'],
    ['PUT', '/api/topic-permissions/%2F/cmp-u', { exchange: 'cmp-x', write: '^a', read: '^b' }],
    ['DELETE', '/api/topic-permissions/%2F/cmp-u/cmp-x'],
    ['GET', '/api/topic-permissions/%2F/cmp-u'],
    ['DELETE', '/api/topic-permissions/%2F/cmp-u'],
    ['DELETE', '/api/topic-permissions/%2F/cmp-u'],
    ['GET', '/api/topic-permissions/%2F/cmp-u'],
    ['GET', '/api/topic-permissions'],
    ['DELETE', '/api/permissions/%2F/cmp-u'],
    ['DELETE', '/api/permissions/%2F/cmp-u'],
    ['PUT', '/api/policies/%2F/cmp-p', { pattern: '^cmp-pq', definition: { 'max-length': 2 }, priority: 1, 'apply-to': 'queues' }],
    ['PUT', '/api/policies/%2F/cmp-p', { pattern: '^cmp-pq', definition: { 'max-length': 2, 'message-ttl': 60000 }, priority: 1, 'apply-to': 'queues' }],
    ['PUT', '/api/policies/%2F/cmp-bad', { pattern: '^x', definition: { 'max-length': 'x' } }],
    ['PUT', '/api/policies/%2F/cmp-bad', { pattern: '^x', definition: { bogus: 1 } }],
    ['PUT', '/api/policies/%2F/cmp-bad', { pattern: '^x', definition: {} }],
    ['PUT', '/api/policies/%2F/cmp-bad', { pattern: '^x' }],
    ['PUT', '/api/policies/%2F/cmp-bad', { pattern: '(', definition: { 'max-length': 1 } }],
    ['PUT', '/api/policies/%2F/cmp-bad', { pattern: '^x', definition: { 'max-length': 1 }, 'apply-to': 'bad' }],
    ['PUT', '/api/policies/%2F/cmp-bad', { pattern: '^x', definition: { expires: 0 } }],
    ['PUT', '/api/policies/no-such-vhost/cmp-bad', { pattern: '^x', definition: { 'max-length': 1 } }],
    ['PUT', '/api/operator-policies/%2F/cmp-op', { pattern: '^cmp-pq', definition: { 'max-length': 5 }, priority: 0, 'apply-to': 'queues' }],
    ['PUT', '/api/operator-policies/%2F/cmp-op2', { pattern: '^cmp-pq', definition: { 'dead-letter-exchange': 'x' } }],
    ['GET', '/api/policies'],
    ['GET', '/api/policies/%2F'],
    ['GET', '/api/policies/%2F/cmp-p'],
    ['GET', '/api/policies/%2F/no-such-policy'],
    ['GET', '/api/operator-policies'],
    ['GET', '/api/operator-policies/%2F/cmp-op'],
    ['PUT', '/api/queues/%2F/cmp-pq1', { durable: true, arguments: { 'x-max-length': 4 } }],
    ['GET', '/api/definitions'],
    ['GET', '/api/definitions/%2F'],
    ['POST', '/api/definitions', DEFINITIONS],
    ['POST', '/api/definitions', { queues: [{ name: 'cmp-iq2', vhost: 'no-such-vhost', durable: true, auto_delete: false, arguments: {} }] }],
    ['POST', '/api/definitions', []],
    ['GET', '/api/queues/%2F/cmp-iq'],
    ['GET', '/api/bindings/%2F/e/cmp-ix/q/cmp-iq'],
    ['GET', '/api/permissions/%2F/cmp-imp'],
    ['GET', '/api/topic-permissions/%2F/cmp-imp'],
    ['GET', '/api/queues/%2F/cmp-is'],
    ['DELETE', '/api/queues/%2F/cmp-is'],
    ['DELETE', '/api/policies/%2F/no-such-policy'],
  ];
  for (const [method, path, body] of writes) {
    const [r, f] = [await get(rabbitHttp, path, method, body), await get(flowHttp, path, method, body)];
    if (r.status !== f.status) {
      diffs.push(`${method} ${path}: status RabbitMQ ${r.status}, FlowMQ ${f.status}`);
      hardFailures++;
    } else diffs.push(`${method} ${path}: ${r.status} on both`);
    if (r.json !== null && f.json !== null && typeof r.json === 'object')
      compare(
        `${method} ${path}`,
        pick(r.json, () => true),
        pick(f.json, () => true),
      );
  }
  const [rp, fp] = [await policyEffect(rabbitAmqp, rabbitHttp), await policyEffect(flowAmqp, flowHttp)];
  const same = JSON.stringify(rp) === JSON.stringify(fp);
  diffs.push(`max-length policy through amqplib: RabbitMQ ${JSON.stringify(rp)}, FlowMQ ${same ? 'the same' : JSON.stringify(fp)}`);
  if (!same) hardFailures++;
  const [rt, ft] = [await topicEffect(rabbitAmqp, rabbitHttp), await topicEffect(flowAmqp, flowHttp)];
  for (const [i, line] of rt.entries()) {
    diffs.push(`topic permissions through amqplib, ${line}${ft[i] === line ? ' (the same on FlowMQ)' : `; FlowMQ: ${ft[i]}`}`);
    if (ft[i] !== line) hardFailures++;
  }
  const [rv, fv] = [await vhostEffect(rabbitAmqp, rabbitHttp), await vhostEffect(flowAmqp, flowHttp)];
  for (const [i, line] of rv.entries()) {
    diffs.push(`per-vhost permissions, ${line}${fv[i] === line ? ' (the same on FlowMQ)' : `; FlowMQ: ${fv[i]}`}`);
    if (fv[i] !== line) hardFailures++;
  }
  if (fv.length !== rv.length) hardFailures++;
  const [rd, fd] = [await vhostDefinitions(rabbitAmqp, rabbitHttp), await vhostDefinitions(flowAmqp, flowHttp)];
  for (const [i, line] of rd.entries()) {
    diffs.push(`per-vhost definitions, ${line}${fd[i] === line ? ' (the same on FlowMQ)' : `; FlowMQ: ${fd[i]}`}`);
    if (fd[i] !== line) hardFailures++;
  }
  if (fd.length !== rd.length) hardFailures++;
  const [rvp, fvp] = [await vhostPolicies(rabbitAmqp, rabbitHttp), await vhostPolicies(flowAmqp, flowHttp)];
  for (const [i, line] of rvp.entries()) {
    diffs.push(`per-vhost policies, ${line}${fvp[i] === line ? ' (the same on FlowMQ)' : `; FlowMQ: ${fvp[i]}`}`);
    if (fvp[i] !== line) hardFailures++;
  }
  if (fvp.length !== rvp.length) hardFailures++;
  const [rgp, fgp] = [await guestPolicymaker(rabbitHttp), await guestPolicymaker(flowHttp)];
  for (const [i, line] of rgp.entries()) {
    diffs.push(`policymaker guest, ${line}${fgp[i] === line ? ' (the same on FlowMQ)' : `; FlowMQ: ${fgp[i]}`}`);
    if (fgp[i] !== line) hardFailures++;
  }
  if (fgp.length !== rgp.length) hardFailures++;
  const [ri, fi] = [await importedLogin(rabbitAmqp), await importedLogin(flowAmqp)];
  diffs.push(`AMQP login of the imported user with RabbitMQ's hash: RabbitMQ ${ri}, FlowMQ ${fi}`);
  if (ri !== fi) hardFailures++;
  for (const [method, path] of [
    ['DELETE', '/api/policies/%2F/cmp-p'],
    ['DELETE', '/api/policies/%2F/cmp-p'],
    ['DELETE', '/api/users/cmp-u'],
    ['DELETE', '/api/users/cmp-u'],
  ]) {
    const [r, f] = [await get(rabbitHttp, path, method), await get(flowHttp, path, method)];
    if (r.status !== f.status) {
      diffs.push(`${method} ${path}: status RabbitMQ ${r.status}, FlowMQ ${f.status}`);
      hardFailures++;
    } else diffs.push(`${method} ${path}: ${r.status} on both`);
  }
} finally {
  await rc.close().catch(() => undefined);
  await fc.close().catch(() => undefined);
}
for (const d of diffs) console.log(d);
console.log(`\n${diffs.length} lines, ${hardFailures} undocumented differences`);
process.exit(hardFailures === 0 ? 0 : 1);
