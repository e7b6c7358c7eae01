/**
 * DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topics (topic-configs.ts), the broker (broker-configs.ts)
 * and its loggers (BROKER_LOGGER), with Kafka's errors and authorization:
 *
 * - TOPIC: `describe stream:` / `alter stream:` (Kafka's DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic), else
 *   TOPIC_AUTHORIZATION_FAILED; UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist.
 * - BROKER and BROKER_LOGGER: `describe cluster:*` / `alter cluster:*` (Kafka's DESCRIBE_CONFIGS / ALTER_CONFIGS on
 *   the cluster), else CLUSTER_AUTHORIZATION_FAILED. A BROKER resource names this broker's id, or "" for the
 *   cluster-wide defaults (described: only the configs set cluster-wide at run time, as Kafka lists them); another
 *   broker's id is INVALID_REQUEST ("unexpected broker id": clients send a broker's resource to that broker).
 *   BROKER_LOGGER takes only IncrementalAlterConfigs (AlterConfigs refuses it with INVALID_REQUEST, as Kafka).
 *
 * Errors are per resource (the protocol has no per-config error): an unknown topic config or an invalid value
 * refuses that resource with INVALID_CONFIG and a message naming the config; a broker config that is not alterable
 * at run time refuses it with INVALID_REQUEST; a config named twice in one resource, or a resource named twice in
 * one request, is INVALID_REQUEST. Other resources of the request are applied. validate_only checks everything and
 * changes nothing.
 */
import type { StreamDef, StreamSettings } from '../../../core/index.js';
import {
  AlterConfigOp,
  ConfigResourceType,
  ConfigSource,
  KafkaErrorCode,
  type AlterConfigsRequest,
  type AlterConfigsResponse,
  type DescribeConfigsRequest,
  type DescribeConfigsResponse,
  type DescribedConfig,
  type IncrementalAlterConfigsRequest,
  type IncrementalAlterConfigsResponse,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { allowed } from '../authz.js';
import { BrokerConfigError } from '../broker-configs.js';
import {
  TopicConfigError,
  applyTopicConfigs,
  checkTopicConfig,
  describeTopicConfigs,
  otherConfigsOf,
  streamSettingsOf,
  topicConfigsOf,
} from '../topic-configs.js';

const TOPIC_DENIED = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED;
const CLUSTER_DENIED = KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED;

/** A refusal of one resource or topic: the Kafka error code and a message for the client. */
export class ConfigProblem extends Error {
  constructor(
    readonly errorCode: number,
    message: string,
  ) {
    super(message);
  }
}

/** The error code and message of a refusal (or of an unexpected failure). */
export function problem(err: unknown): { errorCode: number; errorMessage: string | null } {
  if (err instanceof ConfigProblem || err instanceof BrokerConfigError) return { errorCode: err.errorCode, errorMessage: err.message };
  if (err instanceof TopicConfigError) return { errorCode: err.errorCode, errorMessage: err.message };
  return { errorCode: kafkaErrorCode(err), errorMessage: err instanceof Error ? err.message : null };
}

/**
 * What Kafka refuses in an alter request before looking at any config (ConfigAdminManager.preprocess): a config
 * named twice in one resource, and a null value where a value is needed (AlterConfigs: any; IncrementalAlterConfigs:
 * all but DELETE), both INVALID_REQUEST.
 */
function precheck(configs: ReadonlyArray<{ name: string; value: string | null; op?: number }>): void {
  const names = new Set<string>();
  for (const c of configs) {
    if (names.has(c.name)) throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `error due to duplicate config keys: "${c.name}" is given more than once`);
    names.add(c.name);
  }
  const nulls = configs.filter((c) => c.value === null && c.op !== AlterConfigOp.DELETE).map((c) => c.name);
  if (nulls.length > 0) throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `null value not supported for: ${nulls.join(', ')}`);
}

/**
 * Checks the configs of a CreateTopics topic or an AlterConfigs resource (every entry: unknown names and invalid
 * values refuse the topic or resource, as in Kafka) and returns them by name. A null value is refused at creation
 * (Kafka: "Null value not supported for topic configs"); in AlterConfigs it leaves the config at its default.
 */
