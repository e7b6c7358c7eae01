/**
 * Kafka's broker configs on FlowMQ: what DescribeConfigs reports for a BROKER resource, which of them may be changed
 * at run time (IncrementalAlterConfigs / AlterConfigs on the BROKER resource, and the admin API), and what those
 * changes do.
 *
 * Every config Kafka defines is reported (kafka-broker-config-defs.ts), each with the value in force and its source,
 * in Kafka's order of precedence: set at run time for this broker (DYNAMIC_BROKER_CONFIG), set at run time for every
 * broker (DYNAMIC_DEFAULT_BROKER_CONFIG, Kafka's resource name ""), FlowMQ's own flags (STATIC_BROKER_CONFIG: the
 * broker id, --kafka-default-partitions, --segment-bytes...), else Kafka's default (DEFAULT_CONFIG).
 *
 * Alterable at run time (the others are read-only and refused with INVALID_REQUEST, as Kafka refuses static ones):
 * - honoured: log.retention.ms / .minutes / .hours and log.retention.bytes (the retention of every stream that sets
 *   none of its own, applied by the log), log.segment.bytes and log.roll.ms / .hours (segment size and age, same),
 *   message.max.bytes (largest batch Produce accepts on topics without max.message.bytes) and
 *   log.message.timestamp.type (LogAppendTime stamps batches of topics without message.timestamp.type);
 * - stored and reported, no effect: log.cleanup.policy and the log.cleaner.* settings (the cleaner reads a topic's own
 *   cleanup.policy and compaction settings only: a broker-wide compact would compact every stream of every protocol),
 *   and, as their topic-level synonyms (topic-configs.ts), compression.type and its levels, min.insync.replicas, unclean.leader.election.enable, the flush, index,
 *   preallocate, jitter, delete-delay, timestamp-bound and cleaner settings.
 *
 * Runtime values are kept in the metastore (RuntimeSettings, ControlStore kind `config`): they survive a restart,
 * and in a cluster every broker applies them (the cluster-wide ones everywhere, a broker's own on that broker).
 *
 * Log levels are Kafka's BROKER_LOGGER resource: loggers "root" (the broker's logger: every component follows it)
 * and "kafka" (this adapter's), levels as log4j names them. They are this broker's and not kept, as in Kafka.
 */
import type { Logger } from 'pino';
import { FlowError, type Engine, type StreamDefaults } from '../../core/index.js';
import type { BrokerConfigAdmin, ConfigScope, RuntimeSettings } from '../../control/index.js';
import { ConfigSource, ConfigType, KafkaErrorCode, type DescribedConfig } from './codec/index.js';
import { KAFKA_BROKER_CONFIGS } from './kafka-broker-config-defs.js';
import type { ResolvedKafkaOptions } from './options.js';
import {
  TopicConfigError,
  checkTopicConfig,
  int,
  long,
  topicConfigForBroker,
  type BrokerFallback,
  type ProduceLimits,
  type Validate,
} from './topic-configs.js';

/** A broker config error: its Kafka error code (INVALID_REQUEST for a static one, INVALID_CONFIG for a bad value). */
export class BrokerConfigError extends Error {
  constructor(
    readonly errorCode: number,
    message: string,
  ) {
    super(message);
  }
}

interface DynamicDef {
  validate: Validate;
  /** FlowMQ acts on it (else: stored and reported). */
  honoured: boolean;
  doc: string;
}

const HOUR = 3_600_000;
const STORED = 'Alterable at run time; stored and reported, no effect in FlowMQ (see its topic-level synonym).';

/** Broker-level defaults of topic configs FlowMQ honours per topic only (see the header). */
const TOPIC_ONLY = new Set([
  'log.cleanup.policy',
  'log.cleaner.min.cleanable.ratio',
  'log.cleaner.min.compaction.lag.ms',
  'log.cleaner.max.compaction.lag.ms',
  'log.cleaner.delete.retention.ms',
]);

