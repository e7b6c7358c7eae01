/**
 * The write calls scripts use most: PUT/DELETE queues and exchanges, POST/DELETE bindings, POST
 * /api/exchanges/{vhost}/{name}/publish, POST /api/queues/{vhost}/{name}/get, DELETE .../contents (purge), and
 * DELETE /api/connections/{name}. Statuses as RabbitMQ's: 201 created, 204 existed / deleted, 400 inequivalent or
 * malformed, 404 missing. Authorization as the admin API (create / delete on the queue or exchange; a binding on
 * amq.topic also needs subscribe on every topic its key matches, as AMQP's queue.bind; publish on the exchange;
 * subscribe on the queue for get).
 */
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  NS_ROOT,
  ensureVhost,
  isReservedTopicKey,
  isReservedVhostName,
  makeMessage,
  ownVhostExchange,
  ownVhostKey,
  swapSeparators,
  vhostExchange,
  vhostKey,
  vhostQueue,
  vhostStreamOfQueue,
  type BindingDef,
  type Engine,
  type ExchangeType,
  type Header,
  type Message,
  type NamespaceNames,
  type QueueArguments,
} from '../../core/index.js';
import { bindingJson, connectionName, propertiesKey } from './format.js';
import { RabbitError, badRequest, notFound, type RabbitContext } from './context.js';

type VN = { vhost: string; name: string };
type Body = Record<string, unknown> | undefined;

const TOPIC_EXCHANGE = 'amq.topic';

function int(args: Record<string, unknown>, k: string): number | undefined {
  const v = args[k];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw badRequest(`invalid arg '${k}': expected a non-negative integer`);
  return v;
}
function str(args: Record<string, unknown>, k: string): string | undefined {
  const v = args[k];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw badRequest(`invalid arg '${k}': expected a string`);
  return v;
}

/** The x-arguments of a queue as the core's QueueArguments (unknown ones are kept in the raw arguments only). */
export function queueArguments(args: Record<string, unknown>): QueueArguments {
  const out: QueueArguments = {};
  const set = <K extends keyof QueueArguments>(k: K, v: QueueArguments[K] | undefined) => {
    if (v !== undefined) out[k] = v;
  };
  set('messageTtlMs', int(args, 'x-message-ttl'));
  set('expiresMs', int(args, 'x-expires'));
  set('maxLength', int(args, 'x-max-length'));
  set('maxLengthBytes', int(args, 'x-max-length-bytes'));
  const overflow = str(args, 'x-overflow');
  if (overflow !== undefined && !['drop-head', 'reject-publish', 'reject-publish-dlx'].includes(overflow)) throw badRequest(`invalid arg 'x-overflow'`);
  set('overflow', overflow as QueueArguments['overflow']);
  set('deadLetterExchange', str(args, 'x-dead-letter-exchange'));
  set('deadLetterRoutingKey', str(args, 'x-dead-letter-routing-key'));
  if (args['x-single-active-consumer'] !== undefined) set('singleActiveConsumer', args['x-single-active-consumer'] === true);
  const limit = int(args, 'x-delivery-limit');
  if (limit !== undefined) set('deliveryLimit', limit);
  const type = args['x-queue-type'];
  if (type !== undefined && type !== 'classic' && type !== 'quorum')
    throw badRequest(`invalid arg 'x-queue-type': ${String(type)} is not a queue type FlowMQ makes (classic, quorum, stream)`);
  return out;
}

function objectArg(body: Body, k: string): Record<string, unknown> {
  const v = body?.[k];
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw badRequest(`${k} must be an object`);
  return v as Record<string, unknown>;
}
const bool = (body: Body, k: string, dflt: boolean): boolean => (typeof body?.[k] === 'boolean' ? (body[k] as boolean) : dflt);

