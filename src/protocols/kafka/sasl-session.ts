/**
 * The SASL state of one Kafka connection (handshake, token exchange, principal), and what the adapter is given to
 * authenticate clients. The SaslHandshake and SaslAuthenticate handlers are in sasl.ts.
 */
import { KafkaErrorCode } from './codec/index.js';
import type { Principal } from '../../control/index.js';

export type KafkaSaslStep =
  | { state: 'continue'; challenge: Buffer }
  /**
   * `identity`: the whole principal when the credential carries it (an OIDC token's claims), else the connection
   * looks `principal` up; `expiresAt`: when the credential expires (ms since the epoch), which makes the session's
   * lifetime (KIP-368).
   */
  | { state: 'done'; challenge: Buffer; principal: string; identity?: Principal; expiresAt?: number }
  /** `busy`: the token could not be checked now; the client should reconnect later. */
  | { state: 'failed'; reason: string; username?: string; busy?: boolean };

export interface KafkaSaslExchange {
  step(token: Buffer): KafkaSaslStep | Promise<KafkaSaslStep>;
}

/** What the adapter needs to authenticate clients (the control plane's SASL servers satisfy it). */
export interface KafkaSaslOptions {
  /** Mechanisms offered, in the order SaslHandshake lists them. */
  mechanisms: readonly string[];
  /** Starts one exchange for a mechanism of `mechanisms`, for a client at `remoteAddress` (throttled per address). */
  start(mechanism: string, remoteAddress?: string): KafkaSaslExchange;
}

const enum Phase {
  Initial,
  /** A mechanism was chosen; tokens are expected. */
  Handshaken,
  Authenticated,
  Failed,
}

/** The SASL state of one connection. */
export class SaslSession {
  private phase = Phase.Initial;
  private exchange: KafkaSaslExchange | null = null;
  private busy = false;
  /** Handshake v0 was used: the next frames are raw tokens. */
  raw = false;
  mechanism: string | null = null;
  principal: string | null = null;
  /** The principal the credential carried (OIDC), else null: the connection looks `principal` up. */
  identity: Principal | null = null;
  /** When the authenticated session ends unless the client re-authenticates (KIP-368), ms; null: never. */
  expiresAt: number | null = null;
  /** A re-authentication (KIP-368) is under way: the session it renews still holds until it expires. */
  reauthenticating = false;

  get authenticated(): boolean {
    return this.phase === Phase.Authenticated || this.reauthenticating;
  }

  /** Whether the authenticated session has outlived its credential (the connection is then closed). */
  expired(now: number): boolean {
    return this.expiresAt !== null && now >= this.expiresAt && (this.phase === Phase.Authenticated || this.reauthenticating);
  }

  /** SaslHandshake: null on success, else the error code to answer before closing. */
  handshake(sasl: KafkaSaslOptions | null, mechanism: string, version: number, remoteAddress?: string): number | null {
    // KIP-368: a session with a lifetime may be renewed on the same connection, with the same mechanism (a v1
    // handshake, then SaslAuthenticate); sessions without one (PLAIN, SCRAM) are not re-authenticated, as in Kafka
    // without connections.max.reauth.ms.
    if (this.phase === Phase.Authenticated && this.expiresAt !== null && version >= 1 && sasl !== null && mechanism === this.mechanism) {
      this.phase = Phase.Handshaken;
      this.reauthenticating = true;
      this.exchange = sasl.start(mechanism, remoteAddress);
      return null;
    }
    if (this.phase !== Phase.Initial) {
      this.phase = Phase.Failed;
      return KafkaErrorCode.ILLEGAL_SASL_STATE;
    }
    if (!sasl || !sasl.mechanisms.includes(mechanism)) {
      this.phase = Phase.Failed;
      return KafkaErrorCode.UNSUPPORTED_SASL_MECHANISM;
    }
    this.phase = Phase.Handshaken;
    this.mechanism = mechanism;
    this.exchange = sasl.start(mechanism, remoteAddress);
    this.raw = version === 0;
    return null;
  }

  /** One client token. `illegal` when no exchange is expecting one (no handshake, finished, or one in progress). */
  async step(token: Buffer): Promise<KafkaSaslStep | 'illegal'> {
    const ex = this.exchange;
    if (this.phase !== Phase.Handshaken || !ex || this.busy) {
      this.phase = Phase.Failed;
      return 'illegal';
    }
    this.busy = true;
    let r: KafkaSaslStep;
    try {
      r = await ex.step(token);
    } catch (err) {
      r = { state: 'failed', reason: `authenticator error: ${err instanceof Error ? err.message : String(err)}` };
    } finally {
      this.busy = false;
    }
    if (r.state === 'done' && this.reauthenticating && r.principal !== this.principal) {
      // KIP-368: re-authentication renews the session of the same principal; becoming someone else fails it.
      r = { state: 'failed', reason: 're-authentication as another principal', username: r.principal };
    }
    if (r.state === 'done') {
      this.phase = Phase.Authenticated;
      this.principal = r.principal;
      this.identity = r.identity ?? null;
      this.expiresAt = r.expiresAt ?? null;
      this.exchange = null;
      this.raw = false;
      this.reauthenticating = false;
    } else if (r.state === 'failed') {
      this.phase = Phase.Failed;
      this.exchange = null;
      this.reauthenticating = false;
    }
    return r;
  }
}
