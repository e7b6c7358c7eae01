/**
 * What a NATS client connection and its adapter share: where a connection comes from, the adapter's figures, and
 * what a connection uses of its adapter (NatsConnectionHost, which NatsAdapter implements).
 */
import type { TLSSocket } from 'node:tls';
import type { Logger } from 'pino';
import type { Engine, Message, PublishInfo } from '../../core/index.js';
import type { AccessControl, Principal } from '../../control/index.js';
import type { LogLimiter } from '../../util/log-limit.js';
import type { ConnectOptions, PayloadBudget } from './codec/index.js';
import type { ResolvedNatsOptions } from './options.js';

/** Where a connection comes from, as the listener knows it. */
export interface NatsConnectionMeta {
  remoteAddress: string;
  remotePort: number;
  /** The stream is TLS (upgraded after INFO, or TLS first). */
  tls: boolean;
  /** The listener already sent INFO on this stream (the TLS upgrade path): the connection must not send it again. */
  infoSent?: boolean;
  /** A WebSocket connection (INFO and figures say so). */
  websocket?: boolean;
  /** The socket under a WebSocket stream: its byte counters are the connection's (client registry). */
  byteCounter?: { readonly bytesRead: number; readonly bytesWritten: number };
  /** The TLS socket underneath (TLS or wss), for its client certificate (mTLS). */
  tlsSocket?: TLSSocket;
  /**
   * The client_id INFO announced: `info()` assigns it when absent, and `handle()` keeps it, so a listener that
   * sends INFO itself passes the same meta object to both.
   */
  clientId?: number;
  /** The nonce INFO sent (NKey and JWT logins sign it); absent when no such login is possible. */
  nonce?: string;
}

/** What INFO says about TLS on the listener the client came in on. */
export interface NatsListenerTls {
  /** TLS is offered (tls_available) */
  available: boolean;
  /** TLS is required (tls_required): a client must upgrade before CONNECT. */
  required: boolean;
}

/**
 * Where a NATS publish with a reply subject goes: JetStream (part D) answers PubAcks for the streams that captured
 * it and dedups by Nats-Msg-Id; the default publishes to the engine. Returns what the publish reached, so the
 * connection can answer no-responders. `reply` is the reply as a unified topic (the message's responseTopic).
 */
export interface NatsPublisher {
  publish(msg: Message, reply: string): PublishInfo;
  /** The JetStream domain whose API ($JS.<domain>.API.>) it answers too, if any. */
  readonly domain?: string | null;
  /** A connection subscribed: push consumers waiting for interest look again (JetStream). */
  subscribed?(): void;
}

/** The outcome of a CONNECT's credentials. */
export type NatsAuthOutcome = { ok: true; principal: Principal; expiresAt?: number | null; accountExpiresAt?: number | null } | { ok: false; busy: boolean };

/** The adapter's counters (figures for /api/v1/broker), kept by its connections. */
export function newNatsStats() {
  return {
    connectionsTotal: 0,
    connectionsRefused: 0,
    authFailures: 0,
    authTimeouts: 0,
    /** Messages received from clients (PUB/HPUB) and their bytes (headers and payload, as nats-server counts). */
    msgsIn: 0,
    bytesIn: 0,
    /** Messages sent to clients (MSG/HMSG) and their bytes (headers and payload). */
    msgsOut: 0,
    bytesOut: 0,
    /** Subscriptions made and removed (UNSUB, auto-unsubscribe, close), for /subsz. */
    subInserts: 0,
    subRemoves: 0,
    /** Messages matched to subscriptions of a connection, the subscriptions they reached, the most at once. */
    matches: 0,
    fanoutTotal: 0,
    maxFanout: 0,
    slowConsumers: 0,
    /** PUB/HPUB and SUB refused by a policy (-ERR 'Permissions Violation ...'). */
    permissionViolations: 0,
    /** Connections refused by their namespace's connection quota. */
    quotaRefusals: 0,
    /** Times a connection's reading was paused by its namespace's rate quotas. */
    quotaPauses: 0,
    staleConnections: 0,
    /** Connections closed because an operation they had started was not received whole within opTimeoutMs. */
    opTimeouts: 0,
    protocolErrors: 0,
    invalidSubjects: 0,
    noResponders: 0,
    writeFailures: 0,
  };
}
export type NatsStats = ReturnType<typeof newNatsStats>;

/** What a connection uses of its adapter (NatsAdapter). */
export interface NatsConnectionHost {
  readonly logger: Logger;
  readonly logLimit: LogLimiter;
  readonly engine: Engine;
  readonly publisher: NatsPublisher;
  readonly access: AccessControl;
  readonly options: ResolvedNatsOptions;
  readonly payloads: PayloadBudget;
  readonly stats: NatsStats;
  readonly hasJetStream: boolean;
  /** `$JS/<domain>/API/` when JetStream answers a domain's API subjects too, else null. */
  readonly jsDomainApi: string | null;
  readonly authRequired: boolean;
  readonly credentialsChecked: boolean;
  /** The INFO object for a new connection. */
  info(meta: NatsConnectionMeta, tls: NatsListenerTls): Record<string, unknown>;
  /** Checks a CONNECT's credentials. */
  authenticate(o: ConnectOptions, meta: NatsConnectionMeta): NatsAuthOutcome | Promise<NatsAuthOutcome>;
  /** allow_responses limits for identities whose own are not set (nats-response-max, nats-response-ttl). */
  readonly responses: { readonly max: number; readonly ttlMs: number };
  /** A durable write of a publish failed. */
  writeFailed(err: unknown): void;
  /** A connection is gone (its teardown says so). */
  left(c: { readonly clientId: number }): void;
}
