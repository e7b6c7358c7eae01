/**
 * RabbitMQ policies and operator policies (`/api/policies`, `/api/operator-policies`): a regular expression over queue
 * (and exchange) names, what it applies to, a priority and a definition, in one vhost (a vhost is a namespace,
 * docs/namespaces.md). Kept in the control store (kind `rabbitmq-policy`, so every broker sharing it sees them; named
 * `<kind>:<name>` in `/`, `<kind>/<namespace>/<name>` in another vhost: a namespace name holds no `/`) and applied to
 * the routing core's queues as RabbitMQ 3.10 applies them to classic queues:
 *
 * - the policy that applies to a queue is the matching one of the queue's own vhost (pattern searched in the name its
 *   clients write, `orders` for t1's `$ns/t1/orders`; apply-to `queues` or `all`) of highest priority (ties: the
 *   first name); likewise one operator policy; another vhost's policies never apply to it;
 * - their definitions merge into the effective policy definition: a key of both takes the smaller value (operator
 *   policies may only hold numeric limits: expires, message-ttl, max-length, max-length-bytes, delivery-limit);
 * - a queue argument of the same key wins over the policy for dead-letter-exchange, dead-letter-routing-key, overflow
 *   and queue-mode, and the smaller value wins for expires, message-ttl, max-length, max-length-bytes and
 *   delivery-limit (RabbitMQ's res_arg / res_min per key);
 * - a change applies at once to the queues that exist: a new max-length drops (or dead-letters) the messages over it.
 *
 * Keys RabbitMQ recognises and FlowMQ queues do not act on (ha-*, federation, queue-master-locator, max-in-memory-*,
 * alternate-exchange...) are accepted, stored, listed and shown in effective_policy_definition, and change nothing;
 * `queue-mode` is among them (FlowMQ keeps a bounded window of every queue in memory and the rest on disk: every queue
 * is "lazy" past its window). Unknown keys are refused as RabbitMQ refuses them (400).
 */
import { vhostExchange, vhostKey, type QueueArguments, type QueueDef, type QueueOverflow, type Router } from '../../core/index.js';
import { DEFAULT_NAMESPACE, namespaceNames, splitName } from '../../core/namespaces.js';
import type { ControlStore } from '../../storage/metastore/control-store.js';
import { RabbitError, badRequest } from './errors.js';
import { vhostOfNamespace } from './format.js';

export type PolicyKind = 'policy' | 'operator';

export interface RabbitPolicy {
  /** The namespace of its vhost (`default` for `/`). */
  readonly namespace: string;
  readonly name: string;
  readonly pattern: string;
  readonly applyTo: 'queues' | 'exchanges' | 'all';
  readonly priority: number;
  readonly definition: Record<string, unknown>;
}

interface Compiled extends RabbitPolicy {
  readonly regex: RegExp;
}

const nonNegInt = (what: string) => (v: unknown) => {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw invalid(`${JSON.stringify(v)} is not a valid ${what}`);
};
const posInt = (what: string) => (v: unknown) => {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw invalid(`${JSON.stringify(v)} is not a valid ${what}`);
};
const oneOf = (what: string, values: string[]) => (v: unknown) => {
  if (typeof v !== 'string' || !values.includes(v)) throw invalid(`${JSON.stringify(v)} is not a valid ${what} value`);
};
const text = (what: string) => (v: unknown) => {
  if (typeof v !== 'string') throw invalid(`${JSON.stringify(v)} is not a valid ${what}`);
};
const any = () => undefined;

/** The keys FlowMQ acts on, with RabbitMQ's validation. */
const ACTING: Record<string, (v: unknown) => void> = {
  'message-ttl': nonNegInt('message TTL'),
  expires: posInt('queue expiry'),
  'max-length': nonNegInt('maximum length'),
  'max-length-bytes': nonNegInt('maximum length'),
  overflow: oneOf('overflow', ['drop-head', 'reject-publish', 'reject-publish-dlx']),
  'dead-letter-exchange': text('dead letter exchange'),
  'dead-letter-routing-key': text('dead letter routing key'),
  'delivery-limit': nonNegInt('delivery limit'),
};
/** Keys RabbitMQ 3.10 recognises that FlowMQ stores and shows but does not act on. */
const STORED: Record<string, (v: unknown) => void> = {
  'queue-mode': oneOf('queue mode', ['default', 'lazy']),
  'alternate-exchange': text('alternate exchange'),
  'dead-letter-strategy': oneOf('dead letter strategy', ['at-most-once', 'at-least-once']),
  'max-in-memory-length': nonNegInt('maximum length'),
  'max-in-memory-bytes': nonNegInt('maximum length'),
  'max-age': text('max age'),
  'stream-max-segment-size-bytes': nonNegInt('segment size'),
  'queue-master-locator': text('queue master locator'),
  'queue-leader-locator': text('queue leader locator'),
  'initial-cluster-size': posInt('cluster size'),
  'ha-mode': text('ha mode'),
  'ha-params': any,
  'ha-sync-mode': text('ha sync mode'),
  'ha-sync-batch-size': posInt('batch size'),
  'ha-promote-on-shutdown': text('ha promote on shutdown'),
  'ha-promote-on-failure': text('ha promote on failure'),
  'federation-upstream': text('federation upstream'),
  'federation-upstream-set': text('federation upstream set'),
};
/** What an operator policy may hold (RabbitMQ 3.10). */
const OPERATOR_KEYS = new Set(['expires', 'message-ttl', 'max-length', 'max-length-bytes', 'delivery-limit', 'max-in-memory-length', 'max-in-memory-bytes']);

