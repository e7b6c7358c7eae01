/** `flowmq cluster status|owners`: the brokers of a cluster and who owns what (GET /api/v1/cluster). */
import { UsageError, type CommandGroup } from '../command.js';
import { fmtAge, itemsTable, keyValues } from '../table.js';
import type { ClusterBrokerView, ClusterOwnerView, ClusterStatusView } from '../../control/api/routes-cluster.js';

const KINDS = ['partition', 'queue', 'group', 'consumer', 'session', 'txn'] as const;
type Kind = (typeof KINDS)[number];

type BrokerView = ClusterBrokerView;
type OwnerView = ClusterOwnerView;
type ClusterView = ClusterStatusView;

const NOT_CLUSTERED = 'this broker does not run in cluster mode (start it with --cluster)';

function stateOf(b: BrokerView): string {
  return !b.alive ? 'dead' : b.leaving ? 'leaving' : 'alive';
}

/** The client-facing endpoints in a fixed order, then the others: `mqtt=h:p kafka=h:p ...`. */
function endpointsText(e: BrokerView['endpoints']): string {
  const order = ['mqtt', 'kafka', 'amqp', 'nats', 'http', 'cluster'];
  const names = [
    ...order.filter((n) => e[n]),
    ...Object.keys(e)
      .filter((n) => !order.includes(n))
      .sort(),
  ];
  return names.map((n) => `${n}=${e[n].host}:${e[n].port}`).join(' ');
}

function brokersTable(s: ClusterView): string {
  const now = Date.now();
  return itemsTable(
    s.brokers,
    [
      ['BROKER', (b) => `${b.self ? '*' : ''}${b.id}`],
      ['STATE', (b) => stateOf(b)],
      ['LEASE', (b) => (b.alive ? `${(b.leaseRemainingMs / 1000).toFixed(1)}s` : `expired ${fmtAge(-b.leaseRemainingMs)} ago`)],
      ['UPTIME', (b) => fmtAge(now - b.startedAt)],
      ['PARTITIONS', (b) => b.owned?.partition ?? 0],
      ['QUEUES', (b) => b.owned?.queue ?? 0],
      ['GROUPS', (b) => b.owned?.group ?? 0],
      ['CONSUMERS', (b) => b.owned?.consumer ?? 0],
      ['SESSIONS', (b) => b.owned?.session ?? 0],
      ['ENDPOINTS', (b) => endpointsText(b.endpoints)],
    ],
    'no broker registered',
  );
}

function kindFlag(v: string | undefined): Kind | undefined {
  if (v === undefined) return undefined;
  if (!(KINDS as readonly string[]).includes(v)) throw new UsageError(`--kind must be one of ${KINDS.join(', ')} (got "${v}")`);
  return v as Kind;
}

export const clusterCommand: CommandGroup = {
  name: 'cluster',
  summary: 'Cluster mode: the brokers (alive, lease, endpoints, what each owns) and the owners of partitions, queues, groups, consumers and sessions.',
  subs: {
    status: {
      usage: '',
      summary: 'the brokers of the cluster: state, lease remaining, uptime, owned resources per kind, endpoints (* = the broker answering)',
      async run(ctx) {
        const api = await ctx.api();
        const s = await api.request<ClusterView>('GET', '/api/v1/cluster?limit=1');
        ctx.print(s, () => {
          if (!s.enabled) return NOT_CLUSTERED;
          const alive = s.brokers.filter((b) => b.alive).length;
          const head = keyValues([
            ['answered by', `broker ${s.broker}`],
            ['brokers', `${alive} alive of ${s.brokers.length} registered`],
            ['lease', s.leaseMs === null ? null : `${s.leaseMs / 1000}s`],
          ]);
          return `${head}\n\n${brokersTable(s)}`;
        });
      },
    },
    owners: {
      usage: '[--kind partition|queue|group|consumer|session|txn] [--broker ID]',
      summary: 'owner rows: resource, owner broker, epoch, since when, placement; rows whose owner is dead are marked',
      options: { kind: { type: 'string' }, broker: { type: 'string' } },
      async run(ctx) {
        const kind = kindFlag(ctx.str('kind'));
        const brokerFlag = ctx.str('broker');
        if (brokerFlag !== undefined && !/^\d+$/.test(brokerFlag)) throw new UsageError(`--broker must be a broker id (got "${brokerFlag}")`);
        const api = await ctx.api();
        const rows: OwnerView[] = [];
        let enabled = true;
        let cursor: string | null = null;
        do {
          const q = new URLSearchParams({ limit: '1000' });
          if (kind) q.set('kind', kind);
          if (brokerFlag !== undefined) q.set('broker', brokerFlag);
          if (cursor) q.set('cursor', cursor);
          const page: ClusterView = await api.request<ClusterView>('GET', `/api/v1/cluster?${q}`);
          enabled = page.enabled;
          rows.push(...page.owners.items);
          cursor = page.owners.next;
        } while (cursor !== null);
        const now = Date.now();
        ctx.print(rows, () => {
          if (!enabled) return NOT_CLUSTERED;
          return itemsTable(
            rows,
            [
              ['KIND', (o) => o.kind],
              ['NAME', (o) => o.name],
              ['OWNER', (o) => (o.owner === null ? 'released' : o.alive ? o.owner : `${o.owner} (dead)`)],
              ['EPOCH', (o) => o.epoch],
              ['SINCE', (o) => `${fmtAge(now - o.since)} ago`],
              ['PLACEMENT', (o) => o.placement],
            ],
            'no owner rows',
          );
        });
      },
    },
  },
};
