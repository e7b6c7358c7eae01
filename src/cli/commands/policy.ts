/**
 * `flowmq policy ...`: authorization policies. A policy allows or denies actions on resources to principals;
 * deny wins. From flags:
 *   flowmq policy add sensors-read --allow --action subscribe --resource 'topic:sensors/#' --principal group:ops
 * or from a JSON file (`--file policy.json`, `-` for stdin) holding {name?, effect, actions, resources,
 * principals, namespace?, description?}. `--namespace NS` scopes it to a namespace (it applies to that namespace's
 * principals only): what a namespace administrator (`--resource namespace:NS --action admin`) must give.
 */
import { readFileSync } from 'node:fs';
import { seg } from '../client.js';
import { UsageError, type CommandGroup, type Ctx } from '../command.js';
import { fmtTime, itemsTable, keyValues } from '../table.js';

interface PolicyView {
  name: string;
  effect: 'allow' | 'deny';
  actions: string[];
  resources: string[];
  principals: string[];
  namespace?: string | null;
  description?: string;
  source?: string;
  createdAt?: number | string;
}

function fromFlags(ctx: Ctx, name: string | undefined): Record<string, unknown> {
  const file = ctx.str('file');
  if (file !== undefined) {
    for (const f of ['allow', 'deny', 'action', 'resource', 'principal']) {
      if (ctx.values[f] !== undefined) throw new UsageError(`--file and --${f} do not go together`);
    }
    let doc: unknown;
    try {
      doc = JSON.parse(readFileSync(file === '-' ? 0 : file, 'utf8'));
    } catch (e) {
      throw new UsageError(`cannot read the policy in ${file === '-' ? 'stdin' : file}: ${(e as Error).message}`);
    }
    if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new UsageError(`${file} must hold one JSON object (a policy)`);
    const d = doc as Record<string, unknown>;
    const p: Record<string, unknown> = { name: name ?? d.name };
    if (typeof p.name !== 'string') throw new UsageError('the policy needs a name: give NAME or "name" in the file');
    // What `policy show --json` prints may come back: the fields the broker keeps itself (source, createdAt) go.
    for (const k of ['effect', 'actions', 'resources', 'principals', 'namespace', 'description']) if (d[k] !== undefined && d[k] !== null) p[k] = d[k];
    const ns = ctx.str('namespace');
    if (ns !== undefined) p.namespace = ns;
    return p;
  }
  if (name === undefined) throw new UsageError('a policy needs a NAME');
  const allow = ctx.values.allow === true;
  const deny = ctx.values.deny === true;
  if (allow === deny) throw new UsageError('give one of --allow or --deny (or --file)');
  const actions = ctx.list('action');
  const resources = ctx.list('resource');
  const principals = ctx.list('principal');
  if (!actions || !resources || !principals)
    throw new UsageError('a policy needs --action, --resource and --principal (each may repeat or list several, comma-separated)');
  const description = ctx.str('description');
  const namespace = ctx.str('namespace');
  return {
    name,
    effect: allow ? 'allow' : 'deny',
    actions,
    resources,
    principals,
    ...(namespace !== undefined ? { namespace } : {}),
    ...(description ? { description } : {}),
  };
}

const ADD_OPTIONS = {
  allow: { type: 'boolean' },
  deny: { type: 'boolean' },
  action: { type: 'string', multiple: true, short: 'a' },
  resource: { type: 'string', multiple: true, short: 'r' },
  principal: { type: 'string', multiple: true, short: 'p' },
  description: { type: 'string', short: 'd' },
  namespace: { type: 'string' },
  file: { type: 'string', short: 'f' },
  replace: { type: 'boolean' },
} as const;

const policyText = (p: PolicyView) =>
  keyValues([
    ['policy', p.name],
    ['effect', p.effect],
    ['actions', p.actions.join(', ')],
    ['resources', p.resources.join(', ')],
    ['principals', p.principals.join(', ')],
    ['namespace', p.namespace ?? '(all)'],
    ['description', p.description],
    ['source', p.source],
    ['created', fmtTime(p.createdAt)],
  ]);

export const policyCommand: CommandGroup = {
  name: 'policy',
  aliases: ['policies'],
  summary: 'Authorization policies (actions: publish subscribe create delete describe alter admin respond; resources kind:pattern).',
  subs: {
    add: {
      usage:
        'NAME (--allow|--deny) --action A[,A] --resource KIND:PATTERN --principal user:X|group:X|everyone [--namespace NS] [--description TEXT] [--replace] | [NAME] --file policy.json',
      summary:
        'add a policy (--replace: replace the one of that name; --namespace: scoped to that namespace\'s principals, what a namespace admin gives); e.g. --allow --action publish --resource "topic:sensors/#" --principal group:devices',
      args: [0, 1],
      options: ADD_OPTIONS,
      async run(ctx) {
        const p = fromFlags(ctx, ctx.positionals[0]);
        const api = await ctx.api();
        const { name, ...body } = p;
        const saved = ctx.values.replace
          ? await api.request<PolicyView>('PUT', `/api/v1/policies/${seg(String(name))}`, body)
          : await api.request<PolicyView>('POST', '/api/v1/policies', p);
        ctx.print(
          saved,
          () =>
            `${ctx.values.replace ? 'saved' : 'added'} policy ${saved.name}: ${saved.effect} ${saved.actions.join(',')} on ${saved.resources.join(', ')} to ${saved.principals.join(', ')}`,
        );
      },
    },
    list: {
      usage: '[--namespace NS]',
      summary: 'list policies (those the caller administers; --namespace: only those scoped to NS)',
      options: { namespace: { type: 'string' } },
      async run(ctx) {
        const ns = ctx.str('namespace');
        const ps = await (await ctx.api()).list<PolicyView>('/api/v1/policies', { namespace: ns });
        ctx.print(ps, () =>
          itemsTable(
            ps,
            [
              ['NAME', (p) => p.name],
              ['NAMESPACE', (p) => p.namespace ?? '*'],
              ['EFFECT', (p) => p.effect],
              ['ACTIONS', (p) => p.actions],
              ['RESOURCES', (p) => p.resources.join(' ')],
              ['PRINCIPALS', (p) => p.principals.join(' ')],
              ['SOURCE', (p) => p.source],
            ],
            'no policies (the default policy decides: see --default-policy)',
          ),
        );
      },
    },
    show: {
      usage: 'NAME',
      summary: 'one policy (--json: as a file --file takes)',
      args: [1, 1],
      async run(ctx) {
        const p = await (await ctx.api()).request<PolicyView>('GET', `/api/v1/policies/${seg(ctx.positionals[0])}`);
        ctx.print(p, () => policyText(p));
      },
    },
    delete: {
      usage: 'NAME',
      summary: 'delete a policy (applies at once to connected clients)',
      args: [1, 1],
      async run(ctx) {
        const name = ctx.positionals[0];
        await (await ctx.api()).request('DELETE', `/api/v1/policies/${seg(name)}`);
        ctx.print({ deleted: name }, () => `deleted policy ${name}`);
      },
    },
  },
};