function invalid(reason: string): RabbitError {
  return new RabbitError(400, 'bad_request', `Validation failed\n\n${reason}\n`);
}

/** Validates a policy body as RabbitMQ does (400 with its reasons); answers the policy. */
export function parsePolicy(kind: PolicyKind, namespace: string, name: string, b: Record<string, unknown> | undefined): RabbitPolicy {
  const body = b ?? {};
  const missing = ['pattern', 'definition'].filter((k) => body[k] === undefined);
  if (missing.length > 0) throw badRequest(`[${missing.map((k) => `{key_missing,${k}}`).join(',')}]`);
  const pattern = body.pattern;
  if (typeof pattern !== 'string') throw invalid('pattern should be a string');
  try {
    new RegExp(pattern);
  } catch (e) {
    throw invalid(`pattern should be regular expression but is invalid: ${(e as Error).message}`);
  }
  const applyTo = body['apply-to'] ?? 'all';
  if (applyTo !== 'queues' && applyTo !== 'exchanges' && applyTo !== 'all') {
    throw invalid(`apply-to '${String(applyTo)}' unrecognised; should be 'queues', 'exchanges' or 'all'`);
  }
  const priority = body.priority ?? 0;
  if (typeof priority !== 'number' || !Number.isInteger(priority)) throw invalid(`priority should be a number, actually was ${JSON.stringify(priority)}`);
  const definition = body.definition;
  if (typeof definition !== 'object' || definition === null || Array.isArray(definition)) throw invalid('definition must be a dictionary');
  const def = definition as Record<string, unknown>;
  if (Object.keys(def).length === 0) throw invalid('no policy provided');
  const unknown = Object.keys(def).filter((k) => (kind === 'operator' ? !OPERATOR_KEYS.has(k) : ACTING[k] === undefined && STORED[k] === undefined));
  if (unknown.length > 0) throw invalid(`${unknown.map((k) => JSON.stringify(k)).join(', ')} are not recognised policy settings`);
  for (const [k, v] of Object.entries(def)) (ACTING[k] ?? STORED[k])(v);
  return { namespace, name, pattern, applyTo, priority, definition: { ...def } };
}

export function policyJson(p: RabbitPolicy): Record<string, unknown> {
  return { vhost: vhostOfNamespace(p.namespace), name: p.name, pattern: p.pattern, 'apply-to': p.applyTo, definition: p.definition, priority: p.priority };
}

/** The store's name of a policy: `/`'s keep the name they had before vhosts had policies. */
const docName = (kind: PolicyKind, namespace: string, name: string) => (namespace === DEFAULT_NAMESPACE ? `${kind}:${name}` : `${kind}/${namespace}/${name}`);
const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** The policies of the control store, compiled, and what they make of a queue. */
export class RabbitPolicies {
  private lists: Record<PolicyKind, Compiled[]> = { policy: [], operator: [] };

  constructor(
    private readonly store: ControlStore,
    private readonly changed: () => void,
    /** The exchanges a vhost policy's dead-letter-exchange may name (its vhost's amq.direct... when it has them). */
    private readonly router: Pick<Router, 'getExchange'>,
  ) {}

  /** The policies of one vhost (by namespace), or of every vhost, in RabbitMQ's order (highest priority first). */
  list(kind: PolicyKind, namespace?: string): RabbitPolicy[] {
    return this.lists[kind].filter((p) => namespace === undefined || p.namespace === namespace).map(({ regex: _r, ...p }) => p);
  }

  get(kind: PolicyKind, namespace: string, name: string): RabbitPolicy | undefined {
    return this.list(kind, namespace).find((p) => p.name === name);
  }

  async put(kind: PolicyKind, p: RabbitPolicy): Promise<boolean> {
    const existed = this.get(kind, p.namespace, p.name) !== undefined;
    await this.store.putControl('rabbitmq-policy', docName(kind, p.namespace, p.name), {
      kind,
      namespace: p.namespace,
      name: p.name,
      pattern: p.pattern,
      applyTo: p.applyTo,
      priority: p.priority,
      definition: p.definition,
    });
    await this.reload();
    this.changed();
    return !existed;
  }

