/**
 * The `flowmq` command.
 *
 *   flowmq start [--config FILE] [--data-dir DIR] [--mqtt-port N] ...   run a broker
 *   flowmq stream create NAME --partitions N --bind FILTER [--bind FILTER...] [--retention 7d] [--user NAME]
 *   flowmq stream list [--user NAME]
 *   flowmq stream describe NAME [--user NAME]
 *   flowmq stream delete NAME [--user NAME]
 *
 * Stream commands talk to a running broker's admin API (`--server`, default http://127.0.0.1:8080, or
 * FLOWMQ_SERVER); with `--user NAME` (or FLOWMQ_USER) they authenticate with HTTP Basic, the password from
 * FLOWMQ_PASSWORD or else a prompt on the terminal that does not echo. Exit codes: 0 ok, 1 operation failed
 * (the broker refused the credentials, for one), 2 bad usage or configuration.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { pino } from 'pino';
import { ConfigError, envName, loadConfig, OPTIONS } from '../config/index.js';
import { startBroker } from '../broker.js';
import { isFlowError } from '../core/index.js';

const VERSION = '0.1.0';

class UsageError extends Error {}

const USAGE = `FlowMQ ${VERSION} — one broker for MQTT, Kafka, AMQP and NATS clients

Usage:
  flowmq start [options]                  run a broker (embedded storage by default)
  flowmq stream create NAME --partitions N [--bind FILTER]... [--retention 7d] [--user NAME]
  flowmq stream list [--user NAME]
  flowmq stream describe NAME [--user NAME]
  flowmq stream delete NAME [--user NAME]
  flowmq version

Run 'flowmq start --help' for broker options.
Stream commands reach the broker at --server URL (default http://127.0.0.1:8080, env FLOWMQ_SERVER).
A broker with a users file wants --user NAME (env FLOWMQ_USER); the password comes from FLOWMQ_PASSWORD,
else a prompt on the terminal.`;

function startHelp(): string {
  const lines = OPTIONS.map((o) => {
    const d = o.default;
    const def = Array.isArray(d) ? d.join(',') || '-' : d === null ? '-' : typeof d === 'object' ? d.kind : String(d);
    return `  --${o.name.padEnd(26)} ${o.help} [default: ${def}; env ${envName(o.name)}]`;
  });
  return `Usage: flowmq start [--config flowmq.yaml] [options]\n\nOptions (flags win over environment, which wins over the config file):\n  --config FILE                YAML file of option: value pairs (same names as the flags)\n${lines.join('\n')}`;
}

async function cmdStart(args: string[]): Promise<number> {
  const options: ParseArgsConfig['options'] = { config: { type: 'string' }, help: { type: 'boolean', short: 'h' } };
  for (const o of OPTIONS) options[o.name] = { type: 'string' };
  let parsed;
  try {
    parsed = parseArgs({ args, options, allowPositionals: false, strict: true });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  if (parsed.values.help) {
    console.log(startHelp());
    return 0;
  }
  const { config: file, help: _help, ...flags } = parsed.values;
  const config = loadConfig({ flags, env: process.env, file: (file as string | undefined) ?? process.env.FLOWMQ_CONFIG });
  const logger = pino({ level: config.logLevel, base: { broker: config.brokerId } });
  const broker = await startBroker(config, logger);
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      logger.info({ signal }, 'shutting down');
      broker.close().then(
        () => {
          logger.info('stopped');
          resolve(0);
        },
        (err: unknown) => {
          logger.error({ err }, 'shutdown failed');
          resolve(1);
        },
      );
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
}

/** Where the stream commands send their requests, and as whom. */
interface Client {
  server: string;
  /** Basic credentials, or null to call anonymously. */
  user: { name: string; password: string } | null;
}

async function api(client: Client, method: string, path: string, body?: unknown): Promise<unknown> {
  const { server, user } = client;
  const headers: Record<string, string> = {};
  // Every request but GET carries the JSON content type, body or not: the broker refuses state-changing
  // requests without it (a cross-site form cannot send it).
  if (method !== 'GET') headers['content-type'] = 'application/json';
  if (user !== null) headers.authorization = `Basic ${Buffer.from(`${user.name}:${user.password}`, 'utf8').toString('base64')}`;
  let res: Response;
  try {
    res = await fetch(new URL(path, server), { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new Error(`cannot reach the broker at ${server}: ${((e as Error).cause as Error | undefined)?.message ?? (e as Error).message}`);
  }
  const text = await res.text();
  let data: unknown = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    if (res.ok) throw new Error(`the server at ${server} did not answer with JSON (is it a FlowMQ admin API?)`);
  }
  if (res.status === 401) {
    throw new Error(
      user === null
        ? `the broker at ${server} requires a user: pass --user NAME (or set FLOWMQ_USER) and the password in FLOWMQ_PASSWORD`
        : `the broker at ${server} refused user "${user.name}": invalid username or password`,
    );
  }
  if (!res.ok) {
    const err = (data as { error?: { code?: string; message?: string } } | null)?.error;
    throw new Error(`${err?.message ?? res.statusText} (${err?.code ?? res.status})`);
  }
  return data;
}

/** Reads a password from the terminal without echoing it (raw mode: each key is handled here, not echoed). */
function promptPassword(prompt: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(prompt);
  stdin.setRawMode(true);
  stdin.setEncoding('utf8');
  stdin.resume();
  return new Promise((resolve, reject) => {
    let pw = '';
    const finish = () => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
    };
    const onData = (chunk: string) => {
      for (const ch of chunk) {
        if (ch === '\r' || ch === '\n' || ch === '\u0004') {
          finish();
          return resolve(pw);
        }
        if (ch === '\u0003') {
          finish();
          return reject(new Error('cancelled'));
        }
        if (ch === '\u007f' || ch === '\b') pw = pw.slice(0, -1);
        else pw += ch;
      }
    };
    stdin.on('data', onData);
  });
}