/** Broker configs FlowMQ changes at run time, by name; validators are those of their topic-level synonyms. */
const DYNAMIC = new Map<string, DynamicDef>();
for (const [name] of KAFKA_BROKER_CONFIGS) {
  const t = topicConfigForBroker(name);
  if (t === undefined) continue;
  DYNAMIC.set(name, {
    validate: (n, v) => {
      try {
        return checkTopicConfig(t.name, v)!;
      } catch (err) {
        if (err instanceof TopicConfigError) throw new TopicConfigError(err.message.replaceAll(t.name, n));
        throw err;
      }
    },
    honoured: t.honoured && !TOPIC_ONLY.has(name),
    doc: t.honoured && !TOPIC_ONLY.has(name) ? `Default of the topic config ${t.name} for every topic that does not set it; alterable at run time.` : STORED,
  });
}
DYNAMIC.set('log.retention.minutes', {
  validate: int(-1n),
  honoured: true,
  doc: 'Retention of streams without their own, in minutes (log.retention.ms wins when set); alterable at run time.',
});
DYNAMIC.set('log.retention.hours', {
  validate: int(-1n),
  honoured: true,
  doc: "Retention of streams without their own, in hours (log.retention.ms and .minutes win when set); -1: forever, FlowMQ's default.",
});
DYNAMIC.set('log.roll.hours', {
  validate: int(1n),
  honoured: true,
  doc: 'Age at which segments are sealed, in hours (log.roll.ms wins when set); alterable at run time.',
});
DYNAMIC.set('log.roll.jitter.hours', { validate: int(0n), honoured: false, doc: STORED });
DYNAMIC.set('log.retention.bytes', {
  validate: long(),
  honoured: true,
  doc: 'Size bound per partition of streams without their own (retention.bytes); -1: none.',
});

/** Kafka's names and types, by name. */
const KAFKA = new Map(KAFKA_BROKER_CONFIGS.map(([name, type, def]) => [name, { type, def }]));

/** Broker-level synonyms of a config, in Kafka's order of precedence (log.retention.ms, .minutes, .hours). */
const SYNONYMS: Readonly<Record<string, readonly string[]>> = {
  'log.retention.ms': ['log.retention.ms', 'log.retention.minutes', 'log.retention.hours'],
  'log.retention.minutes': ['log.retention.minutes', 'log.retention.hours'],
  'log.roll.ms': ['log.roll.ms', 'log.roll.hours'],
  'log.roll.jitter.ms': ['log.roll.jitter.ms', 'log.roll.jitter.hours'],
  'log.flush.interval.ms': ['log.flush.interval.ms', 'log.flush.scheduler.interval.ms'],
  'log.dirs': ['log.dirs', 'log.dir'],
  'node.id': ['node.id', 'broker.id'],
};

/** What a broker config holds here, and from where. */
interface Resolved {
  value: string | null;
  source: number;
}

/** pino levels as log4j names them (BROKER_LOGGER), and back. */
const TO_LOG4J: Readonly<Record<string, string>> = {
  trace: 'TRACE',
  debug: 'DEBUG',
  info: 'INFO',
  warn: 'WARN',
  error: 'ERROR',
  fatal: 'FATAL',
  silent: 'OFF',
};
const FROM_LOG4J: Readonly<Record<string, string>> = {
  ALL: 'trace',
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
  FATAL: 'fatal',
  OFF: 'silent',
};

export interface BrokerConfigsContext {
  engine: Engine;
  brokerId: number;
  options: ResolvedKafkaOptions;
  settings: RuntimeSettings;
  /** The broker's logger ("root") and this adapter's ("kafka"). */
  rootLogger: Logger;
  logger: Logger;
}

export class KafkaBrokerConfigs implements BrokerConfigAdmin {
  private readonly statics: Map<string, string | null>;
  private limits: ProduceLimits = { maxMessageBytes: null, logAppendTime: false };
  private readonly unsubscribe: () => void;

  constructor(private readonly ctx: BrokerConfigsContext) {
    this.statics = staticValues(ctx);
    this.apply();
    this.unsubscribe = ctx.settings.onChange(() => this.apply());
  }

  close(): void {
    this.unsubscribe();
  }

