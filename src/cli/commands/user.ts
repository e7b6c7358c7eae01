/** `flowmq user ...` and `flowmq group ...`: the users and groups of the broker's directory. */
import { newPassword, seg } from '../client.js';
import { UsageError, type CommandGroup } from '../command.js';
import { fmtTime, itemsTable } from '../table.js';

interface UserView {
  username: string;
  groups: string[];
  namespace: string;
  mechanisms?: string[];
  createdAt?: number | string;
  source?: string;
}

interface GroupView {
  name: string;
  description?: string;
  members?: string[];
  createdAt?: number | string;
}

const userLine = (u: UserView) => `${u.username} (groups: ${u.groups.length > 0 ? u.groups.join(', ') : 'none'}; namespace ${u.namespace})`;

export const userCommand: CommandGroup = {
  name: 'user',
  aliases: ['users'],
  summary: 'Users (passwords kept as scrypt and SCRAM credentials, never in clear).',
  subs: {
    add: {
      usage: 'NAME [--group G]... [--namespace NS] [--nkey U...]',
      summary:
        'add a user; the password from FLOWMQ_NEW_PASSWORD, else asked twice on the terminal (with --nkey, a NATS user public NKey, no password is asked for)',
      args: [1, 1],
      options: { group: { type: 'string', multiple: true, short: 'g' }, namespace: { type: 'string' }, nkey: { type: 'string' } },
      async run(ctx) {
        const name = ctx.positionals[0];
        const api = await ctx.api();
        const nkey = ctx.str('nkey');
        const password = nkey ? undefined : await newPassword(name);
        const groups = ctx.list('group');
        const namespace = ctx.str('namespace');
        const u = await api.request<UserView>('POST', '/api/v1/users', {
          username: name,
          ...(password !== undefined ? { password } : {}),
          ...(nkey ? { nkey } : {}),
          ...(groups ? { groups } : {}),
          ...(namespace ? { namespace } : {}),
        });
        ctx.print(u, () => `added user ${userLine(u)}`);
      },
    },
    list: {
      usage: '',
      summary: 'list users',
      async run(ctx) {
        const us = await (await ctx.api()).list<UserView>('/api/v1/users');
        ctx.print(us, () =>
          itemsTable(
            us,
            [
              ['USER', (u) => u.username],
              ['GROUPS', (u) => u.groups],
              ['NAMESPACE', (u) => u.namespace],
              ['SOURCE', (u) => u.source],
              ['CREATED', (u) => fmtTime(u.createdAt)],
            ],
            'no users',
          ),
        );
      },
    },
    passwd: {
      usage: 'NAME',
      summary: "change a user's password (FLOWMQ_NEW_PASSWORD, else asked twice on the terminal)",
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        const api = await ctx.api();
        const password = await newPassword(name);
        const u = await api.request<UserView>('PATCH', `/api/v1/users/${seg(name)}`, { password });
        ctx.print(u, () => `changed the password of ${name}`);
      },
    },
    'set-nkey': {
      usage: 'NAME [NKEY]',
      summary: "set a user's NATS public NKey (U...), with which a NATS client signing the server's nonce logs in; none given: removed",
      args: [1, 2],
      async run(ctx) {
        const [name, nkey] = ctx.positionals;
        const u = await (await ctx.api()).request<UserView>('PATCH', `/api/v1/users/${seg(name)}`, { nkey: nkey ?? null });
        ctx.print(u, () => (nkey ? `user ${name} logs in to NATS with nkey ${nkey}` : `removed the nkey of ${name}`));
      },
    },
    'set-groups': {
      usage: 'NAME [GROUP...]',
      summary: "replace a user's groups (none given: no groups)",
      args: [1, Infinity],
      async run(ctx) {
        const [name, ...rest] = ctx.positionals;
        const groups = rest.flatMap((g) => g.split(',')).filter((g) => g !== '');
        const u = await (await ctx.api()).request<UserView>('PATCH', `/api/v1/users/${seg(name)}`, { groups });
        ctx.print(u, () => `user ${userLine(u)}`);
      },
    },
    'set-namespace': {
      usage: 'NAME NAMESPACE',
      summary: 'move a user to another namespace',
      args: [2, 2],
      async run(ctx) {
        const [name, namespace] = ctx.positionals;
        const u = await (await ctx.api()).request<UserView>('PATCH', `/api/v1/users/${seg(name)}`, { namespace });
        ctx.print(u, () => `user ${userLine(u)}`);
      },
    },
    delete: {
      usage: 'NAME',
      summary: 'delete a user (and their API tokens)',
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/users/${seg(name)}`);
        ctx.print({ deleted: name }, () => `deleted user ${name}`);
      },
    },
  },
};

export const groupCommand: CommandGroup = {
  name: 'group',
  aliases: ['groups'],
  summary: "Groups of users: policies name them as group:NAME; members of 'admins' may do everything.",
  subs: {
    add: {
      usage: 'NAME [--description TEXT]',
      summary: 'add a group',
      args: [1, 1],
      options: { description: { type: 'string', short: 'd' } },
      async run(ctx) {
        const description = ctx.str('description');
        const g = await (await ctx.api()).request<GroupView>('POST', '/api/v1/groups', { name: ctx.positionals[0], ...(description ? { description } : {}) });
        ctx.print(g, () => `added group ${g.name}`);
      },
    },
    list: {
      usage: '',
      summary: 'list groups',
      async run(ctx) {
        const gs = await (await ctx.api()).list<GroupView>('/api/v1/groups');
        ctx.print(gs, () =>
          itemsTable(
            gs,
            [
              ['GROUP', (g) => g.name],
              ['MEMBERS', (g) => g.members],
              ['DESCRIPTION', (g) => g.description],
              ['CREATED', (g) => fmtTime(g.createdAt)],
            ],
            'no groups',
          ),
        );
      },
    },
    delete: {
      usage: 'NAME',
      summary: 'delete a group',
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        if (name === '') throw new UsageError('a group name must not be empty');
        await (await ctx.api()).request('DELETE', `/api/v1/groups/${seg(name)}`);
        ctx.print({ deleted: name }, () => `deleted group ${name}`);
      },
    },
  },
};
