#!/usr/bin/env node
// Runs the compiled test suite (dist/test), whole or by tier:
//   node scripts/test.mjs            every test file (npm test)
//   node scripts/test.mjs unit       files that need nothing outside this process tree: no PostgreSQL, S3, HAProxy,
//                                    broker processes or third-party clients (npm run test:unit)
//   node scripts/test.mjs e2e        the rest: real clients and services (npm run test:e2e)
//   node scripts/test.mjs --list unit   prints the files of a tier instead of running them
//   node scripts/test.mjs e2e --match RE   only the files whose path matches RE (for measuring a part of a tier)
// A file belongs to the e2e tier when it lives in test/e2e/ or test/bench/, or when its source, or a local helper it
// imports, starts one of those (the patterns below): the split follows the code, so a new test lands in the right
// tier without a list to keep.
//
// Each file is its own process (`node --test-reporter=spec FILE`: they bind port 0 and write only in temporary
// directories; no `node --test` parent per file, whose start cost ~0.2 s of CPU each); its output
// is printed in one piece when it ends, under a line naming it. Files start longest first, by the durations of the
// last run on this machine (dist/test-durations.json, written after each run) or else by test/durations.json (the
// committed table), so that the run does not end on one long file. Failed files are listed again at the end.
// How many run at once: TEST_UNIT_CONCURRENCY and TEST_E2E_CONCURRENCY (both default 2: two e2e files already use
// most of the CI machine's two cores, 0.7-0.9 of a core each; docs/testing.md says what was measured). Each file's
// line and the tier's line at the end give the CPU used (Linux). Two markers in a file's source limit what runs
// beside it, each followed by the reason:
//   `test-runner: alone`  nothing runs beside it (it measures timings, CPU shares or memory, or loads both cores);
//                         these run first in their tier, one after the other.
//   `test-runner: apart`  (3-broker clusters, whose leases and heartbeats must not starve for CPU) never beside
//                         another `apart` or `alone` file, and beside at most TEST_BESIDE_APART other files (default
//                         0: they run one after the other, after the `alone` ones, with nothing beside; with 1, they
//                         run beside the tier's other files, one of those at a time while an `apart` file runs).
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const ROOT = resolve(dirname(new URL(import.meta.url).pathname), '..');
const DIST_TEST = join(ROOT, 'dist/test');
const E2E_DIRS = ['test/e2e/', 'test/bench/'];
/** What starts a service or an outside client. */
const SERVICE = new RegExp(
  [
    String.raw`helpers/(postgres|s3|haproxy|cluster)\.js`,
    'FlowmqProcess',
    String.raw`\b(spawn|execFile|execFileSync|spawnSync)\(`,
    String.raw`\bkcat\b`,
    'mosquitto',
    'chromium',
    'python3',
    'nats-server',
    'rabbitmq',
  ].join('|'),
);

function walk(dir, out = []) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p, out);
    else if (name.endsWith('.test.js')) out.push(p);
  }
  return out;
}

/** The TypeScript source of a compiled file (the tiers are judged on what was written, not on tsc's output). */
function sourceOf(jsPath) {
  const ts = join(ROOT, relative(join(ROOT, 'dist'), jsPath)).replace(/\.js$/, '.ts');
  return existsSync(ts) ? ts : jsPath;
}

const needsCache = new Map();
/** Whether a source file, or a local module it imports (transitively), starts a service or an outside client. */
function needsServices(file, seen = new Set()) {
  if (needsCache.has(file)) return needsCache.get(file);
  if (seen.has(file) || !existsSync(file)) return false;
  seen.add(file);
  const text = readFileSync(file, 'utf8');
  let needs = SERVICE.test(text);
  if (!needs) {
    for (const m of text.matchAll(/from\s+'(\.{1,2}\/[^']+)\.js'/g)) {
      const dep = resolve(dirname(file), `${m[1]}.ts`);
      // Imports of src/ are the product, not the test's services.
      if (!dep.startsWith(join(ROOT, 'test'))) continue;
      if (needsServices(dep, seen)) {
        needs = true;
        break;
      }
    }
  }
  needsCache.set(file, needs);
  return needs;
}

function tierOf(jsPath) {
  const src = sourceOf(jsPath);
  const rel = relative(ROOT, src);
  if (E2E_DIRS.some((d) => rel.startsWith(d))) return 'e2e';
  return needsServices(src) ? 'e2e' : 'unit';
}

