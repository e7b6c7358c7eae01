/**
 * Runtime settings: what operators change while the broker runs and every broker must agree on, kept in the
 * metastore (ControlStore kinds `quota` and `config`) so that they survive a restart and, in a cluster, apply on
 * every broker.
 *
 * - Client quotas, by quota entity as Kafka names them (KIP-546): `{user: "alice"}`, `{user: null}` (the default
 *   user: every user without a quota of their own, the anonymous principal included). Values are Kafka's quota
 *   keys (producer_byte_rate, consumer_byte_rate); the QuotaManager enforces them per user, beside the namespace's
 *   quotas. Which entities and keys are accepted is the caller's business (the Kafka adapter refuses what FlowMQ
 *   does not enforce); this store keeps what it is given.
 * - Broker configs set at run time (Kafka's dynamic broker configs, by their Kafka names): the cluster-wide
 *   defaults (Kafka's resource name "") and per-broker values. Which names exist, which are dynamic and how they
 *   are validated is the caller's business too (the Kafka adapter's broker-configs.ts).
 *
 * Like the Directory, this holds a copy in memory: reads are synchronous Map lookups (a quota is looked up on every
 * charge). Changes are written to the store first, then the copy is reloaded; changes made by another broker are
 * picked up when the Directory reloads (every control change bumps the store's version, and the Directory, polled
 * and told at once in a cluster, calls its change listeners), and announced to the other brokers after a local one.
 */
import type { Logger } from 'pino';
import { FlowError } from '../core/index.js';
import type { Directory } from './directory.js';
import { MemoryControlStore, type ControlStore } from '../storage/metastore/control-store.js';

/** A client quota entity: entity type ("user", "client-id", "ip") → name (null: the default entity of that type). */
export type QuotaEntity = Readonly<Record<string, string | null>>;

export interface QuotaEntry {
  readonly entity: QuotaEntity;
  /** Quota key → value (Kafka's keys: producer_byte_rate, consumer_byte_rate...). */
  readonly values: Readonly<Record<string, number>>;
}

/** Kafka's quota keys FlowMQ enforces per user. */
export interface UserQuota {
  /** Bytes per second a user may publish (Kafka's producer_byte_rate). */
  readonly producerByteRate?: number;
  /** Bytes per second a user may be sent (Kafka's consumer_byte_rate). */
  readonly consumerByteRate?: number;
}

/** Scope of broker configs: the cluster-wide defaults, or one broker's own values. */
export type ConfigScope = 'default' | number;

/** The document name of a quota entity: its types in order, `type` for a default, `type=name` for a name. */
export function quotaEntityKey(entity: QuotaEntity): string {
  const types = Object.keys(entity).sort();
  if (types.length === 0) throw new FlowError('INVALID_ARGUMENT', 'a quota entity names at least one entity type');
  return types.map((t) => (entity[t] === null ? t : `${t}=${entity[t]}`)).join('\u0001');
}

function scopeKey(scope: ConfigScope): string {
  return scope === 'default' ? 'broker' : `broker=${scope}`;
}

/** A change of one entity's quotas: key → new value, or null to remove it. */
export interface QuotaChange {
  readonly entity: QuotaEntity;
  readonly set: Readonly<Record<string, number | null>>;
}

/**
 * What the admin API offers about broker configs (implemented by the protocol that defines them: the Kafka
 * adapter, whose names they are): every config with its value and source, and changes of the dynamic ones.
 */
export interface BrokerConfigAdmin {
  describe(scope: ConfigScope): Array<{ name: string; value: string | null; source: string; readOnly: boolean; sensitive: boolean; documentation: string }>;
  /** Sets (string) or removes (null) configs of a scope; INVALID_ARGUMENT for an unknown, static or invalid one. */
  alter(scope: ConfigScope, changes: Readonly<Record<string, string | null>>, by: string | null): Promise<void>;
}

export class RuntimeSettings {
  private quotas = new Map<string, QuotaEntry>();
  private configs = new Map<string, Readonly<Record<string, string>>>();
  private readonly listeners = new Set<() => void>();
  private loading: Promise<void> = Promise.resolve();
  /** Bumped on every reload (a change here or on another broker). */
  version = 0;

  constructor(
    private readonly store: ControlStore = new MemoryControlStore(),
    private readonly directory: Directory | null = null,
    private readonly logger?: Logger,
  ) {}

  /** Loads the settings and follows the Directory's reloads (changes made through other brokers). */
  static async open(store: ControlStore, directory: Directory | null, logger?: Logger): Promise<RuntimeSettings> {
    const s = new RuntimeSettings(store, directory, logger);
    await s.reload();
    directory?.onChange(() => {
      s.reload().catch((err: unknown) => logger?.warn({ err }, 'runtime settings: reload failed; keeping the last ones'));
    });
    return s;
  }

