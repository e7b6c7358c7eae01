/**
 * An account JWT's JetStream limits (operator mode), read as nats-server 2.9 reads them (accounts.go
 * UpdateAccountClaims): the claim's `limits` hold the default tier's (`mem_storage`, `disk_storage`, `streams`,
 * `consumer`, `max_ack_pending`, `mem_max_stream_bytes`, `disk_max_stream_bytes`, `max_bytes_required`), used when its
 * mem_storage or disk_storage is not 0; else `tiered_limits` hold them per replica count (`R1`, `R3`). A storage or
 * count missing is 0, a max stream bytes or max_ack_pending not above 0 is -1 (none).
 *
 * FlowMQ keeps one copy of a stream (its storage is replicated underneath, not by JetStream), so every stream is of
 * tier R1: a tiered account's R1 limits are its limits. An account JWT without JetStream limits leaves the
 * namespace's quotas in force (nats-server runs that account without JetStream; FlowMQ's namespaces always have it).
 */
/** nats-server's JetStreamAccountLimits as INFO reports them (-1: none). */
export interface AccountLimits {
  maxMemory: number;
  maxStorage: number;
  maxStreams: number;
  maxConsumers: number;
  maxAckPending: number;
  /** storage_max_stream_bytes (and memory_max_stream_bytes when maxMemoryStreamBytes is not given). */
  maxStreamBytes: number;
  /** memory_max_stream_bytes, when it differs (an account JWT's mem_max_stream_bytes). */
  maxMemoryStreamBytes?: number;
  maxBytesRequired: boolean;
}

/** An account's JetStream limits from its JWT: the default tier's, or those of each tier. */
export interface JwtJetStreamLimits {
  limits: AccountLimits | null;
  tiers: Record<string, AccountLimits>;
}

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const num = (o: Obj, k: string): number => (typeof o[k] === 'number' && Number.isFinite(o[k]) ? o[k] : 0);
/** nats-server's toUnlimited: above 0 is a limit, anything else none. */
const unlimited = (o: Obj, k: string): number => (num(o, k) > 0 ? num(o, k) : -1);

function tier(o: Obj): AccountLimits {
  return {
    maxMemory: num(o, 'mem_storage'),
    maxStorage: num(o, 'disk_storage'),
    maxStreams: num(o, 'streams'),
    maxConsumers: num(o, 'consumer'),
    maxAckPending: unlimited(o, 'max_ack_pending'),
    maxStreamBytes: unlimited(o, 'disk_max_stream_bytes'),
    maxMemoryStreamBytes: unlimited(o, 'mem_max_stream_bytes'),
    maxBytesRequired: o.max_bytes_required === true,
  };
}

/** The JetStream limits in an account claim's `limits`, or null when it enables none (nats-server's IsJSEnabled). */
export function jwtJetStreamLimits(limits: unknown): JwtJetStreamLimits | null {
  if (!isObj(limits)) return null;
  const tiered = isObj(limits.tiered_limits) ? Object.entries(limits.tiered_limits).filter(([, v]) => isObj(v)) : [];
  if (num(limits, 'mem_storage') !== 0 || num(limits, 'disk_storage') !== 0) return { limits: tier(limits), tiers: {} };
  if (tiered.length === 0) return null;
  return { limits: null, tiers: Object.fromEntries(tiered.map(([k, v]) => [k, tier(v as Obj)])) };
}