/** An amq.topic binding key as a filter of the unified topic space (`*` → `+`, `#` ends it: never a weaker check). */
function bindingFilter(key: string): string {
  const out: string[] = [];
  for (const level of swapSeparators(key).split('/')) {
    if (level === '#') {
      out.push('#');
      break;
    }
    out.push(level === '*' ? '+' : level);
  }
  return out.join('/');
}

/** A delivered message as RabbitMQ's /get answers it. */
function messageJson(
  ns: NamespaceNames,
  msg: Message,
  redelivered: boolean,
  remaining: number,
  encoding: string,
  truncate: number | undefined,
): Record<string, unknown> {
  const text = msg.payload.toString('utf8');
  const utf8 = Buffer.from(text, 'utf8').equals(msg.payload);
  const asString = encoding === 'auto' && utf8;
  let body = msg.payload;
  if (truncate !== undefined && body.length > truncate) body = body.subarray(0, truncate);
  const headers: Record<string, string> = {};
  for (const h of msg.headers) if (h.value !== null) headers[h.key] = h.value.toString('utf8');
  const properties: Record<string, unknown> = {};
  if (msg.contentType !== undefined) properties.content_type = msg.contentType;
  if (msg.contentEncoding !== undefined) properties.content_encoding = msg.contentEncoding;
  if (msg.headers.length > 0) properties.headers = headers;
  if (msg.persistent !== undefined) properties.delivery_mode = msg.persistent ? 2 : 1;
  if (msg.priority !== undefined) properties.priority = msg.priority;
  if (msg.correlationData !== undefined) properties.correlation_id = msg.correlationData.toString('utf8');
  if (msg.responseTopic !== undefined) properties.reply_to = swapSeparators(msg.responseTopic);
  if (msg.messageId !== undefined) properties.message_id = msg.messageId;
  if (msg.type !== undefined) properties.type = msg.type;
  return {
    payload_bytes: msg.payload.length,
    redelivered,
    exchange: ownVhostExchange(ns, msg.exchange ?? ''),
    routing_key: ownVhostKey(ns, msg.routingKey ?? swapSeparators(msg.topic)),
    message_count: remaining,
    // RabbitMQ's JSON of an empty property list is [] (an empty Erlang list), not {}.
    properties: Object.keys(properties).length === 0 ? [] : properties,
    payload: asString ? body.toString('utf8') : body.toString('base64'),
    payload_encoding: asString ? 'string' : 'base64',
  };
}

/** A message from the /publish body's `properties`. */
function publishMessage(exchange: string, key: string, payload: Buffer, props: Record<string, unknown>): Message {
  const headers: Header[] = [];
  const h = props.headers;
  if (h !== undefined && h !== null && typeof h === 'object' && !Array.isArray(h)) {
    for (const [k, v] of Object.entries(h)) headers.push({ key: k, value: Buffer.from(typeof v === 'string' ? v : JSON.stringify(v), 'utf8') });
  }
  const msg = makeMessage(exchange === TOPIC_EXCHANGE ? swapSeparators(key) : key, payload, { headers, exchange, routingKey: key });
  const mode = props.delivery_mode;
  if (mode === 1 || mode === 2 || mode === '1' || mode === '2') {
    msg.persistent = Number(mode) === 2;
    if (msg.persistent) msg.qos = 1;
  }
  if (typeof props.content_type === 'string') msg.contentType = props.content_type;
  if (typeof props.content_encoding === 'string') msg.contentEncoding = props.content_encoding;
  if (typeof props.message_id === 'string') msg.messageId = props.message_id;
  if (typeof props.correlation_id === 'string') msg.correlationData = Buffer.from(props.correlation_id, 'utf8');
  if (typeof props.reply_to === 'string') msg.responseTopic = swapSeparators(props.reply_to);
  if (typeof props.type === 'string') msg.type = props.type;
  if (typeof props.priority === 'number') msg.priority = props.priority;
  if (typeof props.expiration === 'string' && /^\d+$/.test(props.expiration)) msg.expiresAt = Date.now() + Number(props.expiration);
  return msg;
}