async function credentials(userFlag: string | undefined): Promise<Client['user']> {
  const name = userFlag ?? (process.env.FLOWMQ_USER || undefined);
  if (name === undefined) return null;
  if (name === '' || name.includes(':')) throw new UsageError('--user must be a non-empty name without ":"');
  const fromEnv = process.env.FLOWMQ_PASSWORD;
  if (fromEnv !== undefined) return { name, password: fromEnv };
  if (!process.stdin.isTTY) {
    throw new UsageError(`--user ${name} needs a password: set FLOWMQ_PASSWORD (there is no terminal to ask on)`);
  }
  return { name, password: await promptPassword(`password for ${name}: `) };
}

interface StreamView {
  name: string;
  partitions: number;
  bindings: string[];
  retentionMs: number | null;
  createdAt: string;
  topic?: string;
  partitionDetails?: Array<Record<string, number>>;
}

function fmtRetention(ms: number | null): string {
  if (ms === null) return 'forever';
  for (const [u, n] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000]] as const) {
    if (ms % n === 0) return `${ms / n}${u}`;
  }
  return `${ms}ms`;
}

async function cmdStream(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      allowPositionals: true,
      strict: true,
      options: {
        server: { type: 'string' },
        partitions: { type: 'string', short: 'p' },
        bind: { type: 'string', multiple: true, short: 'b' },
        retention: { type: 'string' },
        user: { type: 'string', short: 'u' },
        json: { type: 'boolean' },
      },
    });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const v = parsed.values;
  const server = (v.server as string | undefined) ?? process.env.FLOWMQ_SERVER ?? 'http://127.0.0.1:8080';
  const name = parsed.positionals[0];
  const needName = () => {
    if (!name || parsed.positionals.length !== 1) throw new UsageError(`usage: flowmq stream ${sub} NAME`);
    return encodeURIComponent(name);
  };
  if (!['create', 'list', 'describe', 'delete'].includes(sub ?? '')) {
    throw new UsageError(`unknown stream command "${sub ?? ''}"; use create, list, describe or delete`);
  }
  if (sub !== 'list') needName();
  const client: Client = { server, user: await credentials(v.user as string | undefined) };
  const print = (data: unknown, text: () => string) => console.log(v.json ? JSON.stringify(data, null, 2) : text());
  switch (sub) {
    case 'create': {
      needName();
      const partitions = v.partitions === undefined ? 1 : Number(v.partitions);
      if (!Number.isInteger(partitions) || partitions < 1) throw new UsageError('--partitions must be a positive integer');
      const s = (await api(client, 'POST', '/api/v1/streams', {
        name,
        partitions,
        bindings: v.bind,
        retention: v.retention,
      })) as StreamView;
      print(s, () => `created stream ${s.name}: ${s.partitions} partition(s), bound to ${s.bindings.join(', ')}, retention ${fmtRetention(s.retentionMs)}`);
      return 0;
    }
    case 'list': {
      const { streams } = (await api(client, 'GET', '/api/v1/streams')) as { streams: StreamView[] };
      print({ streams }, () => {
        if (streams.length === 0) return 'no streams';
        const rows = streams.map((s) => [s.name, String(s.partitions), fmtRetention(s.retentionMs), s.bindings.join(' ')]);
        return table([['NAME', 'PARTITIONS', 'RETENTION', 'BINDINGS'], ...rows]);
      });
      return 0;
    }
    case 'describe': {
      const s = (await api(client, 'GET', `/api/v1/streams/${needName()}`)) as StreamView;
      print(s, () => {
        const head = [
          `stream:     ${s.name}`,
          `topic:      ${s.topic}`,
          `partitions: ${s.partitions}`,
          `bindings:   ${s.bindings.join(', ')}`,
          `retention:  ${fmtRetention(s.retentionMs)}`,
          `created:    ${s.createdAt}`,
        ];
        const d = s.partitionDetails ?? [];
        const cols = d.length > 0 ? Object.keys(d[0]) : [];
        return [...head, '', table([cols.map((c) => c.toUpperCase()), ...d.map((r) => cols.map((c) => String(r[c])))])].join('\n');
      });
      return 0;
    }
    case 'delete': {
      await api(client, 'DELETE', `/api/v1/streams/${needName()}`);
      print({ deleted: name }, () => `deleted stream ${name}`);
      return 0;
    }
    default:
      throw new UsageError(`unknown stream command "${sub ?? ''}"; use create, list, describe or delete`);
  }
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n');
}

export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  try {
    switch (cmd) {
      case 'start':
        return await cmdStart(rest);
      case 'stream':
      case 'streams':
        return await cmdStream(rest);
      case 'version':
      case '--version':
        console.log(VERSION);
        return 0;
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        console.log(USAGE);
        return cmd === undefined ? 2 : 0;
      default:
        throw new UsageError(`unknown command "${cmd}"`);
    }
  } catch (e) {
    // A ConfigError from the option table, or a configuration file (users file...) that cannot be used.
    if (e instanceof ConfigError || isFlowError(e, 'CONFIG_ERROR')) {
      console.error(`flowmq: ${e.message}`);
      return 2;
    }
    if (e instanceof UsageError) {
      console.error(`flowmq: ${e.message}\n\n${USAGE}`);
      return 2;
    }
    console.error(`flowmq: ${(e as Error).message}`);
    return 1;
  }
}
