/**
 * Streams: list, create, describe (per-partition offsets), change bindings / retention / partitions live, delete,
 * flush, and the message browser. Authorization: `describe|create|alter|delete stream:<name>`; browsing messages is
 * reading them: `subscribe stream:<name>`.
 */
import { isUtf8 } from 'node:buffer';
import type { FastifyInstance } from 'fastify';
import { FlowError, decodeBatch, recordToMessage, splitBatches, splitStreamName, type StreamDef } from '../../core/index.js';
import { parseDuration } from '../../util/units.js';
import { NAME_PARAM, PAGE_QUERY, authorize, authorizeBindings, may, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';

export function streamView(def: StreamDef): Record<string, unknown> {
  return {
    name: def.name,
    // Namespaces (core namespaces.ts): the admin API lists every namespace's streams under their internal names.
    namespace: splitStreamName(def.name).namespace,
    partitions: def.partitions,
    bindings: def.bindings,
    retentionMs: def.retentionMs,
    createdAt: new Date(def.createdAt).toISOString(),
  };
}

function retentionMs(r: string | number | null | undefined): number | null | undefined {
  if (r === undefined) return undefined;
  if (r === null) return null;
  const ms = parseDuration(r);
  if (ms === null || ms <= 0) throw new FlowError('INVALID_ARGUMENT', '"retention" must be a duration such as 7d, 12h or a number of ms (null: keep forever)');
  return ms;
}

const FILTERS = { type: 'array', items: { type: 'string', minLength: 1, maxLength: 65535 }, maxItems: 1000 } as const;
const RETENTION = { type: ['string', 'number', 'null'], description: 'a duration (7d, 12h, ms); null keeps data forever' } as const;

/** Cluster mode: how long a stream's description waits for the owners of its other partitions. */
const OWNER_WAIT_MS = 2000;

/** How many bytes one browser page reads at most from a partition per step. */
const BROWSE_BYTES = 1024 * 1024;

export function streamRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { engine, access } = ctx;

  /**
   * The stream with a line per partition: the log's own figures for the partitions held here; in cluster mode the
   * others' offsets asked of their owners (fetchOffsets; their segment and tail figures stay with their owners).
   */
  const describe = async (name: string) => {
    const e = engine.getAnyStream(name);
    if (!e) throw notFound('stream', name);
    const held = new Map<number, Record<string, number>>((ctx.storage?.describe(name) ?? []).map((d) => [d.partition, d]));
    const partitions = await Promise.all(
      Array.from({ length: e.def.partitions }, async (_, p) => {
        const own = held.get(p);
        if (own !== undefined) return own;
        const asked = engine.storage.fetchOffsets?.(name, p).catch(() => undefined);
        // An owner that does not answer soon (moving, unreachable): the last offsets known here.
        if (asked !== undefined) await Promise.race([asked, new Promise((r) => setTimeout(r, OWNER_WAIT_MS).unref())]);
        return { partition: p, ...engine.offsets(name, p) };
      }),
    );
    return { ...streamView(e.def), topic: e.ownTopic, partitionDetails: partitions };
  };

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/streams',
    {
      schema: {
        tags: ['streams'],
        summary: 'Streams the caller may describe',
        querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY },
      },
    },
    async (req) => {
      const list = engine.listAllStreams().filter((d) => may(access, req, 'describe', 'stream', d.name));
      return paginate(list.map(streamView), (s) => String(s.name), req.query);
    },
  );

  app.post<{ Body: { name: string; partitions?: number; bindings?: string[]; retention?: string | number | null } }>(
    '/api/v1/streams',
    {
      schema: {
        tags: ['streams'],
        summary: 'Create a stream',
        body: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: {
            name: { type: 'string', minLength: 1, maxLength: 249 },
            partitions: { type: 'integer', minimum: 1, default: 1 },
            bindings: FILTERS,
            retention: RETENTION,
          },
        },
      },
    },
    async (req, reply) => {
      const b = req.body;
      authorize(access, req, 'create', 'stream', b.name);
      authorizeBindings(access, req, b.bindings ?? []);
      const def = await engine.createStream({
        name: b.name,
        partitions: b.partitions ?? 1,
        bindings: b.bindings,
        retentionMs: retentionMs(b.retention) ?? null,
      });
      ctx.logger.info({ stream: def.name, partitions: def.partitions, bindings: def.bindings, by: req.auth?.principal.user ?? null }, 'stream created');
      return reply.code(201).send(streamView(def));
    },
  );

  app.get<{ Params: { name: string } }>(
    '/api/v1/streams/:name',
    { schema: { tags: ['streams'], summary: 'One stream with per-partition offsets', params: NAME_PARAM } },
    async (req) => {
      authorize(access, req, 'describe', 'stream', req.params.name);
      return describe(req.params.name);
    },
  );

  app.patch<{ Params: { name: string }; Body: { bindings?: string[]; retention?: string | number | null; partitions?: number } }>(
    '/api/v1/streams/:name',
    {
      schema: {
        tags: ['streams'],
        summary: 'Change bindings or retention live, or add partitions (never fewer)',
        params: NAME_PARAM,
        body: {
          type: 'object',
          additionalProperties: false,
          properties: { bindings: FILTERS, retention: RETENTION, partitions: { type: 'integer', minimum: 1 } },
        },
      },
    },
    async (req) => {
      const { name } = req.params;
      authorize(access, req, 'alter', 'stream', name);
      const e = engine.getAnyStream(name);
      if (!e) throw notFound('stream', name);
      const b = req.body ?? {};
      const retention = retentionMs(b.retention);
      // Checked before anything changes, so a refused part leaves the stream as it was.
      if (b.partitions !== undefined && b.partitions < e.def.partitions) {
        throw new FlowError('INVALID_ARGUMENT', `a stream cannot shrink: it has ${e.def.partitions} partitions, asked ${b.partitions}`);
      }
      if (b.bindings !== undefined)
        authorizeBindings(
          access,
          req,
          b.bindings.filter((f) => !e.def.bindings.includes(f)),
        );
      if (b.bindings !== undefined) await engine.setBindings(name, b.bindings);
      if (retention !== undefined) await engine.setRetention(name, retention);
      if (b.partitions !== undefined && b.partitions > e.def.partitions) await engine.addPartitions(name, b.partitions);
      ctx.logger.info({ stream: name, changes: b, by: req.auth?.principal.user ?? null }, 'stream changed');
      return describe(name);
    },
  );

  app.delete<{ Params: { name: string } }>(
    '/api/v1/streams/:name',
    { schema: { tags: ['streams'], summary: 'Delete a stream and its data', params: NAME_PARAM } },
    async (req, reply) => {
      authorize(access, req, 'delete', 'stream', req.params.name);
      await engine.deleteStream(req.params.name);
      ctx.logger.info({ stream: req.params.name, by: req.auth?.principal.user ?? null }, 'stream deleted');
      return reply.code(204).send();
    },
  );

  app.post<{ Params: { name: string } }>(
    '/api/v1/streams/:name/flush',
    {
      schema: {
        tags: ['streams'],
        summary: "Seal hot data of every stream into the object store now (cluster mode: also at the owners of this stream's partitions); answers this stream",
        params: NAME_PARAM,
      },
    },
    async (req) => {
      authorize(access, req, 'alter', 'stream', req.params.name);
      const e = engine.getAnyStream(req.params.name);
      if (!e) throw notFound('stream', req.params.name);
      await ctx.storage?.flushAll();
      await ctx.storage?.atOwners?.(req.params.name, e.def.partitions, false);
      return describe(req.params.name);
    },
  );

  app.post<{ Params: { name: string } }>(
    '/api/v1/streams/:name/compact',
    {
      schema: {
        tags: ['streams'],
        summary: 'Seal hot data, then run a cleaner pass over the partitions of this stream (cleanup.policy compact) now, at their owners in cluster mode',
        params: NAME_PARAM,
      },
    },
    async (req) => {
      authorize(access, req, 'alter', 'stream', req.params.name);
      const e = engine.getAnyStream(req.params.name);
      if (!e) throw notFound('stream', req.params.name);
      await ctx.storage?.flushAll();
      await ctx.storage?.compact(req.params.name);
      await ctx.storage?.atOwners?.(req.params.name, e.def.partitions, true);
      return describe(req.params.name);
    },
  );

  app.get<{ Params: { name: string }; Querystring: { partition: number; offset?: number; limit: number } }>(
    '/api/v1/streams/:name/messages',
    {
      schema: {
        tags: ['streams'],
        summary: 'Browse messages of one partition from an offset (default: the first readable)',
        params: NAME_PARAM,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            partition: { type: 'integer', minimum: 0, default: 0 },
            offset: { type: 'integer', minimum: 0 },
            limit: { type: 'integer', minimum: 1, maximum: 1000, default: 20 },
          },
        },
      },
    },
    async (req) => {
      const { name } = req.params;
      authorize(access, req, 'subscribe', 'stream', name);
      const e = engine.getAnyStream(name);
      if (!e) throw notFound('stream', name);
      const { partition, limit } = req.query;
      if (partition >= e.def.partitions) throw new FlowError('INVALID_ARGUMENT', `stream "${name}" has partitions 0..${e.def.partitions - 1}`);
      const { logStartOffset, highWatermark } = engine.offsets(name, partition);
      let offset = Math.max(req.query.offset ?? logStartOffset, logStartOffset);
      const items: Array<Record<string, unknown>> = [];
      while (items.length < limit && offset < highWatermark) {
        const chunks = await engine.read(name, partition, offset, BROWSE_BYTES);
        if (chunks.length === 0) break;
        const before = offset;
        for (const chunk of chunks) {
          for (const batch of splitBatches(chunk)) {
            for (const rec of decodeBatch(batch)) {
              if (rec.offset < offset || items.length >= limit) continue;
              const msg = recordToMessage(rec, e.ownTopic);
              const parts = [rec.key, rec.value, ...msg.headers.map((h) => h.value)].filter((x): x is Buffer => x !== null);
              const encoding = parts.every((p) => isUtf8(p)) ? 'utf8' : 'base64';
              const enc = (b: Buffer | null) => (b === null ? null : b.toString(encoding));
              items.push({
                partition,
                offset: rec.offset,
                timestamp: new Date(rec.timestamp).toISOString(),
                topic: msg.topic,
                key: enc(rec.key),
                value: enc(rec.value),
                headers: msg.headers.map((h) => ({ key: h.key, value: enc(h.value) })),
                encoding,
              });
              offset = rec.offset + 1;
            }
          }
        }
        if (offset === before) break; // nothing readable from here (a gap): stop rather than spin
      }
      return { items, next: offset < highWatermark ? offset : null, logStartOffset, highWatermark };
    },
  );
}
