/**
 * A route binds an API codec to its handler. The request and response types meet here, once; the connection
 * only sees erased routes.
 */
import type { KafkaAdapter } from './adapter.js';
import { CLOSE_CONNECTION, ThenClose, type ConnectionInfo, type HandlerResult, type Route as AnyRoute, type RouteResult } from './types.js';
import type { ReadLease } from '../../core/index.js';
import { TRANSLATORS } from './namespaces.js';
import { decodeRequestWith, encodeResponse, type ApiCodec, type RequestHeader } from './codec/index.js';

export { CLOSE_CONNECTION, ThenClose, thenClose, type ConnectionInfo, type HandlerResult, type KafkaListenerInfo, type RouteResult } from './types.js';

/** A route of this adapter: its handler is called with the KafkaAdapter. */
export type Route = AnyRoute<KafkaAdapter>;

export interface RequestContext {
  readonly adapter: KafkaAdapter;
  readonly conn: ConnectionInfo;
  readonly header: RequestHeader;
  /**
   * Holds the storage memory that buffers read for the response point into (pass it to engine.read); the
   * connection releases it once the response is written or dropped.
   */
  readonly lease: ReadLease;
}

/** Returns the response, null for no response at all (Produce with acks=0), or CLOSE_CONNECTION. */
export type Handler<Req, Res> = (ctx: RequestContext, req: Req) => HandlerResult<Res> | Promise<HandlerResult<Res>>;

export function route<Req, Res>(codec: ApiCodec<Req, Res>, handler: Handler<Req, Res>): Route {
  // Namespaces (namespaces.ts): the API's names are qualified on the way in and stripped on the way out.
  const names = TRANSLATORS.get(codec.apiKey);
  return {
    codec,
    run(adapter, conn, frame, lease) {
      const { header, body, trailingBytes } = decodeRequestWith(codec, frame);
      if (trailingBytes > 0 && conn.log.isLevelEnabled('debug')) {
        // Kafka ignores them too (see decodeRequestWith); logged for whoever debugs a client's encoder.
        conn.limitedLog('debug', { api: codec.name, version: header.apiVersion, trailingBytes }, 'bytes after the request body ignored');
      }
      // The client registry shows Kafka's client.id (the first one a request names).
      if (conn.client !== null && conn.client.clientId === null && header.clientId) conn.client.clientId = header.clientId;
      const ns = conn.names;
      let out: HandlerResult<Res> | Promise<HandlerResult<Res>>;
      try {
        if (names !== undefined) names.in(body, ns, adapter);
        out = handler({ adapter, conn, header, lease }, body);
      } catch (err) {
        return Promise.reject(err);
      }
      return Promise.resolve(out).then((res): RouteResult => {
        if (res === null) return null;
        if (res === CLOSE_CONNECTION) return CLOSE_CONNECTION;
        if (names !== undefined) names.out(res instanceof ThenClose ? (res as ThenClose<Res>).response : res, ns);
        if (res instanceof ThenClose) {
          return { frame: encodeResponse(codec, header.apiVersion, header.correlationId, (res as ThenClose<Res>).response), close: true };
        }
        // Awaited<Res> is Res for response objects (they are never thenables).
        return encodeResponse(codec, header.apiVersion, header.correlationId, res as Res);
      });
    },
  };
}
