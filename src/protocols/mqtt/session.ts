/**
 * MQTT sessions, kept outside connections.
 *
 * An `MqttSession` is the engine's subscriber for one client id: it holds the subscriptions and the inbound
 * QoS 2 state, and lives as long as the MQTT session does (Clean Session / Session Expiry Interval), across
 * connections. While a connection is attached it forwards deliveries to it; while none is, its hub queues QoS 1/2
 * messages in the SessionStore (bounded, drop-oldest), not in process memory. For a persistent session every
 * QoS 1/2 delivery is written through to that store queue until it is acknowledged, connected or not.
 *
 * This file also holds what a session is stored as: the `Delivery` (a message on its way to one client) and its
 * store entry form, the persisted state and will. The hub that keeps the sessions is hub.ts.
 */
import type { Access } from '../../control/index.js';
import type { Message, PubKey, QoS, SubscribeOptions, Subscriber, Subscription } from '../../core/index.js';
import { decodeStoredMessage, encodeStoredMessage, namespaceNames, splitName, type NamespaceNames } from '../../core/index.js';
import type { Properties, ProtocolLevel, Will } from './codec/index.js';
import type { SessionConnection } from './types.js';

/** What a subscription of a session carries for delivery (engine `SubscribeOptions.data`). */
export interface SubData {
  /** The filter as the client sent it (with any `$share/<group>/` prefix). */
  filter: string;
  noLocal: boolean;
  retainAsPublished: boolean;
  retainHandling: 0 | 1 | 2;
  subscriptionId: number | undefined;
}

/** A message on its way to one client: what the connection keeps in flight or queued, and what is stored. */
export interface Delivery {
  msg: Message;
  qos: QoS;
  retain: boolean;
  subIds: number[] | null;
  /** The shared subscription it came through, when only shared ones matched (for redelivery to the group). */
  shared: Subscription | null;
  /** Packet id it was sent with (0: never sent). */
  packetId: number;
  /** QoS 2: PUBREC received, only PUBREL/PUBCOMP remain. */
  released: boolean;
  /** Where its session-store entry stands (persistent sessions write every QoS 1/2 delivery through). */
  stored: StoreState;
  /** Seq of its store entry once known (`stored` is 'stored'), else 0. */
  seq: number;
  /** Packet id or QoS 2 state changed since the entry was written: it is rewritten at the next flush. */
  changed: boolean;
  /**
   * The engine counted its hand-off to the session as delivered (a live publish; not a retained message sent
   * on subscribe nor one read back from the store): if it is dropped, it comes out of `delivered` again.
   */
  counted: boolean;
  /** Waiting for its entry to be rewritten once its append (`stored` 'writing') is done (outbound.ts releasedStored). */
  afterWrite?: Array<() => void>;
}

/**
 * 'none': not in the store. 'queued': to be appended at the next flush. 'writing': appended, seq not known yet.
 * 'stored': in the store under `seq`. 'gone': acknowledged or dropped (removed, or skipped if not written yet).
 */
export type StoreState = 'none' | 'queued' | 'writing' | 'stored' | 'gone';

/** Runs a delivery's `afterWrite` waiters once `done` (its rewrite's flush; null: nothing to wait for) settles. */
export function afterWrite(d: Delivery, done: Promise<void> | null): void {
  const waiters = d.afterWrite ?? [];
  delete d.afterWrite;
  for (const w of waiters) {
    if (done === null) w();
    else void done.then(w);
  }
}

/** A delivery not yet sent nor stored. */
export function newDelivery(msg: Message, qos: QoS, retain: boolean, subIds: number[] | null, shared: Subscription | null, counted: boolean): Delivery {
  return { msg, qos, retain, subIds, shared, packetId: 0, released: false, stored: 'none', seq: 0, changed: false, counted };
}

export interface PersistedSub {
  f: string;
  q: QoS;
  nl?: 1;
  rap?: 1;
  rh?: 1 | 2;
  id?: number;
}

export interface PersistedWill {
  topic: string;
  payload: string; // base64
  qos: QoS;
  retain: boolean;
  props?: { pf?: number; exp?: number; ct?: string; rt?: string; cd?: string; up?: Array<[string, string]>; delay?: number };
  /** When to publish it (ms since epoch) once the connection is gone. */
  at?: number;
}

