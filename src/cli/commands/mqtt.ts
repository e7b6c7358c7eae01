/** `flowmq session ...` and `flowmq retained ...`: MQTT sessions and retained messages. */
import { seg } from '../client.js';
import type { CommandGroup } from '../command.js';
import { clip, fmtBytes, fmtTime, itemsTable } from '../table.js';

type Row = Record<string, unknown>;

export const sessionCommand: CommandGroup = {
  name: 'session',
  aliases: ['sessions'],
  summary: 'MQTT sessions kept by the broker (persistent sessions of clients, online or not).',
  subs: {
    list: {
      usage: '',
      summary: 'list MQTT sessions',
      async run(ctx) {
        const ss = await (await ctx.api()).list<Row>('/api/v1/mqtt/sessions');
        ctx.print(ss, () =>
          itemsTable(
            ss,
            [
              ['CLIENT-ID', (s) => s.clientId],
              ['CONNECTED', (s) => (s.connected === undefined ? '-' : s.connected ? 'yes' : 'no')],
              [
                'SUBSCRIPTIONS',
                (s) =>
                  Array.isArray(s.subscriptions)
                    ? (s.subscriptions as Array<{ filter: string; qos: number }>).map((x) => `${x.filter}(${x.qos})`).join(' ')
                    : null,
              ],
              ['EXPIRES', (s) => (s.expiresAt === null ? 'never' : fmtTime(s.expiresAt))],
              ['UPDATED', (s) => fmtTime(s.updatedAt)],
            ],
            'no MQTT sessions',
          ),
        );
      },
    },
    delete: {
      usage: 'CLIENT-ID',
      summary: 'delete a session (a connected client is disconnected first)',
      args: [1, 1],
      async run(ctx) {
        const id = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/mqtt/sessions/${seg(id)}`);
        ctx.print({ deleted: id }, () => `deleted MQTT session ${id}`);
      },
    },
  },
};

export const retainedCommand: CommandGroup = {
  name: 'retained',
  summary: 'Retained messages (MQTT retain flag, from any protocol).',
  subs: {
    list: {
      usage: '[--filter TOPIC-FILTER]',
      summary: 'list retained messages (optionally those matching an MQTT filter such as sensors/#)',
      options: { filter: { type: 'string', short: 'f' } },
      async run(ctx) {
        const rs = await (await ctx.api()).list<Row>('/api/v1/mqtt/retained', { filter: ctx.str('filter') });
        ctx.print(rs, () =>
          itemsTable(
            rs,
            [
              ['TOPIC', (r) => r.topic],
              ['QOS', (r) => r.qos],
              ['SIZE', (r) => (typeof r.bytes === 'number' ? fmtBytes(r.bytes) : null)],
              ['TIME', (r) => fmtTime(r.timestamp)],
              ['PAYLOAD', (r) => (typeof r.payload === 'string' ? (r.encoding === 'base64' ? `base64:${clip(r.payload, 40)}` : clip(r.payload, 50)) : null)],
            ],
            'no retained messages',
          ),
        );
      },
    },
    delete: {
      usage: 'TOPIC',
      summary: 'clear the retained message of a topic',
      args: [1, 1],
      async run(ctx) {
        const topic = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/mqtt/retained/${seg(topic)}`);
        ctx.print({ deleted: topic }, () => `cleared the retained message of ${topic}`);
      },
    },
  },
};
