/**
 * The `flowmq` command: `flowmq start` runs a broker; every other command talks to a running broker's admin API
 * (/api/v1) and prints a table (or, with --json, the API's JSON). One file per command group in commands/.
 *
 * Exit codes: 0 ok, 1 the broker refused or failed the operation (its message is printed, with its code), 2 bad
 * usage or configuration.
 */
import { ConfigError } from '../config/index.js';
import { isFlowError } from '../core/errors.js';
import { UsageError } from './usage-error.js';
// The HTTP client and the other commands load only for them (dynamic imports below): `flowmq start` binds its NATS
// port before loading them (src/protocols/nats/prebound.ts), and a restarted broker's first moments count.
import type { CommandGroup, SubCommand } from './command.js';

const VERSION = '0.1.0';

const usage = (
  GROUPS: readonly CommandGroup[],
  SINGLES: Readonly<Record<string, SubCommand>>,
  COMMON_HELP: string,
): string => `FlowMQ ${VERSION} — one broker for MQTT, Kafka, AMQP and NATS clients

Usage:
  flowmq start [options]          run a broker (embedded storage by default); 'flowmq start --help' for options
${GROUPS.map((g) => `  flowmq ${g.name.padEnd(15)} ${Object.keys(g.subs).join('|')}`).join('\n')}
${Object.entries(SINGLES)
  .map(([n, s]) => `  flowmq ${`${n} ${s.usage}`.padEnd(24)} ${s.summary}`)
  .join('\n')}
  flowmq version

'flowmq <command> --help' describes a command. Examples:
  flowmq stream create telemetry --partitions 3 --bind 'factory/+/+/telemetry' --retention 7d
  FLOWMQ_NEW_PASSWORD=... flowmq user add alice --group ops
  flowmq policy add ops-sensors --allow --action publish,subscribe --resource 'topic:sensors/#' --principal group:ops
  eval "$(flowmq login --user alice)"; flowmq client list

${COMMON_HELP}`;

export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  try {
    // The broker's modules load only for `start`: every other command is an HTTP client and starts in half the time.
    if (cmd === 'start') return await (await import('./commands/start.js')).cmdStart(rest);
    const [{ runGroup, runSub, COMMON_HELP }, { GROUPS, SINGLES }] = await Promise.all([import('./command.js'), import('./commands/index.js')]);
    const USAGE = usage(GROUPS, SINGLES, COMMON_HELP);
    const group = GROUPS.find((g) => g.name === cmd || g.aliases?.includes(cmd ?? ''));
    if (group) return await runGroup(group, rest);
    if (cmd !== undefined && Object.hasOwn(SINGLES, cmd)) return await runSub(cmd, SINGLES[cmd], rest);
    switch (cmd) {
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
        throw new UsageError(`unknown command "${cmd}"\n\n${USAGE}`);
    }
  } catch (e) {
    // A ConfigError from the option table, or a configuration file (users file...) that cannot be used.
    if (e instanceof ConfigError || isFlowError(e, 'CONFIG_ERROR')) {
      console.error(`flowmq: ${e.message}`);
      return 2;
    }
    if (e instanceof UsageError) {
      console.error(`flowmq: ${e.message}`);
      return 2;
    }
    if (e instanceof (await import('./client.js')).ApiError) {
      console.error(`flowmq: ${e.message}`);
      return 1;
    }
    console.error(`flowmq: ${(e as Error).message}`);
    return 1;
  }
}
