/**
 * `npm run bench`: side-by-side benchmarks. Starts FlowMQ (the real `bin/flowmq`, embedded storage, fsync on)
 * and, when Debian's `mosquitto` is installed, a Mosquitto broker on the same machine, drives both with the
 * same raw-socket load generator, and prints the figures and their ratio.
 *
 * Environment: BENCH_SECONDS (default 5) per scenario, BENCH_PUBLISHERS (default 4).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { kafkaProduceRun, mqttQos0Run, open } from './load.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const PUBLISHERS = Number(process.env.BENCH_PUBLISHERS ?? 4);

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => res(p));
    });
    s.on('error', rej);
  });
}

async function waitPort(port: number, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const s = await open(port);
      s.destroy();
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`port ${port} did not open`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

function stop(p: ChildProcess): Promise<void> {
  return new Promise((r) => {
    if (p.exitCode !== null) return r();
    p.once('exit', () => r());
    p.kill('SIGTERM');
    setTimeout(() => p.kill('SIGKILL'), 10_000).unref();
  });
}

async function startFlowmq(dataDir: string) {
  const ports = { mqtt: await freePort(), kafka: await freePort(), http: await freePort() };
  const proc = spawn(
    process.execPath,
    [join(ROOT, 'bin/flowmq'), 'start', '--data-dir', dataDir, '--host', '127.0.0.1', '--mqtt-port', String(ports.mqtt), '--kafka-port', String(ports.kafka), '--http-port', String(ports.http), '--log-level', 'warn'],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  await Promise.all([waitPort(ports.mqtt), waitPort(ports.kafka), waitPort(ports.http)]);
  return { proc, ports };
}

async function startMosquitto(dir: string): Promise<{ proc: ChildProcess; port: number } | null> {
  const which = spawnSync('sh', ['-c', 'command -v mosquitto || ls /usr/sbin/mosquitto'], { encoding: 'utf8' });
  const bin = which.stdout.trim().split('\n')[0];
  if (!bin) return null;
  const port = await freePort();
  const conf = join(dir, 'mosquitto.conf');
  writeFileSync(conf, `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 1000\nlog_dest none\n`);
  const proc = spawn(bin, ['-c', conf], { stdio: ['ignore', 'ignore', 'inherit'] });
  await waitPort(port);
  return { proc, port };
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function pct(a: number, b: number): string {
  return b > 0 ? `${fmt((100 * a) / b, 0)}%` : '-';
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'flowmq-bench-'));
  const rows: string[][] = [];
  console.log(`FlowMQ benchmarks: ${SECONDS}s per scenario, ${PUBLISHERS} publishers, on ${process.platform}/${process.arch}, node ${process.version}\n`);
  const flow = await startFlowmq(join(dir, 'flowmq'));
  try {
    // ---- MQTT QoS 0, many publishers -> 1 subscriber
    const f = await mqttQos0Run(flow.ports.mqtt, { publishers: PUBLISHERS, seconds: SECONDS, payloadBytes: 64 });
    let mosq: Awaited<ReturnType<typeof mqttQos0Run>> | null = null;
    const m = await startMosquitto(dir);
    if (m) {
      try {
        mosq = await mqttQos0Run(m.port, { publishers: PUBLISHERS, seconds: SECONDS, payloadBytes: 64 });
      } finally {
        await stop(m.proc);
      }
    }
    rows.push([
      `MQTT QoS 0, ${PUBLISHERS}→1, 64 B payload (msgs/s delivered)`,
      `${fmt(f.deliveredPerSec)} (${pct(f.delivered, f.sent)} of sent)`,
      mosq ? `${fmt(mosq.deliveredPerSec)} (${pct(mosq.delivered, mosq.sent)} of sent)` : 'mosquitto not installed',
      mosq ? `${fmt(f.deliveredPerSec / mosq.deliveredPerSec, 2)}×` : '-',
    ]);

    // ---- Kafka produce, 1 KiB records, acks=all
    const res = await fetch(`http://127.0.0.1:${flow.ports.http}/api/v1/streams`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bench-produce', partitions: 4 }),
    });
    if (!res.ok) throw new Error(`create stream: ${res.status} ${await res.text()}`);
    const k = await kafkaProduceRun(flow.ports.kafka, {
      topic: 'bench-produce',
      partitions: 4,
      connections: 4,
      inflight: 5,
      recordsPerBatch: 64,
      recordBytes: 1024,
      seconds: SECONDS,
    });
    rows.push([`Kafka produce, 1 KiB records × 64/batch, acks=all (MB/s)`, `${fmt(k.mbPerSec, 1)} MB/s (${fmt(k.recordsPerSec)} rec/s)`, '-', '-']);
  } finally {
    await stop(flow.proc);
    rmSync(dir, { recursive: true, force: true });
  }
  const table = [['scenario', 'FlowMQ', 'Mosquitto', 'FlowMQ / Mosquitto'], ...rows];
  const widths = table[0].map((_, i) => Math.max(...table.map((r) => r[i].length)));
  for (const [i, r] of table.entries()) {
    console.log('| ' + r.map((c, j) => c.padEnd(widths[j])).join(' | ') + ' |');
    if (i === 0) console.log('|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|');
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
