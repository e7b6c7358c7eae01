/**
 * What the JetStream side-by-side e2e files share: a private nats-server with JetStream (Debian's `nats-server`, on
 * a free loopback port, its store in a temporary directory) for the same scenario to run against, and the look-up of
 * a labelled step in a scenario's transcript.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'nats';
import { eventually, freePort } from './harness.js';

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
