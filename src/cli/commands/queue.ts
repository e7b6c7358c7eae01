/** `flowmq queue ...` and `flowmq exchange ...`: AMQP-style queues (depth, consumers) and exchanges. */
import { seg } from '../client.js';
import type { CommandGroup } from '../command.js';
import { fmtBytes, fmtTime, itemsTable, keyValues } from '../table.js';

type Row = Record<string, unknown>;
const n = (v: unknown) => (typeof v === 'number' ? v : '-');

export const queueCommand: CommandGroup = {
  name: 'queue',
  aliases: ['queues'],
  summary: 'Queues: durable, competing consumers, ack/nack (AMQP queues, MQTT $queue/).',
  subs: {
    list: {
      usage: '',
      summary: 'list queues with their depth',
      async run(ctx) {
        const qs = await (await ctx.api()).list<Row>('/api/v1/queues');
        ctx.print(qs, () =>
          itemsTable(
            qs,
            [
              ['NAME', (q) => q.name],
              ['DURABLE', (q) => (q.durable ? 'yes' : 'no')],
              ['MESSAGES', (q) => n(q.messages)],
              ['UNACKED', (q) => n(q.unacked)],
              ['CONSUMERS', (q) => n(q.consumers)],
            ],
            'no queues',
          ),
        );
      },
    },
    describe: {
      usage: 'NAME',
      summary: 'one queue: depth, consumers, arguments',
      args: [1, 1],
      async run(ctx) {
        const q = await (await ctx.api()).request<Row>('GET', `/api/v1/queues/${seg(ctx.positionals[0])}`);
        ctx.print(q, () =>
          keyValues(
            Object.entries(q).map(([k, v]): [string, unknown] => [
              k,
              k === 'createdAt' ? fmtTime(v) : /bytes$/i.test(k) && typeof v === 'number' ? fmtBytes(v) : v,
            ]),
          ),
        );
      },
    },
    purge: {
      usage: 'NAME',
      summary: 'drop the ready messages of a queue',
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        const r = await (await ctx.api()).request<{ purged?: number; messages?: number } | null>('POST', `/api/v1/queues/${seg(name)}/purge`);
        const count = r?.purged ?? r?.messages;
        ctx.print(r ?? { purged: name }, () => `purged queue ${name}${typeof count === 'number' ? `: ${count} message(s)` : ''}`);
      },
    },
    delete: {
      usage: 'NAME',
      summary: 'delete a queue and its messages',
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/queues/${seg(name)}`);
        ctx.print({ deleted: name }, () => `deleted queue ${name}`);
      },
    },
  },
};

export const exchangeCommand: CommandGroup = {
  name: 'exchange',
  aliases: ['exchanges'],
  summary: 'Exchanges (AMQP): where publishes are routed to queues by bindings.',
  subs: {
    list: {
      usage: '',
      summary: 'list exchanges',
      async run(ctx) {
        const xs = await (await ctx.api()).list<Row>('/api/v1/exchanges');
        ctx.print(xs, () =>
          itemsTable(
            xs,
            [
              ['NAME', (x) => (x.name === '' ? '(default)' : x.name)],
              ['TYPE', (x) => x.type],
              ['DURABLE', (x) => (x.durable === undefined ? '-' : x.durable ? 'yes' : 'no')],
              ['AUTO-DELETE', (x) => (x.autoDelete === undefined ? '-' : x.autoDelete ? 'yes' : 'no')],
            ],
            'no exchanges',
          ),
        );
      },
    },
  },
};
