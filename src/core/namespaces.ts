/**
 * Namespaces as tenants: how the name a client of namespace `t1` writes (`orders`) becomes the name the core, the
 * metastore, the WAL, the object store and the cluster's ownership rows use. Adapters qualify names on the way in
 * and strip them on the way out through one `NamespaceNames` per connection; nothing below the adapters knows about
 * namespaces: the namespace travels inside the name itself (as Pulsar's `tenant/namespace/topic`), so every store
 * keeps working unchanged and the data a broker wrote before namespaces existed is the `default` namespace's.
 *
 * - The `default` namespace's names are the names themselves: no prefix, no string built per message.
 * - Topics (unified, `/`-separated) of namespace `t1` live under the first level `$ns`: `$ns/t1/<topic>`. The MQTT
 *   `$` rule ([MQTT-4.7.2-1]) already keeps a first-level `#` or `+` from matching them, and the core applies the
 *   same rule to the `$ns` level for every binding rule (AMQP's `#`, NATS's `>`), so no wildcard of one namespace
 *   reaches another's topics.
 * - Streams (Kafka names, `[a-zA-Z0-9._-]`) of `t1` are `t1~<name>`: `~` is outside both the Kafka name set and the
 *   namespace name set (directory.ts: `[A-Za-z0-9._@-]`), so no client-written stream name can be a qualified one,
 *   and the name stays a safe file name and S3 key (`~` is unreserved in URIs).
 * - Names that may hold almost anything (consumer groups, transactional ids, queues, exchanges, MQTT client ids)
 *   of `t1` are `$ns/t1/<name>`; a client-written name starting with `$ns/` is refused in every namespace
 *   (`isReservedName`), with the protocol's own error.
 */
import { FlowError } from './errors.js';
import { validateFilter } from './topic.js';

export const DEFAULT_NAMESPACE = 'default';
/** The first topic level of every qualified topic, and the start of every qualified arbitrary name. */
export const NS_ROOT = '$ns';
/** The reserved start of qualified topics and names. */
export const NS_PREFIX = '$ns/';
/** Between a namespace and a stream's own name. */
export const STREAM_SEPARATOR = '~';

/** Is this unified topic (or filter) inside the reserved `$ns` space? */
export function isReservedTopic(topic: string): boolean {
  return topic.charCodeAt(0) === 0x24 && (topic === NS_ROOT || topic.startsWith(NS_PREFIX));
}

/** Is this arbitrary name (group, transactional id, queue, exchange, client id) a reserved, qualified one? */
export const isReservedName = isReservedTopic;

/** Is this stream name a qualified one (another namespace's)? Client-written Kafka names never are. */
export function isQualifiedStream(name: string): boolean {
  return name.includes(STREAM_SEPARATOR);
}

/** The namespace and own name of an internal stream name. */
export function splitStreamName(internal: string): { namespace: string; name: string } {
  const i = internal.indexOf(STREAM_SEPARATOR);
  return i < 0 ? { namespace: DEFAULT_NAMESPACE, name: internal } : { namespace: internal.slice(0, i), name: internal.slice(i + 1) };
}

/** The namespace and own topic of an internal unified topic or filter. */
export function splitTopic(internal: string): { namespace: string; topic: string } {
  if (!isReservedTopic(internal)) return { namespace: DEFAULT_NAMESPACE, topic: internal };
  const end = internal.indexOf('/', NS_PREFIX.length);
  if (end < 0) return { namespace: DEFAULT_NAMESPACE, topic: internal };
  return { namespace: internal.slice(NS_PREFIX.length, end), topic: internal.slice(end + 1) };
}

/**
 * The namespace of a qualified NATS subscription subject (`$ns.<ns>.<subject>`, NamespaceNames.natsSubject), or null
 * when it is not one (the cluster's interest table reads a peer's tenant subscriptions with it).
 */
