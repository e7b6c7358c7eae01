/**
 * The SASL state of one Kafka connection (handshake, token exchange, principal), and what the adapter is given to
 * authenticate clients. The SaslHandshake and SaslAuthenticate handlers are in sasl.ts.
 */
import { KafkaErrorCode } from './codec/index.js';

export type KafkaSaslStep =
  | { state: 'continue'; challenge: Buffer }
  | { state: 'done'; challenge: Buffer; principal: string }
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

  get authenticated(): boolean {
    return this.phase === Phase.Authenticated;
  }

  /** SaslHandshake: null on success, else the error code to answer before closing. */
  handshake(sasl: KafkaSaslOptions | null, mechanism: string, version: number, remoteAddress?: string): number | null {
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
    if (r.state === 'done') {
      this.phase = Phase.Authenticated;
      this.principal = r.principal;
      this.exchange = null;
      this.raw = false;
    } else if (r.state === 'failed') {
      this.phase = Phase.Failed;
      this.exchange = null;
    }
    return r;
  }
}