export interface PersistedState {
  level: ProtocolLevel;
  /** Session Expiry Interval, seconds. */
  expiry: number;
  subs: PersistedSub[];
  /** Inbound QoS 2 packet ids awaiting PUBREL (stored once their message was durable; no publish key). */
  rel: number[];
  /**
   * Inbound QoS 2 packet ids awaiting PUBREL with the sequence of their publish key (Message.pubKey), stored before
   * the message was routed: a PUBLISH re-sent after a restart is routed again with the same key, and destinations
   * that have it already recognise it.
   */
  rs?: Array<[number, number]>;
  /** The session's producer id (its publish keys), once it published QoS 2. */
  pk?: number;
  /** The next sequence of its publish keys. */
  ns?: number;
  /** The user the session's last connection authenticated as (null: anonymous): whose policies its subscriptions follow. */
  u?: string | null;
  /** The will of the attached connection (published if the broker finds it attached at restart), or a pending delayed will. */
  will?: PersistedWill;
}

/**
 * What a connection or session holds in place of a Map or Set until its first entry. An empty Map costs ~200 bytes
 * of heap (the object and its first hash table), an empty Set ~170, and most clients never put anything in some of
 * them (an idle one: nothing in flight, no QoS 2): of the ~6.2 KB of heap an idle MQTT connection held (10,000 of
 * them, `npm run bench -- idle`), the eager in-flight map and QoS 2 map and set were ~560 bytes. One instance of each is shared by everyone; adding to it
 * throws, so a missed swap fails loudly instead of sharing entries between clients.
 */
export class EmptyMap<K, V> extends Map<K, V> {
  override set(): this {
    throw new Error('EmptyMap is shared: take an own Map before adding');
  }
}
export class EmptySet<V> extends Set<V> {
  override add(): this {
    throw new Error('EmptySet is shared: take an own Set before adding');
  }
}
const NO_REL: Set<number> = new EmptySet();
/** An empty array shared by every session; frozen, so adding to it throws (see ownList). */
export const NOTHING = Object.freeze([]) as unknown as never[];

/** `list`, or a new array in place of NOTHING: what a session adds to (`(s.toAppend = ownList(s.toAppend)).push(d)`). */
export function ownList<T>(list: T[]): T[] {
  return list === NOTHING ? [] : list;
}
const NO_REL_PENDING: Map<number, Promise<void>> = new EmptyMap();
const NO_SEQ: Map<number, number> = new EmptyMap();

/** What a session uses of its hub (hub.ts): the offline queue, while no connection is attached. */
export interface SessionHub {
  queueOffline(s: MqttSession, msg: Message, subs: Subscription[]): void;
}

export class MqttSession implements Subscriber {
  readonly id: string;
  conn: SessionConnection | null = null;
  /** By the filter string the client sent. */
  readonly subs = new Map<string, Subscription>();
  /** Inbound QoS 2 ids awaiting PUBREL (NO_REL until the first: most sessions never see QoS 2; see relIds). */
  awaitingRel: Set<number> = NO_REL;
  /**
   * Ids of awaitingRel whose message is not durable yet, with the promise of that: they are not stored with the
   * session until it is. A stored id makes a re-sent PUBLISH a duplicate (section 4.3.3), so storing it before the
   * message lost the message when the broker died in between (`npm run crash-test`: PUBCOMPed messages missing).
   * NO_REL_PENDING until the first (see relPending).
   */
  relNotDurable: Map<number, Promise<void>> = NO_REL_PENDING;
  /**
   * Exactly once across a crash (persistent sessions): the publish key's sequence of each QoS 2 id of awaitingRel
   * routed with one (stored with the session before the message was routed; PersistedState.rs). NO_SEQ until the
   * first.
   */
  relSeq: Map<number, number> = NO_SEQ;
  /**
   * Ids of relSeq read back from the store (a restart, a takeover): whether their message reached every destination
   * is not known here, so a re-sent PUBLISH is routed again with its key (and recognised where it is).
   */
  relUnknown: Map<number, number> = NO_SEQ;
  /** The producer id of this session's publish keys (null until its first keyed QoS 2 publish). */
  producer: number | null = null;
  /** The next sequence of its publish keys. */
  nextSeq = 0;
  /** The allocation of `producer` under way. */
  producerPending: Promise<number> | null = null;
  /**
   * Set while a publish of the session waits to be routed (publish-in.ts routeLater): later ones, also those of a
   * connection that took the session over, follow it in order.
   */
  routeGate: Promise<void> | null = null;
  /**
   * As a destination: the highest publish-key sequence taken per producer (Message.pubKey), so that a QoS 2 publish
   * routed again after its publisher's broker crashed is not delivered twice. Stored with the session's queue.
   */
  marks: Map<number, number> = NO_SEQ;
  level: ProtocolLevel = 4;
  /** Seconds; 0 ends the session with its connection. */
  expiry = 0;
  /** While detached: when the session ends (ms since epoch), or null for never. */
  expiresAt: number | null = null;
  /** A will waiting for its Will Delay Interval (v5) after the connection ended. */
  pendingWill: { will: Will; at: number } | null = null;
  /**
   * Store changes not written yet: deliveries to append, to rewrite (packet id assigned, PUBREC received) and
   * seqs to remove (acknowledged). Written once per tick, in one transaction per session. NOTHING while empty
   * (most sessions, and every session between flushes): add through `pendingWrite`.
   */
  toAppend: Delivery[] = NOTHING;
  toRewrite: Delivery[] = NOTHING;
  toRemove: number[] = NOTHING;
  ended = false;
  /** Store writes of this session that failed (a forwarded publish waiting for it is not acknowledged as stored). */
  failedWrites = 0;
  /**
   * Cluster mode: the epoch under which this broker owns the session ('session' owner row), given with every store
   * write so that a write after another broker took the session over is refused (FENCED). undefined: a single broker.
   */
  epoch: number | undefined = undefined;
  /**
   * The authorization of the identity this session acts for (its connection's, kept while offline so that what is
   * queued for it follows the policies too); null: no access control (stand-alone listeners, tests).
   */
  access: Access | null = null;
  /** The user `access` is for (persisted with the session). */
  user: string | null = null;
  /**
   * The admit predicate of every subscription of this session (engine SubscribeOptions.admit): a delivery on a
   * topic the identity may not subscribe to is skipped, so a policy changed live stops deliveries at once.
   */
  readonly admit = (topic: string): boolean => this.access === null || this.access.admits(this.names.isDefault ? topic : this.names.outTopic(topic));
  /**
   * The session's namespace (core namespaces.ts), read from its key: a session of namespace `t1` is keyed
   * `$ns/t1/<client id>`, so two tenants' client id `c1` are two sessions, in the store and in cluster ownership.
   */
  readonly names: NamespaceNames;

