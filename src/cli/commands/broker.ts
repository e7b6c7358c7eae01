/** `flowmq status`, `flowmq log-level [LEVEL]`, `flowmq login`: the broker itself, and getting a token. */
import { ApiError } from '../client.js';
import { UsageError, type SubCommand } from '../command.js';
import { cell, fmtAge, fmtBytes, itemsTable, keyValues } from '../table.js';
import { ttlFlag } from './token.js';

type Row = Record<string, unknown>;

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

export const statusCommand: SubCommand = {
  usage: '',
  summary: 'broker status: id, version, uptime, readiness, listeners, storage',
  async run(ctx) {
    const api = await ctx.api();
    const b = await api.request<Row>('GET', '/api/v1/broker');
    const ready = typeof b.ready === 'boolean' ? b.ready : null;
    ctx.print(b, () => {
      const uptime = typeof b.uptimeMs === 'number' ? fmtAge(b.uptimeMs) : null;
      const storage = (b.storage ?? {}) as Row;
      const head = keyValues([
        ['broker', b.brokerId ?? b.id],
        ['version', b.version],
        ['uptime', uptime],
        ['ready', ready === null ? 'unknown' : ready ? 'yes' : 'no'],
        [
          'storage',
          [storage.metastore && `metastore ${storage.metastore}`, storage.wal && `wal ${storage.wal}`, storage.objects && `objects ${storage.objects}`]
            .filter(Boolean)
            .join(', '),
        ],
        ['wal bytes', typeof storage.walBytes === 'number' ? fmtBytes(storage.walBytes) : null],
      ]);
      const listeners = Object.entries((b.listeners ?? {}) as Record<string, Row>);
      const lt = itemsTable(
        listeners,
        [
          ['LISTENER', ([n]) => n],
          ['ADDRESS', ([, l]) => (l.address !== undefined ? `${cell(l.address)}:${cell(l.port)}` : null)],
          ['CONNECTIONS', ([, l]) => l.connections],
        ],
        '',
      );
      return lt ? `${head}\n\n${lt}` : head;
    });
  },
};

export const logLevelCommand: SubCommand = {
  usage: '[LEVEL]',
  summary: `show the broker's log level, or set it at run time (${LEVELS.join(', ')})`,
  args: [0, 1],
  async run(ctx) {
    const level = ctx.positionals[0];
    if (level !== undefined && !LEVELS.includes(level)) throw new UsageError(`LEVEL must be one of ${LEVELS.join(', ')} (got "${level}")`);
    const api = await ctx.api();
    const r =
      level === undefined
        ? await api.request<{ level: string }>('GET', '/api/v1/log-level')
        : await api.request<{ level: string }>('PUT', '/api/v1/log-level', { level });
    ctx.print(r, () => (level === undefined ? `log level: ${r.level}` : `log level set to ${r.level}`));
  },
};

export const loginCommand: SubCommand = {
  usage: '--user NAME [--ttl 12h] [--description TEXT]',
  summary: "check a user's password and create an API token for the CLI; prints the export line (nothing is stored)",
  options: { ttl: { type: 'string' }, description: { type: 'string', short: 'd' } },
  async run(ctx) {
    const ttl = ttlFlag(ctx.str('ttl') ?? '12h');
    const api = await ctx.api();
    if (api.auth?.kind !== 'basic') throw new UsageError('flowmq login needs --user NAME (or FLOWMQ_USER), the password from FLOWMQ_PASSWORD or the terminal');
    let t: { id: string; token: string; expiresAt?: number | string | null; user?: string };
    try {
      t = await api.request('POST', '/api/v1/tokens', { description: ctx.str('description') ?? 'flowmq login', ttl });
    } catch (e) {
      if (e instanceof ApiError && e.status === 404)
        throw new ApiError(`the broker at ${api.server} has no API tokens (is it an older FlowMQ?)`, 404, 'NOT_FOUND');
      throw e;
    }
    if (ctx.json) {
      ctx.print(t, () => '');
      return;
    }
    // stdout holds only the export line, so that `eval "$(flowmq login -u alice)"` works; the rest goes to stderr.
    console.error(
      `logged in as ${api.auth.name}: token ${t.id}${ttl ? ` valid for ${ttl / 3_600_000 >= 1 ? `${Math.round(ttl / 3_600_000)}h` : `${Math.round(ttl / 60_000)}m`}` : ''}.`,
    );
    console.error(`Nothing was saved. Run the line below (or: eval "$(flowmq login --user ${api.auth.name})"); revoke it with: flowmq token delete ${t.id}`);
    console.log(`export FLOWMQ_TOKEN=${t.token}`);
  },
};