/** 401 for a name in the reserved `$ns/` space (every vhost, `/` included), as AMQP's 403 ACCESS_REFUSED. */
export function checkName(kind: string, name: string): void {
  if (isReservedVhostName(name)) throw new RabbitError(401, 'not_authorized', `access to ${kind} '${name}' refused: the '${NS_ROOT}/' prefix is reserved`);
}
export function checkTopicKey(key: string): void {
  if (isReservedTopicKey(key)) throw new RabbitError(401, 'not_authorized', `access to topic '${key}' refused: the '${NS_ROOT}/' prefix is reserved`);
}

/**
 * Queue arguments naming the vhost's exchanges and keys (x-dead-letter-exchange, x-dead-letter-routing-key), qualified
 * as the AMQP channel qualifies queue.declare's (core vhosts.ts); a copy when they change.
 */
export function vhostQueueArgs(ns: NamespaceNames, engine: Engine, args: Record<string, unknown>): Record<string, unknown> {
  const dlx = args['x-dead-letter-exchange'];
  if (typeof dlx === 'string') checkName('exchange', dlx);
  if (ns.isDefault || typeof dlx !== 'string') return args;
  const x = vhostExchange(ns, engine, dlx);
  const next: Record<string, unknown> = { ...args, 'x-dead-letter-exchange': x };
  const rk = args['x-dead-letter-routing-key'];
  if (typeof rk === 'string') next['x-dead-letter-routing-key'] = vhostKey(ns, x, rk);
  return next;
}

