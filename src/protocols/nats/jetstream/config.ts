/**
 * JetStream consumer configuration (nats-server 2.9's ConsumerConfig, JSON field names) as FlowMQ accepts it:
 * validation with nats-server's errors, defaults as nats-server fills them, and the JSON rendering in nats-server's
 * field order. Pull consumers, and push consumers (deliver_subject), with flow-control requests when flow_control is
 * set (consumer.ts; not in cluster mode, where max_ack_pending and the connection's slow-consumer limit bound them).
 */
import { JsErr, type ApiError } from './errors.js';
import { isValidApiName, subjectsCollide } from './subjects.js';

export type DeliverPolicy = 'all' | 'last' | 'new' | 'by_start_sequence' | 'by_start_time' | 'last_per_subject';
export type AckPolicy = 'none' | 'all' | 'explicit';

export interface ConsumerConfig {
  durable_name?: string;
  name?: string;
  description?: string;
  deliver_policy: DeliverPolicy;
  opt_start_seq?: number;
  opt_start_time?: string;
  ack_policy: AckPolicy;
  /** ns */
  ack_wait?: number;
  max_deliver: number;
  /** ns per redelivery */
  backoff?: number[];
  filter_subject?: string;
  replay_policy: 'instant';
  max_waiting?: number;
  max_ack_pending?: number;
  max_batch?: number;
  /** ns */
  max_expires?: number;
  max_bytes?: number;
  /** ns */
  inactive_threshold?: number;
  num_replicas: number;
  /** Deliveries carry the headers and a Nats-Msg-Size header, no payload. */
  headers_only?: boolean;
  /** Accepted (ordered consumers ask for it); FlowMQ keeps every consumer's state the same way. */
  mem_storage?: boolean;
  /** Push consumer: deliveries are published to this subject while someone listens on it. */
  deliver_subject?: string;
  deliver_group?: string;
  /** Accepted; FlowMQ sends no flow control requests. */
  flow_control?: boolean;
  /** ns; push consumers send `100 Idle Heartbeat` when idle this long. */
  idle_heartbeat?: number;
}

const DEFAULT_ACK_WAIT_NS = 30e9;
const DEFAULT_MAX_WAITING = 512;
const DEFAULT_MAX_ACK_PENDING = 1000;
const DEFAULT_EPHEMERAL_INACTIVE_NS = 5e9;

/** Fields FlowMQ does not implement: a request setting them to anything but their neutral value is refused. */
const UNSUPPORTED: Array<[string, (v: unknown) => boolean]> = [
  ['sample_freq', (v) => v === undefined || v === ''],
  ['filter_subjects', (v) => v === undefined || (Array.isArray(v) && v.length === 0)],
  ['metadata', (v) => v === undefined || (typeof v === 'object' && v !== null && Object.keys(v).length === 0)],
];

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v);

/**
 * Validates a requested config and fills nats-server's defaults. `ephemeral`: created without a durable name
 * (inactive_threshold defaults to 5 s). `streamSubjects`: the stream's subjects, for the filter check.
 */
