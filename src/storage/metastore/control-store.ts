/**
 * The control plane's storage role: users, groups, API tokens, policies, namespaces, dashboard login sessions and
 * runtime settings (client quotas, broker configs),
 * kept in the metastore (SQLite embedded, PostgreSQL in a cluster) so that every broker sees the same identities.
 *
 * One keyed table of JSON documents rather than a table per kind: the control plane's objects are few (thousands,
 * not millions), read whole at start and after each change, and their shape grows with features; a document per
 * (kind, name) keeps migrations out of that growth. Binary fields (salts, keys) are base64 in the document.
 *
 * Contract (test/conformance/control.suite.ts runs it on every backend):
 * - putControl replaces the document of (kind, name), or creates it; deleteControl answers whether it existed.
 * - Every change bumps a store-wide version (controlVersion), also across processes sharing the store: a broker
 *   polls it to learn that another broker changed something, and reloads. Except the `session` kind (dashboard
 *   login sessions): they are not part of the directory, and a login or logout must not make every broker reload
 *   its users and policies and drop every connection's cached verdicts.
 * - Documents are JSON: what comes back is what JSON.stringify/parse makes of what was put (undefined fields gone),
 *   a copy the caller may change freely. An unknown kind, an empty name (or one holding NUL) or a non-object document is refused with
 *   INVALID_ARGUMENT.
 * - Calls on the same (kind, name) take effect in the order they were issued; a write resolves once durable.
 * - putControlIfAbsent creates only when absent (answers false when present), atomically across processes (the
 *   first user, a seed from a file).
 */
import { FlowError } from '../../core/index.js';

/**
 * `txn` and `txn-aborted` are the Kafka transaction coordinator's durable state (src/protocols/kafka/transactions).
 * `quota` and `config` are the runtime settings (settings.ts): client quotas per user (and the default user's), and
 * broker configs altered at run time (cluster-wide and per broker). `rabbitmq-policy` holds the RabbitMQ management
 * API's queue policies and operator policies (src/control/rabbitmq/policies.ts).
 */
export const CONTROL_KINDS = ['user', 'group', 'token', 'policy', 'namespace', 'session', 'quota', 'config', 'txn', 'txn-aborted', 'rabbitmq-policy'] as const;
export type ControlKind = (typeof CONTROL_KINDS)[number];

/**
 * Kinds whose changes bump controlVersion: all but login sessions and the Kafka transaction coordinator's state
 * (`txn`: one document per transactional id; `txn-aborted`: the aborted transactions of one partition), which are
 * data-path state written on every transaction, not part of the directory (see the contract above).
 */
export function bumpsVersion(kind: ControlKind): boolean {
  return kind !== 'session' && kind !== 'txn' && kind !== 'txn-aborted';
}

/** Checks a call's arguments (every backend); answers the document as JSON text. */
export function checkControl(kind: ControlKind, name: string, data?: Record<string, unknown>): string {
  if (!(CONTROL_KINDS as readonly string[]).includes(kind)) throw new FlowError('INVALID_ARGUMENT', `unknown control kind "${String(kind)}"`);
  // NUL: PostgreSQL's text cannot hold it; no name the directory accepts has one.
  if (typeof name !== 'string' || name === '' || name.includes('\u0000'))
    throw new FlowError('INVALID_ARGUMENT', `a ${kind} document needs a non-empty name without NUL`);
  if (data === undefined) return '';
  if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new FlowError('INVALID_ARGUMENT', `a ${kind} document must be a JSON object`);
  return JSON.stringify(data);
}

export interface ControlRecord {
  readonly kind: ControlKind;
  readonly name: string;
  /** A JSON object. */
  readonly data: Record<string, unknown>;
  /** ms since the epoch of the last put. */
  readonly updatedAt: number;
}

/**
 * The cluster's owner row a fenced control write is checked against (src/cluster: kind, name) and the epoch the
 * writer holds it under.
 */
export interface ControlFence {
  owner: string;
  name: string;
  epoch: number;
}

export interface ControlStore {
  listControl(kind: ControlKind): Promise<ControlRecord[]>;
  getControl(kind: ControlKind, name: string): Promise<ControlRecord | null>;
  /**
   * `fence` (cluster mode, PostgreSQL; kinds `txn` and `txn-aborted` only): the cluster's owner row must hold the
   * epoch, checked in the same statement, else FENCED. A number names the owner row of the same kind and name (a
   * transaction coordinator whose id moved to another broker writes nothing); a ControlFence names another (a
   * partition's aborted list is fenced by the partition's owner row, so a deposed leader writes nothing). The
   * other backends have no cluster and ignore it.
   */
  putControl(kind: ControlKind, name: string, data: Record<string, unknown>, fence?: number | ControlFence): Promise<void>;
  putControlIfAbsent(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean>;
  /** `fence`: as putControl's (an expired transactional id's document is deleted by the id's owner only). */
  deleteControl(kind: ControlKind, name: string, fence?: number | ControlFence): Promise<boolean>;
  /** A number that grows with every change to any control document. */
  controlVersion(): Promise<number>;
}

/** In process memory (tests, and a broker whose metastore has no control role). */
export class MemoryControlStore implements ControlStore {
  /** JSON text per key, as the SQL backends keep it: what is read back is a fresh copy, like theirs. */
  private readonly docs = new Map<string, { kind: ControlKind; name: string; json: string; updatedAt: number }>();
  private version = 0;

  private static read(d: { kind: ControlKind; name: string; json: string; updatedAt: number }): ControlRecord {
    return { kind: d.kind, name: d.name, data: JSON.parse(d.json) as Record<string, unknown>, updatedAt: d.updatedAt };
  }

  async listControl(kind: ControlKind): Promise<ControlRecord[]> {
    checkControl(kind, '-');
    return [...this.docs.values()]
      .filter((r) => r.kind === kind)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map(MemoryControlStore.read);
  }
  async getControl(kind: ControlKind, name: string): Promise<ControlRecord | null> {
    checkControl(kind, name);
    const d = this.docs.get(`${kind}\u0000${name}`);
    return d ? MemoryControlStore.read(d) : null;
  }
  async putControl(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<void> {
    const json = checkControl(kind, name, data);
    this.docs.set(`${kind}\u0000${name}`, { kind, name, json, updatedAt: Date.now() });
    if (bumpsVersion(kind)) this.version++;
  }
  async putControlIfAbsent(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean> {
    checkControl(kind, name, data);
    if (this.docs.has(`${kind}\u0000${name}`)) return false;
    await this.putControl(kind, name, data);
    return true;
  }
  async deleteControl(kind: ControlKind, name: string): Promise<boolean> {
    checkControl(kind, name);
    const had = this.docs.delete(`${kind}\u0000${name}`);
    if (had && bumpsVersion(kind)) this.version++;
    return had;
  }
  async controlVersion(): Promise<number> {
    return this.version;
  }
}

/** Whether a metastore (or anything) carries the control role. */
export function isControlStore(x: unknown): x is ControlStore {
  return (
    typeof x === 'object' && x !== null && typeof (x as ControlStore).listControl === 'function' && typeof (x as ControlStore).controlVersion === 'function'
  );
}
