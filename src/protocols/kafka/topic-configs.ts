/**
 * Kafka's topic configs on FlowMQ streams: every name Kafka defines (TopicConfig, LogConfig's topic definitions
 * and the two throttled-replica lists of QuotaConfig), each with Kafka's type and validator, so that CreateTopics,
 * AlterConfigs and IncrementalAlterConfigs accept what a Kafka broker accepts and refuse what it refuses.
 *
 * A config is either
 * - honoured: FlowMQ acts on it. retention.ms, retention.bytes, segment.bytes and segment.ms are the stream's own
 *   settings (StreamDef: the log applies them, whatever protocol writes); max.message.bytes and
 *   message.timestamp.type=LogAppendTime are applied by the Kafka Produce handler; cleanup.policy (delete, compact or
 *   both), min.cleanable.dirty.ratio, min.compaction.lag.ms, max.compaction.lag.ms and delete.retention.ms are read
 *   by the log's cleaner (storage/log/compaction.ts) from StreamDef.configs;
 * - or stored: kept with the stream (StreamDef.configs) and reported by DescribeConfigs as set, with no effect.
 *   Their documentation in DescribeConfigs says so, and why (FlowMQ has no replicas, no flush policy of its own:
 *   every acknowledged write is in the write-ahead log; batches are stored as the producer compressed them...).
 *
 * DescribeConfigs reports every config: the value set on the topic (source DYNAMIC_TOPIC_CONFIG), else the value
 * in force (DEFAULT_CONFIG: FlowMQ's own default where it differs from Kafka's, e.g. retention.ms -1, segments of
 * --segment-bytes), with the broker config it falls back to as a synonym, as Kafka's ConfigHelper does.
 */
import type { StreamDef, StreamSettings } from '../../core/index.js';
import { ConfigSource, ConfigType, KafkaErrorCode, type DescribedConfig } from './codec/index.js';
import type { ResolvedKafkaOptions } from './options.js';

/** A config the client may not have: its error code (INVALID_CONFIG) and message. */
export class TopicConfigError extends Error {
  readonly errorCode = KafkaErrorCode.INVALID_CONFIG;
}

const LONG_MAX = 9223372036854775807n;
const LONG_MIN = -9223372036854775808n;
const INT_MAX = 2147483647n;
const INT_MIN = -2147483648n;
const LONG_MAX_TEXT = LONG_MAX.toString();

/** Checks a value given for config `name`; returns it normalized, or throws TopicConfigError (INVALID_CONFIG). */
export type Validate = (name: string, value: string) => string;

function integer(min: bigint, max: bigint, lo: bigint | null, hi: bigint | null = null): Validate {
  return (name, value) => {
    const t = value.trim();
    if (!/^[+-]?\d+$/.test(t)) throw new TopicConfigError(`${name} must be an integer, not "${value}"`);
    const n = BigInt(t);
    if (n < min || n > max) throw new TopicConfigError(`${name} ${t} is out of range`);
    if ((lo !== null && n < lo) || (hi !== null && n > hi)) {
      throw new TopicConfigError(`${name} must be ${hi === null ? `at least ${lo}` : `in [${lo}, ${hi}]`}, not ${t}`);
    }
    return n.toString();
  };
}
export const long = (lo: bigint | null = null, hi: bigint | null = null): Validate => integer(LONG_MIN, LONG_MAX, lo, hi);
export const int = (lo: bigint | null = null, hi: bigint | null = null): Validate => integer(INT_MIN, INT_MAX, lo, hi);
export const bool: Validate = (name, value) => {
  const t = value.trim().toLowerCase();
  if (t !== 'true' && t !== 'false') throw new TopicConfigError(`${name} must be true or false, not "${value}"`);
  return t;
};
export const oneOf =
  (...allowed: string[]): Validate =>
  (name, value) => {
    const t = value.trim();
    if (!allowed.includes(t)) throw new TopicConfigError(`${name} must be one of ${allowed.join(', ')}, not "${value}"`);
    return t;
  };