  constructor(
    /** The session key: the client id, qualified by its namespace (NamespaceNames.name). */
    readonly clientId: string,
    private readonly hub: SessionHub,
  ) {
    this.id = `mqtt:${clientId}`;
    this.names = namespaceNames(splitName(clientId).namespace);
  }

  get persistent(): boolean {
    return this.expiry > 0;
  }

  /** `awaitingRel`, the session's own from the first id on (to add to it). */
  relIds(): Set<number> {
    if (this.awaitingRel === NO_REL) this.awaitingRel = new Set();
    return this.awaitingRel;
  }

  /** `relNotDurable`, the session's own from the first entry on (to add to it). */
  relPending(): Map<number, Promise<void>> {
    if (this.relNotDurable === NO_REL_PENDING) this.relNotDurable = new Map();
    return this.relNotDurable;
  }

  /** `relSeq`, the session's own from the first entry on. */
  relSeqs(): Map<number, number> {
    if (this.relSeq === NO_SEQ) this.relSeq = new Map();
    return this.relSeq;
  }

  /** `relUnknown`, the session's own from the first entry on. */
  relUnknowns(): Map<number, number> {
    if (this.relUnknown === NO_SEQ) this.relUnknown = new Map();
    return this.relUnknown;
  }

  /** Notes a publish key delivered here; false when this session took it (or a later one of its producer) already. */
  takeKey(key: PubKey): boolean {
    const m = this.marks.get(key.producer);
    if (m !== undefined && key.seq <= m) return false;
    if (this.marks === NO_SEQ) this.marks = new Map();
    this.marks.set(key.producer, key.seq);
    return true;
  }

  deliver(msg: Message, subs: Subscription[]): void {
    // A QoS 2 publish routed again after its broker crashed (Message.pubKey): delivered once.
    if (msg.pubKey !== undefined && !this.takeKey(msg.pubKey)) return;
    if (this.conn !== null) this.conn.deliver(msg, subs);
    else this.hub.queueOffline(this, msg, subs);
  }

  isAvailable(): boolean {
    return this.conn !== null && this.conn.isConnected;
  }
}

/**
 * The engine options of a subscription of session `s`. A QoS 1/2 subscription of a persistent session that is not
 * shared is `durable` (its key: the session's): in cluster mode a QoS 1/2 publish on another broker is acknowledged
 * only once this session's owner stored it (src/cluster/live-durable.ts).
 */
export function subscribeOptions(s: MqttSession, qos: QoS, group: string | undefined, data: SubData, admit: boolean): SubscribeOptions {
  const o: SubscribeOptions = { qos, group, data };
  if (admit) o.admit = s.admit;
  if (qos > 0 && group === undefined && s.persistent) o.durable = s.clientId;
  return o;
}

