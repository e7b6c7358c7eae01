/**
 * The read side of the RabbitMQ management API: overview, queues, exchanges, bindings, connections, channels,
 * consumers, vhosts, nodes, whoami. Lists keep what the caller may describe (see server.ts).
 */
import os from 'node:os';
import { readdirSync, readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { AmqpConnectionView, AmqpStreamQueueView } from './types.js';
import {
  VHOST,
  internalName,
  vhostOfName,
  vhostOfNamespace,
  bindingJson,
  bindingVhost,
  bindingView,
  channelJson,
  connectionJson,
  connectionName,
  consumerJson,
  defaultBindingJson,
  exchangeJson,
  overviewStats,
  partitionQueues,
  queueJson,
  streamQueueJson,
  withDetails,
} from './format.js';
import { DEFAULT_NAMESPACE, splitStreamName } from '../../core/namespaces.js';
import { refreshQueueStats } from '../../core/queues.js';
import { ADMIN_GROUP } from '../policy.js';
import { RABBITMQ_API_VERSION, notFound, type RabbitContext } from './context.js';

type V = { vhost: string };
type VN = { vhost: string; name: string };

const EXCHANGE_TYPES = [
  { name: 'direct', description: 'AMQP direct exchange, as per the AMQP specification', enabled: true },
  { name: 'fanout', description: 'AMQP fanout exchange, as per the AMQP specification', enabled: true },
  { name: 'headers', description: 'AMQP headers exchange, as per the AMQP specification', enabled: true },
  { name: 'topic', description: 'AMQP topic exchange, as per the AMQP specification', enabled: true },
];

/** Listener names as RabbitMQ calls the protocols (health/checks/protocol-listener uses the same names). */
export const PROTOCOL_NAMES: Record<string, string> = {
  amqp: 'amqp',
  amqps: 'amqp/ssl',
  mqtt: 'mqtt',
  mqtts: 'mqtt/ssl',
  'mqtt-ws': 'http/web-mqtt',
  http: 'http',
  management: 'http',
  kafka: 'kafka',
  'kafka-tls': 'kafka/ssl',
  nats: 'nats',
  'nats-ws': 'http/web-nats',
};

/** Open file descriptors and the soft limit (Linux /proc; 0 where it cannot be read). */
function fileDescriptors(): { used: number; total: number } {
  try {
    const used = readdirSync('/proc/self/fd').length;
    const m = /Max open files\s+(\d+)/.exec(readFileSync('/proc/self/limits', 'utf8'));
    return { used, total: m ? Number(m[1]) : 0 };
  } catch {
    return { used: 0, total: 0 };
  }
}

export function nodeJson(ctx: RabbitContext): Record<string, unknown> {
  const fd = fileDescriptors();
  const alarms = ctx.amqp()?.alarms() ?? { memory: false, disk: false };
  const disk = ctx.disk?.() ?? null;
  const limit = ctx.amqp()?.memoryLimit() ?? 0;
  const clients = ctx.access.clients.size;
  return {
    name: ctx.node,
    type: 'disc',
    running: true,
    mem_used: process.memoryUsage.rss(),
    mem_limit: limit > 0 ? limit : os.totalmem(),
    mem_alarm: alarms.memory,
    disk_free: disk?.freeBytes ?? 0,
    disk_free_limit: disk?.minFreeBytes ?? 0,
    disk_free_alarm: alarms.disk,
    fd_used: fd.used,
    fd_total: fd.total,
    // Sockets open: the listeners' and every client connection's (all protocols). The limit is the descriptors'.
    sockets_used: ctx.listeners().length + clients,
    sockets_total: fd.total,
    // No Erlang processes: the event loop's active handles and requests are the nearest equivalent.
    proc_used: process.getActiveResourcesInfo().length,
    proc_total: fd.total,
    run_queue: 0,
    processors: os.cpus().length,
    os_pid: String(process.pid),
    uptime: Date.now() - ctx.startedAt,
    partitions: [],
    rates_mode: 'basic',
    net_ticktime: 60,
    exchange_types: EXCHANGE_TYPES,
    auth_mechanisms: [{ name: 'PLAIN', description: 'SASL PLAIN authentication mechanism', enabled: true }],
    enabled_plugins: ['rabbitmq_management'],
  };
}

function listenersJson(ctx: RabbitContext): Array<Record<string, unknown>> {
  return ctx.listeners().map((l) => ({ node: ctx.node, protocol: PROTOCOL_NAMES[l.name] ?? l.name, ip_address: ctx.host, port: l.port }));
}

/** The caller's connections: all with `describe cluster:*`, else its own. */
export function visibleConnections(ctx: RabbitContext, req: FastifyRequest): AmqpConnectionView[] {
  const all = (ctx.amqp()?.connections() ?? []).filter((c) => ctx.sees(req, vhostOfNamespace(c.namespace)));
  if (ctx.can(req, 'describe', 'cluster', '*')) return all;
  const me = ctx.caller(req).name;
  return all.filter((c) => c.user === me);
}

function sortBy<T>(items: T[], key: (t: T) => string): T[] {
  return items.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

export function readRoutes(app: FastifyInstance, ctx: RabbitContext): void {
  const { engine } = ctx;
  const queues = (req: FastifyRequest) =>
    sortBy(engine.listQueues(), (d) => d.name).filter((d) => ctx.sees(req, vhostOfName(d.name).vhost) && ctx.can(req, 'describe', 'queue', d.name));
  const queueOut = (d: ReturnType<typeof engine.listQueues>[number]) =>
    queueJson(d, engine.getQueue(d.name), ctx.node, ctx.rates, ctx.policies.describe(d.name));
  /** Stream queues and super-stream partition queues (the AMQP module's view) the caller may describe. */
  const allStreams = (): AmqpStreamQueueView[] => ctx.amqp()?.streamQueues() ?? [];
  const streams = (req: FastifyRequest) =>
    allStreams().filter((v) => ctx.sees(req, vhostOfNamespace(splitStreamName(v.stream).namespace)) && ctx.can(req, 'describe', 'stream', v.stream));
  /** AMQP consumers by the queue they read (every connection's: a queue's consumer count is not the caller's). */
  const consumerCounts = (): Map<string, number> => {
    const n = new Map<string, number>();
    for (const c of ctx.amqp()?.connections() ?? []) for (const ch of c.channels) for (const k of ch.consumers) n.set(k.queue, (n.get(k.queue) ?? 0) + 1);
    return n;
  };
  const streamOut = (v: AmqpStreamQueueView, counts: Map<string, number>) => streamQueueJson(v, counts.get(v.name) ?? 0, ctx.node, ctx.rates);
  /** Every queue the caller may describe, classic and stream, by name (as RabbitMQ lists them). */
  const allQueuesOut = async (req: FastifyRequest) => {
    const qs = queues(req);
    // Cluster mode: the counts of queues owned by other brokers, from their owners.
    await refreshQueueStats(qs.map((d) => engine.getQueue(d.name)));
    const counts = consumerCounts();
    const out = [...qs.map(queueOut), ...streams(req).map((v) => streamOut(v, counts))];
    return sortBy(out, (q) => q.name as string);
  };
  const exchanges = (req: FastifyRequest) =>
    sortBy(engine.listExchanges(), (d) => d.name).filter(
      (d) => d.name === '' || ((d.name === 'amq.topic' || ctx.sees(req, vhostOfName(d.name).vhost)) && ctx.can(req, 'describe', 'exchange', d.name)),
    );
  const bindings = (req: FastifyRequest) => {
    const sv = streams(req);
    const names = sortBy([...queues(req).map((q) => q.name), ...sv.map((v) => v.name)], (n) => n);
    const out = names.map((n) => defaultBindingJson(n));
    const pq = partitionQueues(allStreams());
    for (const b of engine.listBindings()) if (ctx.sees(req, bindingVhost(b)) && ctx.can(req, 'describe', 'exchange', b.source)) out.push(bindingJson(b, pq));
    return out;
  };

  app.get('/api/overview', async (req) => {
    const qs = queues(req);
    let messages = 0;
    let ready = 0;
    let unacked = 0;
    let consumers = 0;
    for (const d of qs) {
      const h = engine.getQueue(d.name);
      const s = h?.stats() ?? { ready: 0, unacked: 0, bytes: 0, consumers: 0 };
      messages += s.ready + s.unacked;
      ready += s.ready;
      unacked += s.unacked;
      consumers += s.consumers;
    }
    const sv = streams(req);
    for (const v of sv) {
      messages += v.messages;
      ready += v.messages;
    }
    // The AMQP module's publish counts are the broker's: for those who may describe it only.
    const stats = overviewStats(
      qs.map((d) => engine.getQueue(d.name)),
      ctx.can(req, 'describe', 'cluster', '*') ? ctx.amqp() : undefined,
    );
    const conns = visibleConnections(ctx, req);
    const admin = ctx.can(req, 'describe', 'cluster', '*');
    return {
      management_version: RABBITMQ_API_VERSION,
      rates_mode: 'basic',
      exchange_types: EXCHANGE_TYPES,
      product_version: ctx.version,
      product_name: 'FlowMQ',
      rabbitmq_version: RABBITMQ_API_VERSION,
      cluster_name: ctx.node,
      erlang_version: process.version,
      erlang_full_version: `Node.js ${process.version}`,
      disable_stats: false,
      enable_queue_totals: true,
      message_stats: withDetails(stats, ctx.rates, 'o'),
      queue_totals: {
        messages,
        messages_details: ctx.rates.details('t.messages'),
        messages_ready: ready,
        messages_ready_details: ctx.rates.details('t.messages_ready'),
        messages_unacknowledged: unacked,
        messages_unacknowledged_details: ctx.rates.details('t.messages_unacknowledged'),
      },
      object_totals: {
        channels: conns.reduce((n, c) => n + c.channels.length, 0),
        connections: conns.length,
        consumers,
        exchanges: exchanges(req).length,
        queues: qs.length + sv.length,
      },
      statistics_db_event_queue: 0,
      node: ctx.node,
      listeners: admin ? listenersJson(ctx) : [],
      contexts: admin ? [{ node: ctx.node, description: 'RabbitMQ Management', path: '/', port: String(ctx.port) }] : [],
    };
  });

  app.get('/api/queues', async (req) => allQueuesOut(req));
  app.get<{ Params: V }>('/api/queues/:vhost', async (req) => {
    const vhost = ctx.vhost(req, req.params.vhost);
    return (await allQueuesOut(req)).filter((q) => q.vhost === vhost);
  });
  /** The stream queue `name` the caller may describe (when no classic queue has that name). */
  const streamNamed = (req: FastifyRequest, name: string): AmqpStreamQueueView | undefined =>
    engine.getQueue(name) !== undefined ? undefined : streams(req).find((v) => v.name === name);
  app.get<{ Params: VN }>('/api/queues/:vhost/:name', async (req) => {
    const vhost = ctx.vhost(req, req.params.vhost);
    const internal = internalName(vhost, req.params.name);
    const d = engine.getQueue(internal)?.def;
    const sv = d === undefined ? streamNamed(req, internal) : undefined;
    if (sv === undefined && (d === undefined || !ctx.can(req, 'describe', 'queue', d.name))) throw notFound();
    const name = d?.name ?? internal;
    if (d !== undefined) await refreshQueueStats([engine.getQueue(d.name)]);
    const out = d !== undefined ? queueOut(d) : streamOut(sv!, consumerCounts());
    const details: Array<Record<string, unknown>> = [];
    for (const c of visibleConnections(ctx, req))
      for (const ch of c.channels) ch.consumers.forEach((k, i) => k.queue === name && details.push(consumerJson(c, ch, i)));
    out.consumer_details = details;
    return out;
  });
  app.get<{ Params: VN }>('/api/queues/:vhost/:name/bindings', async (req) => {
    const vhost = ctx.vhost(req, req.params.vhost);
    const name = internalName(vhost, req.params.name);
    const pq = partitionQueues(allStreams());
    if (engine.getQueue(name) === undefined) {
      if (streamNamed(req, name) === undefined) throw notFound();
      const own = engine.listBindings().filter((b) => b.destinationKind === 'stream' && bindingView(b, pq).destination === name);
      return [defaultBindingJson(name), ...own.map((b) => bindingJson(b, pq))];
    }
    if (!ctx.can(req, 'describe', 'queue', name)) throw notFound();
    return [
      defaultBindingJson(name),
      ...engine
        .listBindings()
        .filter((b) => b.destinationKind === 'queue' && b.destination === name)
        .map((b) => bindingJson(b)),
    ];
  });

  app.get('/api/exchanges', async (req) => exchanges(req).map(exchangeJson));
  app.get<{ Params: V }>('/api/exchanges/:vhost', async (req) => {
    const vhost = ctx.vhost(req, req.params.vhost);
    return exchanges(req)
      .map(exchangeJson)
      .filter((x) => x.vhost === vhost || x.name === '' || x.name === 'amq.topic');
  });
  app.get<{ Params: VN }>('/api/exchanges/:vhost/:name', async (req) => {
    const vhost = ctx.vhost(req, req.params.vhost);
    const name = req.params.name === 'amq.default' ? '' : internalName(vhost, req.params.name);
    const x = engine.getExchange(name);
    if (x === undefined || (name !== '' && !ctx.can(req, 'describe', 'exchange', name))) throw notFound();
    return exchangeJson(x);
  });
  for (const side of ['source', 'destination'] as const) {
    app.get<{ Params: VN }>(`/api/exchanges/:vhost/:name/bindings/${side}`, async (req) => {
      const vhost = ctx.vhost(req, req.params.vhost);
      const name = internalName(vhost, req.params.name);
      if (engine.getExchange(name) === undefined || !ctx.can(req, 'describe', 'exchange', name)) throw notFound();
      const pq = partitionQueues(allStreams());
      return engine
        .listBindings()
        .filter((b) => (side === 'source' ? b.source === name : b.destinationKind === 'exchange' && b.destination === name))
        .map((b) => bindingJson(b, pq))
        .filter((b) => b.vhost === vhost);
    });
  }

  app.get('/api/bindings', async (req) => bindings(req));
  app.get<{ Params: V }>('/api/bindings/:vhost', async (req) => {
    const vhost = ctx.vhost(req, req.params.vhost);
    return bindings(req).filter((b) => b.vhost === vhost);
  });

  app.get('/api/connections', async (req) => visibleConnections(ctx, req).map((c) => connectionJson(c, ctx.node, ctx.rates)));
  app.get<{ Params: V }>('/api/vhosts/:vhost/connections', async (req) => {
    const vhost = ctx.vhost(req, req.params.vhost);
    return visibleConnections(ctx, req)
      .map((c) => connectionJson(c, ctx.node, ctx.rates))
      .filter((c) => c.vhost === vhost);
  });
  app.get<{ Params: { name: string } }>('/api/connections/:name', async (req) => {
    const c = visibleConnections(ctx, req).find((x) => connectionName(x) === req.params.name);
    if (c === undefined) throw notFound();
    return connectionJson(c, ctx.node, ctx.rates);
  });
  app.get<{ Params: { name: string } }>('/api/connections/:name/channels', async (req) => {
    const c = visibleConnections(ctx, req).find((x) => connectionName(x) === req.params.name);
    if (c === undefined) throw notFound();
    return c.channels.map((ch) => channelJson(c, ch, ctx.node));
  });
  const channels = (req: FastifyRequest) => visibleConnections(ctx, req).flatMap((c) => c.channels.map((ch) => channelJson(c, ch, ctx.node)));
  app.get('/api/channels', async (req) => channels(req));
  app.get<{ Params: V }>('/api/vhosts/:vhost/channels', async (req) => {
    ctx.vhost(req, req.params.vhost);
    return channels(req);
  });
  const consumers = (req: FastifyRequest) =>
    visibleConnections(ctx, req).flatMap((c) => c.channels.flatMap((ch) => ch.consumers.map((_k, i) => consumerJson(c, ch, i))));
  app.get('/api/consumers', async (req) => consumers(req));
  app.get<{ Params: V }>('/api/consumers/:vhost', async (req) => {
    ctx.vhost(req, req.params.vhost);
    return consumers(req);
  });

  /** The vhosts the caller may see: `/`, and every namespace's (all for the admins group, else its own). */
  const vhostNames = (req: FastifyRequest): string[] => {
    const p = ctx.caller(req).principal;
    const all = p === null || p.groups.includes(ADMIN_GROUP);
    const names = ctx.access.directory
      .listNamespaces()
      .map((n) => n.name)
      .filter((n) => n !== DEFAULT_NAMESPACE && (all || n === p?.namespace));
    return [VHOST, ...names.sort()];
  };
  const vhostJson = (req: FastifyRequest, vhost: string) => {
    let messages = 0;
    let ready = 0;
    let unacked = 0;
    for (const d of queues(req)) {
      if (vhostOfName(d.name).vhost !== vhost) continue;
      const s = engine.getQueue(d.name)?.stats();
      if (s === undefined) continue;
      messages += s.ready + s.unacked;
      ready += s.ready;
      unacked += s.unacked;
    }
    const description = vhost === VHOST ? 'Default virtual host' : (ctx.access.directory.namespace(vhost)?.description ?? `Namespace ${vhost}`);
    const r = vhost === VHOST ? 't' : `t.${vhost}`;
    return {
      cluster_state: { [ctx.node]: 'running' },
      default_queue_type: 'classic',
      description,
      metadata: { description, tags: [] },
      messages,
      messages_details: ctx.rates.details(`${r}.messages`),
      messages_ready: ready,
      messages_ready_details: ctx.rates.details(`${r}.messages_ready`),
      messages_unacknowledged: unacked,
      messages_unacknowledged_details: ctx.rates.details(`${r}.messages_unacknowledged`),
      name: vhost,
      tags: [],
      tracing: false,
    };
  };
  app.get('/api/vhosts', async (req) => vhostNames(req).map((v) => vhostJson(req, v)));
  app.get<{ Params: V }>('/api/vhosts/:vhost', async (req) => vhostJson(req, ctx.vhost(req, req.params.vhost)));

  /** A node name the caller may use for this node: its own, or rabbit@ and the name it reached us by. */
  const isThisNode = (req: FastifyRequest, name: string): boolean => {
    if (name === ctx.node) return true;
    const host = (req.headers.host ?? '').replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
    const label = /^([a-zA-Z0-9-]*)/.exec(host)?.[1] ?? '';
    return name === `rabbit@${label}` || name === 'rabbit@localhost';
  };
  app.get('/api/nodes', async (req) => {
    ctx.require(req, 'describe', 'cluster', '*');
    return [nodeJson(ctx)];
  });
  app.get<{ Params: { name: string } }>('/api/nodes/:name', async (req) => {
    ctx.require(req, 'describe', 'cluster', '*');
    if (!isThisNode(req, req.params.name)) throw notFound();
    return nodeJson(ctx);
  });
}