export function natsSubjectNamespace(subject: string): string | null {
  if (!subject.startsWith(`${NS_ROOT}.`)) return null;
  const end = subject.indexOf('.', NS_ROOT.length + 1);
  return end < 0 ? null : subject.slice(NS_ROOT.length + 1, end).replaceAll('/', '.');
}

/** The namespace of an internal arbitrary name (same layout as topics). */
export function splitName(internal: string): { namespace: string; name: string } {
  const { namespace, topic } = splitTopic(internal);
  return { namespace, name: topic };
}

/**
 * One namespace's view of names: built once per connection at login. For `default` every method returns its
 * argument (`isDefault` lets hot paths skip the call altogether).
 */
export class NamespaceNames {
  readonly isDefault: boolean;
  /** `$ns/<ns>/`, or '' for `default`. */
  readonly topicPrefix: string;
  /** `<ns>~`, or '' for `default`. */
  readonly streamPrefix: string;
  /** `$ns.<ns>.` (the namespace's dots written `/`), or '' for `default`: NATS subjects (natsSubject). */
  readonly natsPrefix: string;

  constructor(readonly namespace: string) {
    this.isDefault = namespace === DEFAULT_NAMESPACE;
    this.topicPrefix = this.isDefault ? '' : `${NS_PREFIX}${namespace}/`;
    this.streamPrefix = this.isDefault ? '' : `${namespace}${STREAM_SEPARATOR}`;
    this.natsPrefix = this.isDefault ? '' : `${NS_ROOT}.${namespace.replaceAll('.', '/')}.`;
  }

  /**
   * A NATS subject (or subscription subject) as the core knows it: `$ns.<ns>.<subject>`, a `.` of the namespace's name
   * written `/` (the separator swap makes that word the `<ns>` level of `$ns/<ns>/...`). The subscription carries
   * the namespace (SubscribeOptions.namespace), without which the core refuses a subject starting with `$ns`.
   */
  natsSubject(s: string): string {
    return this.isDefault ? s : this.natsPrefix + s;
  }

  /** A client's topic or filter as the core knows it. */
  topic(t: string): string {
    return this.isDefault ? t : this.topicPrefix + t;
  }

  /** A core topic or filter as this namespace's clients know it; null when it is not this namespace's. */
  ownTopic(internal: string): string | null {
    if (this.isDefault) return isReservedTopic(internal) ? null : internal;
    return internal.startsWith(this.topicPrefix) ? internal.slice(this.topicPrefix.length) : null;
  }

  /**
   * A core topic as this namespace's clients see it on a delivery: stripped of the prefix; unchanged when it is not
   * under it (a `$queue/<name>` delivery without a topic carries the subscription's own filter).
   */
  outTopic(internal: string): string {
    return this.isDefault || !internal.startsWith(this.topicPrefix) ? internal : internal.slice(this.topicPrefix.length);
  }

  /** A client's stream (Kafka topic) name as the core knows it. */
  stream(name: string): string {
    return this.isDefault ? name : this.streamPrefix + name;
  }

  /** A core stream name as this namespace's clients know it; null when it is not this namespace's. */
  ownStream(internal: string): string | null {
    if (this.isDefault) return isQualifiedStream(internal) ? null : internal;
    return internal.startsWith(this.streamPrefix) ? internal.slice(this.streamPrefix.length) : null;
  }

  /** A client's group id, transactional id, queue, exchange or client id as the core knows it. */
  name(n: string): string {
    return this.isDefault ? n : this.topicPrefix + n;
  }

  /** A core arbitrary name as this namespace's clients know it; null when it is not this namespace's. */
  ownName(internal: string): string | null {
    return this.ownTopic(internal);
  }

  /**
   * A Kafka client's topic name as the core knows it. In `default` a name holding `~` (never a valid Kafka name) is
   * escaped to `~<name>`, which no namespace owns and the core refuses as a stream name: a `default` client cannot
   * reach `t1~orders` by spelling it, and gets INVALID_TOPIC_EXCEPTION under the name it wrote.
   */
  kafkaStream(n: string): string {
    if (this.isDefault) return n.includes(STREAM_SEPARATOR) ? STREAM_SEPARATOR + n : n;
    return this.streamPrefix + n;
  }