  async delete(kind: PolicyKind, namespace: string, name: string): Promise<boolean> {
    const gone = await this.store.deleteControl('rabbitmq-policy', docName(kind, namespace, name));
    await this.reload();
    this.changed();
    return gone;
  }

  /** Deletes every policy and operator policy of a vhost (the vhost is deleted); how many there were. */
  async deleteVhost(namespace: string): Promise<number> {
    let n = 0;
    for (const kind of ['policy', 'operator'] as const)
      for (const p of this.list(kind, namespace)) if (await this.store.deleteControl('rabbitmq-policy', docName(kind, namespace, p.name))) n++;
    if (n > 0) {
      await this.reload();
      this.changed();
    }
    return n;
  }

  /** Re-reads the store (after a change here, or another broker's). */
  async reload(): Promise<void> {
    const next: Record<PolicyKind, Compiled[]> = { policy: [], operator: [] };
    for (const r of await this.store.listControl('rabbitmq-policy')) {
      const d = r.data;
      const kind = d.kind === 'operator' ? 'operator' : 'policy';
      const namespace = typeof d.namespace === 'string' ? d.namespace : DEFAULT_NAMESPACE;
      try {
        const p = parsePolicy(kind, namespace, String(d.name ?? r.name), {
          pattern: d.pattern,
          'apply-to': d.applyTo,
          priority: d.priority,
          definition: d.definition,
        });
        next[kind].push({ ...p, regex: new RegExp(p.pattern) });
      } catch {
        // A document this version cannot read applies to nothing.
      }
    }
    for (const k of ['policy', 'operator'] as const)
      next[k].sort((a, b) => b.priority - a.priority || cmp(vhostOfNamespace(a.namespace), vhostOfNamespace(b.namespace)) || cmp(a.name, b.name));
    this.lists = next;
  }

  /**
   * The policy and operator policy that apply to a queue (by its core name), and their merged definition: its own
   * vhost's only, matched against the name the vhost's clients write.
   */
  forQueue(internal: string): { policy: RabbitPolicy | null; operator: RabbitPolicy | null; definition: Record<string, unknown> } {
    const { namespace, name } = splitName(internal);
    const pick = (kind: PolicyKind) =>
      this.lists[kind].find((p) => p.namespace === namespace && p.applyTo !== 'exchanges' && p.regex.test(namespace === DEFAULT_NAMESPACE ? internal : name)) ??
      null;
    const policy = pick('policy');
    const operator = pick('operator');
    const definition: Record<string, unknown> = { ...(policy?.definition ?? {}) };
    for (const [k, v] of Object.entries(operator?.definition ?? {})) {
      const mine = definition[k];
      definition[k] = typeof mine === 'number' && typeof v === 'number' ? Math.min(mine, v) : v;
    }
    return { policy, operator, definition };
  }

  /** The arguments a queue acts on: its declared ones merged with the policy (the module comment's rules). */
  effectiveArguments(def: QueueDef): QueueArguments | null {
    const { policy, operator, definition } = this.forQueue(def.name);
    if (Object.keys(definition).length === 0) return null;
    // A vhost's policy names its own exchanges and keys, qualified as queue.declare's arguments in that vhost.
    const ns = namespaceNames((policy ?? operator)?.namespace ?? DEFAULT_NAMESPACE);
    const out: QueueArguments = { ...def.arguments };
    const num = (key: string, field: 'messageTtlMs' | 'expiresMs' | 'maxLength' | 'maxLengthBytes' | 'deliveryLimit') => {
      const v = definition[key];
      if (typeof v !== 'number') return;
      const declared = out[field];
      out[field] = declared === undefined ? v : Math.min(declared, v);
    };
    num('message-ttl', 'messageTtlMs');
    num('expires', 'expiresMs');
    num('max-length', 'maxLength');
    num('max-length-bytes', 'maxLengthBytes');
    num('delivery-limit', 'deliveryLimit');
    const dlx = definition['dead-letter-exchange'];
    if (typeof dlx === 'string' && out.deadLetterExchange === undefined) out.deadLetterExchange = vhostExchange(ns, this.router, dlx);
    const dlk = definition['dead-letter-routing-key'];
    if (typeof dlk === 'string' && out.deadLetterRoutingKey === undefined)
      out.deadLetterRoutingKey = out.deadLetterExchange === undefined ? dlk : vhostKey(ns, out.deadLetterExchange, dlk);
    if (typeof definition.overflow === 'string' && out.overflow === undefined) out.overflow = definition.overflow as QueueOverflow;
    return out;
  }

  /** The fields /api/queues shows of the policies of a queue. */
  describe(name: string): { policy: string | null; operator_policy: string | null; effective_policy_definition: Record<string, unknown> } {
    const f = this.forQueue(name);
    return { policy: f.policy?.name ?? null, operator_policy: f.operator?.name ?? null, effective_policy_definition: f.definition };
  }
}
