/**
 * The shape of a CLI command: a group (`flowmq user ...`) of subcommands, each with its own flags besides the
 * common ones (`--server`, `--token`, `--user`, `--json`). `runGroup` parses, builds the API client lazily (a
 * usage error is reported before any password prompt) and prints either the table/text or, with `--json`, the
 * API's data as JSON.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ApiClient, resolveAuth } from './client.js';
import { UsageError } from './usage-error.js';

export { UsageError };

export type Options = NonNullable<ParseArgsConfig['options']>;
export type Values = Record<string, string | boolean | string[] | boolean[] | undefined>;

export interface Ctx {
  readonly values: Values;
  readonly positionals: string[];
  readonly json: boolean;
  /** The API client (asks for a password on first use when a user is given without one). */
  api(): Promise<ApiClient>;
  /** Prints `data` as JSON with --json, else `text()`. */
  print(data: unknown, text: () => string): void;
  /** A string flag, or undefined. */
  str(name: string): string | undefined;
  /** A repeatable string flag, split on commas too (`--action publish,subscribe --action describe`). */
  list(name: string): string[] | undefined;
}

export interface SubCommand {
  /** Arguments after `flowmq <group> <sub>`, for the usage line: `NAME [--partitions N]`. */
  readonly usage: string;
  readonly summary: string;
  readonly options?: Options;
  /** Positional arguments: [min, max] (max Infinity for any). Default [0, 0]. */
  readonly args?: readonly [number, number];
  run(ctx: Ctx): Promise<number | void>;
}

export interface CommandGroup {
  readonly name: string;
  readonly aliases?: readonly string[];
  readonly summary: string;
  readonly subs: Readonly<Record<string, SubCommand>>;
}

export const COMMON_OPTIONS: Options = {
  server: { type: 'string' },
  token: { type: 'string' },
  user: { type: 'string', short: 'u' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
};

export const COMMON_HELP = `Common options:
  --server URL     the broker's admin API (env FLOWMQ_SERVER; default http://127.0.0.1:8080)
  --token TOKEN    an API token (env FLOWMQ_TOKEN; see 'flowmq login' and 'flowmq token create')
  --user NAME, -u  a user (env FLOWMQ_USER); the password from FLOWMQ_PASSWORD, else a prompt on the terminal
  --json           print the API's answer as JSON instead of a table`;

export function groupUsage(g: CommandGroup): string {
  const lines = Object.entries(g.subs).map(([n, s]) => `  flowmq ${g.name} ${n}${s.usage ? ` ${s.usage}` : ''}\n      ${s.summary}`);
  return `${g.summary}\n\nUsage:\n${lines.join('\n')}\n\n${COMMON_HELP}`;
}

export async function runGroup(g: CommandGroup, argv: string[]): Promise<number> {
  const [subName, ...rest] = argv;
  if (subName === undefined || subName === '--help' || subName === '-h' || subName === 'help') {
    console.log(groupUsage(g));
    return subName === undefined ? 2 : 0;
  }
  const sub = Object.hasOwn(g.subs, subName) ? g.subs[subName] : undefined;
  if (!sub) throw new UsageError(`unknown ${g.name} command "${subName}"; use ${Object.keys(g.subs).join(', ')}\n\n${groupUsage(g)}`);
  return runSub(`${g.name} ${subName}`, sub, rest);
}

/** Runs one command (`label`: what follows `flowmq`, for the usage line) on its arguments. */
export async function runSub(label: string, sub: SubCommand, rest: string[]): Promise<number> {
  const usage = `usage: flowmq ${label}${sub.usage ? ` ${sub.usage}` : ''}`;
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({ args: rest, options: { ...COMMON_OPTIONS, ...sub.options }, allowPositionals: true, strict: true }) as typeof parsed;
  } catch (e) {
    throw new UsageError(`${(e as Error).message}\n${usage}`);
  }
  const v = parsed.values;
  if (v.help) {
    console.log(`${usage}\n  ${sub.summary}\n\n${COMMON_HELP}`);
    return 0;
  }
  const [min, max] = sub.args ?? [0, 0];
  if (parsed.positionals.length < min || parsed.positionals.length > max) throw new UsageError(usage);
  const server = (v.server as string | undefined) ?? (process.env.FLOWMQ_SERVER || 'http://127.0.0.1:8080');
  try {
    new URL(server);
  } catch {
    throw new UsageError(`--server must be a URL such as http://127.0.0.1:8080 (got "${server}")`);
  }
  let client: ApiClient | null = null;
  const ctx: Ctx = {
    values: v,
    positionals: parsed.positionals,
    json: v.json === true,
    async api() {
      client ??= new ApiClient(server, await resolveAuth({ token: v.token as string | undefined, user: v.user as string | undefined }));
      return client;
    },
    print(data, text) {
      console.log(v.json ? JSON.stringify(data, null, 2) : text());
    },
    str(name) {
      const x = v[name];
      return typeof x === 'string' ? x : undefined;
    },
    list(name) {
      const x = v[name];
      if (x === undefined) return undefined;
      const arr = (Array.isArray(x) ? x : [x]) as string[];
      return arr
        .flatMap((s) => String(s).split(','))
        .map((s) => s.trim())
        .filter((s) => s !== '');
    },
  };
  // Credentials are resolved before the command runs (a missing password is a usage error, exit 2, even when the
  // command would fail on its own arguments' check against the broker).
  await ctx.api();
  const code = await sub.run(ctx);
  return code ?? 0;
}

/** A whole number ≥ min from a flag, or a usage error naming it. */
export function intFlag(ctx: Ctx, name: string, min = 0): number | undefined {
  const s = ctx.str(name);
  if (s === undefined) return undefined;
  const n = Number(s);
  if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`--${name} must be a whole number${min > 0 ? ` of at least ${min}` : ''} (got "${s}")`);
  return n;
}
