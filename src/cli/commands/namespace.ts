/** `flowmq namespace ...`: namespaces (the unit of isolation: AMQP vhosts, NATS accounts) and their quotas. */
import { parseSize } from '../../util/units.js';
import { seg } from '../client.js';
import { UsageError, type CommandGroup, type Ctx } from '../command.js';
import { cell, fmtBytes, fmtTime, itemsTable, keyValues } from '../table.js';

interface Quotas {
  maxConnections?: number;
  publishRate?: number;
  bytesInRate?: number;
  bytesOutRate?: number;
  maxStorageBytes?: number;
  maxStreams?: number;
  maxConsumers?: number;
  maxMemoryBytes?: number;
  maxStreamBytes?: number;
  maxAckPending?: number;
  maxBytesRequired?: number;
  jetstream?: number;
}

interface NamespaceView {
  name: string;
  description?: string;
  quotas: Quotas;
  createdAt?: number | string;
  usage?: Record<string, unknown>;
}

/** Quota flags → quotas; `none` lifts one (sent as null). Sizes take units (10MiB, 1GB). */
const QUOTA_FLAGS: ReadonlyArray<[flag: string, key: keyof Quotas, size: boolean]> = [
  ['max-connections', 'maxConnections', false],
  ['publish-rate', 'publishRate', false],
  ['bytes-in-rate', 'bytesInRate', true],
  ['bytes-out-rate', 'bytesOutRate', true],
  ['max-storage', 'maxStorageBytes', true],
  // JetStream account limits of the namespace (docs/jetstream.md, "Account info and limits").
  ['max-streams', 'maxStreams', false],
  ['max-consumers', 'maxConsumers', false],
  ['max-memory', 'maxMemoryBytes', true],
  ['max-stream-bytes', 'maxStreamBytes', true],
  ['max-ack-pending', 'maxAckPending', false],
  ['max-bytes-required', 'maxBytesRequired', false],
  ['jetstream', 'jetstream', false],
];

const QUOTA_OPTIONS = Object.fromEntries(QUOTA_FLAGS.map(([f]) => [f, { type: 'string' as const }]));

function quotaFlags(ctx: Ctx): Record<string, number | null> {
  const out: Record<string, number | null> = {};
  for (const [flag, key, size] of QUOTA_FLAGS) {
    const s = ctx.str(flag);
    if (s === undefined) continue;
    if (s === 'none' || s === 'unlimited') {
      out[key] = null;
      continue;
    }
    const n = size ? parseSize(s) : Number(s);
    if (n === null || !Number.isFinite(n) || n < 0 || !Number.isInteger(n)) {
      throw new UsageError(`--${flag} must be a whole number${size ? ' of bytes (units: 64KiB, 10MiB, 1GB)' : ''} or "none" (got "${s}")`);
    }
    out[key] = n;
  }
  return out;
}

const quotaText = (q: Quotas) => {
  const parts: string[] = [];
  if (q.maxConnections !== undefined && q.maxConnections !== null) parts.push(`${q.maxConnections} conn`);
  if (q.publishRate !== undefined && q.publishRate !== null) parts.push(`${q.publishRate} msg/s`);
  if (q.bytesInRate !== undefined && q.bytesInRate !== null) parts.push(`in ${fmtBytes(q.bytesInRate)}/s`);
  if (q.bytesOutRate !== undefined && q.bytesOutRate !== null) parts.push(`out ${fmtBytes(q.bytesOutRate)}/s`);
  if (q.maxStorageBytes !== undefined && q.maxStorageBytes !== null) parts.push(`storage ${fmtBytes(q.maxStorageBytes)}`);
  if (q.maxStreams !== undefined && q.maxStreams !== null) parts.push(`${q.maxStreams} streams`);
  if (q.maxConsumers !== undefined && q.maxConsumers !== null) parts.push(`${q.maxConsumers} consumers/stream`);
  if (q.maxMemoryBytes !== undefined && q.maxMemoryBytes !== null) parts.push(`memory ${fmtBytes(q.maxMemoryBytes)}`);
  if (q.maxStreamBytes !== undefined && q.maxStreamBytes !== null) parts.push(`stream ${fmtBytes(q.maxStreamBytes)}`);
  if (q.maxAckPending !== undefined && q.maxAckPending !== null) parts.push(`${q.maxAckPending} ack pending`);
  if (q.maxBytesRequired !== undefined && q.maxBytesRequired !== null && q.maxBytesRequired > 0) parts.push('max_bytes required');
  if (q.jetstream === 0) parts.push('no JetStream');
  return parts.length > 0 ? parts.join(', ') : 'none';
};

