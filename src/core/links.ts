/**
 * Exports and imports between namespaces (NATS accounts, nats-server's account exports and imports): the one way a
 * namespace's messages reach another's on purpose. Namespaces are apart because their names are (namespaces.ts); a
 * link is a live subscription of the core's own in one namespace that publishes what it gets again in the other,
 * under the other's names. It lives here, in the routing layer, not in the NATS adapter, because a namespace's
 * topics are every protocol's: an MQTT publish of t1 on an exported topic reaches t2's NATS (or MQTT, AMQP, stream)
 * subscribers of the import, and a message crossing is routed in the importer's namespace as one published there
 * (its streams capture it, its queues get it, its subscribers' policies judge it).
 *
 * - **Stream import** (t2 imports t1's `prices.>`, optionally with a prefix or a `to` mapping): a subscription on t1's
 *   `prices.>` publishes each message again in t2 at the mapped subject.
 * - **Service import** (t2 imports t1's `svc.>`, optionally `to: t1svc.>`): a subscription on t2's `t1svc.>` publishes
 *   each request in t1 at `svc.x`, with a reply subject of t1's own (`_R_.<token>`, as nats-server does) that a
 *   subscription on t1's `_R_.>` maps back to the requester's reply subject in t2: once (singleton) or until the
 *   response window ends (stream, chunked). A request nobody in t1 receives is answered with a 503 status, so a
 *   nats.js requester learns "no responders" as it would in its own account.
 * - Export restricted to named accounts: an import by another namespace is refused (`refused` in configure's answer,
 *   which the caller logs) and nothing crosses.
 *
 * Authorization: the publisher's policies judge its publish in its own namespace (a deny there stops it before any
 * link sees it); the importer's subscribers' policies judge the message at the importer's subject (their admit
 * check), as for any message of their namespace. A deny holds on both sides. What crosses is no user's publish: the
 * copy's origin is the link (`link:<namespace>`), so a service behind an export (the JetStream API) serves it as the
 * exporting account's, as nats-server does.
 *
 * A message that is published again in another namespace is a copy with the names swapped: its topic mapped, its
 * reply subject (and the stored subject of a JetStream delivery) moved to the importer's namespace as they are, not
 * retained. Links follow links (t1 → t2 → t3), at most MAX_HOPS deep (a cycle ends there).
 *
 * Cluster mode: the subscriptions are local (`local: true`): each broker links what is published through it, and the
 * copy is forwarded to the other brokers like any publish; the response subscriptions on `_R_.>` are not local, so a
 * response published on another broker comes back to the one holding the request's mapping.
 */
import { randomBytes } from 'node:crypto';
import type { Message } from './message.js';
import { namespaceNames, splitTopic, type NamespaceNames } from './namespaces.js';
import type { NamespaceLinkDef, ResponseType } from './links-config.js';
import { newPublishInfo, type PublishInfo, type Subscriber, type SubscribeOptions, type Subscription } from './subscriptions.js';
import { swapSeparators } from './topic.js';

/** What links need of the engine. */
export interface LinkHost {
  subscribe(filter: string, subscriber: Subscriber, options: SubscribeOptions): Subscription;
  hasLiveSubscribers(topic: string): boolean;
  unsubscribe(sub: Subscription): void;
  publish(msg: Message, info?: PublishInfo): Promise<void> | null;
}

/** How deep links may follow links (t1 → t2 → t3 ...): a cycle of imports ends here. */
export const MAX_HOPS = 8;
/** How long a service request's responses are mapped back (nats-server's default response threshold: 2 min). */
export const RESPONSE_TTL_MS = 2 * 60_000;
/** Requests whose responses are mapped at once, at most (the oldest go first). */
export const MAX_RESPONSE_MAPS = 100_000;
/** The reply subjects' first token in the exporter's namespace (nats-server's). */
const REPLY_ROOT = '_R_';