export function checkedConfigs(configs: Array<{ name: string; value: string | null }>, nullAllowed: boolean): Map<string, string | null> {
  const out = new Map<string, string | null>();
  for (const c of configs) {
    if (c.value === null && !nullAllowed) throw new TopicConfigError(`null value for topic config "${c.name}"`);
    out.set(c.name, checkTopicConfig(c.name, c.value));
  }
  return out;
}

/** Stream settings from configs given whole (CreateTopics, AlterConfigs): what is not named is at its default. */
export function settingsOf(configs: Map<string, string | null>): StreamSettings {
  return streamSettingsOf(applyTopicConfigs(new Map(), configs));
}

/** The configs of a topic as CreateTopics v5+ returns them. */
export function topicConfigList(
  def: StreamDef,
  ctx: RequestContext,
): Array<{ name: string; value: string | null; readOnly: boolean; configSource: number; isSensitive: boolean }> {
  return describeTopicConfigs(def, ctx.adapter.options, null, false, false, ctx.adapter.brokerConfigs.topicFallback).map((d) => ({
    name: d.name,
    value: d.value,
    readOnly: d.readOnly,
    configSource: d.configSource,
    isSensitive: d.isSensitive,
  }));
}

/** The scope a BROKER resource names: "" (cluster-wide) or this broker's id; anything else is refused. */
function brokerScope(ctx: RequestContext, name: string, logger: boolean): 'default' | number {
  if (name === '') {
    if (logger) throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, 'a BROKER_LOGGER resource names a broker id');
    return 'default';
  }
  if (name !== String(ctx.adapter.brokerId)) {
    throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `unexpected broker id: this is broker ${ctx.adapter.brokerId}, the resource names "${name}"`);
  }
  return ctx.adapter.brokerId;
}

// ------------------------------------------------------------------------------------------------ DescribeConfigs

export function handleDescribeConfigs(ctx: RequestContext, req: DescribeConfigsRequest): DescribeConfigsResponse {
  const bc = ctx.adapter.brokerConfigs;
  const results = req.resources.map((r) => {
    const base = {
      errorCode: KafkaErrorCode.NONE as number,
      errorMessage: null as string | null,
      resourceType: r.resourceType,
      resourceName: r.resourceName,
      configs: [] as DescribedConfig[],
    };
    try {
      if (r.resourceType === ConfigResourceType.TOPIC) {
        if (!allowed(ctx, 'describe', 'stream', r.resourceName)) throw new ConfigProblem(TOPIC_DENIED, `not authorized to describe topic "${r.resourceName}"`);
        const entry = ctx.adapter.engine.getAnyStream(r.resourceName);
        if (!entry) throw new ConfigProblem(KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, `topic "${r.resourceName}" does not exist`);
        base.configs = describeTopicConfigs(
          entry.def,
          ctx.adapter.options,
          r.configurationKeys,
          req.includeSynonyms,
          req.includeDocumentation,
          bc.topicFallback,
        );
      } else if (r.resourceType === ConfigResourceType.BROKER || r.resourceType === ConfigResourceType.BROKER_LOGGER) {
        if (!allowed(ctx, 'describe', 'cluster', '*')) throw new ConfigProblem(CLUSTER_DENIED, "not authorized to describe the cluster's configs");
        const logger = r.resourceType === ConfigResourceType.BROKER_LOGGER;
        const scope = brokerScope(ctx, r.resourceName, logger);
        if (logger) base.configs = bc.describeLoggers(r.configurationKeys, req.includeDocumentation);
        else if (scope === 'default') {
          // The cluster-wide resource lists what was set cluster-wide at run time, as Kafka does.
          const set = Object.keys(ctx.adapter.settings.brokerConfigs('default'));
          const keys = r.configurationKeys === null || r.configurationKeys.length === 0 ? set : r.configurationKeys.filter((k) => set.includes(k));
          base.configs = keys.length === 0 ? [] : bc.describeBroker('default', keys, req.includeSynonyms, req.includeDocumentation);
        } else base.configs = bc.describeBroker(scope, r.configurationKeys, req.includeSynonyms, req.includeDocumentation);
      } else {
        throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `config resource type ${r.resourceType} is not supported`);
      }
      // v0 has no config source: isDefault says whether the value is Kafka's default.
      if (ctx.header.apiVersion === 0) for (const c of base.configs) c.isDefault = c.configSource === ConfigSource.DEFAULT_CONFIG;
    } catch (err) {
      Object.assign(base, problem(err), { configs: [] });
    }
    return base;
  });
  return { throttleTimeMs: 0, results };
}