  /** Broker defaults Produce applies to topics without their own (a new object when they change). */
  get produceDefaults(): ProduceLimits {
    return this.limits;
  }

  /** Runtime values changed (here or on another broker): the engine's stream defaults and Produce's follow. */
  private apply(): void {
    const num = (name: string): number | null => {
      const r = this.dynamic(name);
      return r === undefined ? null : Number(r);
    };
    const firstSet = (...names: Array<[string, number]>): number | null => {
      for (const [n, unit] of names) {
        const v = this.resolve(n).value;
        if (v !== null) return Number(v) * unit;
      }
      return null;
    };
    const retention = firstSet(['log.retention.ms', 1], ['log.retention.minutes', 60_000], ['log.retention.hours', HOUR]);
    const bytes = num('log.retention.bytes');
    const roll =
      this.dynamic('log.roll.ms') !== undefined || this.dynamic('log.roll.hours') !== undefined ? firstSet(['log.roll.ms', 1], ['log.roll.hours', HOUR]) : null;
    const d: StreamDefaults = {
      retentionMs: retention === null || retention < 0 ? null : Math.max(1, Math.min(retention, Number.MAX_SAFE_INTEGER)),
      retentionBytes: bytes === null || bytes < 0 ? null : Math.min(bytes, Number.MAX_SAFE_INTEGER),
      segmentBytes: num('log.segment.bytes'),
      segmentMs: roll,
    };
    const cur = this.ctx.engine.streamDefaults;
    if (cur.retentionMs !== d.retentionMs || cur.retentionBytes !== d.retentionBytes || cur.segmentBytes !== d.segmentBytes || cur.segmentMs !== d.segmentMs) {
      this.ctx.engine.setStreamDefaults(d);
      this.ctx.logger.info({ defaults: d }, 'stream defaults changed (broker configs)');
    }
    const max = num('message.max.bytes');
    const lat = this.resolve('log.message.timestamp.type').value === 'LogAppendTime';
    if (max !== this.limits.maxMessageBytes || lat !== this.limits.logAppendTime) this.limits = { maxMessageBytes: max, logAppendTime: lat };
  }

  /** A value set at run time for this broker, else for every broker; undefined when none. */
  private dynamic(name: string): string | undefined {
    return this.ctx.settings.brokerConfigs(this.ctx.brokerId)[name] ?? this.ctx.settings.brokerConfigs('default')[name];
  }

  /** The value of a broker config here and its source, by Kafka's precedence. */
  resolve(name: string, scope: ConfigScope = this.ctx.brokerId): Resolved {
    if (scope !== 'default') {
      const own = this.ctx.settings.brokerConfigs(scope)[name];
      if (own !== undefined) return { value: own, source: ConfigSource.DYNAMIC_BROKER_CONFIG };
    }
    const all = this.ctx.settings.brokerConfigs('default')[name];
    if (all !== undefined) return { value: all, source: ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG };
    if (this.statics.has(name)) return { value: this.statics.get(name)!, source: ConfigSource.STATIC_BROKER_CONFIG };
    return { value: KAFKA.get(name)?.def ?? null, source: ConfigSource.DEFAULT_CONFIG };
  }

  /** Every source a config has here, in Kafka's order (the synonyms of DescribeConfigs v1+). */
  private synonymsOf(name: string, scope: ConfigScope): DescribedConfig['synonyms'] {
    const out: DescribedConfig['synonyms'] = [];
    for (const n of SYNONYMS[name] ?? [name]) {
      if (scope !== 'default') {
        const own = this.ctx.settings.brokerConfigs(scope)[n];
        if (own !== undefined) out.push({ name: n, value: own, source: ConfigSource.DYNAMIC_BROKER_CONFIG });
      }
      const all = this.ctx.settings.brokerConfigs('default')[n];
      if (all !== undefined) out.push({ name: n, value: all, source: ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG });
      if (this.statics.has(n)) out.push({ name: n, value: this.statics.get(n)!, source: ConfigSource.STATIC_BROKER_CONFIG });
      const k = KAFKA.get(n);
      if (k !== undefined && k.def !== null) out.push({ name: n, value: k.def, source: ConfigSource.DEFAULT_CONFIG });
    }
    return out;
  }