const ratio: Validate = (name, value) => {
  const n = Number(value.trim());
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1) throw new TopicConfigError(`${name} must be a number in [0, 1], not "${value}"`);
  return String(n);
};
/** Kafka's ThrottledReplicaListValidator: "", "*", or partition:broker pairs. */
const throttledReplicas: Validate = (name, value) => {
  const t = value.trim();
  if (t === '' || t === '*') return t;
  const items = t.split(',').map((x) => x.trim());
  if (!items.every((x) => /^\d+:\d+$/.test(x))) throw new TopicConfigError(`${name} must be "*" or a list of partition:broker, not "${value}"`);
  return items.join(',');
};
/** message.format.version (deprecated): a Kafka version, as MetadataVersionValidator takes it. */
const kafkaVersion: Validate = (name, value) => {
  const t = value.trim();
  if (!/^\d+\.\d+(\.\d+)?(-IV\d+)?$/.test(t)) throw new TopicConfigError(`${name} must be a Kafka version such as 3.0-IV1, not "${value}"`);
  return t;
};
/** cleanup.policy: a list of compact and delete (Kafka's LogConfig: both may be given), normalized to "compact,delete" order. */
const cleanupPolicy: Validate = (name, value) => {
  const items = value
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '');
  for (const x of items) if (x !== 'delete' && x !== 'compact') throw new TopicConfigError(`${name} must list compact or delete, not "${x}"`);
  // Kafka accepts an empty list (no cleanup at all): records stay, as with retention.ms -1.
  const out = ['compact', 'delete'].filter((x) => items.includes(x));
  return out.join(',');
};

interface TopicConfigDef {
  name: string;
  type: number;
  validate: Validate;
  /** The value in force when the topic does not set it. */
  defaultValue(o: ResolvedKafkaOptions): string;
  /** The broker config it falls back to in Kafka (DescribeConfigs synonyms). */
  broker?: string;
  /** Whether FlowMQ acts on it (else it is only stored and reported). */
  honoured: boolean;
  doc: string;
}

const STORED = 'Stored and reported; no effect in FlowMQ: ';