/** One import that holds: whose, from where, and how its subjects map. */
interface Link {
  readonly kind: 'stream' | 'service';
  readonly importer: NamespaceNames;
  readonly exporter: NamespaceNames;
  /** Stream: the exporter's subject subscribed to; service: the importer's local subject subscribed to. */
  readonly from: string[];
  /** The subject it becomes on the other side (wildcards filled in order), or null with `prefix`. */
  readonly to: string[] | null;
  /** Stream import with a prefix: these levels put before the exporter's. */
  readonly prefix: string[] | null;
  readonly responseType: ResponseType;
  readonly describe: string;
}

interface ResponseMap {
  /** The requester's reply topic (internal, in its namespace) and its namespace. */
  readonly to: string;
  readonly names: NamespaceNames;
  /** The exporter whose `_R_` it is. */
  readonly exporter: string;
  left: number;
  readonly until: number;
}

/** The answer of configure(): what holds, and what of this source's was refused and why (the caller logs it). */
export interface LinksOutcome {
  active: string[];
  refused: Array<{ namespace: string; import: string; reason: string }>;
}

function subjectLevels(subject: string): string[] {
  return subject.split('.').map((t) => (t === '*' || t === '>' ? t : swapSeparators(t)));
}

/** Is every subject `inner` matches also matched by `outer`? (an import must be covered by the export) */
export function subjectCovers(outer: string, inner: string): boolean {
  const o = outer.split('.');
  const n = inner.split('.');
  for (let i = 0; i < o.length; i++) {
    const t = o[i];
    if (t === '>') return n.length > i;
    if (i >= n.length) return false;
    if (t === '*') {
      if (n[i] === '>') return false;
      continue;
    }
    if (t !== n[i]) return false;
  }
  return o.length === n.length;
}

/**
 * The levels of `levels` (a topic matching `from`) mapped onto `to`: each wildcard of `to` takes what the same
 * wildcard of `from` matched, in order. Null when they do not match.
 */
export function mapLevels(levels: string[], from: string[], to: string[]): string[] | null {
  const caught: string[] = [];
  let rest: string[] | null = null;
  for (let i = 0; i < from.length; i++) {
    const t = from[i];
    if (t === '>') {
      if (levels.length <= i) return null;
      rest = levels.slice(i);
      break;
    }
    if (i >= levels.length) return null;
    if (t === '*') caught.push(levels[i]!);
    else if (t !== levels[i]) return null;
  }
  if (rest === null && levels.length !== from.length) return null;
  const out: string[] = [];
  let k = 0;
  for (const t of to) {
    if (t === '*') out.push(caught[k++] ?? '');
    else if (t === '>') out.push(...(rest ?? []));
    else out.push(t);
  }
  return out;
}

/** A topic of `from`'s namespace as the same topic of `to`'s (null: not `from`'s). */
function moveTopic(topic: string, from: NamespaceNames, to: NamespaceNames): string | null {
  const own = from.ownTopic(topic);
  return own === null ? null : to.topic(own);
}

export class NamespaceLinks implements Subscriber {
  readonly id = 'links';
  private readonly sources = new Map<string, NamespaceLinkDef[]>();
  private subs: Subscription[] = [];
  /** The service imports that hold (shadows()). */
  private services: Link[] = [];
  private readonly responses = new Map<string, ResponseMap>();
  private readonly tokenBase = randomBytes(6).toString('base64url').replace(/[-_]/g, 'x');
  private nextToken = 0;
  private depth = 0;
  /** Figures: messages that crossed, requests mapped, responses mapped back, requests nobody answered, hops cut. */
  readonly stats = { crossed: 0, requests: 0, responses: 0, noResponders: 0, loopsCut: 0 };
  /**
   * Publishes a request crossing into the exporter (the NATS adapter sets the JetStream-aware one, so an imported
   * JetStream publish gets its PubAck); the engine's publish otherwise.
   */
  requestPublisher: ((msg: Message, reply: string) => PublishInfo) | null = null;
  /** Called for writes of a crossed message that failed (a stream of the importer refusing it). */
  onWriteFailed: (err: unknown) => void = () => undefined;