  /**
   * Where a topic config falls back to (topic DescribeConfigs): the broker config it is a synonym of, as resolved
   * here, and for retention.ms and segment.ms the longer synonym chains (the value in force is the first set).
   */
  readonly topicFallback: BrokerFallback = (topicConfig) => {
    const chain: Readonly<Record<string, Array<[string, number]>>> = {
      'retention.ms': [
        ['log.retention.ms', 1],
        ['log.retention.minutes', 60_000],
        ['log.retention.hours', HOUR],
      ],
      'segment.ms': [
        ['log.roll.ms', 1],
        ['log.roll.hours', HOUR],
      ],
    };
    const names = chain[topicConfig];
    if (names !== undefined) {
      const synonyms: DescribedConfig['synonyms'] = [];
      for (const [n] of names) synonyms.push(...this.synonymsOf(n, this.ctx.brokerId).filter((s) => s.name === n));
      for (const [n, unit] of names) {
        const r = this.resolve(n);
        if (r.value !== null) {
          const v = BigInt(r.value) * BigInt(unit);
          return { value: (v < 0n ? -1n : v).toString(), source: r.source, synonyms };
        }
      }
      return null;
    }
    for (const [brokerName] of KAFKA_BROKER_CONFIGS) {
      const t = topicConfigForBroker(brokerName);
      if (t?.name === topicConfig) {
        const r = this.resolve(brokerName);
        // No broker-level value (Kafka's default is null: log.flush.interval.ms): the topic config's own default.
        if (r.value === null) return null;
        return { value: r.value, source: r.source, synonyms: this.synonymsOf(brokerName, this.ctx.brokerId) };
      }
    }
    return null;
  };

  /** DescribeConfigs of a BROKER resource: every config (or those `keys` names), sorted by name. */
  describeBroker(scope: ConfigScope, keys: readonly string[] | null, synonyms: boolean, docs: boolean): DescribedConfig[] {
    const wanted = keys === null || keys.length === 0 ? null : new Set(keys);
    const out: DescribedConfig[] = [];
    for (const [name, type] of KAFKA_BROKER_CONFIGS) {
      if (wanted !== null && !wanted.has(name)) continue;
      const r = this.resolve(name, scope);
      const sensitive = type === ConfigType.PASSWORD;
      const dyn = DYNAMIC.get(name);
      out.push({
        name,
        value: sensitive ? null : r.value,
        readOnly: dyn === undefined,
        isDefault: r.source === ConfigSource.DEFAULT_CONFIG,
        configSource: r.source,
        isSensitive: sensitive,
        synonyms: synonyms ? this.synonymsOf(name, scope).map((s) => (sensitive ? { ...s, value: null } : s)) : [],
        configType: type,
        documentation: docs ? docOf(dyn, this.statics.has(name)) : null,
      });
    }
    return out;
  }

  /**
   * Checks changes of broker configs (name → value, null: back to the default): INVALID_REQUEST for a config that is
   * not alterable at run time (or unknown), INVALID_CONFIG for an invalid value. Returns them normalized.
   */
  check(changes: ReadonlyArray<{ name: string; value: string | null }>): Map<string, string | null> {
    const fixed = changes.filter((c) => !DYNAMIC.has(c.name)).map((c) => c.name);
    if (fixed.length > 0) {
      const unknown = fixed.filter((n) => !KAFKA.has(n));
      throw new BrokerConfigError(
        KafkaErrorCode.INVALID_REQUEST,
        unknown.length === fixed.length
          ? `unknown broker config${unknown.length > 1 ? 's' : ''}: ${unknown.join(', ')}`
          : `cannot update these configs dynamically: ${fixed.join(', ')} (set them in flowmq.yaml or with flags)`,
      );
    }
    const out = new Map<string, string | null>();
    for (const c of changes) {
      if (c.value === null) {
        out.set(c.name, null);
        continue;
      }
      try {
        out.set(c.name, DYNAMIC.get(c.name)!.validate(c.name, c.value));
      } catch (err) {
        if (err instanceof TopicConfigError) throw new BrokerConfigError(KafkaErrorCode.INVALID_CONFIG, err.message);
        throw err;
      }
    }
    return out;
  }