  /** The Kafka client's name of a core stream name (escaped ones included); null: another namespace's. */
  kafkaOwnStream(internal: string): string | null {
    if (this.isDefault) {
      if (internal.charCodeAt(0) === 0x7e) return internal.slice(1);
      return internal.includes(STREAM_SEPARATOR) ? null : internal;
    }
    return internal.startsWith(this.streamPrefix) ? internal.slice(this.streamPrefix.length) : null;
  }

  /**
   * A Kafka client's group id or transactional id as the core knows it. In `default` an id spelling the reserved
   * `$ns/` space is kept apart as `$ns//<id>` (no namespace has an empty name): it reaches nothing of a tenant's.
   */
  kafkaName(n: string): string {
    if (this.isDefault) return isReservedName(n) ? `${NS_PREFIX}/${n}` : n;
    return this.topicPrefix + n;
  }

  /** The Kafka client's group or transactional id of a core one; null: another namespace's. */
  kafkaOwnName(internal: string): string | null {
    if (this.isDefault) {
      if (!isReservedName(internal)) return internal;
      return internal.startsWith(`${NS_PREFIX}/`) ? internal.slice(NS_PREFIX.length + 1) : null;
    }
    return internal.startsWith(this.topicPrefix) ? internal.slice(this.topicPrefix.length) : null;
  }
}

const DEFAULT_NAMES = new NamespaceNames(DEFAULT_NAMESPACE);
const cache = new Map<string, NamespaceNames>();

/** The (shared, immutable) names of a namespace. */
export function namespaceNames(namespace: string): NamespaceNames {
  if (namespace === DEFAULT_NAMESPACE) return DEFAULT_NAMES;
  let n = cache.get(namespace);
  if (n === undefined) {
    if (cache.size > 10_000) cache.clear();
    n = new NamespaceNames(namespace);
    cache.set(namespace, n);
  }
  return n;
}

/** The topic a stream captures by default: its own name with dots as levels, inside its namespace. */
export function streamOwnTopic(internal: string): string {
  const i = internal.indexOf(STREAM_SEPARATOR);
  if (i < 0) return internal.split('.').join('/');
  return `${NS_PREFIX}${internal.slice(0, i)}/${internal
    .slice(i + 1)
    .split('.')
    .join('/')}`;
}

/**
 * A stream's binding stays inside the stream's namespace: a `default` stream binds no `$ns/...` filter, a stream
 * `t1~x` only `$ns/t1/...` ones (its adapter qualifies what its client wrote). Throws INVALID_FILTER otherwise.
 */
export function validateStreamBinding(stream: string, filter: string): void {
  validateFilter(filter);
  const i = stream.indexOf(STREAM_SEPARATOR);
  const inside = i < 0 ? !isReservedTopic(filter) : filter.startsWith(`${NS_PREFIX}${stream.slice(0, i)}/`);
  if (!inside) throw new FlowError('INVALID_FILTER', `binding "${filter}" is outside the stream's namespace`);
}

/** Namespace names as the directory allows them (src/control/directory.ts validateName). */
const NAMESPACE_NAME = /^[A-Za-z0-9._@-]{1,128}$/;
const KAFKA_NAME = /^[a-zA-Z0-9._-]{1,249}$/;

/** A stream name the core accepts: a Kafka-valid name, or `<namespace>~<Kafka-valid name>`. */
export function isValidInternalStreamName(name: string): boolean {
  const i = name.indexOf(STREAM_SEPARATOR);
  const own = i < 0 ? name : name.slice(i + 1);
  if (i >= 0 && !NAMESPACE_NAME.test(name.slice(0, i))) return false;
  return KAFKA_NAME.test(own) && own !== '.' && own !== '..';
}
