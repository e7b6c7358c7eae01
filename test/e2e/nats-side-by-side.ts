/**
 * What the JetStream side-by-side e2e files share: a private nats-server with JetStream (Debian's `nats-server`, on
 * a free loopback port, its store in a temporary directory) for the same scenario to run against, the hooks that run
 * a scenario against both, and the look-up of a labelled step in a scenario's transcript.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { connect } from 'nats';
import { eventually, FlowmqProcess, freePort } from './harness.js';

/** One step of a scenario: its label and what it answered. */
export type Entry = [string, unknown];

export interface NatsServerJs {
  /** host:port for nats.js. */
  url: string;
  stop(): void;
}

/**
 * Starts nats-server with JetStream and resolves once a nats.js client can connect (10 s at most); `extra`: more of
 * its configuration (accounts, say).
 */
export async function startNatsServerJs(prefix: string, extra = ''): Promise<NatsServerJs> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const conf = join(dir, 'nats.conf');
  writeFileSync(conf, `listen: "127.0.0.1:${port}"\njetstream { store_dir: "${join(dir, 'js')}" }\n${extra}`);
  const server = spawn('nats-server', ['-c', conf], { stdio: 'ignore' });
  const url = `127.0.0.1:${port}`;
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
  return { url, stop: () => void server.kill('SIGTERM') };
}

/** What the step labelled `label` answered; fails the test when the transcript has no such step. */
export function step(t: Entry[], label: string): unknown {
  const e = t.find(([l]) => l === label);
  assert.ok(e, `transcript has ${label}`);
  return e[1];
}

/** What sideBySide fills in once its before hook ran. */
export interface SideBySide {
  /** The FlowMQ broker the scenario ran against (still running: tests may use its other protocols, or restart it). */
  broker: FlowmqProcess;
  /** FlowMQ's transcript, and nats-server's. */
  ours: Entry[];
  theirs: Entry[];
}

/**
 * Registers the suite's hooks: start FlowMQ and a private nats-server (`prefix`: its directory's), run `scenario`
 * against FlowMQ, then against nats-server, and stop both after the suite.
 */
export function sideBySide(prefix: string, scenario: (url: string) => Promise<Entry[]>): SideBySide {
  const t = { ours: [], theirs: [] } as unknown as SideBySide;
  let server: NatsServerJs | undefined;
  before(async () => {
    [t.broker, server] = await Promise.all([
      // No KIP-134 wait for the one-member Kafka groups some scenarios read with (3 s each otherwise).
      FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0'] }),
      startNatsServerJs(prefix),
    ]);
    t.ours = await scenario(t.broker.natsServer);
    t.theirs = await scenario(server.url);
  });
  after(async () => {
    server?.stop();
    await t.broker?.stop();
    t.broker?.cleanup();
  });
  return t;
}
