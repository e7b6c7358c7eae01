/** `flowmq client ...`: connected clients of every protocol (list, filter, kick). */
import { seg } from '../client.js';
import type { CommandGroup } from '../command.js';
import { fmtAge, fmtBytes, itemsTable } from '../table.js';

interface ClientView {
  id: string;
  protocol: string;
  listener: string;
  remoteAddress: string | null;
  remotePort: number | null;
  user: string | null;
  namespace: string;
  clientId: string | null;
  connectedAt: string;
  messagesIn: number;
  messagesOut: number;
  bytesIn: number;
  bytesOut: number;
}

export const clientCommand: CommandGroup = {
  name: 'client',
  aliases: ['clients'],
  summary: 'Connected clients over every protocol.',
  subs: {
    list: {
      usage: '[--protocol P] [--for-user U] [--namespace N] [--search TEXT]',
      summary: 'list connected clients (filters: protocol, user, namespace, text in the id/client id/address)',
      options: { protocol: { type: 'string' }, 'for-user': { type: 'string' }, namespace: { type: 'string' }, search: { type: 'string', short: 'q' } },
      async run(ctx) {
        const cs = await (
          await ctx.api()
        ).list<ClientView>('/api/v1/clients', {
          protocol: ctx.str('protocol'),
          user: ctx.str('for-user'),
          namespace: ctx.str('namespace'),
          q: ctx.str('search'),
        });
        ctx.print(cs, () =>
          itemsTable(
            cs,
            [
              ['ID', (c) => c.id],
              ['PROTOCOL', (c) => c.protocol],
              ['USER', (c) => c.user ?? '(anonymous)'],
              ['NAMESPACE', (c) => c.namespace],
              ['CLIENT-ID', (c) => c.clientId],
              ['REMOTE', (c) => (c.remoteAddress ? `${c.remoteAddress}:${c.remotePort ?? ''}` : null)],
              ['CONNECTED', (c) => fmtAge(Date.now() - Date.parse(c.connectedAt))],
              ['MSGS-IN', (c) => c.messagesIn],
              ['MSGS-OUT', (c) => c.messagesOut],
              ['BYTES-IN', (c) => fmtBytes(c.bytesIn)],
              ['BYTES-OUT', (c) => fmtBytes(c.bytesOut)],
            ],
            'no clients connected',
          ),
        );
      },
    },
    kick: {
      usage: 'ID',
      summary: "disconnect a client the protocol's way (ID from 'flowmq client list')",
      args: [1, 1],
      async run(ctx) {
        const id = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/clients/${seg(id)}`);
        ctx.print({ kicked: id }, () => `kicked client ${id}`);
      },
    },
  },
};
