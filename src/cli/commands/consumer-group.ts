/** `flowmq consumer-group ...`: Kafka consumer groups (and JetStream durable consumers): lag, members, reset. */
import { seg } from '../client.js';
import { UsageError, type CommandGroup } from '../command.js';
import { itemsTable, keyValues, ProgressBar } from '../table.js';

interface GroupView {
  name: string;
  protocol: string;
  state: string;
  members: number;
  lag: number | null;
  memberDetails?: Array<{ id: string; clientId: string; host: string; assignments: Array<{ stream: string; partition: number }> }>;
  offsets?: Array<{ stream: string; partition: number; committed: number | null; end: number; lag: number | null }>;
}

function detailText(g: GroupView): string {
  const parts = [
    keyValues([
      ['group', g.name],
      ['protocol', g.protocol],
      ['state', g.state],
      ['members', g.members],
      ['lag', g.lag],
    ]),
  ];
  const members = g.memberDetails ?? [];
  if (members.length > 0) {
    parts.push(
      itemsTable(
        members,
        [
          ['MEMBER', (m) => m.id],
          ['CLIENT-ID', (m) => m.clientId],
          ['HOST', (m) => m.host],
          ['ASSIGNMENTS', (m) => m.assignments.map((a) => `${a.stream}/${a.partition}`).join(' ')],
        ],
        '',
      ),
    );
  }
  const offsets = g.offsets ?? [];
  parts.push(
    itemsTable(
      offsets,
      [
        ['STREAM', (o) => o.stream],
        ['PARTITION', (o) => o.partition],
        ['COMMITTED', (o) => o.committed],
        ['END', (o) => o.end],
        ['LAG', (o) => o.lag],
      ],
      'no committed offsets',
    ),
  );
  return parts.join('\n\n');
}

/** `--to`: earliest, latest, an offset (a whole number) or a time (ISO 8601 or ms since the epoch with --timestamp). */
function target(to: string | undefined, offset: string | undefined, timestamp: string | undefined): Record<string, unknown> {
  const given = [to !== undefined, offset !== undefined, timestamp !== undefined].filter(Boolean).length;
  if (given !== 1) throw new UsageError('give one of --to earliest|latest, --offset N or --timestamp TIME');
  if (to !== undefined) {
    if (to !== 'earliest' && to !== 'latest') throw new UsageError(`--to must be earliest or latest (got "${to}"); use --offset or --timestamp for the others`);
    return { to };
  }
  if (offset !== undefined) {
    const o = Number(offset);
    if (!Number.isSafeInteger(o) || o < 0) throw new UsageError(`--offset must be a whole number (got "${offset}")`);
    return { to: 'offset', offset: o };
  }
  const ts = /^\d+$/.test(timestamp!) ? Number(timestamp) : Date.parse(timestamp!);
  if (!Number.isFinite(ts)) throw new UsageError(`--timestamp must be an ISO 8601 time or ms since the epoch (got "${timestamp}")`);
  return { to: 'timestamp', timestamp: ts };
}

export const consumerGroupCommand: CommandGroup = {
  name: 'consumer-group',
  aliases: ['consumer-groups', 'cg'],
  summary: 'Consumer groups (Kafka groups, JetStream durable consumers): members, lag, offset resets.',
  subs: {
    list: {
      usage: '',
      summary: 'list consumer groups with their lag',
      async run(ctx) {
        const gs = await (await ctx.api()).list<GroupView>('/api/v1/consumer-groups');
        ctx.print(gs, () =>
          itemsTable(
            gs,
            [
              ['NAME', (g) => g.name],
              ['PROTOCOL', (g) => g.protocol],
              ['STATE', (g) => g.state],
              ['MEMBERS', (g) => g.members],
              ['LAG', (g) => g.lag],
            ],
            'no consumer groups',
          ),
        );
      },
    },
    describe: {
      usage: 'NAME',
      summary: 'a group: members and their assignments, committed offsets and lag per partition',
      args: [1, 1],
      async run(ctx) {
        const g = await (await ctx.api()).request<GroupView>('GET', `/api/v1/consumer-groups/${seg(ctx.positionals[0])}`);
        ctx.print(g, () => detailText(g));
      },
    },
    reset: {
      usage: 'NAME [--stream S]... (--to earliest|latest | --offset N | --timestamp TIME)',
      summary: 'move the committed offsets of an empty group, on the given streams (default: every stream it has offsets on)',
      args: [1, 1],
      options: { stream: { type: 'string', multiple: true, short: 's' }, to: { type: 'string' }, offset: { type: 'string' }, timestamp: { type: 'string' } },
      async run(ctx) {
        const name = ctx.positionals[0];
        const body = target(ctx.str('to'), ctx.str('offset'), ctx.str('timestamp'));
        const api = await ctx.api();
        let streams = ctx.list('stream');
        if (streams === undefined) {
          const g = await api.request<GroupView>('GET', `/api/v1/consumer-groups/${seg(name)}`);
          streams = [...new Set((g.offsets ?? []).map((o) => o.stream))];
          if (streams.length === 0) throw new UsageError(`group ${name} has no committed offsets: name the streams with --stream`);
        }
        // One request per stream: the bar moves as each stream's offsets are moved.
        const bar = new ProgressBar(`resetting ${name}`);
        let last: GroupView | null = null;
        bar.update(0, streams.length);
        for (let i = 0; i < streams.length; i++) {
          last = await api.request<GroupView>('POST', `/api/v1/consumer-groups/${seg(name)}/reset`, { stream: streams[i], ...body });
          bar.update(i + 1, streams.length, streams[i]);
        }
        if (!ctx.json) bar.done(streams.length, streams.length, 'stream(s)');
        ctx.print(last, () => (last ? detailText(last) : ''));
      },
    },
    delete: {
      usage: 'NAME',
      summary: 'delete an empty group and its committed offsets',
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/consumer-groups/${seg(name)}`);
        ctx.print({ deleted: name }, () => `deleted consumer group ${name}`);
      },
    },
  },
};
