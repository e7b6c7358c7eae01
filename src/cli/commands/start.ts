/** `flowmq start`: runs a broker in this process until SIGINT/SIGTERM; SIGHUP reloads its files (Broker.reload). */
import { join, resolve } from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { envName, formatDefault, loadConfig, OPTIONS } from '../../config/index.js';
// Not command.js: it loads the HTTP client, which `start` does not use (every module before the NATS bind counts).
import { UsageError } from '../usage-error.js';
import { prestartQueueWorker } from '../../storage/queues/sqlite-worker-boot.js';
import { prebindNats, releasePrebound, setEarlyInfo } from '../../protocols/nats/prebound.js';
import { earlyNatsInfo } from '../early-nats-info.js';

function startHelp(): string {
  const lines = OPTIONS.map((o) => `  --${o.name.padEnd(26)} ${o.help} [default: ${formatDefault(o)}; env ${envName(o.name)}]`);
  return `Usage: flowmq start [--config flowmq.yaml] [options]\n\nOptions (flags win over environment, which wins over the config file):\n  --config FILE                YAML file of option: value pairs (same names as the flags)\n${lines.join('\n')}`;
}

/**
 * Every option is parsed as a string (a boolean is `--mqtt-ws false` as well as `--mqtt-ws=false`), so a boolean
 * flag given bare (`flowmq start --cluster --broker-id 1`, as docs/cluster.md writes it) is read as `true`: it gets the
 * value inserted when the next argument is another option or there is none.
 */
export function bareBooleans(args: readonly string[]): string[] {
  const bools = new Set(OPTIONS.filter((o) => o.kind === 'bool').map((o) => `--${o.name}`));
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    out.push(args[i]);
    if (bools.has(args[i]) && (i + 1 >= args.length || args[i + 1].startsWith('--'))) out.push('true');
  }
  return out;
}

export async function cmdStart(argv: string[]): Promise<number> {
  const args = bareBooleans(argv);
  const options: ParseArgsConfig['options'] = { config: { type: 'string' }, help: { type: 'boolean', short: 'h' } };
  // --wal-shard repeats (one shard each).
  for (const o of OPTIONS) options[o.name] = o.kind === 'wal-shards' ? { type: 'string', multiple: true } : { type: 'string' };
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
  // The NATS port accepts from now on, first thing, and sends INFO at once; its clients' CONNECT, PING and PUBs wait
  // until the broker is up (prebound.ts). Awaited: node binds a tick after listen, and that tick would come only
  // once pino's modules below have loaded (~0.1 s, more on a busy machine).
  if (config.protocols.includes('nats')) {
    await prebindNats(config.host, config.natsPort);
    setEarlyInfo(earlyNatsInfo(config));
  }
  // pino loads after the bind (~0.1 s on a busy machine).
  const { pino } = await import('pino');
  const logger = pino({ level: config.logLevel, base: { broker: config.brokerId } });
  // Loaded here, not at the top: every other command only talks HTTP, and the broker's modules (storage backends,
  // the AWS SDK, fastify, four protocols) take ~0.5 s to load, which each CLI call would pay.
  // The embedded queue store's worker thread boots while the broker's modules load (sqlite-worker-boot.ts).
  if (config.metastore.kind === 'sqlite') prestartQueueWorker(join(resolve(config.dataDir), 'queues.db'));
  let broker;
  try {
    const { startBroker } = await import('../../broker.js');
    broker = await startBroker(config, logger);
  } finally {
    // Not taken by the NATS listener (a failed start): closed.
    releasePrebound();
  }
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
    // SIGHUP reloads what can be reloaded (as nats-server reloads its configuration) instead of ending the process.
    process.on('SIGHUP', () => {
      if (stopping) return;
      logger.info({ signal: 'SIGHUP' }, 'reloading the configuration');
      void broker.reload().catch((err: unknown) => logger.error({ err }, 'reload failed'));
    });
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
}