  constructor(private readonly host: LinkHost) {}

  /** Links are configured (some import holds). */
  get size(): number {
    return this.subs.length;
  }

  /**
   * Sets the exports and imports one source defines (`namespaces`: the directory; `nats-jwt`: operator mode's account
   * JWTs) and applies every source's together: a namespace's exports are the union of its sources'.
   */
  configure(source: string, defs: NamespaceLinkDef[]): LinksOutcome {
    if (defs.length === 0) this.sources.delete(source);
    else this.sources.set(source, defs);
    for (const s of this.subs) this.host.unsubscribe(s);
    this.subs = [];
    this.services = [];
    const exportsOf = new Map<string, NamespaceLinkDef['exports']>();
    const all: Array<NamespaceLinkDef & { source: string }> = [];
    for (const [src, list] of this.sources) {
      for (const d of list) {
        all.push({ ...d, source: src });
        const e = exportsOf.get(d.namespace);
        if (e === undefined) exportsOf.set(d.namespace, d.exports.slice());
        else e.push(...d.exports);
      }
    }
    const out: LinksOutcome = { active: [], refused: [] };
    const replyExporters = new Set<string>();
    for (const d of all) {
      for (const imp of d.imports) {
        const kind = imp.stream !== undefined ? 'stream' : 'service';
        const src = (imp.stream ?? imp.service)!;
        const describe = `${kind} ${src.account}:${src.subject}${imp.to !== undefined ? ` to ${imp.to}` : ''}${imp.prefix !== undefined ? ` prefix ${imp.prefix}` : ''}`;
        // Each source's own refusals (the caller logs them; another source's were logged when it was configured).
        const refuse = (reason: string) => {
          if (d.source === source) out.refused.push({ namespace: d.namespace, import: describe, reason });
        };
        if (src.account === d.namespace) {
          refuse('an account cannot import from itself');
          continue;
        }
        const exp = (exportsOf.get(src.account) ?? []).find((e) => {
          const s = kind === 'stream' ? e.stream : e.service;
          return s !== undefined && subjectCovers(s, src.subject);
        });
        if (exp === undefined) {
          refuse(`${src.account} exports no ${kind} covering ${src.subject}`);
          continue;
        }
        if (exp.accounts !== undefined && !exp.accounts.includes(d.namespace)) {
          refuse(`${src.account}'s export is not granted to ${d.namespace}`);
          continue;
        }
        const link: Link = {
          kind,
          importer: namespaceNames(d.namespace),
          exporter: namespaceNames(src.account),
          from: subjectLevels(kind === 'stream' ? src.subject : (imp.to ?? src.subject)),
          to: imp.prefix !== undefined ? null : subjectLevels(kind === 'stream' ? (imp.to ?? src.subject) : src.subject),
          prefix: imp.prefix !== undefined ? subjectLevels(imp.prefix) : null,
          responseType: exp.response_type ?? 'singleton',
          describe: `${d.namespace} imports ${describe}`,
        };
        // Stream: listen in the exporter; service: listen in the importer, on the subject its clients publish.
        const where = kind === 'stream' ? link.exporter : link.importer;
        const subject = kind === 'stream' ? src.subject : (imp.to ?? src.subject);
        this.listen(where, subject, link, true);
        if (kind === 'service') {
          replyExporters.add(src.account);
          this.services.push(link);
        }
        out.active.push(link.describe);
      }
    }
    // Responses come back through the exporter's `_R_.>` (one subscription per exporting namespace).
    for (const ns of replyExporters) this.listen(namespaceNames(ns), `${REPLY_ROOT}.>`, null, false);
    return out;
  }

  private listen(names: NamespaceNames, subject: string, link: Link | null, local: boolean): void {
    const o: SubscribeOptions = { qos: 0, rule: 'nats', data: link, local };
    // A stream import is interest where the importer has some at the mapped subject (nats-server's shadow
    // subscriptions): a push consumer delivering to an exported subject is bound only while someone imports it there.
    if (link !== null && link.kind === 'stream') o.interest = (topic) => this.interested(link, topic);
    if (!names.isDefault) o.namespace = names.namespace;
    this.subs.push(this.host.subscribe(names.natsSubject(subject), this, o));
  }