  /** The configs set at run time for a scope (IncrementalAlterConfigs starts from them). */
  current(scope: ConfigScope): Map<string, string> {
    return new Map(Object.entries(this.ctx.settings.brokerConfigs(scope)));
  }

  /** Writes checked changes (null: remove) to the metastore; every broker applies them. */
  async write(scope: ConfigScope, changes: Map<string, string | null>, by: string | null): Promise<void> {
    if (changes.size === 0) return;
    await this.ctx.settings.alterBrokerConfigs(scope, Object.fromEntries(changes));
    this.ctx.logger.info({ scope, configs: Object.fromEntries(changes), by }, 'broker configs changed');
  }

  // ------------------------------------------------------------------------------------ BrokerConfigAdmin

  describe(scope: ConfigScope): ReturnType<BrokerConfigAdmin['describe']> {
    const names: Readonly<Record<number, string>> = {
      [ConfigSource.DYNAMIC_BROKER_CONFIG]: 'dynamic-broker',
      [ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]: 'dynamic-default',
      [ConfigSource.STATIC_BROKER_CONFIG]: 'static',
      [ConfigSource.DEFAULT_CONFIG]: 'default',
    };
    return this.describeBroker(scope, null, false, true).map((c) => ({
      name: c.name,
      value: c.value,
      source: names[c.configSource] ?? 'unknown',
      readOnly: c.readOnly,
      sensitive: c.isSensitive,
      documentation: c.documentation ?? '',
    }));
  }

  async alter(scope: ConfigScope, changes: Readonly<Record<string, string | null>>, by: string | null): Promise<void> {
    let checked: Map<string, string | null>;
    try {
      checked = this.check(Object.entries(changes).map(([name, value]) => ({ name, value })));
    } catch (err) {
      if (err instanceof BrokerConfigError) throw new FlowError('INVALID_ARGUMENT', err.message);
      throw err;
    }
    await this.write(scope, checked, by);
  }

  // ------------------------------------------------------------------------------------ BROKER_LOGGER

  private loggers(): Map<string, Logger> {
    return new Map([
      ['root', this.ctx.rootLogger],
      ['kafka', this.ctx.logger],
    ]);
  }

  /** DescribeConfigs of BROKER_LOGGER: each logger and its level. */
  describeLoggers(keys: readonly string[] | null, docs: boolean): DescribedConfig[] {
    const wanted = keys === null || keys.length === 0 ? null : new Set(keys);
    return [...this.loggers()]
      .filter(([name]) => wanted === null || wanted.has(name))
      .map(([name, l]) => ({
        name,
        value: TO_LOG4J[l.level] ?? l.level.toUpperCase(),
        readOnly: false,
        isDefault: false,
        configSource: ConfigSource.DYNAMIC_BROKER_CONFIG,
        isSensitive: false,
        synonyms: [],
        configType: ConfigType.STRING,
        documentation: docs
          ? name === 'root'
            ? "The broker's log level (every component follows it unless set on its own)."
            : "The Kafka adapter's log level."
          : null,
      }));
  }

  /**
   * Checks a change of logger levels (SET or DELETE), as Kafka does: INVALID_CONFIG for an unknown logger or level,
   * INVALID_REQUEST for APPEND/SUBTRACT or for removing the root logger's level. Returns logger → pino level (null:
   * follow the root again).
   */
  checkLoggers(changes: ReadonlyArray<{ name: string; op: 'set' | 'delete' | 'other'; value: string | null }>): Map<string, string | null> {
    const known = this.loggers();
    const out = new Map<string, string | null>();
    for (const c of changes) {
      if (!known.has(c.name))
        throw new BrokerConfigError(KafkaErrorCode.INVALID_CONFIG, `logger ${c.name} does not exist (loggers: ${[...known.keys()].join(', ')})`);
      if (c.op === 'other') throw new BrokerConfigError(KafkaErrorCode.INVALID_REQUEST, `only SET and DELETE change the level of logger ${c.name}`);
      if (c.op === 'delete') {
        if (c.name === 'root') throw new BrokerConfigError(KafkaErrorCode.INVALID_REQUEST, 'removing the log level of the root logger is not allowed');
        out.set(c.name, null);
        continue;
      }
      const level = FROM_LOG4J[(c.value ?? '').toUpperCase()];
      if (level === undefined)
        throw new BrokerConfigError(
          KafkaErrorCode.INVALID_CONFIG,
          `cannot set logger ${c.name} to level "${c.value}": use one of ${Object.keys(FROM_LOG4J).join(', ')}`,
        );
      out.set(c.name, level);
    }
    return out;
  }