export function normalizeConsumerConfig(raw: unknown, ephemeral: boolean, streamSubjects: string[]): ConsumerConfig | ApiError {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return JsErr.invalidJson();
  const r = raw as Record<string, unknown>;
  const push = r.deliver_subject !== undefined && r.deliver_subject !== null && r.deliver_subject !== '';
  // nats-server's refusals of a pull consumer's rate limit (a push consumer's: not supported below).
  if (!push && r.rate_limit_bps !== undefined && r.rate_limit_bps !== 0) return JsErr.pullRateLimit();
  if (push && !(r.rate_limit_bps === undefined || r.rate_limit_bps === 0)) return JsErr.consumerCreate('consumer rate_limit_bps is not supported by FlowMQ');
  for (const [k, neutral] of UNSUPPORTED) {
    if (!neutral(r[k])) {
      return JsErr.consumerCreate(`consumer ${k} is not supported by FlowMQ`);
    }
  }
  const str = (k: string): string | undefined | ApiError => {
    const v = r[k];
    if (v === undefined || v === null || v === '') return undefined;
    return typeof v === 'string' ? v : JsErr.invalidJson();
  };
  const num = (k: string): number | undefined | ApiError => {
    const v = r[k];
    if (v === undefined || v === null) return undefined;
    return isInt(v) ? v : JsErr.invalidJson();
  };
  const durable = str('durable_name');
  const name = str('name');
  const description = str('description');
  const filter = str('filter_subject');
  const startTime = str('opt_start_time');
  for (const v of [durable, name, description, filter, startTime]) if (typeof v === 'object') return v;
  const deliverSubject = str('deliver_subject');
  const deliverGroup = str('deliver_group');
  if (typeof deliverSubject === 'object') return deliverSubject;
  if (typeof deliverGroup === 'object') return deliverGroup;
  const heartbeat = num('idle_heartbeat');
  if (typeof heartbeat === 'object') return heartbeat;
  if (r.flow_control !== undefined && typeof r.flow_control !== 'boolean') return JsErr.invalidJson();
  if (deliverSubject !== undefined && !/^[^\s*>]+$/.test(deliverSubject as string)) return JsErr.invalidDeliverSubject();
  // nats-server 2.9.10's checks of push-only settings, in its order.
  if (deliverSubject === undefined && r.flow_control === true) return JsErr.flowControlRequiresPush();
  if (deliverSubject === undefined && ((heartbeat as number | undefined) ?? 0) > 0) return JsErr.heartbeatRequiresPush();
  const startSeq = num('opt_start_seq');
  const ackWait = num('ack_wait');
  const maxDeliverRaw = num('max_deliver');
  const maxWaiting = num('max_waiting');
  const maxAckPending = num('max_ack_pending');
  const maxBatch = num('max_batch');
  const maxExpires = num('max_expires');
  const maxBytes = num('max_bytes');
  const inactive = num('inactive_threshold');
  const replicas = num('num_replicas');
  for (const v of [startSeq, ackWait, maxDeliverRaw, maxWaiting, maxAckPending, maxBatch, maxExpires, maxBytes, inactive, replicas]) {
    if (typeof v === 'object') return v;
  }
  if (((replicas as number | undefined) ?? 0) < 0) return JsErr.replicasNegative();
  if (((maxWaiting as number | undefined) ?? 0) < 0) return JsErr.maxWaitingNegative();
  if (deliverSubject !== undefined && ((maxWaiting as number | undefined) ?? 0) !== 0) return JsErr.pushMaxWaiting();
  if (((maxBatch as number | undefined) ?? 0) < 0) return JsErr.maxBatchNegative();
  if (r.flow_control === true && !((heartbeat as number | undefined) ?? 0)) return JsErr.flowControlNeedsHeartbeat();
  if (durable !== undefined && !isValidApiName(durable as string)) return JsErr.consumerNameInvalid();
  if (name !== undefined && !isValidApiName(name as string)) return JsErr.consumerNameInvalid();
  if (durable !== undefined && name !== undefined && durable !== name) return JsErr.durableAndNameMismatch();

  const deliver = (r.deliver_policy ?? 'all') as DeliverPolicy;
  if (!['all', 'last', 'new', 'by_start_sequence', 'by_start_time', 'last_per_subject'].includes(deliver)) return JsErr.invalidJson();
  const ack = (r.ack_policy ?? 'none') as AckPolicy;
  if (!['none', 'all', 'explicit'].includes(ack)) return JsErr.invalidJson();
  const replay = r.replay_policy ?? 'instant';
  if (replay !== 'instant') {
    if (replay === 'original') return JsErr.consumerCreate('replay policy original is not supported by FlowMQ');
    return JsErr.invalidJson();
  }
  const policyNames: Record<DeliverPolicy, string> = {
    all: 'deliver all',
    last: 'deliver last',
    new: 'deliver new',
    by_start_sequence: 'deliver by start sequence',
    by_start_time: 'deliver by start time',
    last_per_subject: 'deliver last per subject',
  };
  if (deliver === 'by_start_sequence') {
    if (startSeq === undefined || startSeq === 0)
      return JsErr.consumerInvalidPolicy('consumer delivery policy is deliver by start sequence, but optional start sequence is not set');
    if (startTime !== undefined)
      return JsErr.consumerInvalidPolicy('consumer delivery policy is deliver by start sequence, but optional start time is also set');
  } else if (deliver === 'by_start_time') {
    if (startTime === undefined) return JsErr.consumerInvalidPolicy('consumer delivery policy is deliver by start time, but optional start time is not set');
    if (startSeq !== undefined && startSeq !== 0)
      return JsErr.consumerInvalidPolicy('consumer delivery policy is deliver by start time, but optional start sequence is also set');
    if (!Number.isFinite(Date.parse(startTime as string))) return JsErr.invalidJson();
  } else {
    if (startSeq !== undefined && startSeq !== 0)
      return JsErr.consumerInvalidPolicy(`consumer delivery policy is ${policyNames[deliver]}, but optional start sequence is also set`);
    if (startTime !== undefined) return JsErr.consumerInvalidPolicy(`consumer delivery policy is ${policyNames[deliver]}, but optional start time is also set`);
  }
  let backoff: number[] | undefined;
  if (r.backoff !== undefined && r.backoff !== null) {
    if (!Array.isArray(r.backoff) || !r.backoff.every((b) => isInt(b) && b > 0)) return JsErr.invalidJson();
    backoff = r.backoff.length > 0 ? (r.backoff as number[]) : undefined;
  }
  let maxDeliver = (maxDeliverRaw as number | undefined) ?? -1;
  if (maxDeliver === 0) maxDeliver = -1;
  if (backoff !== undefined && maxDeliver !== -1 && maxDeliver <= backoff.length) return JsErr.backoffMaxDeliver();
  if (backoff !== undefined && maxDeliver === -1) return JsErr.backoffMaxDeliver();
  if (filter !== undefined) {
    const f = filter as string;
    if (f !== '>' && !streamSubjects.some((s) => subjectsCollide(s, f))) return JsErr.filterNotSubset();
  }
  const cfg: ConsumerConfig = {
    ...(durable !== undefined ? { durable_name: durable as string } : {}),
    ...(name !== undefined || durable !== undefined ? { name: (name ?? durable) as string } : {}),
    ...(description !== undefined ? { description: description as string } : {}),
    deliver_policy: deliver,
    ...(startSeq !== undefined && startSeq !== 0 ? { opt_start_seq: startSeq as number } : {}),
    ...(startTime !== undefined ? { opt_start_time: startTime as string } : {}),
    ack_policy: ack,
    ...(ack !== 'none' ? { ack_wait: backoff?.[0] ?? ((ackWait as number | undefined) || DEFAULT_ACK_WAIT_NS) } : {}),
    max_deliver: maxDeliver,
    ...(backoff !== undefined ? { backoff } : {}),
    ...(filter !== undefined && filter !== '>' ? { filter_subject: filter as string } : {}),
    replay_policy: 'instant',
    ...(deliverSubject === undefined ? { max_waiting: (maxWaiting as number | undefined) || DEFAULT_MAX_WAITING } : {}),
    ...(ack !== 'none' ? { max_ack_pending: (maxAckPending as number | undefined) || DEFAULT_MAX_ACK_PENDING } : {}),
    ...(maxBatch ? { max_batch: maxBatch as number } : {}),
    ...(maxExpires ? { max_expires: maxExpires as number } : {}),
    ...(maxBytes ? { max_bytes: maxBytes as number } : {}),
    ...((inactive as number | undefined) || ephemeral ? { inactive_threshold: (inactive as number | undefined) || DEFAULT_EPHEMERAL_INACTIVE_NS } : {}),
    ...(deliverSubject !== undefined ? { deliver_subject: deliverSubject as string } : {}),
    ...(deliverGroup !== undefined ? { deliver_group: deliverGroup as string } : {}),
    ...(r.flow_control === true ? { flow_control: true } : {}),
    ...(heartbeat ? { idle_heartbeat: heartbeat as number } : {}),
    // As asked (0: the stream's); more than one needs cluster mode (consumer-api.ts).
    num_replicas: (replicas as number | undefined) ?? 0,
    ...(r.headers_only === true ? { headers_only: true } : {}),
    ...(r.mem_storage === true ? { mem_storage: true } : {}),
  };
  if (r.headers_only !== undefined && typeof r.headers_only !== 'boolean') return JsErr.invalidJson();
  if (r.mem_storage !== undefined && typeof r.mem_storage !== 'boolean') return JsErr.invalidJson();
  return cfg;
}

/**
 * Fields an existing consumer may not change, checked in nats-server 2.9.10's order with its "<field> can not be
 * updated" refusals (filter_subject, limits and the rest may change).
 */
export function checkConsumerUpdate(old: ConsumerConfig, next: ConsumerConfig): ApiError | null {
  const fixed: Array<[keyof ConsumerConfig, string]> = [
    ['deliver_policy', 'deliver policy'],
    ['opt_start_seq', 'start sequence'],
    ['opt_start_time', 'start time'],
    ['ack_policy', 'ack policy'],
    ['replay_policy', 'replay policy'],
    ['idle_heartbeat', 'heart beats'],
    ['flow_control', 'flow control'],
    ['max_waiting', 'max waiting'],
  ];
  for (const [k, what] of fixed) if (old[k] !== next[k]) return JsErr.consumerCreate(`${what} can not be updated`);
  // A pull consumer cannot become a push consumer or the reverse (a push consumer may move to another subject).
  if ((old.deliver_subject === undefined) !== (next.deliver_subject === undefined)) {
    return JsErr.consumerCreate(
      old.deliver_subject === undefined ? 'can not update pull consumer to push based' : 'can not update push consumer to pull based',
    );
  }
  return null;
}