  /** The engine's delivery: each matched link moves the message across. */
  deliver(msg: Message, subs: Subscription[]): void {
    if (this.depth >= MAX_HOPS) {
      this.stats.loopsCut++;
      return;
    }
    this.depth++;
    try {
      // Overlapping service imports (nats.js's kv tests: `froma.$KV.>` and `froma.>`): the most specific one serves
      // a request, as on nats-server; stream imports each deliver.
      let service: Link | null = null;
      for (const s of subs) {
        const link = s.options.data as Link | null;
        if (link === null) this.response(msg);
        else if (link.kind === 'stream') this.stream(link, msg);
        else if (service === null || specificity(link.from) > specificity(service.from)) service = link;
      }
      if (service !== null) this.request(service, msg);
    } finally {
      this.depth--;
    }
  }

  /** A topic of the exporter as the stream import's importer sees it (internal), or null. */
  private streamTopic(link: Link, topic: string): string | null {
    const own = link.exporter.ownTopic(topic);
    if (own === null) return null;
    const levels = own.split('/');
    const mapped = link.prefix !== null ? [...link.prefix, ...levels] : mapLevels(levels, link.from, link.to!);
    return mapped === null ? null : link.importer.topic(mapped.join('/'));
  }

  private interested(link: Link, topic: string): boolean {
    if (this.depth >= MAX_HOPS) return false;
    const mapped = this.streamTopic(link, topic);
    if (mapped === null) return false;
    this.depth++;
    try {
      return this.host.hasLiveSubscribers(mapped);
    } finally {
      this.depth--;
    }
  }

  /** A message of the exporter on an exported stream: published again in the importer at the mapped subject. */
  private stream(link: Link, msg: Message): void {
    const mapped = this.streamTopic(link, msg.topic);
    if (mapped === null) return;
    const copy = this.cross(msg, link.exporter, link.importer, mapped);
    if (msg.responseTopic !== undefined) {
      const r = moveTopic(msg.responseTopic, link.exporter, link.importer);
      if (r === null) delete copy.responseTopic;
      else copy.responseTopic = r;
    }
    this.publish(copy);
  }

  /** A request of the importer on an imported service: published in the exporter with a reply subject of its own. */
  private request(link: Link, msg: Message): void {
    const own = link.importer.ownTopic(msg.topic);
    if (own === null) return;
    const mapped = mapLevels(own.split('/'), link.from, link.to!);
    if (mapped === null) return;
    const copy = this.cross(msg, link.importer, link.exporter, link.exporter.topic(mapped.join('/')));
    this.stats.requests++;
    const reply = msg.responseTopic;
    if (reply === undefined) {
      delete copy.responseTopic;
      this.publish(copy);
      return;
    }
    const token = `${this.tokenBase}${(this.nextToken++).toString(36)}`;
    const rt = link.exporter.topic(`${REPLY_ROOT}/${token}`);
    copy.responseTopic = rt;
    const now = Date.now();
    this.expire(now);
    this.responses.set(token, {
      to: reply,
      names: link.importer,
      exporter: link.exporter.namespace,
      left: link.responseType === 'singleton' ? 1 : Number.POSITIVE_INFINITY,
      until: now + RESPONSE_TTL_MS,
    });
    let reached: number;
    try {
      const info = this.requestPublisher !== null ? this.requestPublisher(copy, rt) : this.publishInfo(copy);
      reached = info.delivered + info.captured.length + info.queued;
    } catch {
      reached = 0;
    }
    if (reached === 0) {
      // Nobody in the exporter: "no responders" to the requester, as its own account would answer.
      this.responses.delete(token);
      this.stats.noResponders++;
      const status: Message = { topic: reply, payload: Buffer.alloc(0), key: null, headers: [], timestamp: now, qos: 0, retain: false, status: '503' };
      if (!link.importer.isDefault) status.namespace = link.importer.namespace;
      this.publish(status);
    }
  }

