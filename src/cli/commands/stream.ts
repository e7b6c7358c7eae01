/** `flowmq stream ...`: streams (create, list, describe, update, delete, flush) and the message browser. */
import { parseDuration } from '../../util/units.js';
import { seg } from '../client.js';
import { intFlag, UsageError, type CommandGroup, type Ctx } from '../command.js';
import { cell, clip, fmtDuration, fmtTime, itemsTable, keyValues, table } from '../table.js';

interface StreamView {
  name: string;
  partitions: number;
  bindings: string[];
  retentionMs: number | null;
  createdAt: string | number;
  topic?: string;
  partitionDetails?: Array<Record<string, unknown>>;
}

interface BrowsedMessage {
  partition: number;
  offset: number;
  timestamp: number | string;
  key: string | null;
  value: string | null;
  headers?: Array<{ key: string; value: string }>;
  encoding?: 'utf8' | 'base64';
}

/** A retention flag: a duration (7d, 12h, ms) checked here, sent as written; `forever`/`none` clears it. */
function retentionFlag(ctx: Ctx): string | null | undefined {
  const r = ctx.str('retention');
  if (r === undefined) return undefined;
  if (r === 'forever' || r === 'none') return null;
  const ms = parseDuration(r);
  if (ms === null || ms <= 0) throw new UsageError(`--retention must be a duration such as 7d, 12h or 30m, or "forever" (got "${r}")`);
  return r;
}

function describeText(s: StreamView): string {
  const head = keyValues([
    ['stream', s.name],
    ['topic', s.topic],
    ['partitions', s.partitions],
    ['bindings', s.bindings.join(', ')],
    ['retention', fmtDuration(s.retentionMs)],
    ['created', fmtTime(s.createdAt)],
  ]);
  const d = s.partitionDetails ?? [];
  if (d.length === 0) return head;
  // Every partition's fields (in cluster mode those another broker owns have offsets only).
  const cols = [...new Set(d.flatMap((r) => Object.keys(r)))];
  return `${head}\n\n${table([cols.map((c) => c.toUpperCase()), ...d.map((r) => cols.map((c) => cell(r[c])))])}`;
}