const args = process.argv.slice(2);
const matchAt = args.indexOf('--match');
const match = matchAt >= 0 ? new RegExp(args[matchAt + 1]) : undefined;
if (matchAt >= 0) args.splice(matchAt, 2);
const list = args[0] === '--list';
const tier = list ? args[1] : args[0];
if ((tier !== undefined && tier !== 'unit' && tier !== 'e2e') || (matchAt >= 0 && match.source === '(?:)')) {
  console.error(`usage: node scripts/test.mjs [--list] [unit|e2e] [--match RE]`);
  process.exit(2);
}
if (!existsSync(DIST_TEST)) {
  console.error('dist/test is missing: run `npm run build` first');
  process.exit(2);
}
// A compiled test whose TypeScript source is gone (renamed or merged; tsc does not delete old outputs) is not run.
const compiled = walk(DIST_TEST);
const stale = compiled.filter((f) => sourceOf(f) === f);
if (stale.length > 0)
  console.error(`skipping ${stale.length} compiled test file(s) without a source in test/: ${stale.map((f) => relative(ROOT, f)).join(', ')}`);
const files = compiled
  .filter((f) => !stale.includes(f))
  .filter((f) => tier === undefined || tierOf(f) === tier)
  .filter((f) => match === undefined || match.test(relative(ROOT, sourceOf(f))))
  .sort();
if (list) {
  for (const f of files) console.log(relative(ROOT, f));
  process.exit(0);
}
/** A whole number >= `min` from the environment, or `fallback`. */
function concurrencyFrom(name, fallback, min = 1) {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) {
    console.error(`${name} must be a whole number >= ${min} (got ${v})`);
    process.exit(2);
  }
  return n;
}
const unitN = concurrencyFrom('TEST_UNIT_CONCURRENCY', 2);
const e2eN = concurrencyFrom('TEST_E2E_CONCURRENCY', 2);
/** How many other files may run beside an `apart` one (0, the default: they run like `alone` ones, after them). */
const besideApart = concurrencyFrom('TEST_BESIDE_APART', 0, 0);

/** Seconds each file took (keyed by its source path), from the last run here or the committed table. */
const LAST_DURATIONS = join(ROOT, 'dist/test-durations.json');
const COMMITTED_DURATIONS = join(ROOT, 'test/durations.json');
function readTable(path) {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return {};
  }
}
const durations = { ...readTable(COMMITTED_DURATIONS), ...readTable(LAST_DURATIONS) };
const keyOf = (f) => relative(ROOT, sourceOf(f));
/** A file not in the tables yet is guessed at a middling length for its tier. */
const expected = (f) => durations[keyOf(f)] ?? (tierOf(f) === 'e2e' ? 8 : 2);
const classOf = (f) => {
  const m = /test-runner: (alone|apart)\b/.exec(readFileSync(sourceOf(f), 'utf8'));
  return m ? m[1] : 'any';
};

/**
 * Runs `batch` with at most `n` files at once: the `alone` files first, one at a time, then the others longest first,
 * the `apart` ones one after the other with at most `besideApart` other files beside each. Resolves to the failed files.
 */