  /** A response on an exporter's `_R_.<token>`: back to the requester's reply subject in its namespace. */
  private response(msg: Message): void {
    const { namespace } = splitTopic(msg.topic);
    const own = namespaceNames(namespace).ownTopic(msg.topic);
    if (own === null || !own.startsWith(`${REPLY_ROOT}/`)) return;
    const token = own.slice(REPLY_ROOT.length + 1);
    const m = this.responses.get(token);
    if (m === undefined || m.exporter !== namespace) return;
    if (Date.now() > m.until) {
      this.responses.delete(token);
      return;
    }
    if (--m.left <= 0) this.responses.delete(token);
    this.stats.responses++;
    const from = namespaceNames(namespace);
    const copy = this.cross(msg, from, m.names, m.to);
    if (msg.responseTopic !== undefined) {
      // A response's own reply subject (a JetStream delivery's ack subject) stays a subject of the same name in the
      // requester's namespace: it reaches the exporter when the requester imports it too (nats.js imports $JS.ACK.>).
      const r = moveTopic(msg.responseTopic, from, m.names);
      if (r === null) delete copy.responseTopic;
      else copy.responseTopic = r;
    }
    this.publish(copy);
  }

  /** The copy of `msg` that is published in `to` on `topic`. */
  private cross(msg: Message, from: NamespaceNames, to: NamespaceNames, topic: string): Message {
    this.stats.crossed++;
    const copy: Message = { ...msg, topic, retain: false, origin: `link:${to.namespace}` };
    delete copy.pubKey;
    if (to.isDefault) delete copy.namespace;
    else copy.namespace = to.namespace;
    // The stored subject a JetStream delivery names, and the one its authorization follows, move along.
    if (msg.deliverTopic !== undefined) copy.deliverTopic = moveTopic(msg.deliverTopic, from, to) ?? msg.deliverTopic;
    if (msg.guardTopic !== undefined) copy.guardTopic = moveTopic(msg.guardTopic, from, to) ?? msg.guardTopic;
    // An AMQP exchange and key name the publisher's own objects.
    delete copy.exchange;
    delete copy.routingKey;
    return copy;
  }

  private publishInfo(msg: Message): PublishInfo {
    const info = newPublishInfo();
    this.host.publish(msg, info)?.catch(this.onWriteFailed);
    return info;
  }

  private publish(msg: Message): void {
    try {
      this.host.publish(msg)?.catch(this.onWriteFailed);
    } catch (err) {
      this.onWriteFailed(err);
    }
  }

  /** Drops response maps past their window (oldest first: the map keeps insertion order) and beyond the bound. */
  private expire(now: number): void {
    for (const [k, m] of this.responses) {
      if (m.until > now && this.responses.size < MAX_RESPONSE_MAPS) break;
      this.responses.delete(k);
    }
  }

  /**
   * Is this (internal) topic one its namespace imports as a service? A service of the importer's own that answers
   * the same subject (the JetStream API of every namespace) leaves it to the import, as only the exporter answers it
   * on nats-server.
   */
  shadows(topic: string): boolean {
    for (const l of this.services) {
      const own = l.importer.ownTopic(topic);
      if (own !== null && mapLevels(own.split('/'), l.from, l.from) !== null) return true;
    }
    return false;
  }

  /** Response maps held now (tests, figures). */
  get pendingResponses(): number {
    return this.responses.size;
  }

  /** Drops every link (broker shutdown). */
  close(): void {
    for (const s of this.subs) this.host.unsubscribe(s);
    this.subs = [];
    this.services = [];
    this.sources.clear();
  }
}

/** How specific a subject pattern is: its literal tokens count most, then its length (`*` over `>`). */
function specificity(levels: string[]): number {
  let n = 0;
  for (const l of levels) n += l === '>' ? 0 : l === '*' ? 1 : 1000;
  return n;
}