export const streamCommand: CommandGroup = {
  name: 'stream',
  aliases: ['streams'],
  summary: 'Streams: durable, partitioned logs bound to topic filters (Kafka topics).',
  subs: {
    create: {
      usage: 'NAME [--partitions N] [--bind FILTER]... [--retention 7d]',
      summary: 'create a stream (bound to its own name unless --bind is given)',
      args: [1, 1],
      options: { partitions: { type: 'string', short: 'p' }, bind: { type: 'string', multiple: true, short: 'b' }, retention: { type: 'string' } },
      async run(ctx) {
        const partitions = intFlag(ctx, 'partitions', 1) ?? 1;
        const retention = retentionFlag(ctx);
        const api = await ctx.api();
        const s = await api.request<StreamView>('POST', '/api/v1/streams', {
          name: ctx.positionals[0],
          partitions,
          ...(ctx.values.bind ? { bindings: ctx.values.bind } : {}),
          ...(retention ? { retention } : {}),
        });
        ctx.print(
          s,
          () => `created stream ${s.name}: ${s.partitions} partition(s), bound to ${s.bindings.join(', ')}, retention ${fmtDuration(s.retentionMs)}`,
        );
      },
    },
    list: {
      usage: '',
      summary: 'list streams',
      async run(ctx) {
        const streams = await (await ctx.api()).list<StreamView>('/api/v1/streams');
        ctx.print(streams, () =>
          itemsTable(
            streams,
            [
              ['NAME', (s) => s.name],
              ['PARTITIONS', (s) => s.partitions],
              ['RETENTION', (s) => fmtDuration(s.retentionMs)],
              ['BINDINGS', (s) => s.bindings.join(' ')],
            ],
            'no streams',
          ),
        );
      },
    },
    describe: {
      usage: 'NAME',
      summary: 'a stream with its partitions: start offset, high watermark, ...',
      args: [1, 1],
      async run(ctx) {
        const s = await (await ctx.api()).request<StreamView>('GET', `/api/v1/streams/${seg(ctx.positionals[0])}`);
        ctx.print(s, () => describeText(s));
      },
    },
    update: {
      usage: 'NAME [--bind FILTER]... [--retention 7d|forever] [--partitions N]',
      summary: 'change bindings (the whole list) and retention live; partitions only grow',
      args: [1, 1],
      options: { partitions: { type: 'string', short: 'p' }, bind: { type: 'string', multiple: true, short: 'b' }, retention: { type: 'string' } },
      async run(ctx) {
        const partitions = intFlag(ctx, 'partitions', 1);
        const retention = retentionFlag(ctx);
        const body = {
          ...(ctx.values.bind ? { bindings: ctx.values.bind } : {}),
          ...(retention !== undefined ? { retention } : {}),
          ...(partitions !== undefined ? { partitions } : {}),
        };
        if (Object.keys(body).length === 0) throw new UsageError('nothing to change: give --bind, --retention or --partitions');
        const s = await (await ctx.api()).request<StreamView>('PATCH', `/api/v1/streams/${seg(ctx.positionals[0])}`, body);
        ctx.print(
          s,
          () => `updated stream ${s.name}: ${s.partitions} partition(s), bound to ${s.bindings.join(', ')}, retention ${fmtDuration(s.retentionMs)}`,
        );
      },
    },
    delete: {
      usage: 'NAME',
      summary: 'delete a stream and its data',
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/streams/${seg(name)}`);
        ctx.print({ deleted: name }, () => `deleted stream ${name}`);
      },
    },
    flush: {
      usage: 'NAME',
      summary: 'seal what the stream holds in memory into segment objects now',
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        const r = await (await ctx.api()).request('POST', `/api/v1/streams/${seg(name)}/flush`);
        ctx.print(r ?? { flushed: name }, () => `flushed stream ${name}`);
      },
    },
    browse: {
      usage: 'NAME [--partition P] [--offset N] [--limit N]',
      summary: 'read messages of one partition from an offset (default: partition 0 from its start, 20 messages)',
      args: [1, 1],
      options: { partition: { type: 'string', short: 'p' }, offset: { type: 'string', short: 'o' }, limit: { type: 'string', short: 'n' } },
      async run(ctx) {
        const partition = intFlag(ctx, 'partition') ?? 0;
        const offset = intFlag(ctx, 'offset');
        const limit = intFlag(ctx, 'limit', 1) ?? 20;
        const q = new URLSearchParams({ partition: String(partition), limit: String(limit) });
        if (offset !== undefined) q.set('offset', String(offset));
        const page = await (
          await ctx.api()
        ).request<{ items: BrowsedMessage[]; next: unknown }>('GET', `/api/v1/streams/${seg(ctx.positionals[0])}/messages?${q}`);
        ctx.print(page, () => {
          const shown = (s: string | null, enc: BrowsedMessage['encoding']) => (s === null ? '-' : enc === 'base64' ? `base64:${clip(s, 50)}` : clip(s));
          const text = itemsTable(
            page.items,
            [
              ['PARTITION', (m) => m.partition],
              ['OFFSET', (m) => m.offset],
              ['TIMESTAMP', (m) => fmtTime(m.timestamp)],
              ['KEY', (m) => shown(m.key, m.encoding)],
              ['HEADERS', (m) => (m.headers ?? []).map((h) => `${h.key}=${clip(h.value, 20)}`).join(' ')],
              ['VALUE', (m) => shown(m.value, m.encoding)],
            ],
            `no messages at partition ${partition}${offset !== undefined ? ` from offset ${offset}` : ''}`,
          );
          return page.next !== null && page.next !== undefined && page.items.length > 0
            ? `${text}\n(more: --offset ${page.items[page.items.length - 1].offset + 1})`
            : text;
        });
      },
    },
  },
};
