/**
 * GET /api/v1/cluster: the brokers of the cluster and who owns what, as the shared store says now (not this broker's
 * cached view: an operator checking a failover wants the truth, and the `flowmq cluster status` CLI, the dashboard's
 * Cluster page and the test harness read it). Owner rows are paged (`kind`, `broker` filters) since a cluster holds
 * one per partition, queue, group, JetStream consumer and MQTT session; the per-broker counts cover every row.
 *
 * On a single broker (no --cluster) it answers `enabled: false` with no brokers: the clients need not guess.
 */
import type { FastifyInstance } from 'fastify';
import type { Cluster, OwnerRecord, ResourceKind } from '../../cluster/index.js';
import { RESOURCE_KINDS } from '../../cluster/index.js';
import { PAGE_QUERY, authorize, paginate } from './common.js';
import type { ApiContext } from './types.js';

/** One broker as GET /api/v1/cluster describes it (the CLI and the test harness read this shape). */
export interface ClusterBrokerView {
  id: number;
  incarnation: string;
  version: string;
  startedAt: number;
  alive: boolean;
  leaving: boolean;
  leaseRemainingMs: number;
  endpoints: Record<string, { host: string; port: number }>;
  /** Owner rows held by this broker (its current incarnation), per kind. */
  owned: Record<ResourceKind, number>;
  /** The broker that answered is this one. */
  self: boolean;
}

/** One owner row as GET /api/v1/cluster describes it. */
export interface ClusterOwnerView {
  kind: ResourceKind;
  name: string;
  owner: number | null;
  epoch: number;
  since: number;
  /** The owner is a live broker of the incarnation that claimed the row. */
  alive: boolean;
  /** Where placement (rendezvous over live brokers not leaving) puts it, as the answering broker sees it. */
  placement: number | null;
}

/** GET /api/v1/cluster. */
export interface ClusterStatusView {
  enabled: boolean;
  broker: number | null;
  leaseMs: number | null;
  brokers: ClusterBrokerView[];
  owners: { items: ClusterOwnerView[]; next: string | null };
}

interface ClusterQuery {
  kind?: ResourceKind;
  broker?: number;
  limit?: number;
  cursor?: string;
}

export function clusterRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;
  app.get<{ Querystring: ClusterQuery }>(
    '/api/v1/cluster',
    {
      schema: {
        tags: ['cluster'],
        summary: 'Cluster mode: every registered broker (alive, leaving, lease remaining, endpoints, owned counts) and the owner rows, paged',
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            kind: { type: 'string', enum: [...RESOURCE_KINDS], description: 'owner rows of this kind only' },
            broker: { type: 'integer', minimum: 0, description: 'owner rows held by this broker id only' },
            ...PAGE_QUERY,
          },
        },
      },
    },
    async (req) => {
      authorize(access, req, 'describe', 'cluster', '*');
      const cluster: Cluster | null = ctx.cluster ?? null;
      if (cluster === null) return { enabled: false, broker: null, leaseMs: null, brokers: [], owners: { items: [], next: null } };
      const [brokers, rows] = await Promise.all([cluster.store.brokers(), Promise.all(RESOURCE_KINDS.map((k) => cluster.store.owners(k)))]);
      const byId = new Map(brokers.map((b) => [b.id, b]));
      const holds = (r: OwnerRecord): boolean => {
        if (r.owner === null) return false;
        const b = byId.get(r.owner);
        return b !== undefined && b.incarnation === r.incarnation;
      };
      const owned = new Map<number, Record<ResourceKind, number>>();
      for (const b of brokers) owned.set(b.id, Object.fromEntries(RESOURCE_KINDS.map((k) => [k, 0])) as Record<ResourceKind, number>);
      for (const list of rows) for (const r of list) if (holds(r)) owned.get(r.owner!)![r.kind]++;
      const { kind, broker } = req.query;
      const items = rows
        .flat()
        .filter((r) => (kind === undefined || r.kind === kind) && (broker === undefined || r.owner === broker))
        .map((r) => ({
          kind: r.kind,
          name: r.name,
          owner: r.owner,
          epoch: r.epoch,
          since: r.since,
          alive: holds(r) && byId.get(r.owner!)!.alive,
          placement: cluster.placement(r.kind, r.name),
        }));
      return {
        enabled: true,
        broker: cluster.id,
        leaseMs: cluster.leaseMs,
        brokers: brokers
          .sort((a, b) => a.id - b.id)
          .map((b) => ({
            id: b.id,
            incarnation: b.incarnation,
            version: b.version,
            startedAt: b.startedAt,
            alive: b.alive,
            leaving: b.leaving,
            leaseRemainingMs: b.leaseRemainingMs,
            endpoints: b.endpoints,
            owned: owned.get(b.id),
            self: b.id === cluster.id && b.incarnation === cluster.incarnation,
          })),
        // What this broker serves now and its channel's figures (the store's rows may lead or lag by a handover).
        local: cluster.figures(),
        owners: paginate(items, (o) => `${o.kind}\u0000${o.name}`, req.query),
      };
    },
  );
}
