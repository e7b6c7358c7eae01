/**
 * End-to-end harness: runs the real `bin/flowmq` as a child process (so SIGTERM and kill -9 are real), on
 * ports the OS picks, and runs real client programs (mosquitto_pub/sub, kcat) with time limits.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
export const FLOWMQ_BIN = join(ROOT, 'bin/flowmq');

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs a program to completion (killed after `timeoutMs`), feeding `input` on stdin. */
export function run(cmd: string, args: string[], opts: { input?: string | Buffer; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...opts.env } });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 30_000);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolvePromise({ code, signal, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() });
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
  });
}

export interface LogLine {
  level: number;
  msg: string;
  [k: string]: unknown;
}

export class FlowmqProcess {
  readonly logs: LogLine[] = [];
  readonly ports: Record<string, number> = {};
  private exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private stderr = '';

  private constructor(
    readonly proc: ChildProcess,
    readonly dataDir: string,
    /** The options it was started with (beyond the data directory and ports); a restart keeps them. */
    readonly args: string[] = [],
    readonly env: NodeJS.ProcessEnv = {},
    /** The address its listeners bind and clients reach it at (another in a test network namespace). */
    readonly host = '127.0.0.1',
    readonly wrap?: string[],
  ) {
    this.exit = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
    eachLine(proc.stdout!, (line) => {
      try {
        const l = JSON.parse(line) as LogLine;
        this.logs.push(l);
        if (l.msg.startsWith('listening') && typeof l.address === 'string') {
          this.ports[String(l.protocol)] = Number(String(l.address).split(':').pop());
        }
      } catch {
        // not a log line
      }
    });
    proc.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
  }

  /** Starts a broker on free loopback ports and waits until its MQTT, Kafka and HTTP listeners are up. */
  static async start(
    opts: {
      dataDir?: string;
      args?: string[];
      env?: NodeJS.ProcessEnv;
      defaultHost?: boolean;
      startTimeoutMs?: number;
      /**
       * Binds the protocol listeners to this address (default 127.0.0.1). The admin API stays on loopback (the first user
       * is made there): a test reaching it at `host` forwards that port there (test/helpers/netns.ts's `forward`).
       */
      host?: string;
      /** A command the launcher runs under (test/helpers/netns.ts's `ip netns exec <ns>`: it execs, the pid stays). */
      wrap?: string[];
    } = {},
  ): Promise<FlowmqProcess> {
    const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'flowmq-e2e-'));
    const args = [
      'start',
      '--data-dir',
      dataDir,
      // defaultHost: --host left at its default (every address, both families).
      ...(opts.defaultHost === true ? [] : ['--host', opts.host ?? '127.0.0.1']),
      '--mqtt-port',
      '0',
      '--mqtt-ws-port',
      '0',
      '--kafka-port',
      '0',
      '--amqp-port',
      '0',
      '--nats-port',
      '0',
      '--http-port',
      '0',
      ...(opts.args ?? []),
    ];
    // The launcher itself, as users run it (it execs Node in the same process, so signals reach the broker).
    const [cmd, ...pre] = [...(opts.wrap ?? []), FLOWMQ_BIN];
    const proc = spawn(cmd!, [...pre, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FLOWMQ_NODE: process.execPath, ...opts.env } });
    const b = new FlowmqProcess(proc, dataDir, opts.args ?? [], opts.env ?? {}, opts.host, opts.wrap);
    const startTimeoutMs = opts.startTimeoutMs ?? 20_000;
    const deadline = Date.now() + startTimeoutMs;
    while (b.ports.http === undefined) {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        throw new Error(`flowmq exited early (${proc.exitCode ?? proc.signalCode}): ${b.stderr}\n${JSON.stringify(b.logs)}`);
      }
      if (Date.now() > deadline) {
        proc.kill('SIGKILL');
        throw new Error(`flowmq did not start within ${startTimeoutMs} ms: ${b.stderr}\n${JSON.stringify(b.logs.slice(-20))}`);
      }
      await sleep(20);
    }
    return b;
  }

  /** What the broker printed on stderr (an uncaught exception, a fatal start error). */
  get errorOutput(): string {
    return this.stderr;
  }

  get http(): string {
    return `http://${this.host}:${this.ports.http}`;
  }
  get kafka(): string {
    return `${this.host}:${this.ports.kafka}`;
  }
  get mqttUrl(): string {
    return `mqtt://${this.host}:${this.ports.mqtt}`;
  }
  /** The NATS listener's port (from its 'listening' line, as the other protocols'). */
  get natsPort(): number {
    return this.ports.nats;
  }
  /** `127.0.0.1:<port>` for the nats client's `servers`. */
  get natsServer(): string {
    return `${this.host}:${this.ports.nats}`;
  }

  /** Credentials `api()` sends (HTTP Basic), for a broker started with a users file. */
  credentials: { username: string; password: string } | null = null;

  /** Runs the `flowmq` CLI against this broker (`env`: FLOWMQ_USER, FLOWMQ_PASSWORD...). */
  cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<RunResult> {
    return run(process.execPath, [FLOWMQ_BIN, ...args, '--server', this.http], { timeoutMs: 15_000, env });
  }

  async api<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {};
    // The admin API refuses state-changing requests that are not JSON, body or not.
    if (method !== 'GET') headers['content-type'] = 'application/json';
    if (this.credentials) {
      headers.authorization = `Basic ${Buffer.from(`${this.credentials.username}:${this.credentials.password}`).toString('base64')}`;
    }
    const res = await fetch(this.http + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return (text ? JSON.parse(text) : null) as T;
  }

  /** SIGTERM (or another signal), then wait for exit. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(signal);
    return this.exit;
  }

  /** Restarts on the same data directory (new ports), with the same options unless given others. */
  async restart(args?: string[]): Promise<FlowmqProcess> {
    await this.stop();
    return FlowmqProcess.start({
      dataDir: this.dataDir,
      args: args ?? this.args,
      env: this.env,
      host: this.host === '127.0.0.1' ? undefined : this.host,
      wrap: this.wrap,
    });
  }

  async waitForLog(pred: (l: LogLine) => boolean, timeoutMs = 5000): Promise<LogLine> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.logs.find(pred);
      if (hit) return hit;
      if (Date.now() > deadline) throw new Error(`no such log line within ${timeoutMs} ms; have:\n${this.logs.map((l) => JSON.stringify(l)).join('\n')}`);
      await sleep(20);
    }
  }

  cleanup(): void {
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** Calls `fn` with each complete line a child's output stream prints, as it arrives. */
export function eachLine(stream: NodeJS.ReadableStream, fn: (line: string) => void): void {
  let buf = '';
  stream.on('data', (d: Buffer) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      fn(line);
    }
  });
}