function runTier(n, batch, measured) {
  const byLength = [...batch].sort((a, b) => expected(b) - expected(a));
  const alone = byLength.filter((f) => classOf(f) === 'alone');
  const apart = byLength.filter((f) => classOf(f) === 'apart');
  const others = byLength.filter((f) => classOf(f) === 'any');
  const failed = [];
  return new Promise((resolveTier) => {
    let running = 0;
    let apartRunning = false;
    let aloneRunning = false;
    const done = () => alone.length === 0 && apart.length === 0 && others.length === 0 && running === 0;
    const start = (f, kind) => {
      running++;
      if (kind === 'apart') apartRunning = true;
      if (kind === 'alone') aloneRunning = true;
      const t = Date.now();
      const child = spawn(process.execPath, ['--test-reporter=spec', f], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
      // A file's output comes when it ends: a file that runs on is named every 5 minutes meanwhile.
      const slow = setInterval(() => console.log(`# ${keyOf(f)}: still running after ${((Date.now() - t) / 1000).toFixed(0)} s`), 300_000);
      const out = [];
      child.stdout.on('data', (d) => out.push(d));
      child.stderr.on('data', (d) => out.push(d));
      // The children's CPU grows when one is reaped, just before its 'exit': what it grew by since the last reap is
      // this file's (its brokers and clients included when it waited for them).
      let cpu = NaN;
      child.on('exit', () => {
        const now = childrenCpu();
        cpu = now - lastReapCpu;
        lastReapCpu = now;
      });
      child.on('close', (code, signal) => {
        clearInterval(slow);
        const s = (Date.now() - t) / 1000;
        measured[keyOf(f)] = Math.round(s * 10) / 10;
        const ok = code === 0 && signal === null;
        if (!ok) failed.push({ f, head: `${signal ?? `exit ${code}`} after ${s.toFixed(1)} s`, text: Buffer.concat(out).toString('utf8') });
        const besides = kind === 'any' ? '' : `, ${kind}`;
        const cpuText = Number.isNaN(cpu) ? '' : ` (${cpu.toFixed(1)} s of CPU)`;
        process.stdout.write(`\n# ${keyOf(f)}: ${ok ? 'passed' : `FAILED (${signal ?? `exit ${code}`})`} in ${s.toFixed(1)} s${cpuText}${besides}\n`);
        process.stdout.write(Buffer.concat(out));
        running--;
        if (kind === 'apart') apartRunning = false;
        if (kind === 'alone') aloneRunning = false;
        next();
      });
    };
    const next = () => {
      if (done()) return resolveTier(failed);
      if (aloneRunning) return;
      if (alone.length > 0) {
        if (running === 0) start(alone.shift(), 'alone');
        return;
      }
      // An `apart` file starts as soon as no other one runs and at most one other file does (the others wait for
      // it: they are started only up to one while an `apart` file waits or runs).
      if (!apartRunning && apart.length > 0 && running <= Math.min(besideApart, n - 1)) start(apart.shift(), 'apart');
      const limit = apartRunning || apart.length > 0 ? Math.min(n, besideApart + 1) : n;
      while (others.length > 0 && running < limit) start(others.shift(), 'any');
    };
    next();
  });
}

/** CPU seconds used by this process's finished children and theirs (Linux: cutime + cstime of /proc/self/stat). */
function childrenCpu() {
  try {
    const fields = readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ');
    return (Number(fields[13]) + Number(fields[14])) / 100;
  } catch {
    return NaN;
  }
}

let lastReapCpu = childrenCpu();

const ALL_TIERS = [
  { name: 'unit', n: unitN, files: files.filter((f) => tierOf(f) === 'unit') },
  { name: 'e2e', n: e2eN, files: files.filter((f) => tierOf(f) === 'e2e') },
];
const started = Date.now();
const outcomes = [];
const failedAll = [];
const measured = {};
for (const { name, n, files: batch } of ALL_TIERS) {
  if (batch.length === 0) continue;
  const t = Date.now();
  const cpu = childrenCpu();
  const failed = await runTier(n, batch, measured);
  const cpuUsed = childrenCpu() - cpu;
  const kinds = ['alone', 'apart'].map((k) => `${batch.filter((f) => classOf(f) === k).length} ${k}`).join(', ');
  outcomes.push(
    `${name} ${batch.length} file(s) (${kinds}), up to ${n} at a time: ${failed.length === 0 ? 'passed' : `${failed.length} FAILED`} in ${((Date.now() - t) / 1000).toFixed(0)} s${Number.isNaN(cpuUsed) ? '' : ` (${cpuUsed.toFixed(0)} s of CPU)`}`,
  );
  failedAll.push(...failed);
}

/**
 * What a failed file reported, again at the end of the run (CI shows the tail of a run's output): the spec reporter's
 * "failing tests" section, else the file's last lines (it crashed or was killed before its summary).
 */
function failureExcerpt(text, maxLines = 60) {
  // Node's own stack frames say nothing about the failure.
  const lines = text.split('\n').filter((l) => !/^\s+at (.*\(node:|node:|new (Safe)?Promise|Array\.map)/.test(l));
  const at = lines.findIndex((l) => l.includes('failing tests:'));
  const part = at >= 0 ? lines.slice(at) : lines.slice(-maxLines);
  return (part.length > maxLines ? [...part.slice(0, maxLines), `  ... (${part.length - maxLines} more lines above, under its name)`] : part)
    .map((l) => `  | ${l}`)
    .join('\n');
}
writeFileSync(LAST_DURATIONS, `${JSON.stringify({ ...durations, ...measured }, Object.keys({ ...durations, ...measured }).sort(), 1)}\n`);
if (failedAll.length > 0) {
  process.exitCode = 1;
  for (const { f, head, text } of failedAll) console.log(`\n# ${keyOf(f)} FAILED (${head}); what it reported:\n${failureExcerpt(text)}`);
  console.log(`\nfailed files (their whole output is above, under their name):\n${failedAll.map(({ f }) => `  ${keyOf(f)}`).join('\n')}`);
}
if (outcomes.length > 0) console.log(`\n${tier ?? 'all'} tests: ${outcomes.join('; ')} (${((Date.now() - started) / 1000).toFixed(0)} s in all)`);