/** Every topic config Kafka defines, by name. */
const DEFS: TopicConfigDef[] = [
  {
    name: 'cleanup.policy',
    type: ConfigType.LIST,
    validate: cleanupPolicy,
    defaultValue: () => 'delete',
    broker: 'log.cleanup.policy',
    honoured: true,
    doc: '"delete": records go by retention (time or size). "compact": sealed segments are rewritten keeping the last record per key (retention does not apply). "compact,delete": both.',
  },
  {
    name: 'compression.gzip.level',
    type: ConfigType.INT,
    validate: (n, v) => {
      const r = int(-1n, 9n)(n, v);
      if (r === '0') throw new TopicConfigError(`${n} must be -1 or in [1, 9]`);
      return r;
    },
    defaultValue: () => '-1',
    broker: 'compression.gzip.level',
    honoured: false,
    doc: `${STORED}batches are stored as the producer compressed them.`,
  },
  {
    name: 'compression.lz4.level',
    type: ConfigType.INT,
    validate: int(1n, 17n),
    defaultValue: () => '9',
    broker: 'compression.lz4.level',
    honoured: false,
    doc: `${STORED}batches are stored as the producer compressed them.`,
  },
  {
    name: 'compression.type',
    type: ConfigType.STRING,
    validate: oneOf('uncompressed', 'zstd', 'lz4', 'snappy', 'gzip', 'producer'),
    defaultValue: () => 'producer',
    broker: 'compression.type',
    honoured: false,
    doc: `${STORED}batches are stored as the producer compressed them (as "producer").`,
  },
  {
    name: 'compression.zstd.level',
    type: ConfigType.INT,
    validate: int(-131072n, 22n),
    defaultValue: () => '3',
    broker: 'compression.zstd.level',
    honoured: false,
    doc: `${STORED}batches are stored as the producer compressed them.`,
  },
  {
    name: 'delete.retention.ms',
    type: ConfigType.LONG,
    validate: long(0n),
    defaultValue: () => '86400000',
    broker: 'log.cleaner.delete.retention.ms',
    honoured: true,
    doc: 'How long the cleaner keeps a tombstone (a record with a null value) of a compacted topic after the segment holding it was first cleaned.',
  },
  {
    name: 'file.delete.delay.ms',
    type: ConfigType.LONG,
    validate: long(0n),
    defaultValue: () => '60000',
    broker: 'log.segment.delete.delay.ms',
    honoured: false,
    doc: `${STORED}expired segments are deleted from the object store at once.`,
  },
  {
    name: 'flush.messages',
    type: ConfigType.LONG,
    validate: long(1n),
    defaultValue: () => LONG_MAX_TEXT,
    broker: 'log.flush.interval.messages',
    honoured: false,
    doc: `${STORED}every acknowledged write is already durable in the write-ahead log.`,
  },
  {
    name: 'flush.ms',
    type: ConfigType.LONG,
    validate: long(0n),
    defaultValue: () => LONG_MAX_TEXT,
    broker: 'log.flush.interval.ms',
    honoured: false,
    doc: `${STORED}every acknowledged write is already durable in the write-ahead log.`,
  },
  {
    name: 'follower.replication.throttled.replicas',
    type: ConfigType.LIST,
    validate: throttledReplicas,
    defaultValue: () => '',
    honoured: false,
    doc: `${STORED}partitions have one replica.`,
  },
  {
    name: 'index.interval.bytes',
    type: ConfigType.INT,
    validate: int(0n),
    defaultValue: () => '4096',
    broker: 'log.index.interval.bytes',
    honoured: false,
    doc: `${STORED}segments index every batch.`,
  },
  {
    name: 'leader.replication.throttled.replicas',
    type: ConfigType.LIST,
    validate: throttledReplicas,
    defaultValue: () => '',
    honoured: false,
    doc: `${STORED}partitions have one replica.`,
  },
  {
    name: 'local.retention.bytes',
    type: ConfigType.LONG,
    validate: long(-2n),
    defaultValue: () => '-2',
    broker: 'log.local.retention.bytes',
    honoured: false,
    doc: `${STORED}segments always go to the object store; retention.bytes applies.`,
  },
  {
    name: 'local.retention.ms',
    type: ConfigType.LONG,
    validate: long(-2n),
    defaultValue: () => '-2',
    broker: 'log.local.retention.ms',
    honoured: false,
    doc: `${STORED}segments always go to the object store; retention.ms applies.`,
  },
  {
    name: 'max.compaction.lag.ms',
    type: ConfigType.LONG,
    validate: long(1n),
    defaultValue: () => LONG_MAX_TEXT,
    broker: 'log.cleaner.max.compaction.lag.ms',
    honoured: true,
    doc: 'Longest a record of a compacted topic stays uncleaned: a sealed segment older than this is cleaned whatever the dirty ratio.',
  },
  {
    name: 'max.message.bytes',
    type: ConfigType.INT,
    validate: int(0n),
    defaultValue: (o) => String(o.maxRequestBytes),
    broker: 'message.max.bytes',
    honoured: true,
    doc: 'Largest record batch (with its 12-byte log overhead) Produce accepts; larger ones get MESSAGE_TOO_LARGE. Default: the largest request.',
  },
  {
    name: 'message.downconversion.enable',
    type: ConfigType.BOOLEAN,
    validate: bool,
    defaultValue: () => 'true',
    broker: 'log.message.downconversion.enable',
    honoured: false,
    doc: `${STORED}Fetch serves RecordBatch v2 only (Fetch v4 and later).`,
  },
  {
    name: 'message.format.version',
    type: ConfigType.STRING,
    validate: kafkaVersion,
    defaultValue: () => '3.0-IV1',
    broker: 'log.message.format.version',
    honoured: false,
    doc: `${STORED}batches are stored as RecordBatch v2.`,
  },
  {
    name: 'message.timestamp.after.max.ms',
    type: ConfigType.LONG,
    validate: long(0n),
    defaultValue: () => LONG_MAX_TEXT,
    broker: 'log.message.timestamp.after.max.ms',
    honoured: false,
    doc: `${STORED}producer timestamps are not bounded.`,
  },
  {
    name: 'message.timestamp.before.max.ms',
    type: ConfigType.LONG,
    validate: long(0n),
    defaultValue: () => LONG_MAX_TEXT,
    broker: 'log.message.timestamp.before.max.ms',
    honoured: false,
    doc: `${STORED}producer timestamps are not bounded.`,
  },
  {
    name: 'message.timestamp.difference.max.ms',
    type: ConfigType.LONG,
    validate: long(0n),
    defaultValue: () => LONG_MAX_TEXT,
    broker: 'log.message.timestamp.difference.max.ms',
    honoured: false,
    doc: `${STORED}producer timestamps are not bounded.`,
  },
  {
    name: 'message.timestamp.type',
    type: ConfigType.STRING,
    validate: oneOf('CreateTime', 'LogAppendTime'),
    defaultValue: () => 'CreateTime',
    broker: 'log.message.timestamp.type',
    honoured: true,
    doc: "CreateTime: the producer's timestamps. LogAppendTime: Produce stamps each batch with the time it is appended.",
  },
  {
    name: 'min.cleanable.dirty.ratio',
    type: ConfigType.DOUBLE,
    validate: ratio,
    defaultValue: () => '0.5',
    broker: 'log.cleaner.min.cleanable.ratio',
    honoured: true,
    doc: 'Share of the sealed, not yet cleaned bytes of a compacted partition above which the cleaner runs.',
  },
  {
    name: 'min.compaction.lag.ms',
    type: ConfigType.LONG,
    validate: long(0n),
    defaultValue: () => '0',
    broker: 'log.cleaner.min.compaction.lag.ms',
    honoured: true,
    doc: 'Youngest a record of a compacted topic may be to be cleaned: segments newer than this are left as they are.',
  },
  {
    name: 'min.insync.replicas',
    type: ConfigType.INT,
    validate: int(1n),
    defaultValue: () => '1',
    broker: 'min.insync.replicas',
    honoured: false,
    doc: `${STORED}partitions have one replica, and an acknowledged write is durable in the write-ahead log.`,
  },
  {
    name: 'preallocate',
    type: ConfigType.BOOLEAN,
    validate: bool,
    defaultValue: () => 'false',
    broker: 'log.preallocate',
    honoured: false,
    doc: `${STORED}segments are objects written whole.`,
  },
  {
    name: 'remote.log.copy.disable',
    type: ConfigType.BOOLEAN,
    validate: bool,
    defaultValue: () => 'false',
    honoured: false,
    doc: `${STORED}sealed segments always go to the object store.`,
  },
  {
    name: 'remote.log.delete.on.disable',
    type: ConfigType.BOOLEAN,
    validate: bool,
    defaultValue: () => 'false',
    honoured: false,
    doc: `${STORED}sealed segments always go to the object store.`,
  },
  {
    name: 'remote.storage.enable',
    type: ConfigType.BOOLEAN,
    validate: bool,
    defaultValue: () => 'false',
    honoured: false,
    doc: `${STORED}sealed segments always go to the object store.`,
  },
  {
    name: 'retention.bytes',
    type: ConfigType.LONG,
    validate: long(),
    defaultValue: () => '-1',
    broker: 'log.retention.bytes',
    honoured: true,
    doc: 'Size bound per partition: the oldest whole segments are deleted while the rest still holds this many bytes. -1: none.',
  },
  {
    name: 'retention.ms',
    type: ConfigType.LONG,
    validate: long(-1n),
    defaultValue: () => '-1',
    broker: 'log.retention.ms',
    honoured: true,
    doc: "How long records are kept before whole segments are deleted; -1 keeps them forever (FlowMQ's default).",
  },
  {
    name: 'segment.bytes',
    type: ConfigType.INT,
    validate: int(14n),
    defaultValue: (o) => String(o.logSegmentBytes),
    broker: 'log.segment.bytes',
    honoured: true,
    doc: "Size at which a partition's segment is sealed into the object store (at least 1 MiB is used).",
  },
  {
    name: 'segment.index.bytes',
    type: ConfigType.INT,
    validate: int(4n),
    defaultValue: () => '10485760',
    broker: 'log.index.size.max.bytes',
    honoured: false,
    doc: `${STORED}a segment's index is sized to its batches.`,
  },
  {
    name: 'segment.jitter.ms',
    type: ConfigType.LONG,
    validate: long(0n),
    defaultValue: () => '0',
    broker: 'log.roll.jitter.ms',
    honoured: false,
    doc: `${STORED}segments are sealed by size or age without jitter.`,
  },
  {
    name: 'segment.ms',
    type: ConfigType.LONG,
    validate: long(1n),
    defaultValue: (o) => String(o.logSegmentMs),
    broker: 'log.roll.ms',
    honoured: true,
    doc: "Age at which a partition's segment is sealed into the object store, even if not full.",
  },
  {
    name: 'unclean.leader.election.enable',
    type: ConfigType.BOOLEAN,
    validate: bool,
    defaultValue: () => 'false',
    broker: 'unclean.leader.election.enable',
    honoured: false,
    doc: `${STORED}a partition's new leader reads the same shared log: no data is lost by electing it.`,
  },
];

