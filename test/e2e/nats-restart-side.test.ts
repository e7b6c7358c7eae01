/**
 * An ephemeral consumer over a server restart, side by side: the same nats.js scenario runs against bin/flowmq and
 * against Debian's nats-server 2.9.10, each killed (SIGKILL, as nats.js's own test launcher restarts a server) and
 * started again on the same port and store while the client reconnects, and the two transcripts must be equal.
 * nats-server keeps an ephemeral consumer of a file stream across its restart: the push consumer made before is
 * still there under its name and delivers what is published after (nats.js's `kv - watcher on server restart`
 * relies on it: its watcher's ordered consumer only notices a lost consumer after two missed 30 s heartbeats).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AckPolicy, connect, nanos, StringCodec, type Msg, type NatsConnection } from 'nats';
import { eventually, FlowmqProcess, freePort } from './harness.js';
import { step, type Entry } from './nats-side-by-side.js';

const sc = StringCodec();

/** A server the scenario can kill and start again on the same port and store. */
interface Restartable {
  url: string;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

async function flowmq(): Promise<Restartable> {
  const port = await freePort();
  let b = await FlowmqProcess.start({ args: ['--nats-port', String(port)] });
  return {
    url: `127.0.0.1:${port}`,
    async restart() {
      await b.stop('SIGKILL');
      b = await FlowmqProcess.start({ dataDir: b.dataDir, args: b.args });
    },
    async stop() {
      await b.stop();
      b.cleanup();
    },
  };
}

async function natsServer(): Promise<Restartable> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'natsjs-restart-'));
  const conf = join(dir, 'nats.conf');
  writeFileSync(conf, `listen: "127.0.0.1:${port}"\njetstream { store_dir: "${join(dir, 'js')}" }\n`);
  const url = `127.0.0.1:${port}`;
  let proc: ChildProcess;
  const start = async (): Promise<void> => {
    proc = spawn('nats-server', ['-c', conf], { stdio: 'ignore' });
    await eventually(
      async () => {
        try {
          await (await connect({ servers: url, reconnect: false })).close();
          return true;
        } catch {
          return false;
        }
      },
      10_000,
      'nats-server up',
    );
  };
  const kill = async (signal: NodeJS.Signals): Promise<void> => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill(signal);
    await exited;
  };
  await start();
  return {
    url,
    async restart() {
      await kill('SIGKILL');
      await start();
    },
    stop: () => kill('SIGTERM'),
  };
}

/** The consumer a push delivery came from: `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>...` (v1 ack subject). */
function consumerOf(m: Msg): string {
  return (m.reply ?? '').split('.')[3] ?? '';
}

/** What `f` answered, or the error it failed with (the two servers must fail alike). */
async function attempt(f: () => Promise<unknown>): Promise<unknown> {
  try {
    return await f();
  } catch (err) {
    return { error: (err as Error).message };
  }
}

async function scenario(server: Restartable): Promise<Entry[]> {
  const nc: NatsConnection = await connect({ servers: server.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  const out: Entry[] = [];
  const log = (label: string, v: unknown): void => void out.push([label, v]);
  try {
    const js = nc.jetstream();
    const jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: 'RS', subjects: ['rs.>'] });
    const got: Msg[] = [];
    nc.subscribe('dlv.rs', { callback: (_e, m) => void got.push(m) });
    const ci = await jsm.consumers.add('RS', { deliver_subject: 'dlv.rs', ack_policy: AckPolicy.None, inactive_threshold: nanos(120_000) });
    const name = ci.name;
    log('ephemeral', ci.config.durable_name === undefined);
    await nc.flush();

    await server.restart();
    // Reconnected once a round trip through the new server went through.
    await eventually(
      async () => {
        try {
          await jsm.streams.info('RS');
          return true;
        } catch {
          return false;
        }
      },
      15_000,
      'reconnected',
    );
    log(
      'consumer after restart',
      await attempt(async () => {
        const i = await jsm.consumers.info('RS', name);
        return { same: i.name === name, ephemeral: i.config.durable_name === undefined, deliver_subject: i.config.deliver_subject };
      }),
    );
    log('pub m1', (await js.publish('rs.a', sc.encode('m1'))).seq);
    // Both delivered by the consumer made before the restart (nothing else delivers to dlv.rs; 5 s at most).
    log('pub marker', (await js.publish('rs.z', sc.encode('marker'))).seq);
    await eventually(async () => got.length >= 2, 5_000, 'deliveries after the restart').catch(() => undefined);
    log(
      'delivered after restart',
      got.map((m) => [m.subject, sc.decode(m.data), consumerOf(m) === name]),
    );
  } finally {
    await nc.close().catch(() => undefined);
  }
  return out;
}

describe('e2e: an ephemeral consumer over a restart, FlowMQ beside nats-server 2.9.10', () => {
  const servers: Restartable[] = [];
  let ours: Entry[] = [];
  let theirs: Entry[] = [];
  before(async () => {
    const [a, b] = await Promise.all([flowmq(), natsServer()]);
    servers.push(a, b);
    ours = await scenario(a);
    theirs = await scenario(b);
  });
  after(async () => {
    for (const s of servers) await s.stop().catch(() => undefined);
  });

  it('the consumer is there again under its name and delivers what comes after, as on nats-server', () => {
    assert.deepEqual(step(theirs, 'consumer after restart'), { same: true, ephemeral: true, deliver_subject: 'dlv.rs' });
    assert.deepEqual(step(theirs, 'delivered after restart'), [
      ['rs.a', 'm1', true],
      ['rs.z', 'marker', true],
    ]);
    assert.deepEqual(ours, theirs);
  });
});
