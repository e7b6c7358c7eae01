#!/usr/bin/env node
/**
 * Time from the spawn of `bin/flowmq start` to its NATS port's first INFO line (issue 28: a (re)started broker must
 * answer a NATS client within 300 ms of its start). A client dials the NATS port every 2 ms from the spawn on; each
 * run prints when the port first accepted, when that connection got its INFO, and when the broker logged its NATS
 * listener `listening` (the broker fully up); the median of each over the runs at the end, with the load average.
 * It also prints the CPU time (user + system, 10 ms ticks, from /proc) the broker process had used when its INFO
 * came: on a machine busy with other work the wall time is mostly waiting for a core, and this is what an idle
 * machine's wall time would be at least.
 *
 * Usage: node scripts/nats-first-info.mjs [--runs 5] [--data-dir DIR] [--fill N]
 *   --data-dir DIR: start on this directory every run (a restart over its data); default a fresh directory per run.
 *   --fill N: first fill DIR (or a new directory) with a JetStream stream of N messages of 100 bytes, then measure
 *   restarts on it. Needs a build (`npx tsc -p tsconfig.json`).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, connect as tcpConnect } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const BIN = join(ROOT, 'bin', 'flowmq');
const { values } = parseArgs({ options: { runs: { type: 'string', default: '5' }, 'data-dir': { type: 'string' }, fill: { type: 'string' } } });
const runs = Number(values.runs);

const freePort = () =>
  new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

function startBroker(dataDir, natsPort) {
  const args = ['start', '--data-dir', dataDir, '--host', '127.0.0.1', '--nats-port', String(natsPort)];
  for (const p of ['mqtt-port', 'mqtt-ws-port', 'kafka-port', 'amqp-port', 'http-port']) args.push(`--${p}`, '0');
  const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, FLOWMQ_NODE: process.execPath } });
  const spawnedAt = performance.now();
  let listening = null;
  let buf = '';
  const ready = new Promise((resolve) => {
    proc.stdout.on('data', (d) => {
      buf += d.toString();
      for (let i; (i = buf.indexOf('\n')) >= 0;) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        try {
          const l = JSON.parse(line);
          if (l.msg === 'listening' && l.protocol === 'nats') listening = performance.now() - spawnedAt;
          if (String(l.msg).startsWith('listening') && l.protocol === 'http') resolve();
        } catch {
          // not a log line
        }
      }
    });
  });
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  return { proc, spawnedAt, ready, exited, listening: () => listening };
}

/** CPU time (user + system) process `pid` has used, in ms; null off Linux. */
function cpuMs(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return null;
  }
}

/** Dials until accepted; resolves with the accept time and the first INFO line's time (ms after `t0`), and the broker's CPU time then. */
async function firstInfo(port, t0, pid, deadlineMs = 60_000) {
  for (;;) {
    const r = await new Promise((resolve) => {
      const s = tcpConnect(port, '127.0.0.1');
      s.once('connect', () => resolve(s));
      s.once('error', () => resolve(null));
    });
    if (r !== null) {
      const accepted = performance.now() - t0;
      const info = await new Promise((resolve, reject) => {
        let got = '';
        r.on('data', (d) => {
          got += d.toString('latin1');
          if (got.includes('\r\n')) {
            resolve({ at: performance.now() - t0, cpu: cpuMs(pid), line: got.slice(0, got.indexOf('\r\n')) });
            r.destroy();
          }
        });
        r.once('close', () => reject(new Error(`closed before INFO: ${JSON.stringify(got)}`)));
      });
      return { accepted, info: info.at, cpu: info.cpu, line: info.line };
    }
    if (performance.now() - t0 > deadlineMs) throw new Error('never accepted');
    await new Promise((r) => setTimeout(r, 2));
  }
}

async function fill(dataDir, n) {
  const { connect, StringCodec } = await import('nats');
  const port = await freePort();
  const b = startBroker(dataDir, port);
  await b.ready;
  const nc = await connect({ servers: `127.0.0.1:${port}` });
  const jsm = await nc.jetstreamManager();
  await jsm.streams.add({ name: 'FILL', subjects: ['fill.>'] });
  const js = nc.jetstream();
  const payload = StringCodec().encode('x'.repeat(100));
  for (let i = 0; i < n; i += 1000) {
    const acks = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) acks.push(js.publish(`fill.${j % 16}`, payload));
    await Promise.all(acks);
  }
  const si = await jsm.streams.info('FILL');
  console.log(`filled ${dataDir}: stream FILL, ${si.state.messages} messages, ${si.state.bytes} bytes`);
  await nc.close();
  b.proc.kill('SIGTERM');
  await b.exited;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
let dir = values['data-dir'] ?? null;
if (values.fill !== undefined) {
  dir ??= mkdtempSync(join(tmpdir(), 'flowmq-first-info-'));
  await fill(dir, Number(values.fill));
}
const rows = [];
console.log(
  `load average before: ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
for (let i = 0; i < runs; i++) {
  const d = dir ?? mkdtempSync(join(tmpdir(), 'flowmq-first-info-'));
  const port = await freePort();
  const b = startBroker(d, port);
  const r = await firstInfo(port, b.spawnedAt, b.proc.pid);
  await b.ready;
  const row = { accepted: r.accepted, info: r.info, cpu: r.cpu, listening: b.listening() };
  rows.push(row);
  console.log(
    `run ${i + 1}: accepted ${row.accepted.toFixed(0)} ms, INFO ${row.info.toFixed(0)} ms (broker CPU ${row.cpu} ms), nats listening ${row.listening?.toFixed(0)} ms`,
  );
  if (i === 0) console.log(`  ${r.line.slice(0, 200)}`);
  b.proc.kill('SIGTERM');
  await b.exited;
  if (dir === null) rmSync(d, { recursive: true, force: true });
}
const m = (k) => median(rows.map((r) => r[k])).toFixed(0);
console.log(`median of ${runs}: accepted ${m('accepted')} ms, INFO ${m('info')} ms (broker CPU ${m('cpu')} ms), nats listening ${m('listening')} ms`);
console.log(
  `load average after: ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
if (values.fill !== undefined && values['data-dir'] === undefined) rmSync(dir, { recursive: true, force: true });
