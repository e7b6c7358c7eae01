// The `nats-server` shim's half in Node: reads the nats-server config file that nats.js's test launcher (nst)
// writes, prints the `flowmq start` arguments that express it (one a line), writes the users file it needs, and
// writes the ports file the launcher waits for (<ports_file_dir>/nats-server_<pid>.ports, pid = the shim's, which
// FlowMQ keeps by exec). Keys FlowMQ cannot express make it exit 1 with one line on stderr and in NATSJS_SHIM_LOG,
// so that the test fails at its start, visibly for that reason, instead of running against another configuration.
// Usage: node shim-conf.mjs <config file> <pid>
//
// A config reload (the launcher's ns.reload(): the file rewritten, then SIGHUP to the pid, FlowMQ): FlowMQ reloads
// its users file and JWT files on SIGHUP, so they must hold the new config's translation. A watcher child started
// here (RELOADER) polls the config file and, when it changes, runs `node shim-conf.mjs --reload <config> <pid>
// <data dir>`, which writes the files again and sends FlowMQ a second SIGHUP (the launcher's own may come first,
// while the files are still the old ones; reloading twice is harmless). Flags FlowMQ was started with stay.
import { appendFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const reloading = process.argv[2] === '--reload';
const [confFile, pid, reloadDataDir] = process.argv.slice(reloading ? 3 : 2);
const RELOADER = `
const [conf, pid, dataDir, shim] = process.argv.slice(1);
const fs = require('node:fs');
const { execFileSync } = require('node:child_process');
const alive = () => { try { process.kill(+pid, 0); return true; } catch { return false; } };
let seen = fs.statSync(conf).mtimeMs;
const timer = setInterval(() => {
  if (!alive()) return clearInterval(timer);
  let m;
  try { m = fs.statSync(conf).mtimeMs; } catch { return; }
  if (m === seen) return;
  seen = m;
  try { execFileSync(process.execPath, [shim, '--reload', conf, pid, dataDir], { stdio: 'ignore' }); } catch {}
}, 50);`;
const WAITER = `
const [file, ports, list, others] = process.argv.slice(1);
const net = require('node:net');
const open = (p) => new Promise((r) => { const s = net.connect(+p, '127.0.0.1'); s.on('connect', () => { s.destroy(); r(true); }); s.on('error', () => r(false)); });
const all = async (l) => (await Promise.all(l.split(',').filter(Boolean).map(open))).every(Boolean);
(async () => {
  const start = Date.now();
  for (const end = start + 20000; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
    if (!(await all(list))) continue;
    if (Date.now() - start < 4000 && !(await all(others))) continue;
    return require('node:fs').writeFileSync(file, ports);
  }
})();`;
const text = (await import('node:fs')).readFileSync(confFile, 'utf8');

/** Parses the subset nst's toConf writes: `k: v`, `k {`...`}`, `k [`...`]`, one item a line. */
function parse(lines) {
  let i = 0;
  const scalar = (s) => {
    s = s.trim();
    if (/^".*"$/.test(s)) return s.slice(1, -1);
    if (/^-?\d+(\.\d+)?$/.test(s)) return Number(s);
    if (s === 'true' || s === 'false') return s === 'true';
    return s;
  };
  function block(closer) {
    const isArray = closer === ']';
    const out = isArray ? [] : {};
    while (i < lines.length) {
      const l = lines[i++].trim();
      if (l === '') continue;
      if (l === closer) return out;
      let m;
      if (isArray) {
        if (l === '{') out.push(block('}'));
        else if (l === '[') out.push(block(']'));
        else out.push(scalar(l));
      } else if ((m = /^("?[^":\s{[]+"?)\s*\{$/.exec(l))) out[m[1].replace(/"/g, '')] = block('}');
      else if ((m = /^("?[^":\s{[]+"?)\s*\[$/.exec(l))) out[m[1].replace(/"/g, '')] = block(']');
      else if ((m = /^("?[^":\s]+"?)\s*[:=]\s*(.*)$/.exec(l))) out[m[1].replace(/"/g, '')] = scalar(m[2]);
      else throw new Error(`cannot parse config line: ${l}`);
    }
    return out;
  }
  return block(undefined);
}

function refuse(why) {
  const line = `flowmq shim: ${why} (${confFile})`;
  console.error(line);
  if (process.env.NATSJS_SHIM_LOG) appendFileSync(process.env.NATSJS_SHIM_LOG, `${why}\n`);
  process.exit(1);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}
const portOf = async (v) => {
  const n =
    typeof v === 'number'
      ? v
      : Number(
          String(v ?? '')
            .split(':')
            .pop(),
        );
  return Number.isInteger(n) && n > 0 ? n : freePort();
};

let conf;
try {
  conf = parse(text.split('\n'));
} catch (e) {
  refuse(String(e.message));
}
const args = ['start', '--host', '127.0.0.1', '--protocols', 'nats', '--log-level', 'warn'];
for (const p of ['--mqtt-port', '--mqtt-ws-port', '--kafka-port', '--amqp-port', '--http-port']) args.push(p, '0');
const port = await portOf(conf.port);
const monitor = await portOf(conf.http);
args.push('--nats-port', String(port), '--nats-monitor-port', String(monitor));

// Keys without meaning for one FlowMQ broker started for one test, or that FlowMQ has without a setting.
const ignored = new Set(['host', 'port', 'http', 'ports_file_dir', 'server_tags', 'server_name', 'leafnodes', 'debug', 'trace', 'logtime']);
const users = [];
let websocket;
let tlsRequired = false;
let allowNonTls = false;
let responseMax;
let responseTtl;
let operator;
let resolverPreload;
const policies = [];
// Config-file accounts: each a FlowMQ namespace (its users log in there), with its exports and imports as they are
// written (the users file takes nats-server's shape: src/core/links-config.ts).
const namespaces = [];
// An account's `jetstream { ... }` limits (nats-server's names and their aliases) as FlowMQ namespace quotas.
const ACCOUNT_JS_LIMITS = {
  max_memory: 'maxMemoryBytes',
  max_mem: 'maxMemoryBytes',
  max_file: 'maxStorageBytes',
  max_store: 'maxStorageBytes',
  max_disk: 'maxStorageBytes',
  max_streams: 'maxStreams',
  max_consumers: 'maxConsumers',
  max_ack_pending: 'maxAckPending',
};
let anonymousOff = false;
const levels = (subject) =>
  subject
    .split('.')
    .map((t) => (t === '*' ? '+' : t === '>' ? '#' : t.replace(/\//g, '.')))
    .join('/');
// "subject queue" (a subscription in that queue group only): FlowMQ's `$nats-queue/<queue>/<subject>` topic.
const toTopic = (entry) => {
  const [subject, queue, extra] = String(entry).trim().split(/\s+/);
  if (extra !== undefined) refuse(`permission entry: ${entry}`);
  if (queue === undefined) return `topic:${levels(subject)}`;
  return `topic:$nats-queue/${queue === '*' || queue === '>' ? '+' : queue.replace(/\//g, '.')}/${levels(subject)}`;
};
const list = (v) => (v === undefined ? undefined : Array.isArray(v) ? v : [v]);
function addUser(u, namespace) {
  const known = new Set(['user', 'password', 'nkey', 'permissions', 'permission']);
  for (const k of Object.keys(u)) if (!known.has(k)) refuse(`user key ${k}`);
  const username = u.user ?? u.nkey;
  if (!username) refuse('a user without user or nkey');
  users.push({
    username: String(username),
    // A user with neither (nats-server's `{ user: b }`, reached as no_auth_user): FlowMQ's directory needs a
    // credential, so one nobody knows; such a user comes in through --nats-no-auth-user only.
    ...(u.password !== undefined ? { password: String(u.password) } : u.nkey ? {} : { password: randomBytes(18).toString('base64url') }),
    ...(u.nkey ? { nkey: u.nkey } : {}),
    ...(namespace !== undefined ? { namespace } : {}),
  });
  const principals = [`user:${username}`];
  // nats-server: no permissions, everything allowed; a publish or subscribe list allows only what it names.
  const perms = u.permissions ?? u.permission ?? {}; // nats-server reads both spellings
  for (const k of Object.keys(perms)) if (!['publish', 'subscribe', 'allow_responses'].includes(k)) refuse(`permissions.${k}`);
  // allow_responses: replies to the requests it receives, on any subject (FlowMQ's `respond` action); its max and
  // expires are FlowMQ's --nats-response-max and --nats-response-ttl (one setting for every user).
  const ar = perms.allow_responses;
  if (ar) {
    policies.push({ name: `${username}-respond`, effect: 'allow', actions: ['respond'], resources: ['topic:#'], principals });
    if (typeof ar === 'object') {
      if (ar.max !== undefined) responseMax = String(ar.max);
      if (ar.expires !== undefined) responseTtl = typeof ar.expires === 'number' ? `${Math.round(ar.expires / 1e6)}ms` : String(ar.expires);
    }
  }
  // No publish or subscribe permissions: everything, `$` subjects too (`$KV.>`, which MQTT's `#` would not match).
  if (perms.publish === undefined && perms.subscribe === undefined) {
    const all = ['publish', 'subscribe', 'respond', 'create', 'describe', 'alter', 'delete'];
    policies.push({ name: `${username}-all`, effect: 'allow', actions: all, resources: ['*:*'], principals });
    return;
  }
  for (const action of ['publish', 'subscribe']) {
    const p = perms[action];
    const spec = p === undefined ? { allow: ['>'] } : Array.isArray(p) || typeof p === 'string' ? { allow: list(p) } : p;
    const allow = list(spec.allow) ?? (spec.deny ? ['>'] : []);
    if (allow.length) policies.push({ name: `${username}-${action}-allow`, effect: 'allow', actions: [action], resources: allow.map(toTopic), principals });
    if (spec.deny)
      policies.push({ name: `${username}-${action}-deny`, effect: 'deny', actions: [action], resources: list(spec.deny).map(toTopic), principals });
  }
  // JetStream's own resources (streams, consumers) follow the subjects above on nats-server: open them here.
  policies.push({ name: `${username}-js`, effect: 'allow', actions: ['*'], resources: ['stream:*', 'group:*'], principals });
}

for (const [k, v] of Object.entries(conf)) {
  if (ignored.has(k)) continue;
  switch (k) {
    case 'jetstream':
      // FlowMQ's JetStream works on its data directory; max_file_store/max_mem_store have no setting.
      if (v === 'disabled' || v === false) args.push('--nats-jetstream', 'false');
      else if (typeof v === 'object' && v !== null && v.domain !== undefined) args.push('--nats-jetstream-domain', String(v.domain));
      break;
    case 'websocket': {
      const known = new Set(['port', 'no_tls']);
      for (const wk of Object.keys(v)) if (!known.has(wk)) refuse(`websocket.${wk}`);
      if (v.no_tls !== true) refuse('websocket with TLS');
      websocket = await portOf(v.port);
      args.push('--nats-ws-port', String(websocket));
      break;
    }
    case 'allow_non_tls':
      allowNonTls = v === true;
      break;
    case 'authorization': {
      const known = new Set(['token', 'user', 'username', 'password', 'users', 'timeout']);
      for (const ak of Object.keys(v)) if (!known.has(ak)) refuse(`authorization.${ak}`);
      if (v.token !== undefined) args.push('--nats-token', String(v.token));
      const user = v.user ?? v.username; // nats-server reads both spellings
      if (user !== undefined) addUser({ user, password: v.password });
      for (const u of v.users ?? []) addUser(u);
      if (v.timeout !== undefined) args.push('--nats-auth-timeout', `${v.timeout}s`);
      anonymousOff = true;
      break;
    }
    case 'tls': {
      const known = new Set(['cert_file', 'key_file', 'ca_file', 'verify', 'handshake_first', 'timeout']);
      for (const tk of Object.keys(v)) if (!known.has(tk)) refuse(`tls.${tk}`);
      args.push('--nats-tls-cert', v.cert_file, '--nats-tls-key', v.key_file);
      tlsRequired = true;
      if (v.verify) args.push('--tls-client-ca', v.ca_file, '--tls-client-auth', 'require');
      if (v.handshake_first) args.push('--nats-tls-handshake-first');
      break;
    }
    case 'operator':
      operator = v;
      break;
    case 'resolver':
      if (v !== 'MEMORY') refuse(`resolver: ${v} (FlowMQ reads account JWTs at start: MEMORY with resolver_preload)`);
      break;
    case 'resolver_preload':
      resolverPreload = v;
      break;
    case 'accounts':
      for (const [name, a] of Object.entries(v)) {
        if (name === '$G') refuse('accounts.$G');
        if (name === '$SYS' || a?.system === true) refuse(`accounts.${name} (the system account)`);
        const known = new Set(['users', 'exports', 'imports', 'jetstream']);
        for (const ak of Object.keys(a ?? {})) if (!known.has(ak)) refuse(`accounts.${name}.${ak}`);
        // As nats-server: a config account has JetStream only with a `jetstream` entry (`enabled` or a block of limits,
        // the namespace's JetStream quotas, docs/jetstream.md, Accounts); without one, or `disabled`, the namespace's
        // `jetstream` quota is 0 (its API answers 10039).
        const quotas = {};
        if (a.jetstream === undefined || a.jetstream === false || a.jetstream === 'disabled') quotas.jetstream = 0;
        else if (typeof a.jetstream === 'object' && a.jetstream !== null) {
          for (const [jk, jv] of Object.entries(a.jetstream)) {
            const q = ACCOUNT_JS_LIMITS[jk];
            if (q === undefined || typeof jv !== 'number') refuse(`accounts.${name}.jetstream.${jk}`);
            if (jv >= 0) quotas[q] = jv;
          }
        } else if (a.jetstream !== undefined && a.jetstream !== true && a.jetstream !== 'enabled' && a.jetstream !== 'enable')
          refuse(`accounts.${name}.jetstream: ${a.jetstream}`);
        namespaces.push({
          name,
          ...(Object.keys(quotas).length ? { quotas } : {}),
          ...(a.exports ? { exports: list(a.exports) } : {}),
          ...(a.imports ? { imports: list(a.imports) } : {}),
        });
        for (const u of list(a.users) ?? []) addUser(u, name);
      }
      anonymousOff = true;
      break;
    case 'no_auth_user':
      args.push('--nats-no-auth-user', String(v));
      break;
    case 'max_payload':
      args.push('--nats-max-payload', String(v));
      break;
    case 'max_control_line':
      args.push('--nats-max-control-line', String(v));
      break;
    case 'max_connections':
      args.push('--nats-max-connections', String(v));
      break;
    case 'max_subscriptions':
    case 'max_subs':
      args.push('--nats-max-subscriptions', String(v));
      break;
    case 'max_pending':
      args.push('--nats-max-pending', String(v));
      break;
    case 'ping_interval':
      args.push('--nats-ping-interval', typeof v === 'number' ? `${v}s` : String(v));
      break;
    case 'ping_max':
      args.push('--nats-max-pings-out', String(v));
      break;
    default:
      refuse(`${k}${typeof v === 'object' ? ' {...}' : `: ${v}`}`);
  }
}

if (anonymousOff) args.push('--allow-anonymous', 'false');
// No jetstream block: nats-server runs without JetStream.
if (conf.jetstream === undefined) args.push('--nats-jetstream', 'false');
const dataDir = reloading
  ? reloadDataDir
  : typeof conf.jetstream?.store_dir === 'string'
    ? conf.jetstream.store_dir
    : mkdtempSync(join(tmpdir(), 'flowmq-shim-'));
args.push('--data-dir', dataDir);
if (operator !== undefined) {
  // Operator mode: the operator JWT and the preloaded account JWTs as files (--nats-operator, --nats-accounts).
  const dir = join(dataDir, 'shim-operator');
  mkdirSync(join(dir, 'accounts'), { recursive: true });
  writeFileSync(join(dir, 'operator.jwt'), String(operator));
  args.push('--nats-operator', join(dir, 'operator.jwt'));
  const accounts = Object.entries(resolverPreload ?? {});
  for (const [id, jwt] of accounts) writeFileSync(join(dir, 'accounts', `${id}.jwt`), String(jwt));
  if (accounts.length) args.push('--nats-accounts', join(dir, 'accounts'));
} else if (resolverPreload !== undefined) refuse('resolver_preload without operator');
// nats-server requires TLS when it has a tls block, unless allow_non_tls (then INFO says tls_available).
if (tlsRequired && !allowNonTls) args.push('--nats-tls-required');
if (responseMax !== undefined) args.push('--nats-response-max', responseMax);
if (responseTtl !== undefined) args.push('--nats-response-ttl', responseTtl);
if (users.length || namespaces.length) {
  const f = join(dataDir, 'shim-users.json');
  writeFileSync(f, JSON.stringify({ users, policies, namespaces }));
  args.push('--users-file', f);
}
if (reloading) {
  // The files are written again (above); FlowMQ reads them on SIGHUP.
  process.kill(Number(pid), 'SIGHUP');
  process.exit(0);
}
spawn(process.execPath, ['-e', RELOADER, confFile, pid, dataDir, new URL(import.meta.url).pathname], { detached: true, stdio: 'ignore' }).unref();
// The ports file once the NATS port accepts and, for up to 4 s after the spawn, the monitoring and WebSocket ports
// too: a child that outlives this process polls them for up to 20 s, then writes it. nats-server writes it after
// opening all its listeners; FlowMQ binds the NATS port first thing in its start and sends INFO at once
// (src/protocols/nats/prebound.ts), so the launcher, content once INFO comes, would otherwise go on to the monitoring
// port before it is open. The launcher gives the file 5 s, then connects to the NATS port only.
const portsDir = conf.ports_file_dir ?? tmpdir();
const ports = {
  nats: [`nats://127.0.0.1:${port}`],
  monitoring: [`http://127.0.0.1:${monitor}`],
  ...(websocket ? { websocket: [`ws://127.0.0.1:${websocket}`] } : {}),
};
const listening = String(port);
const others = [monitor, ...(websocket ? [websocket] : [])].join(',');
spawn(process.execPath, ['-e', WAITER, join(portsDir, `nats-server_${pid}.ports`), JSON.stringify(ports), listening, others], {
  detached: true,
  stdio: 'ignore',
}).unref();
process.stdout.write(args.join('\n') + '\n');