const BY_NAME = new Map(DEFS.map((d) => [d.name, d]));

/** The topic config whose broker-wide default is the broker config `brokerName` (log.retention.ms → retention.ms). */
const BY_BROKER = new Map(DEFS.filter((d) => d.broker !== undefined).map((d) => [d.broker!, d]));

/** A topic config's definition as broker-configs.ts needs it: validator, type, whether FlowMQ acts on it. */
export function topicConfigForBroker(brokerName: string): { name: string; type: number; validate: Validate; honoured: boolean } | undefined {
  return BY_BROKER.get(brokerName);
}

/** Every topic config name Kafka defines, sorted. */
export const TOPIC_CONFIG_NAMES: readonly string[] = DEFS.map((d) => d.name).sort();
/** Those FlowMQ acts on. */
export const HONOURED_TOPIC_CONFIGS: readonly string[] = DEFS.filter((d) => d.honoured).map((d) => d.name);

/**
 * Settings kept in StreamDef fields of their own (the log applies them, and other protocols and the admin API may
 * change them), not in `configs`. An explicit "no bound" (retention.ms -1, a negative retention.bytes) has no field
 * value: it stays in `configs`, so that DescribeConfigs reports it as set, as Kafka does.
 */
const TYPED = new Set(['retention.ms', 'retention.bytes', 'segment.bytes', 'segment.ms']);
const unbounded = (name: string, v: string): boolean => (name === 'retention.ms' && v === '-1') || (name === 'retention.bytes' && v.startsWith('-'));