// ------------------------------------------------------------------ store entry form

/** u8 flags (qos:2, retain:4, released:8) | u16 packet id | u8 n | u32 subscription id * n | stored message */
export function encodeDelivery(d: Delivery): Buffer {
  const ids = d.subIds ?? [];
  const n = Math.min(ids.length, 255);
  const head = Buffer.allocUnsafe(4 + 4 * n);
  head[0] = d.qos | (d.retain ? 4 : 0) | (d.released ? 8 : 0);
  head.writeUInt16BE(d.packetId, 1);
  head[3] = n;
  for (let k = 0; k < n; k++) head.writeUInt32BE(ids[k], 4 + 4 * k);
  return Buffer.concat([head, encodeStoredMessage(d.msg)]);
}

export function decodeDelivery(b: Buffer): Delivery {
  const n = b[3];
  const subIds: number[] = [];
  for (let k = 0; k < n; k++) subIds.push(b.readUInt32BE(4 + 4 * k));
  return {
    qos: (b[0] & 3) as QoS,
    retain: (b[0] & 4) !== 0,
    released: (b[0] & 8) !== 0,
    packetId: b.readUInt16BE(1),
    subIds: n > 0 ? subIds : null,
    shared: null,
    msg: decodeStoredMessage(b.subarray(4 + 4 * n)),
    stored: 'none',
    seq: 0,
    changed: false,
    counted: false,
  };
}

export function willToJson(w: Will, at?: number): PersistedWill {
  const p = w.properties;
  const out: PersistedWill = { topic: w.topic, payload: w.payload.toString('base64'), qos: w.qos, retain: w.retain };
  if (p) {
    out.props = {
      pf: p.payloadFormatIndicator,
      exp: p.messageExpiryInterval,
      ct: p.contentType,
      rt: p.responseTopic,
      cd: p.correlationData?.toString('base64'),
      up: p.userProperties,
      delay: p.willDelayInterval,
    };
  }
  if (at !== undefined) out.at = at;
  return out;
}

export function willFromJson(j: PersistedWill): Will {
  const w: Will = { topic: j.topic, payload: Buffer.from(j.payload, 'base64'), qos: j.qos, retain: j.retain };
  if (j.props) {
    const p: Properties = {};
    if (j.props.pf !== undefined) p.payloadFormatIndicator = j.props.pf;
    if (j.props.exp !== undefined) p.messageExpiryInterval = j.props.exp;
    if (j.props.ct !== undefined) p.contentType = j.props.ct;
    if (j.props.rt !== undefined) p.responseTopic = j.props.rt;
    if (j.props.cd !== undefined) p.correlationData = Buffer.from(j.props.cd, 'base64');
    if (j.props.up !== undefined) p.userProperties = j.props.up;
    if (j.props.delay !== undefined) p.willDelayInterval = j.props.delay;
    w.properties = p;
  }
  return w;
}

/** The message a will becomes, with its v5 properties [MQTT-3.1.3-9]. */
export function willMessage(w: Will, origin: string, names: NamespaceNames): Message {
  const p = w.properties;
  const msg: Message = {
    // The will is kept as the client wrote it; its topics are qualified when it is published.
    topic: names.topic(w.topic),
    payload: w.payload,
    key: null,
    headers: p?.userProperties ? p.userProperties.map(([k, v]) => ({ key: k, value: Buffer.from(v) })) : [],
    timestamp: Date.now(),
    qos: w.qos,
    retain: w.retain,
    origin,
  };
  if (!names.isDefault) msg.namespace = names.namespace;
  if (p?.messageExpiryInterval !== undefined) msg.expiresAt = Date.now() + p.messageExpiryInterval * 1000;
  if (p?.contentType !== undefined) msg.contentType = p.contentType;
  if (p?.responseTopic !== undefined) msg.responseTopic = names.topic(p.responseTopic);
  if (p?.correlationData !== undefined) msg.correlationData = p.correlationData;
  if (p?.payloadFormatIndicator !== undefined) msg.payloadFormat = p.payloadFormatIndicator;
  return msg;
}

/** `$share/<group>/<filter>` -> group and filter; anything else is a plain filter. */
export function splitShared(f: string): { group: string | undefined; filter: string } {
  if (!f.startsWith('$share/')) return { group: undefined, filter: f };
  const slash = f.indexOf('/', 7);
  if (slash < 0) return { group: '', filter: '' };
  return { group: f.slice(7, slash), filter: f.slice(slash + 1) };
}