// ------------------------------------------------------------------------------------------------ alter

type AlterResult = AlterConfigsResponse['responses'][number];
type Op = { name: string; op: number; value: string | null };

/**
 * Alters one resource. `topic` gets the topic's configs in force and returns the new full set; `broker` the configs
 * set at run time for the scope and returns the changes (name → value, null: remove). Either throws to refuse the
 * resource. Nothing is applied unless all of it is valid, and nothing at all with validate_only.
 */
async function alterResource(
  ctx: RequestContext,
  r: { resourceType: number; resourceName: string },
  validateOnly: boolean,
  duplicate: boolean,
  how: {
    configs: ReadonlyArray<{ name: string; value: string | null; op?: number }>;
    topic: (current: Map<string, string>) => Map<string, string>;
    broker: (current: Map<string, string>) => Map<string, string | null>;
    logger: (() => Map<string, string | null>) | null;
  },
): Promise<AlterResult> {
  const res: AlterResult = { errorCode: KafkaErrorCode.NONE, errorMessage: null, resourceType: r.resourceType, resourceName: r.resourceName };
  const by = ctx.conn.access?.principal.user ?? null;
  try {
    if (duplicate)
      throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `each resource must appear at most once: "${r.resourceName}" (type ${r.resourceType}) does not`);
    precheck(how.configs);
    if (r.resourceType === ConfigResourceType.BROKER || r.resourceType === ConfigResourceType.BROKER_LOGGER) {
      if (!allowed(ctx, 'alter', 'cluster', '*')) throw new ConfigProblem(CLUSTER_DENIED, "not authorized to alter the cluster's configs");
      const logger = r.resourceType === ConfigResourceType.BROKER_LOGGER;
      const scope = brokerScope(ctx, r.resourceName, logger);
      const bc = ctx.adapter.brokerConfigs;
      if (logger) {
        if (how.logger === null)
          throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, 'AlterConfigs does not support the resource type BROKER_LOGGER: use IncrementalAlterConfigs');
        const levels = how.logger();
        if (!validateOnly) bc.setLoggers(levels, by);
        return res;
      }
      const changes = how.broker(bc.current(scope));
      if (!validateOnly) await bc.write(scope, changes, by);
      return res;
    }
    if (r.resourceType !== ConfigResourceType.TOPIC)
      throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `config resource type ${r.resourceType} is not supported`);
    if (!allowed(ctx, 'alter', 'stream', r.resourceName)) throw new ConfigProblem(TOPIC_DENIED, `not authorized to alter topic "${r.resourceName}"`);
    const entry = ctx.adapter.engine.getAnyStream(r.resourceName);
    if (!entry) throw new ConfigProblem(KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, `topic "${r.resourceName}" does not exist`);
    const current = topicConfigsOf(entry.def);
    const next = how.topic(current);
    const changed = next.size !== current.size || [...next].some(([k, v]) => current.get(k) !== v);
    if (!validateOnly && changed) {
      const settings = streamSettingsOf(next);
      // Kafka's configs are replaced as a set; other protocols' options in the same map (JetStream's) stay.
      await ctx.adapter.engine.setSettings(r.resourceName, { ...settings, configs: { ...otherConfigsOf(entry.def), ...settings.configs } });
      ctx.conn.log.info({ topic: r.resourceName, configs: Object.fromEntries(next), by }, 'topic configs changed');
    }
  } catch (err) {
    Object.assign(res, problem(err));
  }
  return res;
}

/** Whether each resource of a request appears more than once (Kafka refuses those with INVALID_REQUEST). */
function duplicates(resources: ReadonlyArray<{ resourceType: number; resourceName: string }>): boolean[] {
  const counts = new Map<string, number>();
  const key = (r: { resourceType: number; resourceName: string }) => `${r.resourceType}\u0000${r.resourceName}`;
  for (const r of resources) counts.set(key(r), (counts.get(key(r)) ?? 0) + 1);
  return resources.map((r) => (counts.get(key(r)) ?? 0) > 1);
}

