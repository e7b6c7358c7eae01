/** `flowmq token ...`: API tokens (Bearer) for the admin API, the CLI (FLOWMQ_TOKEN) and NATS auth_token. */
import { parseDuration } from '../../util/units.js';
import { seg } from '../client.js';
import { UsageError, type CommandGroup } from '../command.js';
import { fmtTime, itemsTable } from '../table.js';

interface TokenView {
  id: string;
  user: string;
  description?: string;
  createdAt?: number | string;
  expiresAt?: number | string | null;
  /** Only in the answer to a creation: the secret, shown once. */
  token?: string;
}

/** A TTL flag: a duration (30d, 12h), checked here, sent in ms. */
export function ttlFlag(s: string | undefined): number | undefined {
  if (s === undefined) return undefined;
  const ms = parseDuration(s);
  if (ms === null || ms <= 0) throw new UsageError(`--ttl must be a duration such as 30d, 12h or 90m (got "${s}")`);
  return ms;
}

export const tokenCommand: CommandGroup = {
  name: 'token',
  aliases: ['tokens'],
  summary: 'API tokens: fmq_<id>.<secret>, shown once at creation, stored as a hash.',
  subs: {
    create: {
      usage: '[--for USER] [--description TEXT] [--ttl 30d]',
      summary: 'create a token for yourself (or, as an admin, for USER); prints it once',
      options: { for: { type: 'string' }, description: { type: 'string', short: 'd' }, ttl: { type: 'string' } },
      async run(ctx) {
        const ttl = ttlFlag(ctx.str('ttl'));
        const user = ctx.str('for');
        const description = ctx.str('description');
        const t = await (
          await ctx.api()
        ).request<TokenView>('POST', '/api/v1/tokens', { ...(user ? { user } : {}), ...(description ? { description } : {}), ...(ttl ? { ttl } : {}) });
        ctx.print(t, () =>
          [
            `created token ${t.id} for ${t.user}${t.expiresAt ? `, expires ${fmtTime(t.expiresAt)}` : ', does not expire'}`,
            '',
            `  ${t.token}`,
            '',
            'It is shown only now. Use it with: export FLOWMQ_TOKEN=<token>  (or --token, or Authorization: Bearer <token>)',
          ].join('\n'),
        );
      },
    },
    list: {
      usage: '',
      summary: 'list tokens (yours; an admin sees every token)',
      async run(ctx) {
        const ts = await (await ctx.api()).list<TokenView>('/api/v1/tokens');
        ctx.print(ts, () =>
          itemsTable(
            ts,
            [
              ['ID', (t) => t.id],
              ['USER', (t) => t.user],
              ['DESCRIPTION', (t) => t.description],
              ['CREATED', (t) => fmtTime(t.createdAt)],
              ['EXPIRES', (t) => (t.expiresAt === null || t.expiresAt === undefined ? 'never' : fmtTime(t.expiresAt))],
            ],
            'no tokens',
          ),
        );
      },
    },
    delete: {
      usage: 'ID',
      summary: 'revoke a token',
      args: [1, 1],
      async run(ctx) {
        const id = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/tokens/${seg(id)}`);
        ctx.print({ deleted: id }, () => `deleted token ${id}`);
      },
    },
  },
};
