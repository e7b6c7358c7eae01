/**
 * HAProxy (Debian's /usr/sbin/haproxy) in front of a test cluster: one TCP frontend per protocol (MQTT, AMQP,
 * NATS) on a free loopback port, round robin over the brokers' listeners, with health checks, so that a client
 * connects to one address and lands on any broker, and reconnects to a live one when its broker dies. Kafka needs no
 * proxy (clients take a bootstrap list and follow Metadata to each partition's leader).
 *
 * The brokers listen on ports the OS picks, so the configuration is generated from their addresses; a broker added
 * or removed is a new configuration, applied by starting a new HAProxy with `-sf <old pid>` (the old one stops
 * listening and finishes its open connections), the way HAProxy is reloaded in production. The frontends keep
 * their ports across reloads.
 *
 * A plain module (no node:test imports), so bench/ can use it too.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../bench/util.js';

export const HAPROXY_BIN = process.env.FLOWMQ_HAPROXY ?? '/usr/sbin/haproxy';

/** A protocol HAProxy fronts, and the listener name it has on a broker. */
export type ProxiedProtocol = 'mqtt' | 'amqp' | 'nats';
export const PROXIED: readonly ProxiedProtocol[] = ['mqtt', 'amqp', 'nats'];

/** One backend server: a broker's listeners by protocol. */
export interface ProxyBackend {
  name: string;
  ports: Partial<Record<ProxiedProtocol, number>>;
}

export interface HAProxy {
  /** The frontends' ports. */
  readonly ports: Record<ProxiedProtocol, number>;
  readonly mqttUrl: string;
  /** `amqp://127.0.0.1:<port>` */
  readonly amqpUrl: string;
  /** `127.0.0.1:<port>` for the nats client. */
  readonly natsServer: string;
  /** The configuration in force. */
  readonly config: string;
  /** Applies a new list of backends (a broker joined or left): a soft reload. */
  reload(backends: readonly ProxyBackend[]): Promise<void>;
  stop(): Promise<void>;
}

export function haproxyAvailable(): boolean {
  return existsSync(HAPROXY_BIN);
}

/**
 * The configuration: TCP mode; a health check every 300 ms, two failed in a row mark a broker down (a broker killed is
 * out of rotation within ~1 s, and `on-marked-down shutdown-sessions` cuts the clients still attached to it so they
 * reconnect at once; with `fall 1` a single late check took a broker out of rotation: on a loaded machine a client
 * once got ECONNRESET from the proxy with all three brokers up, which is what HAProxy does with no server in rotation);
 * a connection refused by a dead server is tried again on another (`option redispatch`, `retries`). Client and
 * server timeouts are long: MQTT and AMQP connections idle between keepalives.
 */
export function haproxyConfig(frontends: Record<ProxiedProtocol, number>, backends: readonly ProxyBackend[], host = '127.0.0.1'): string {
  const lines = [
    'global',
    '  maxconn 4000',
    '',
    'defaults',
    '  mode tcp',
    '  timeout connect 2s',
    '  timeout client 1h',
    '  timeout server 1h',
    '  timeout check 1s',
    '  option redispatch',
    '  retries 3',
    '',
  ];
  for (const p of PROXIED) {
    lines.push(`frontend ${p}_in`, `  bind ${host}:${frontends[p]}`, `  default_backend ${p}_brokers`, '');
    lines.push(`backend ${p}_brokers`, '  balance roundrobin', '  default-server check inter 300ms fall 2 rise 1 on-marked-down shutdown-sessions');
    for (const b of backends) {
      const port = b.ports[p];
      if (port !== undefined) lines.push(`  server ${b.name} ${host}:${port}`);
    }
    lines.push('');
  }
  return lines.join('\n');
}

/** Starts HAProxy in front of `backends` on free loopback ports. */
export async function startHAProxy(backends: readonly ProxyBackend[]): Promise<HAProxy> {
  if (!haproxyAvailable()) throw new Error(`no HAProxy at ${HAPROXY_BIN} (apt-get install haproxy)`);
  const dir = await mkdtemp(join(tmpdir(), 'flowmq-haproxy-'));
  const ports = { mqtt: await freePort(), amqp: await freePort(), nats: await freePort() };
  /** Every HAProxy started (old generations finish their connections after a reload). */
  const children: ChildProcess[] = [];
  let config = '';
  let generation = 0;
  let stderr = '';

  const launch = async (list: readonly ProxyBackend[]): Promise<void> => {
    // Each generation also listens on a probe port of its own: once it accepts, this configuration is in force
    // (the frontends' ports are shared with the previous generation until it lets go of them).
    const probe = await freePort();
    config = haproxyConfig(ports, list);
    const withProbe = `${config}\nfrontend probe\n  bind 127.0.0.1:${probe}\n  tcp-request connection reject\n`;
    const file = join(dir, `haproxy-${++generation}.cfg`);
    await writeFile(file, withProbe);
    const old = children.filter((c) => c.exitCode === null && c.signalCode === null).map((c) => String(c.pid));
    // -db: foreground, no daemon; -sf: the old processes stop listening and exit once their connections are done.
    const c = spawn(HAPROXY_BIN, ['-db', '-f', file, ...(old.length > 0 ? ['-sf', ...old] : [])], { stdio: ['ignore', 'ignore', 'pipe'] });
    c.stderr!.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-8000);
    });
    children.push(c);
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (c.exitCode !== null || c.signalCode !== null) throw new Error(`haproxy exited (${c.exitCode ?? c.signalCode}): ${stderr}\n${config}`);
      if (await canConnect(probe)) break;
      if (Date.now() > deadline) throw new Error(`haproxy did not listen: ${stderr}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  };

  const stopAll = async (): Promise<void> => {
    await Promise.all(
      children.splice(0).map(async (c) => {
        if (c.exitCode !== null || c.signalCode !== null) return;
        const exited = new Promise((r) => c.once('exit', r));
        c.kill('SIGKILL');
        await exited;
      }),
    );
  };
  const onExit = (): void => {
    for (const c of children) {
      try {
        c.kill('SIGKILL');
      } catch {
        // best effort
      }
    }
  };
  process.on('exit', onExit);

  await launch(backends);
  return {
    ports,
    mqttUrl: `mqtt://127.0.0.1:${ports.mqtt}`,
    amqpUrl: `amqp://127.0.0.1:${ports.amqp}`,
    natsServer: `127.0.0.1:${ports.nats}`,
    get config() {
      return config;
    },
    async reload(list) {
      await launch(list);
    },
    async stop() {
      process.off('exit', onExit);
      await stopAll();
      await rm(dir, { recursive: true, force: true, maxRetries: 5 });
    },
  };
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port }, () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}