  setLoggers(levels: Map<string, string | null>, by: string | null): void {
    const known = this.loggers();
    for (const [name, level] of levels) {
      const l = known.get(name)!;
      const from = l.level;
      // "kafka" back to the root's level: pino children follow their parent until set, so set it to the root's.
      l.level = level ?? this.ctx.rootLogger.level;
      this.ctx.rootLogger.info({ logger: name, from, to: l.level, by }, 'log level changed (Kafka BROKER_LOGGER)');
    }
  }
}

/** A broker config's documentation (FlowMQ's own words: what it means here). */
function docOf(dyn: DynamicDef | undefined, isStatic: boolean): string {
  if (dyn !== undefined) return dyn.doc;
  if (isStatic) return "FlowMQ's own setting (a flag or flowmq.yaml); read-only at run time.";
  return "Kafka broker config without a FlowMQ equivalent: reported at Kafka's default, read-only.";
}

/** FlowMQ's own values of Kafka broker configs (its flags and fixed choices): source STATIC_BROKER_CONFIG. */
function staticValues(ctx: BrokerConfigsContext): Map<string, string | null> {
  const o = ctx.options;
  const id = String(ctx.brokerId);
  const mechanisms = o.sasl?.mechanisms.join(',') ?? '';
  return new Map<string, string | null>([
    ['broker.id', id],
    ['node.id', id],
    ['process.roles', 'broker,controller'],
    ['auto.create.topics.enable', String(o.autoCreateTopics)],
    ['num.partitions', String(o.defaultPartitions)],
    ['delete.topic.enable', 'true'],
    // One replica per partition: durability comes from the write-ahead log.
    ['default.replication.factor', '1'],
    ['offsets.topic.replication.factor', '1'],
    ['transaction.state.log.replication.factor', '1'],
    ['transaction.state.log.min.isr', '1'],
    ['min.insync.replicas', '1'],
    ['log.dirs', o.logDir],
    ['log.dir', o.logDir],
    // FlowMQ keeps stream data forever unless a retention is set (Kafka: 168 hours).
    ['log.retention.hours', '-1'],
    ['log.segment.bytes', String(o.logSegmentBytes)],
    ['log.roll.ms', String(o.logSegmentMs)],
    ['message.max.bytes', String(o.maxRequestBytes)],
    ['socket.request.max.bytes', String(o.maxRequestBytes)],
    ['sasl.server.max.receive.size', String(o.saslMaxReceiveBytes)],
    ['connections.max.idle.ms', String(o.connectionsMaxIdleMs)],
    ['group.min.session.timeout.ms', String(o.groupMinSessionTimeoutMs)],
    ['group.max.session.timeout.ms', String(o.groupMaxSessionTimeoutMs)],
    ['group.initial.rebalance.delay.ms', String(o.groupInitialRebalanceDelayMs)],
    ['transactional.id.expiration.ms', String(o.transactionalIdExpirationMs)],
    ['group.consumer.session.timeout.ms', String(o.consumerGroupSessionTimeoutMs)],
    ['group.consumer.heartbeat.interval.ms', String(o.consumerGroupHeartbeatIntervalMs)],
    ['sasl.enabled.mechanisms', mechanisms],
    ['unclean.leader.election.enable', 'false'],
    ['log.cleanup.policy', 'delete'],
  ]);
}