  /** Called after every reload that changed nothing or something (cheap listeners only). */
  onChange(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  // -------------------------------------------------------------------------------------------- quotas

  listQuotas(): QuotaEntry[] {
    return [...this.quotas.values()];
  }

  /** The quota of one entity exactly as set (no default applied), or undefined. */
  quota(entity: QuotaEntity): QuotaEntry | undefined {
    return this.quotas.get(quotaEntityKey(entity));
  }

  /** The quotas in force for a user (null: anonymous): its own keys, else the default user's, per key. */
  userQuota(user: string | null): UserQuota {
    const own = user === null ? undefined : this.quotas.get(`user=${user}`)?.values;
    const def = this.quotas.get('user')?.values;
    if (own === undefined && def === undefined) return NO_QUOTA;
    const pick = (k: string): number | undefined => own?.[k] ?? def?.[k];
    const out: { producerByteRate?: number; consumerByteRate?: number } = {};
    const p = pick('producer_byte_rate');
    const c = pick('consumer_byte_rate');
    if (p !== undefined) out.producerByteRate = p;
    if (c !== undefined) out.consumerByteRate = c;
    return out;
  }

  /** Applies quota changes (each entity's document replaced at once); entities left with no key are deleted. */
  async alterQuotas(changes: readonly QuotaChange[]): Promise<void> {
    for (const c of changes) {
      const key = quotaEntityKey(c.entity);
      const values: Record<string, number> = { ...(this.quotas.get(key)?.values ?? {}) };
      for (const [k, v] of Object.entries(c.set)) {
        if (v === null) delete values[k];
        else values[k] = v;
      }
      if (Object.keys(values).length === 0) await this.store.deleteControl('quota', key);
      else await this.store.putControl('quota', key, { entity: { ...c.entity }, values });
    }
    await this.changed();
  }

  // -------------------------------------------------------------------------------------------- broker configs

  /** Broker configs set at run time for a scope (name → value). */
  brokerConfigs(scope: ConfigScope): Readonly<Record<string, string>> {
    return this.configs.get(scopeKey(scope)) ?? NO_CONFIGS;
  }

  /** Sets (string) or removes (null) broker configs of a scope. */
  async alterBrokerConfigs(scope: ConfigScope, changes: Readonly<Record<string, string | null>>): Promise<void> {
    const key = scopeKey(scope);
    const values: Record<string, string> = { ...(this.configs.get(key) ?? {}) };
    for (const [k, v] of Object.entries(changes)) {
      if (v === null) delete values[k];
      else values[k] = v;
    }
    if (Object.keys(values).length === 0) await this.store.deleteControl('config', key);
    else await this.store.putControl('config', key, { values });
    await this.changed();
  }

  // -------------------------------------------------------------------------------------------- sync

  /** A local write: reload here, then let the Directory (and through it, the other brokers) know. */
  private async changed(): Promise<void> {
    await this.reload();
    if (this.directory !== null) {
      await this.directory.refresh().catch((err: unknown) => this.logger?.warn({ err }, 'directory refresh after a settings change failed'));
      this.directory.announce?.();
    }
  }

  /** Re-reads both kinds (one reload at a time, in order, as the Directory does). */
  reload(): Promise<void> {
    const next = this.loading.then(() => this.load());
    this.loading = next.catch(() => undefined);
    return next;
  }

  private async load(): Promise<void> {
    const [quotas, configs] = await Promise.all([this.store.listControl('quota'), this.store.listControl('config')]);
    const q = new Map<string, QuotaEntry>();
    for (const r of quotas) {
      const entity = r.data.entity as Record<string, string | null> | undefined;
      const values = r.data.values as Record<string, number> | undefined;
      if (typeof entity !== 'object' || entity === null || typeof values !== 'object' || values === null) {
        this.logger?.warn({ quota: r.name }, 'control store: quota document unreadable; left out');
        continue;
      }
      q.set(r.name, { entity, values });
    }
    const c = new Map<string, Readonly<Record<string, string>>>();
    for (const r of configs) {
      const values = r.data.values as Record<string, string> | undefined;
      if (typeof values !== 'object' || values === null) {
        this.logger?.warn({ config: r.name }, 'control store: config document unreadable; left out');
        continue;
      }
      c.set(r.name, values);
    }
    this.quotas = q;
    this.configs = c;
    this.version++;
    for (const l of this.listeners) {
      try {
        l();
      } catch (err) {
        this.logger?.error({ err }, 'runtime settings change listener failed');
      }
    }
  }
}

const NO_QUOTA: UserQuota = Object.freeze({});
const NO_CONFIGS: Readonly<Record<string, string>> = Object.freeze({});
