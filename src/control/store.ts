/**
 * The control plane's storage role: users, groups, API tokens, policies, namespaces and dashboard login sessions,
 * kept in the metastore (SQLite embedded, PostgreSQL in a cluster) so that every broker sees the same identities.
 *
 * One keyed table of JSON documents rather than a table per kind: the control plane's objects are few (thousands,
 * not millions), read whole at start and after each change, and their shape grows with features; a document per
 * (kind, name) keeps migrations out of that growth. Binary fields (salts, keys) are base64 in the document.
 *
 * Contract (test/conformance/control.suite.ts runs it on every backend):
 * - putControl replaces the document of (kind, name), or creates it; deleteControl answers whether it existed.
 * - Every change bumps a store-wide version (controlVersion), also across processes sharing the store: a broker
 *   polls it to learn that another broker changed something, and reloads.
 * - Calls on the same (kind, name) take effect in the order they were issued; a write resolves once durable.
 * - putControlIfAbsent creates only when absent (answers false when present), atomically across processes (the
 *   first user, a seed from a file).
 */
export const CONTROL_KINDS = ['user', 'group', 'token', 'policy', 'namespace', 'session'] as const;
export type ControlKind = (typeof CONTROL_KINDS)[number];

export interface ControlRecord {
  readonly kind: ControlKind;
  readonly name: string;
  /** A JSON object. */
  readonly data: Record<string, unknown>;
  /** ms since the epoch of the last put. */
  readonly updatedAt: number;
}

export interface ControlStore {
  listControl(kind: ControlKind): Promise<ControlRecord[]>;
  getControl(kind: ControlKind, name: string): Promise<ControlRecord | null>;
  putControl(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<void>;
  putControlIfAbsent(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean>;
  deleteControl(kind: ControlKind, name: string): Promise<boolean>;
  /** A number that grows with every change to any control document. */
  controlVersion(): Promise<number>;
}

/** In process memory (tests, and a broker whose metastore has no control role). */
export class MemoryControlStore implements ControlStore {
  private readonly docs = new Map<string, ControlRecord>();
  private version = 0;

  async listControl(kind: ControlKind): Promise<ControlRecord[]> {
    return [...this.docs.values()].filter((r) => r.kind === kind).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }
  async getControl(kind: ControlKind, name: string): Promise<ControlRecord | null> {
    return this.docs.get(`${kind}\u0000${name}`) ?? null;
  }
  async putControl(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<void> {
    this.docs.set(`${kind}\u0000${name}`, { kind, name, data: structuredClone(data), updatedAt: Date.now() });
    this.version++;
  }
  async putControlIfAbsent(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean> {
    if (this.docs.has(`${kind}\u0000${name}`)) return false;
    await this.putControl(kind, name, data);
    return true;
  }
  async deleteControl(kind: ControlKind, name: string): Promise<boolean> {
    const had = this.docs.delete(`${kind}\u0000${name}`);
    if (had) this.version++;
    return had;
  }
  async controlVersion(): Promise<number> {
    return this.version;
  }
}

/** Whether a metastore (or anything) carries the control role. */
export function isControlStore(x: unknown): x is ControlStore {
  return typeof x === 'object' && x !== null && typeof (x as ControlStore).listControl === 'function' && typeof (x as ControlStore).controlVersion === 'function';
}