/** A free loopback port, for a server that is told its port (nats-server, RabbitMQ): see helpers/ports.ts. */
export { freePort } from '../helpers/ports.js';

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `fn` until it returns true or the time runs out. */
export async function eventually(fn: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

/**
 * Retries `fn` (assertions) every 25 ms until it passes; after `timeoutMs` its last failure is the caller's. For
 * waiting on deliveries whose end a marker message proves, not for proving that something did not happen.
 */
export async function until(fn: () => void, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      fn();
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(25);
    }
  }
}

export interface KcatMessage {
  topic: string;
  partition: number;
  offset: number;
  tstype: string;
  ts: number;
  key: string | null;
  payload: string | null;
  headers?: string[];
}

/** `kcat -C -t TOPIC -o beginning -e -J`: every message currently in the topic. */
export async function kcatConsume(broker: string, topic: string, extra: string[] = []): Promise<KcatMessage[]> {
  const r = await run('kcat', ['-b', broker, '-C', '-t', topic, '-o', 'beginning', '-e', '-J', '-q', ...extra], { timeoutMs: 30_000 });
  if (r.code !== 0) throw new Error(`kcat failed (${r.code ?? r.signal}): ${r.stderr}`);
  return r.stdout
    .split('\n')
    .filter((l) => l.trim().startsWith('{'))
    .map((l) => JSON.parse(l) as KcatMessage);
}

export interface TestCert {
  dir: string;
  certPath: string;
  keyPath: string;
  /** The certificate in PEM, to trust it as a CA in clients. */
  cert: string;
}

/**
 * A fresh self-signed certificate for localhost and 127.0.0.1, in a new temporary directory (node:crypto
 * cannot make X.509; openssl can). librdkafka and Node verify the host name against the subjectAltName.
 */
export function makeTestCert(prefix = 'flowmq-tls-'): TestCert {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const certPath = join(dir, 'cert.pem');
  const keyPath = join(dir, 'key.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
      '-keyout',
      keyPath,
      '-out',
      certPath,
    ],
    { stdio: 'ignore' },
  );
  return { dir, certPath, keyPath, cert: readFileSync(certPath, 'utf8') };
}

/** A throwaway certificate authority: clients' certificates signed by it are what mTLS listeners trust. */
export interface TestCa extends TestCert {
  /** Signs a client certificate (subject CN, optional subjectAltName e-mail and DNS names). */
  issue(opts: { cn: string; email?: string; dns?: string }): TestCert;
}

/** A fresh CA (EC P-256, one day) in a new temporary directory, with `issue` for client certificates. */
export function makeTestCa(prefix = 'flowmq-ca-'): TestCa {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const certPath = join(dir, 'ca.pem');
  const keyPath = join(dir, 'ca-key.pem');
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  execFileSync('openssl', ['req', '-x509', ...ec, '-days', '1', '-subj', '/CN=FlowMQ test CA', '-keyout', keyPath, '-out', certPath], { stdio: 'ignore' });
  let n = 0;
  const issue = (o: { cn: string; email?: string; dns?: string }): TestCert => {
    const base = join(dir, `client-${n++}`);
    const san = [o.email ? `email:${o.email}` : '', o.dns ? `DNS:${o.dns}` : ''].filter(Boolean).join(',');
    writeFileSync(`${base}.ext`, `basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n${san ? `subjectAltName=${san}\n` : ''}`);
    execFileSync('openssl', ['req', '-new', ...ec, '-subj', `/CN=${o.cn}`, '-keyout', `${base}-key.pem`, '-out', `${base}.csr`], { stdio: 'ignore' });
    execFileSync(
      'openssl',
      [
        'x509',
        '-req',
        '-in',
        `${base}.csr`,
        '-CA',
        certPath,
        '-CAkey',
        keyPath,
        '-CAcreateserial',
        '-days',
        '1',
        '-extfile',
        `${base}.ext`,
        '-out',
        `${base}.pem`,
      ],
      {
        stdio: 'ignore',
      },
    );
    return { dir, certPath: `${base}.pem`, keyPath: `${base}-key.pem`, cert: readFileSync(`${base}.pem`, 'utf8') };
  };
  return { dir, certPath, keyPath, cert: readFileSync(certPath, 'utf8'), issue };
}