const clampLong = (v: string): number => {
  const n = BigInt(v);
  return n > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(n);
};

/** The topic configs a stream sets, by name, as a client set them (after validation and normalization). */
export function topicConfigsOf(def: StreamDef): Map<string, string> {
  const out = new Map<string, string>();
  for (const [k, v] of Object.entries(def.configs ?? {})) if (BY_NAME.has(k)) out.set(k, v);
  // The fields win over an explicit "no bound" in configs: another protocol may have set a retention since.
  if (def.retentionMs !== null) out.set('retention.ms', String(def.retentionMs));
  if (def.retentionBytes != null) out.set('retention.bytes', String(def.retentionBytes));
  if (def.segmentBytes != null) out.set('segment.bytes', String(def.segmentBytes));
  if (def.segmentMs != null) out.set('segment.ms', String(def.segmentMs));
  return new Map([...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * Checks one config a client sets; returns its normalized value. Throws TopicConfigError for an unknown name or an
 * invalid value (Kafka: INVALID_CONFIG). A null value means "back to the default" (IncrementalAlterConfigs DELETE,
 * an AlterConfigs or CreateTopics entry without a value).
 */
export function checkTopicConfig(name: string, value: string | null): string | null {
  const d = BY_NAME.get(name);
  if (!d) throw new TopicConfigError(`unknown topic config "${name}"`);
  if (value === null) return null;
  const v = d.validate(name, value);
  if (name === 'retention.ms' && v === '0') {
    // Kafka deletes every closed segment at once; FlowMQ's streams take a positive retention or none.
    throw new TopicConfigError('retention.ms 0 is not supported: use -1 (forever) or a positive number of ms');
  }
  return v;
}

/** Applies checked configs (name → normalized value, null: unset) to a stream's settings. */
export function applyTopicConfigs(base: Map<string, string>, changes: Map<string, string | null>): Map<string, string> {
  const out = new Map(base);
  for (const [k, v] of changes) {
    if (v === null) out.delete(k);
    else out.set(k, v);
  }
  return out;
}

/** The stream settings that a full set of topic configs gives. */
/**
 * The stream's configs that are not Kafka topic configs (another protocol's options kept in the same map, such as
 * the JetStream stream options `nats.*`): an AlterConfigs, which replaces the topic's whole set, keeps them.
 */
export function otherConfigsOf(def: StreamDef): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(def.configs ?? {})) if (!BY_NAME.has(k)) out[k] = v;
  return out;
}

export function streamSettingsOf(configs: Map<string, string>): StreamSettings {
  const rm = configs.get('retention.ms');
  const rb = configs.get('retention.bytes');
  const sb = configs.get('segment.bytes');
  const sm = configs.get('segment.ms');
  const rest: Record<string, string> = {};
  for (const [k, v] of configs) if (!TYPED.has(k) || unbounded(k, v)) rest[k] = v;
  return {
    retentionMs: rm === undefined || rm === '-1' ? null : clampLong(rm),
    // Kafka: a negative retention.bytes is no bound.
    retentionBytes: rb === undefined || BigInt(rb) < 0n ? null : clampLong(rb),
    segmentBytes: sb === undefined ? null : Number(sb),
    segmentMs: sm === undefined ? null : clampLong(sm),
    configs: rest,
  };
}

/**
 * Where a topic config not set on the topic takes its value: the broker config it falls back to, as the broker has
 * it (a runtime setting, a flag, or the default), with the broker-level synonyms in Kafka's order of precedence.
 * Null: no broker-level value (the topic config's own default applies).
 */
export type BrokerFallback = (topicConfig: string) => { value: string | null; source: number; synonyms: DescribedConfig['synonyms'] } | null;

/** Describes one config of a topic (DescribeConfigs), as Kafka's ConfigHelper.createTopicConfigEntry does. */
function describe(
  d: TopicConfigDef,
  set: Map<string, string>,
  o: ResolvedKafkaOptions,
  synonyms: boolean,
  docs: boolean,
  broker: BrokerFallback | null,
): DescribedConfig {
  const own = set.get(d.name);
  const b = d.broker !== undefined && broker !== null ? broker(d.name) : null;
  const fallback = b !== null ? b.value : d.defaultValue(o);
  const value = own ?? fallback;
  const source = own !== undefined ? ConfigSource.DYNAMIC_TOPIC_CONFIG : (b?.source ?? ConfigSource.DEFAULT_CONFIG);
  const list: DescribedConfig['synonyms'] = [];
  if (synonyms) {
    if (own !== undefined) list.push({ name: d.name, value: own, source: ConfigSource.DYNAMIC_TOPIC_CONFIG });
    if (b !== null) list.push(...b.synonyms);
    else if (d.broker !== undefined) list.push({ name: d.broker, value: fallback, source: ConfigSource.DEFAULT_CONFIG });
  }
  return {
    name: d.name,
    value,
    readOnly: false,
    isDefault: own === undefined,
    configSource: source,
    isSensitive: false,
    synonyms: list,
    configType: d.type,
    documentation: docs ? d.doc : null,
  };
}

/**
 * The configs of a topic as DescribeConfigs reports them: every one Kafka defines (or those `keys` names; null or
 * empty: all, as Kafka's ConfigHelper), sorted by name.
 */
export function describeTopicConfigs(
  def: StreamDef,
  o: ResolvedKafkaOptions,
  keys: readonly string[] | null,
  synonyms: boolean,
  docs: boolean,
  broker: BrokerFallback | null = null,
): DescribedConfig[] {
  const set = topicConfigsOf(def);
  const wanted = keys === null || keys.length === 0 ? null : new Set(keys);
  return DEFS.filter((d) => wanted === null || wanted.has(d.name)).map((d) => describe(d, set, o, synonyms, docs, broker));
}

/** What the Produce handler applies: the parsed max.message.bytes and whether batches get the log's append time. */
export interface ProduceLimits {
  maxMessageBytes: number | null;
  logAppendTime: boolean;
  /** cleanup.policy includes compact: every record needs a key (Kafka's LogValidator, INVALID_RECORD). */
  compacted?: boolean;
}

const NO_LIMITS: ProduceLimits = { maxMessageBytes: null, logAppendTime: false };
/**
 * Per definition (a redefined stream is a new object) and broker defaults (a new object when they change), so
 * Produce parses nothing per request.
 */
const limitsCache = new WeakMap<StreamDef, { of: ProduceLimits; l: ProduceLimits }>();

/**
 * What Produce applies to a topic: its own max.message.bytes and message.timestamp.type, else the broker's
 * (message.max.bytes and log.message.timestamp.type set at run time, see broker-configs.ts).
 */
export function produceLimits(def: StreamDef, broker: ProduceLimits = NO_LIMITS): ProduceLimits {
  const c = def.configs;
  if (c === undefined) return broker;
  const cached = limitsCache.get(def);
  if (cached !== undefined && cached.of === broker) return cached.l;
  const max = c['max.message.bytes'];
  const ts = c['message.timestamp.type'];
  const l = {
    maxMessageBytes: max === undefined ? broker.maxMessageBytes : Number(max),
    logAppendTime: ts === undefined ? broker.logAppendTime : ts === 'LogAppendTime',
    compacted: (c['cleanup.policy'] ?? '').includes('compact'),
  };
  limitsCache.set(def, { of: broker, l });
  return l;
}