export function writeRoutes(app: FastifyInstance, ctx: RabbitContext): void {
  const { engine } = ctx;
  /** The vhost's names, with its predeclared exchanges made (a tenant may use this API before any AMQP client). */
  const vhostOf = async (req: FastifyRequest<{ Params: { vhost: string } }>): Promise<NamespaceNames> => {
    const ns = ctx.writeVhost(req, req.params.vhost);
    if (!ns.isDefault) await ensureVhost(engine, ns);
    return ns;
  };
  /** The stream queue behind an internal queue name of the vhost (none when a classic queue has the name). */
  const streamQueueOf = (ns: NamespaceNames, queue: string): string | null => {
    if (engine.getQueue(queue) !== undefined) return null;
    const s = vhostStreamOfQueue(ns, queue);
    return s !== null && engine.getAnyStream(s) !== undefined ? s : null;
  };

  app.put<{ Params: VN; Body: Body }>('/api/queues/:vhost/:name', async (req, reply) => {
    const ns = await vhostOf(req);
    const own = req.params.name;
    checkName('queue', own);
    // A reserved `amq.` name stays as written: the core refuses it as in `/` (as queue.declare in a vhost).
    const name = own.startsWith('amq.') ? own : vhostQueue(ns, own);
    const args = objectArg(req.body, 'arguments');
    if (args['x-queue-type'] === 'stream' || streamQueueOf(ns, name) !== null) {
      // A stream queue: a FlowMQ stream of one partition, made as AMQP's queue.declare makes one (`stream:` resource).
      ctx.require(req, 'create', 'stream', own, ns);
      const amqp = ctx.amqp();
      if (amqp === undefined) throw badRequest('stream queues need the AMQP protocol (--protocols)');
      if (args['x-queue-type'] !== 'stream') throw badRequest(`inequivalent arg 'x-queue-type' for queue '${own}' in vhost '${req.params.vhost}'`);
      const r = await amqp.declareStreamQueue(name, args, bool(req.body, 'durable', true), bool(req.body, 'auto_delete', false));
      if ('error' in r) throw badRequest(r.error);
      return reply.code(r.created ? 201 : 204).send();
    }
    ctx.require(req, 'create', 'queue', own, ns);
    const raw = vhostQueueArgs(ns, engine, args);
    const existed = engine.getQueue(name) !== undefined;
    await engine.declareQueue({
      name,
      durable: bool(req.body, 'durable', true),
      autoDelete: bool(req.body, 'auto_delete', false),
      exclusiveOwner: null,
      arguments: queueArguments(raw),
      rawArguments: raw,
    });
    return reply.code(existed ? 204 : 201).send();
  });

  app.delete<{ Params: VN; Querystring: Record<string, string> }>('/api/queues/:vhost/:name', async (req, reply) => {
    const ns = await vhostOf(req);
    const own = req.params.name;
    checkName('queue', own);
    const name = vhostQueue(ns, own);
    if (engine.getQueue(name) === undefined) {
      // A stream queue or super-stream partition queue: deleted as AMQP queue.delete deletes it (`stream:` resource).
      const sv = ctx
        .amqp()
        ?.streamQueues()
        .find((v) => v.name === name);
      if (sv === undefined) throw notFound();
      ctx.require(req, 'delete', 'stream', ns.ownStream(sv.stream) ?? sv.stream, ns);
      if (req.query['if-empty'] === 'true' && sv.messages > 0) throw badRequest(`queue '${own}' in vhost '${req.params.vhost}' is not empty`);
      if ((await ctx.amqp()?.deleteStreamQueue(name)) == null) throw notFound();
      return reply.code(204).send();
    }
    ctx.require(req, 'delete', 'queue', own, ns);
    await engine.deleteQueue(name, { ifUnused: req.query['if-unused'] === 'true', ifEmpty: req.query['if-empty'] === 'true' });
    return reply.code(204).send();
  });

  app.delete<{ Params: VN }>('/api/queues/:vhost/:name/contents', async (req, reply) => {
    const ns = await vhostOf(req);
    checkName('queue', req.params.name);
    // RabbitMQ's purge needs the read permission (queue.purge): here subscribe, as AMQP's queue.purge.
    ctx.require(req, 'subscribe', 'queue', req.params.name, ns);
    const name = vhostQueue(ns, req.params.name);
    if (engine.getQueue(name) === undefined) throw notFound();
    await engine.purgeQueue(name);
    return reply.code(204).send();
  });

  app.post<{ Params: VN; Body: Body }>('/api/queues/:vhost/:name/get', async (req) => {
    const ns = await vhostOf(req);
    checkName('queue', req.params.name);
    ctx.require(req, 'subscribe', 'queue', req.params.name, ns);
    const h = engine.getQueue(vhostQueue(ns, req.params.name));
    if (h === undefined) throw notFound();
    const b = req.body ?? {};
    const count = typeof b.count === 'number' && Number.isInteger(b.count) && b.count > 0 ? Math.min(b.count, 10_000) : 1;
    const mode = String(b.ackmode ?? '');
    if (!['ack_requeue_true', 'ack_requeue_false', 'reject_requeue_true', 'reject_requeue_false'].includes(mode))
      throw badRequest('ackmode must be ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false');
    const encoding = String(b.encoding ?? 'auto');
    if (encoding !== 'auto' && encoding !== 'base64') throw badRequest('encoding must be auto or base64');
    const truncate = typeof b.truncate === 'number' ? b.truncate : undefined;
    const owner = `management/${randomUUID()}`;
    const out = [];
    const ids: number[] = [];
    for (let i = 0; i < count; i++) {
      const d = await h.get(owner, false);
      if (d === null) break;
      ids.push(d.id);
      out.push(messageJson(ns, d.msg, d.redelivered, d.remaining, encoding, truncate));
    }
    // Requeued ones go back together at the end, as RabbitMQ's temporary channel closing does.
    if (mode.endsWith('requeue_true')) h.release(owner);
    else if (mode === 'ack_requeue_false') await Promise.all(ids.map((id) => h.ack(id)));
    else await Promise.all(ids.map((id) => h.nack(id, false)));
    return out;
  });

  app.put<{ Params: VN; Body: Body }>('/api/exchanges/:vhost/:name', async (req, reply) => {
    const ns = await vhostOf(req);
    const own = req.params.name;
    checkName('exchange', own);
    ctx.require(req, 'create', 'exchange', own, ns);
    const name = vhostExchange(ns, engine, own);
    const type = req.body?.type;
    if (type !== 'direct' && type !== 'fanout' && type !== 'topic' && type !== 'headers') throw badRequest(`invalid exchange type: ${String(type)}`);
    let args = objectArg(req.body, 'arguments');
    const existed = engine.getExchange(name) !== undefined;
    const ae = args['alternate-exchange'];
    let alternate: string | undefined;
    if (typeof ae === 'string') {
      checkName('exchange', ae);
      alternate = vhostExchange(ns, engine, ae);
      if (alternate !== ae) args = { ...args, 'alternate-exchange': alternate };
    }
    await engine.declareExchange({
      name,
      type: type as ExchangeType,
      durable: bool(req.body, 'durable', true),
      autoDelete: bool(req.body, 'auto_delete', false),
      internal: bool(req.body, 'internal', false),
      ...(alternate !== undefined ? { alternateExchange: alternate } : {}),
      rawArguments: args,
    });
    return reply.code(existed ? 204 : 201).send();
  });

  app.delete<{ Params: VN; Querystring: Record<string, string> }>('/api/exchanges/:vhost/:name', async (req, reply) => {
    const ns = await vhostOf(req);
    const own = req.params.name;
    checkName('exchange', own);
    ctx.require(req, 'delete', 'exchange', own, ns);
    const name = vhostExchange(ns, engine, own);
    if (engine.getExchange(name) === undefined) throw notFound();
    await engine.deleteExchange(name, { ifUnused: req.query['if-unused'] === 'true' });
    return reply.code(204).send();
  });

  app.post<{ Params: VN; Body: Body }>('/api/exchanges/:vhost/:name/publish', async (req) => {
    const ns = await vhostOf(req);
    const own = req.params.name === 'amq.default' ? '' : req.params.name;
    checkName('exchange', own);
    ctx.require(req, 'publish', 'exchange', own, ns);
    const b = req.body ?? {};
    const key = b.routing_key;
    const payload = b.payload;
    if (typeof key !== 'string' || typeof payload !== 'string') throw badRequest('routing_key and payload are required strings');
    if (own === '') checkName('queue', key);
    if (own === TOPIC_EXCHANGE) {
      checkTopicKey(key);
      ctx.require(req, 'publish', 'topic', swapSeparators(key), ns);
    }
    const encoding = b.payload_encoding ?? 'string';
    if (encoding !== 'string' && encoding !== 'base64') throw badRequest('payload_encoding must be string or base64');
    const exchange = vhostExchange(ns, engine, own);
    if (engine.getExchange(exchange) === undefined) throw notFound();
    const rk = vhostKey(ns, exchange, key);
    const msg = publishMessage(exchange, rk, Buffer.from(payload, encoding === 'base64' ? 'base64' : 'utf8'), objectArg(b, 'properties'));
    // The vhost may publish on its own `$ns/<ns>/` topics (its amq.topic keys are qualified above).
    if (!ns.isDefault) msg.namespace = ns.namespace;
    const r = engine.publishTo(exchange, rk, msg);
    if (r.durable !== null) await r.durable;
    return { routed: r.routed > 0 };
  });

  const bindingRoute = (destKind: 'q' | 'e') => `/api/bindings/:vhost/e/:source/${destKind}/:destination`;
  type BP = { vhost: string; source: string; destination: string };
  /** A binding path's source and destination as the core knows them (the vhost's names checked and qualified). */
  const ends = (ns: NamespaceNames, req: FastifyRequest<{ Params: BP }>, destKind: 'q' | 'e') => {
    const { source, destination } = req.params;
    checkName('exchange', source);
    checkName(destKind === 'q' ? 'queue' : 'exchange', destination);
    return {
      source: vhostExchange(ns, engine, source),
      destination: destKind === 'q' ? vhostQueue(ns, destination) : vhostExchange(ns, engine, destination),
    };
  };
  const checkBinding = (ns: NamespaceNames, req: FastifyRequest<{ Params: BP }>, destKind: 'q' | 'e', key: string, action: 'create' | 'delete') => {
    const { source, destination } = ends(ns, req, destKind);
    if (engine.getExchange(source) === undefined) throw notFound();
    if (destKind === 'q' ? engine.getQueue(destination) === undefined : engine.getExchange(destination) === undefined) throw notFound();
    ctx.require(req, action, destKind === 'q' ? 'queue' : 'exchange', req.params.destination, ns);
    ctx.require(req, 'describe', 'exchange', req.params.source, ns);
    if (action === 'create' && source === TOPIC_EXCHANGE && !ctx.can(req, 'subscribe', 'topic', bindingFilter(key), ns)) {
      throw new RabbitError(401, 'not_authorized', `Access refused: binding ${key} on ${TOPIC_EXCHANGE} needs subscribe on every topic it matches`);
    }
  };
  const bindingsOf = (ns: NamespaceNames, req: FastifyRequest<{ Params: BP }>, destKind: 'q' | 'e') => {
    const { source, destination } = ends(ns, req, destKind);
    return engine
      .listBindings()
      .filter((b) => b.source === source && b.destination === destination && b.destinationKind === (destKind === 'q' ? 'queue' : 'exchange'));
  };
  for (const destKind of ['q', 'e'] as const) {
    app.get<{ Params: BP }>(bindingRoute(destKind), async (req) => {
      const ns = await vhostOf(req);
      if (!ctx.can(req, 'describe', 'exchange', req.params.source, ns)) throw notFound();
      return bindingsOf(ns, req, destKind).map((b) => bindingJson(b));
    });
    app.post<{ Params: BP; Body: Body }>(bindingRoute(destKind), async (req, reply: FastifyReply) => {
      const ns = await vhostOf(req);
      const key = req.body?.routing_key ?? '';
      if (typeof key !== 'string') throw badRequest('routing_key must be a string');
      const args = objectArg(req.body, 'arguments');
      if (req.params.source === TOPIC_EXCHANGE) checkTopicKey(key);
      checkBinding(ns, req, destKind, key, 'create');
      const { source, destination } = ends(ns, req, destKind);
      const b: BindingDef = {
        source,
        destinationKind: destKind === 'q' ? 'queue' : 'exchange',
        destination,
        key: vhostKey(ns, source, key),
        arguments: args,
      };
      await engine.bind(b);
      return reply.code(201).header('location', propertiesKey(key, args)).send();
    });
    app.get<{ Params: BP & { props: string } }>(`${bindingRoute(destKind)}/:props`, async (req) => {
      const ns = await vhostOf(req);
      if (!ctx.can(req, 'describe', 'exchange', req.params.source, ns)) throw notFound();
      const b = bindingsOf(ns, req, destKind)
        .map((x) => bindingJson(x))
        .find((x) => x.properties_key === req.params.props);
      if (b === undefined) throw notFound();
      return b;
    });
    app.delete<{ Params: BP & { props: string } }>(`${bindingRoute(destKind)}/:props`, async (req, reply) => {
      const ns = await vhostOf(req);
      const b = bindingsOf(ns, req, destKind).find((x) => bindingJson(x).properties_key === req.params.props);
      if (b === undefined) throw notFound();
      checkBinding(ns, req, destKind, ownVhostKey(ns, b.key), 'delete');
      await engine.unbind(b);
      return reply.code(204).send();
    });
  }

  app.delete<{ Params: { name: string } }>('/api/connections/:name', async (req, reply) => {
    ctx.require(req, 'admin', 'cluster', '*');
    const view = ctx.amqp();
    const c = view?.connections().find((x) => connectionName(x) === req.params.name);
    if (view === undefined || c === undefined) throw notFound();
    view.close(c.id, String(req.headers['x-reason'] ?? 'Closed via management plugin'));
    return reply.code(204).send();
  });
}
