#!/usr/bin/env node
// Runs the compiled test suite (dist/test), whole or by tier:
//   node scripts/test.mjs            every test file (npm test)
//   node scripts/test.mjs unit       files that need nothing outside this process tree: no PostgreSQL, S3, HAProxy,
//                                    broker processes or third-party clients (npm run test:unit)
//   node scripts/test.mjs e2e        the rest: real clients and services (npm run test:e2e)
//   node scripts/test.mjs --list unit   prints the files of a tier instead of running them
// A file belongs to the e2e tier when it lives in test/e2e/ or test/bench/, or when its source, or a local helper it
// imports, starts one of those (the patterns below): the split follows the code, so a new test lands in the right
// tier without a list to keep. Failures are listed again at the end of the run (the spec reporter's summary).
//
// Files run two at a time (node --test --test-concurrency, a process each: they bind port 0 and write only in
// temporary directories). TEST_UNIT_CONCURRENCY and TEST_E2E_CONCURRENCY change that (docs/testing.md says what was
// measured). Files whose source holds the marker `test-runner: alone` (they measure timings or memory, load both
// cores, or run 3-broker clusters whose leases must not starve of CPU) run one at a time after the other files of
// their tier.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
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
const list = args[0] === '--list';
const tier = list ? args[1] : args[0];
if (tier !== undefined && tier !== 'unit' && tier !== 'e2e') {
  console.error(`usage: node scripts/test.mjs [--list] [unit|e2e]`);
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
  .sort();
if (list) {
  for (const f of files) console.log(relative(ROOT, f));
  process.exit(0);
}
/** A whole number >= 1 from the environment, or `fallback`. */
function concurrencyFrom(name, fallback) {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`${name} must be a whole number >= 1 (got ${v})`);
    process.exit(2);
  }
  return n;
}
const unitN = concurrencyFrom('TEST_UNIT_CONCURRENCY', 2);
const e2eN = concurrencyFrom('TEST_E2E_CONCURRENCY', 2);
const ALONE = /test-runner: alone/;
const unitFiles = files.filter((f) => tierOf(f) === 'unit');
const e2eFiles = files.filter((f) => tierOf(f) === 'e2e');
const isAlone = (f) => ALONE.test(readFileSync(sourceOf(f), 'utf8'));
const alone = e2eFiles.filter(isAlone);
const unitAlone = unitN === 1 ? [] : unitFiles.filter(isAlone);
const batches = [
  { n: unitN, files: unitFiles.filter((f) => !unitAlone.includes(f)) },
  { n: 1, files: unitAlone },
  ...(e2eN === 1
    ? [{ n: 1, files: e2eFiles }]
    : [
        { n: e2eN, files: e2eFiles.filter((f) => !alone.includes(f)) },
        { n: 1, files: alone },
      ]),
];

function runBatch(n, batch) {
  return new Promise((resolvePromise) => {
    const child = spawn(process.execPath, ['--test', `--test-concurrency=${n}`, '--test-reporter=spec', ...batch], { stdio: 'inherit', cwd: ROOT });
    child.on('exit', (code, signal) => resolvePromise(code ?? (signal ? 1 : 0)));
  });
}

const started = Date.now();
const outcomes = [];
for (const { n, files: batch } of batches) {
  if (batch.length === 0) continue;
  const t = Date.now();
  const code = await runBatch(n, batch);
  outcomes.push(`${batch.length} file(s), ${n} at a time: ${code === 0 ? 'passed' : 'FAILED'} in ${((Date.now() - t) / 1000).toFixed(0)} s`);
  if (code !== 0) process.exitCode = 1;
}
if (outcomes.length > 0) console.log(`\n${tier ?? 'all'} tests: ${outcomes.join('; ')} (${((Date.now() - started) / 1000).toFixed(0)} s in all)`);