/** AlterConfigs replaces the resource's whole dynamic config: configs not mentioned go back to their defaults. */
export async function handleAlterConfigs(ctx: RequestContext, req: AlterConfigsRequest): Promise<AlterConfigsResponse> {
  const dup = duplicates(req.resources);
  const responses = [];
  for (let i = 0; i < req.resources.length; i++) {
    const r = req.resources[i];
    responses.push(
      await alterResource(ctx, r, req.validateOnly, dup[i], {
        configs: r.configs,
        topic: () => {
          const set = new Map<string, string>();
          for (const [k, v] of checkedConfigs(r.configs, true)) if (v !== null) set.set(k, v);
          return set;
        },
        broker: (current) => {
          const given = ctx.adapter.brokerConfigs.check(r.configs.filter((c) => c.value !== null));
          const changes = new Map<string, string | null>(given);
          for (const k of current.keys()) if (!given.has(k)) changes.set(k, null);
          return changes;
        },
        logger: null,
      }),
    );
  }
  return { throttleTimeMs: 0, responses };
}

/** List configs take APPEND and SUBTRACT (KIP-339); the others refuse them, as Kafka does. */
const LIST_CONFIGS = new Set(['cleanup.policy', 'follower.replication.throttled.replicas', 'leader.replication.throttled.replicas', 'log.cleanup.policy']);

/** SET, DELETE, APPEND, SUBTRACT over a config set (by name), checked by `check` (normalized value, or throws). */
function incremental(
  current: Map<string, string>,
  ops: readonly Op[],
  check: (name: string, value: string | null) => string | null,
  listDefault: (name: string) => string,
): Map<string, string> {
  const next = new Map(current);
  for (const c of ops) {
    if (c.op === AlterConfigOp.SET) {
      if (c.value === null) throw new TopicConfigError(`null value for config "${c.name}"`);
      next.set(c.name, check(c.name, c.value)!);
    } else if (c.op === AlterConfigOp.DELETE) {
      check(c.name, null);
      next.delete(c.name);
    } else if (c.op === AlterConfigOp.APPEND || c.op === AlterConfigOp.SUBTRACT) {
      check(c.name, null);
      if (!LIST_CONFIGS.has(c.name)) throw new TopicConfigError(`cannot append to or subtract from "${c.name}": it is not a list`);
      const items = (next.get(c.name) ?? listDefault(c.name)).split(',').filter((x) => x !== '');
      const given = (c.value ?? '')
        .split(',')
        .map((x) => x.trim())
        .filter((x) => x !== '');
      const list = c.op === AlterConfigOp.APPEND ? [...items, ...given.filter((x) => !items.includes(x))] : items.filter((x) => !given.includes(x));
      next.set(c.name, check(c.name, list.join(','))!);
    } else {
      throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `unknown config operation ${c.op}`);
    }
  }
  return next;
}

/** IncrementalAlterConfigs (KIP-339): SET, DELETE, and APPEND/SUBTRACT for list configs, all or nothing per resource. */
export async function handleIncrementalAlterConfigs(ctx: RequestContext, req: IncrementalAlterConfigsRequest): Promise<IncrementalAlterConfigsResponse> {
  const dup = duplicates(req.resources);
  const bc = ctx.adapter.brokerConfigs;
  const responses = [];
  for (let i = 0; i < req.resources.length; i++) {
    const r = req.resources[i];
    const ops: Op[] = r.configs.map((c) => ({ name: c.name, op: c.configOperation, value: c.value }));
    responses.push(
      await alterResource(ctx, r, req.validateOnly, dup[i], {
        configs: ops,
        topic: (current) => incremental(current, ops, checkTopicConfig, (n) => (n === 'cleanup.policy' ? 'delete' : '')),
        broker: (current) => {
          const check = (name: string, value: string | null): string | null => bc.check([{ name, value }]).get(name) ?? null;
          const listDefault = (n: string): string => bc.resolve(n).value ?? '';
          const next = incremental(current, ops, check, listDefault);
          const changes = new Map<string, string | null>();
          for (const [k, v] of next) if (current.get(k) !== v) changes.set(k, v);
          for (const k of current.keys()) if (!next.has(k)) changes.set(k, null);
          return changes;
        },
        logger: () =>
          bc.checkLoggers(
            ops.map((o) => ({ name: o.name, op: o.op === AlterConfigOp.SET ? 'set' : o.op === AlterConfigOp.DELETE ? 'delete' : 'other', value: o.value })),
          ),
      }),
    );
  }
  return { throttleTimeMs: 0, responses };
}
