/**
 * The admin HTTP API (control plane). JSON under /api/v1/; the `flowmq` CLI is a client of it.
 *
 *   GET    /healthz                      liveness
 *   GET    /api/v1/broker                listeners and counters
 *   GET    /api/v1/streams               every stream
 *   POST   /api/v1/streams               create {name, partitions, bindings?, retention?}
 *   GET    /api/v1/streams/{name}        one stream with per-partition offsets
 *   DELETE /api/v1/streams/{name}        delete a stream and its data
 *   POST   /api/v1/streams/{name}/flush  seal hot data of every stream into the object store now
 *
 * Errors are `{ "error": { "code": "...", "message": "..." } }` with a matching HTTP status.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { FlowError, isFlowError, type Engine, type StreamDef } from '../core/index.js';
import { parseDuration } from '../config/units.js';
import { listenOn } from '../protocols/listener.js';

/** Storage operations the control plane may ask for; implemented by the log engine. */
export interface StorageOps {
  flushAll(): Promise<void>;
  describe(stream: string): Array<Record<string, number>>;
}

export interface AdminApiOptions {
  engine: Engine;
  logger: Logger;
  storage?: StorageOps;
  /** Extra broker information for GET /api/v1/broker. */
  info?: () => Record<string, unknown>;
  host: string;
  port: number;
}

export interface AdminApi {
  address(): AddressInfo;
  close(): Promise<void>;
}

const MAX_BODY = 1024 * 1024;

const STATUS: Record<string, number> = {
  INVALID_ARGUMENT: 400,
  INVALID_FILTER: 400,
  INVALID_TOPIC: 400,
  NOT_FOUND: 404,
  ALREADY_EXISTS: 409,
  LIMIT_EXCEEDED: 413,
};

function send(res: ServerResponse, status: number, body: unknown): void {
  const data = status === 204 ? '' : JSON.stringify(body, null, 2) + '\n';
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

function readJson(req: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new FlowError('LIMIT_EXCEEDED', 'request body too large'));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      if (text.trim() === '') return resolve({});
      try {
        resolve(JSON.parse(text));
      } catch {
        reject(new FlowError('INVALID_ARGUMENT', 'request body is not valid JSON'));
      }
    });
    req.on('error', reject);
  });
}

export function streamView(def: StreamDef): Record<string, unknown> {
  return {
    name: def.name,
    partitions: def.partitions,
    bindings: def.bindings,
    retentionMs: def.retentionMs,
    createdAt: new Date(def.createdAt).toISOString(),
  };
}

function parseCreate(body: unknown): { name: string; partitions: number; bindings?: string[]; retentionMs: number | null } {
  if (typeof body !== 'object' || body === null) throw new FlowError('INVALID_ARGUMENT', 'expected a JSON object');
  const b = body as Record<string, unknown>;
  if (typeof b.name !== 'string') throw new FlowError('INVALID_ARGUMENT', '"name" must be a string');
  const partitions = b.partitions ?? 1;
  if (typeof partitions !== 'number') throw new FlowError('INVALID_ARGUMENT', '"partitions" must be a number');
  let bindings: string[] | undefined;
  if (b.bindings !== undefined) {
    if (!Array.isArray(b.bindings) || !b.bindings.every((x) => typeof x === 'string')) {
      throw new FlowError('INVALID_ARGUMENT', '"bindings" must be an array of topic filters');
    }
    bindings = b.bindings as string[];
  }
  let retentionMs: number | null = null;
  if (b.retention !== undefined && b.retention !== null) {
    const r = typeof b.retention === 'string' || typeof b.retention === 'number' ? parseDuration(b.retention) : null;
    if (r === null || r <= 0) throw new FlowError('INVALID_ARGUMENT', '"retention" must be a duration such as 7d, 12h or a number of ms');
    retentionMs = r;
  }
  return { name: b.name, partitions, bindings, retentionMs };
}

export async function startAdminApi(opts: AdminApiOptions): Promise<AdminApi> {
  const { engine, logger } = opts;

  const describe = (name: string) => {
    const e = engine.getStream(name);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${name}" does not exist`);
    const detail = opts.storage?.describe(name);
    const partitions = detail ?? Array.from({ length: e.def.partitions }, (_, p) => ({ partition: p, ...engine.offsets(name, p) }));
    return { ...streamView(e.def), topic: e.ownTopic, partitionDetails: partitions };
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    const method = req.method ?? 'GET';
    if (url.pathname === '/healthz' && method === 'GET') return send(res, 200, { status: 'ok' });
    if (parts[0] !== 'api' || parts[1] !== 'v1') throw new FlowError('NOT_FOUND', `no such endpoint ${url.pathname}`);
    const [, , resource, name, action] = parts;
    if (resource === 'broker' && parts.length === 3 && method === 'GET') {
      return send(res, 200, { ...(opts.info?.() ?? {}), stats: engine.stats });
    }
    if (resource === 'streams') {
      if (name === undefined) {
        if (method === 'GET') return send(res, 200, { streams: engine.listStreams().map(streamView) });
        if (method === 'POST') {
          const def = await engine.createStream(parseCreate(await readJson(req)));
          logger.info({ stream: def.name, partitions: def.partitions, bindings: def.bindings }, 'stream created');
          return send(res, 201, streamView(def));
        }
      } else if (action === undefined) {
        if (method === 'GET') return send(res, 200, describe(name));
        if (method === 'DELETE') {
          await engine.deleteStream(name);
          logger.info({ stream: name }, 'stream deleted');
          return send(res, 204, null);
        }
      } else if (action === 'flush' && method === 'POST' && parts.length === 5) {
        if (!engine.getStream(name)) throw new FlowError('NOT_FOUND', `stream "${name}" does not exist`);
        await opts.storage?.flushAll();
        return send(res, 200, describe(name));
      }
    }
    res.setHeader('allow', 'GET, POST, DELETE');
    throw new FlowError('NOT_FOUND', `no such endpoint ${method} ${url.pathname}`);
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      const code = isFlowError(err) ? err.code : 'INTERNAL';
      const status = isFlowError(err) ? STATUS[err.code] ?? 500 : 500;
      if (status >= 500) logger.error({ err, url: req.url }, 'admin API request failed');
      if (!res.headersSent) send(res, status, { error: { code, message: (err as Error).message } });
      else res.destroy();
    });
  });
  await listenOn(server, opts, (err) => logger.error({ err }, 'admin API server error'));
  return {
    address: () => server.address() as AddressInfo,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