export const namespaceCommand: CommandGroup = {
  name: 'namespace',
  aliases: ['namespaces', 'ns'],
  summary: "Namespaces with quotas; users belong to one ('default' unless said otherwise).",
  subs: {
    add: {
      usage:
        'NAME [--description TEXT] [--max-connections N] [--publish-rate N] [--bytes-in-rate SIZE] [--bytes-out-rate SIZE] [--max-storage SIZE] [--max-streams N] [--max-consumers N] [--max-memory SIZE] [--max-stream-bytes SIZE] [--max-ack-pending N] [--max-bytes-required 0|1] [--jetstream 0|1]',
      summary: 'add a namespace, optionally with quotas',
      args: [1, 1],
      options: { description: { type: 'string', short: 'd' }, ...QUOTA_OPTIONS },
      async run(ctx) {
        const quotas = Object.fromEntries(Object.entries(quotaFlags(ctx)).filter(([, v]) => v !== null));
        const description = ctx.str('description');
        const ns = await (
          await ctx.api()
        ).request<NamespaceView>('POST', '/api/v1/namespaces', { name: ctx.positionals[0], ...(description ? { description } : {}), quotas });
        ctx.print(ns, () => `added namespace ${ns.name} (quotas: ${quotaText(ns.quotas ?? {})})`);
      },
    },
    list: {
      usage: '',
      summary: 'list namespaces with their quotas',
      async run(ctx) {
        const nss = await (await ctx.api()).list<NamespaceView>('/api/v1/namespaces');
        ctx.print(nss, () =>
          itemsTable(
            nss,
            [
              ['NAME', (n) => n.name],
              ['QUOTAS', (n) => quotaText(n.quotas ?? {})],
              ['CONNECTIONS', (n) => n.usage?.connections],
              ['STORED', (n) => (typeof n.usage?.storedBytes === 'number' ? fmtBytes(n.usage.storedBytes) : '')],
              ['DESCRIPTION', (n) => n.description],
            ],
            'no namespaces',
          ),
        );
      },
    },
    describe: {
      usage: 'NAME',
      summary: 'a namespace: quotas and usage',
      args: [1, 1],
      async run(ctx) {
        const ns = await (await ctx.api()).request<NamespaceView>('GET', `/api/v1/namespaces/${seg(ctx.positionals[0])}`);
        ctx.print(ns, () =>
          keyValues([
            ['namespace', ns.name],
            ['description', ns.description],
            ['quotas', quotaText(ns.quotas ?? {})],
            ['created', fmtTime(ns.createdAt)],
            ...Object.entries(ns.usage ?? {}).map(([k, v]): [string, unknown] => [k, cell(v)]),
          ]),
        );
      },
    },
    usage: {
      usage: 'NAME',
      summary: "a namespace's usage: messages and bytes in and out, connections, bytes stored (hot tier, objects)",
      args: [1, 1],
      async run(ctx) {
        const u = await (await ctx.api()).request<Record<string, unknown>>('GET', `/api/v1/namespaces/${seg(ctx.positionals[0])}/usage`);
        const b = (k: string) => (typeof u[k] === 'number' ? fmtBytes(u[k]) : cell(u[k]));
        ctx.print(u, () =>
          keyValues([
            ['namespace', u.name],
            ['connections', u.connections],
            ['messages in / out', `${cell(u.messagesIn)} / ${cell(u.messagesOut)}`],
            ['bytes in / out', `${b('bytesIn')} / ${b('bytesOut')}`],
            ['stored', `${b('storedBytes')} (hot ${b('storedHotBytes')}, objects ${b('storedObjectBytes')})`],
            ['storage quota', u.maxStorageBytes === null ? 'none' : b('maxStorageBytes')],
            ['writes refused (storage)', u.refusedWrites],
            ['connections refused', u.refusedConnections],
            ['throttled', `${cell(u.throttled)} times, ${cell(u.throttledMs)} ms`],
          ]),
        );
      },
    },
    'set-quota': {
      usage:
        'NAME [--max-connections N] [--publish-rate N] [--bytes-in-rate SIZE] [--bytes-out-rate SIZE] [--max-storage SIZE] [--max-streams N] [--max-consumers N] [--max-memory SIZE] [--max-stream-bytes SIZE] [--max-ack-pending N] [--max-bytes-required 0|1]   (none: lift one)',
      summary: 'change quotas live (the others stay as they are)',
      args: [1, 1],
      options: QUOTA_OPTIONS,
      async run(ctx) {
        const name = ctx.positionals[0];
        const change = quotaFlags(ctx);
        if (Object.keys(change).length === 0) throw new UsageError('nothing to change: give a quota flag (--max-connections, --publish-rate, ...)');
        // Quotas given are set, `none` (null) lifts one, the others stay as they are (the API merges).
        const ns = await (await ctx.api()).request<NamespaceView>('PATCH', `/api/v1/namespaces/${seg(name)}`, { quotas: change });
        ctx.print(ns, () => `namespace ${ns.name} quotas: ${quotaText(ns.quotas ?? {})}`);
      },
    },
    delete: {
      usage: 'NAME',
      summary: 'delete a namespace (no user may belong to it) with its queues, exchanges, streams and policies',
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/namespaces/${seg(name)}`);
        ctx.print({ deleted: name }, () => `deleted namespace ${name}`);
      },
    },
  },
};
