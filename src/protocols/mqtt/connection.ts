/**
 * One MQTT connection (3.1, 3.1.1 and 5.0): protocol state for one client over any Duplex stream (TCP, TLS,
 * WebSocket stream, a test pair). It talks to the routing core only (`ctx.engine`) and keeps session state in
 * its `MqttSession` (see session.ts), never in storage directly.
 *
 * Inbound: bytes -> codec -> packets -> engine.publish / subscribe / unsubscribe.
 * Outbound: the engine calls the session's `deliver()` synchronously for every matching publish; the session
 * forwards it here, where it becomes a PUBLISH frame under flow control (in-flight window = min(maxInflight,
 * the client's Receive Maximum), bounded queue, write high-water mark), so a slow consumer can never make
 * the broker's memory grow without bound.
 *
 * Timers: none per connection. The hub's shared tick calls `checkTimers()` (connect timeout, keep-alive).
 */
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { startSaslExchange, type Access, type AccessControl, type ClientEntry, type Principal, type QuotaLease, type SaslExchange } from '../../control/index.js';
import type { Message, QoS, QueueDelivery, Subscription } from '../../core/index.js';
import { isFlowError, validateFilter } from '../../core/index.js';
import { logKey } from '../../util/log-limit.js';
import type { AdapterContext } from '../types.js';
import { storageRefusal } from '../storage-refusal.js';
import {
  ConnackCode,
  INCOMPLETE,
  MqttProtocolError,
  ReasonCode,
  SUBACK_FAILURE,
  encodeAuth,
  encodeConnack,
  encodeDisconnect,
  encodeIdOnly,
  encodePublishFrame,
  encodeSuback,
  encodeUnsuback,
  parsePacket,
  peekFrameLength,
  type AuthPacket,
  type ConnectPacket,
  type DisconnectPacket,
  type MqttPacket,
  type Properties,
  type ProtocolLevel,
  type PublishPacket,
  type SubscribePacket,
  type SubscriptionRequest,
  type UnsubscribePacket,
  type Will,
} from './codec/index.js';
import { EXPIRY_NEVER, resolveMqttOptions, type AuthResult, type EnhancedAuthResult, type MqttOptions, type ResolvedMqttOptions } from './options.js';
import {
  EmptyMap,
  MqttHub,
  newDelivery,
  splitShared,
  type Delivery,
  type MqttDropCounts,
  type MqttSession,
  type SubData,
} from './session.js';
import type { SessionConnection } from './types.js';
import { MqttQueueConsumer, QUEUE_PREFIX, isQueueBound, type QueueBoundDelivery, type QueueConsumerHost } from './queue-consumer.js';

// ------------------------------------------------------------------ connection

const enum State {
  AwaitingConnect,
  Authenticating,
  Connected,
  Closed,
}

/** Why the connection ends; decides the will, the v5 DISCONNECT reason and how the socket is closed. */
type CloseKind =
  /** Client sent DISCONNECT: no will [MQTT-3.14.4-3] (v5: unless reason 0x04). */
  | 'disconnect'
  /** Client vanished or broke the protocol: will is published, socket destroyed. */
  | 'abnormal'
  /** Server-side close after a final packet (CONNACK refusal, v5 DISCONNECT): will published, flush, then end. */
  | 'refused'
  /** Another connection took the client id over: will is published. */
  | 'takeover'
  /** Listener shutting down: no will, flush, then end. */
  | 'shutdown';

/** An inbound QoS 1/2 publish whose PUBACK / PUBREC waits for durability; sent strictly in arrival order. */
interface PendingAck {
  /** 'none': a QoS 0 publish being stored, held in line so that it counts towards maxPendingAcks. */
  type: 'puback' | 'pubrec' | 'none';
  packetId: number;
  done: boolean;
  reason: number;
}

/**
 * Replies to the client's own packets (PINGRESP, SUBACK, UNSUBACK, PUBACK, PUBREC, PUBREL, PUBCOMP) written and not
 * yet taken by the socket. A client that sends and never reads would otherwise grow this without bound: 2 bytes of
 * PINGREQ cost a 2-byte PINGRESP plus ~100 bytes of write queue entry each (10 MB of PINGREQs took +355 MB of RSS).
 * Past `maxPendingAcks` replies the connection stops reading until half of them are out (`paused`); one whose
 * replies then make no progress for `packetTimeoutMs` is closed. Kept only while replies are out (an idle
 * connection holds none).
 */
interface ReplyBacklog {
  unsent: number;
  /** Replies taken by the socket since the backlog began (progress). */
  taken: number;
  /** Reading is paused for this backlog alone. */
  paused: boolean;
  /** When `taken` last moved while paused, and its value then. */
  since: number;
  seen: number;
  /** The write callback of every reply. */
  readonly done: () => void;
}

export interface MqttConnectionStats {
  /** Outbound messages dropped by flow control (slow consumer, too large for the client, expired). */
  dropped: number;
  publishesIn: number;
  publishesOut: number;
}

const PINGRESP = Buffer.from([0xd0, 0x00]);

/** Where a connection's stream keeps its connection, for the stream's listeners (MqttConnection.onStreamData...). */
const CONNECTION = Symbol('MqttConnection');
type ConnectionStream = Duplex & { [CONNECTION]: MqttConnection };

/** The in-flight map of every connection with nothing in flight yet (see EmptyMap). */
const NO_INFLIGHT: Map<number, Delivery> = new EmptyMap();
/** `pending` holding nothing: shared, frozen (adding to it throws). */
const NO_BUFFERS = Object.freeze([]) as unknown as Buffer[];

/**
 * Fan-out cache: the engine delivers one message to every matching subscriber back to back, and a QoS 0
 * frame with retain=0 and no per-subscriber properties is the same bytes for all of them, so it is encoded
 * once per protocol generation.
 */
let lastFrameMsg: Message | null = null;
let lastFrame4: Buffer | null = null;
let lastFrame5: Buffer | null = null;

function plainQos0Frame(msg: Message, v5: boolean): Buffer {
  if (msg !== lastFrameMsg) {
    lastFrameMsg = msg;
    lastFrame4 = lastFrame5 = null;
  }
  // [MQTT-3.3.1-9] live deliveries carry RETAIN 0 (unless Retain As Published, which takes the slow path).
  if (v5) return (lastFrame5 ??= encodePublishFrame(msg.topic, msg.payload, 0, false, false, 0, messageProps(msg, Date.now())));
  return (lastFrame4 ??= encodePublishFrame(msg.topic, msg.payload, 0, false, false, 0));
}

/**
 * The v5 PUBLISH properties a message carries to every subscriber (before subscription ids and alias). A message
 * from another protocol (a Kafka record's flowmq.* headers, an AMQP publish) may hold what no MQTT publisher could
 * send; such a property is left out rather than sent malformed, which would make the client close the connection
 * [MQTT-1.5.4-2] [MQTT-3.3.2-4] [MQTT-3.3.2-14]: a payload format other than 0 or 1, a response topic that is not a
 * topic name, strings with U+0000 or over 65535 bytes, binary data over 65535 bytes. The expiry is capped at the
 * largest interval MQTT can say (about 136 years).
 */
function messageProps(msg: Message, now: number): Properties {
  const p: Properties = {};
  if (msg.payloadFormat === 0 || msg.payloadFormat === 1) p.payloadFormatIndicator = msg.payloadFormat;
  // [MQTT-3.3.2-6] the interval sent is the time the message has left.
  if (msg.expiresAt !== undefined) p.messageExpiryInterval = Math.min(0xffffffff, Math.max(1, Math.ceil((msg.expiresAt - now) / 1000)));
  if (msg.contentType !== undefined && isMqttString(msg.contentType)) p.contentType = msg.contentType;
  if (msg.responseTopic !== undefined && isMqttString(msg.responseTopic) && msg.responseTopic !== '' && !/[+#]/.test(msg.responseTopic)) {
    p.responseTopic = msg.responseTopic;
  }
  if (msg.correlationData !== undefined && msg.correlationData.length <= 0xffff) p.correlationData = msg.correlationData;
  // [MQTT-3.3.2-17] [MQTT-3.3.2-18] user properties are forwarded unaltered and in order.
  if (msg.headers.length > 0) {
    const up: Array<[string, string]> = [];
    for (const h of msg.headers) {
      const v = h.value === null ? '' : h.value.toString('utf8');
      if (isMqttString(h.key) && isMqttString(v)) up.push([h.key, v]);
    }
    if (up.length > 0) p.userProperties = up;
  }
  return p;
}

/** An MQTT UTF-8 string: at most 65535 bytes, no U+0000 [MQTT-1.5.4-1] [MQTT-1.5.4-2]. */
function isMqttString(s: string): boolean {
  return (s.length <= 0x5555 || Buffer.byteLength(s) <= 0xffff) && !s.includes('\u0000');
}

const isPlain = (msg: Message): boolean => msg.headers.length === 0 && msg.expiresAt === undefined;

export interface MqttConnectionInit {
  options?: MqttOptions | ResolvedMqttOptions;
  /** The broker's MQTT hub (sessions, registry, shared tick); a private one when omitted. */
  hub?: MqttHub;
  /** Peer address for logs. */
  remote?: string;
  /** Listener name for the client registry ("mqtt", "mqtts", "mqtt-ws"). */
  listener?: string;
  /** The transport's byte counters for the client registry (the TCP socket, also under a WebSocket). */
  socket?: { readonly bytesRead: number; readonly bytesWritten: number };
  /**
   * The login a verified client certificate gives (mTLS on the TLS listener, src/control/certs.ts): null when it
   * gives none, the user it names, or 'bad' when the directory has no such user. Credentials in CONNECT win.
   */
  certificate?: () => CertificateLogin;
}

export type CertificateLogin = { verdict: 'ok'; user: string; principal: Principal } | { verdict: 'bad'; user: string } | null;

/** The SASL mechanisms MQTT 5.0 enhanced authentication offers (Authentication Method names as the SASL ones). */
const SCRAM_METHODS: ReadonlySet<string> = new Set(['SCRAM-SHA-256', 'SCRAM-SHA-512']);

export class MqttConnection implements QueueConsumerHost, SessionConnection {
  clientId = '';
  readonly remote: string;
  /**
   * The peer's address without its port (undefined when unknown): the key of its rate-limited log lines and of
   * the authenticator's per-address throttle.
   */
  private readonly address: string | undefined;
  readonly stats: MqttConnectionStats = { dropped: 0, publishesIn: 0, publishesOut: 0 };
  /** Resolves once the stream has closed and every resource is released. */
  readonly closed: Promise<void>;

  private readonly opts: ResolvedMqttOptions;
  private readonly hub: MqttHub;
  private readonly ownHub: boolean;
  private session: MqttSession | null = null;
  private state = State.AwaitingConnect;
  private level: ProtocolLevel = 4;
  private will: Will | null = null;
  private keepaliveMs = 0;
  private lastRx = Date.now();
  private readonly openedAt = Date.now();
  private lingerTimer: NodeJS.Timeout | null = null;
  private resolveClosed!: () => void;

  // inbound bytes not parsed yet (NO_BUFFERS when none), and how many are needed before parsing can progress
  private pending: Buffer[] = NO_BUFFERS;
  private pendingBytes = 0;
  private needBytes = 0;
  /** Bytes of `pending` counted in the hub's `partialBytes`. */
  private held = 0;
  /** When the packet now held unfinished started arriving (0: none). */
  private partialSince = 0;
  /**
   * Reading paused by us (async authentication, session load, too many inbound acks waiting for storage, or too
   * many replies the client has not read).
   */
  private readPaused = false;
  /** Replies not yet taken by the socket; null while there are none (see ReplyBacklog). */
  private replies: ReplyBacklog | null = null;

  // inbound QoS 1/2
  private readonly acks: PendingAck[] = [];
  private acksHead = 0;
  /** Inbound QoS 1 publishes not acknowledged yet (v5 Receive Maximum accounting). */
  private inQos1 = 0;
  private inAliases: Map<number, string> | null = null;

  // v5 client limits
  private clientReceiveMax = 65535;
  private clientMaxPacket = Number.MAX_SAFE_INTEGER;
  private clientAliasMax = 0;
  private outAliases: Map<string, number> | null = null;
  private requestProblemInfo = true;
  private authMethod: string | null = null;
  private authStep = 0;
  private pendingConnect: ConnectPacket | null = null;

  // control plane (null without opts.access)
  /** What this connection's identity may do; set at login. */
  private access: Access | null = null;
  /** Its namespace's quotas, held from login to close. */
  private lease: QuotaLease | null = null;
  /** Its entry in the client registry, from accept to close. */
  private readonly client: ClientEntry | null = null;
  /** A SCRAM exchange under way (CONNECT, or a re-authentication). */
  private scram: SaslExchange | null = null;
  /** Enhanced authentication is the control plane's SCRAM (not the `enhancedAuth` hook). */
  private scramAuth = false;
  /** Reading is held back by a quota until this timer fires. */
  private throttleTimer: NodeJS.Timeout | null = null;
  private readonly certificate: (() => CertificateLogin) | null;

  // outbound
  /** By packet id; NO_INFLIGHT until the first QoS 1/2 delivery (see ownInflight). */
  private inflight: Map<number, Delivery> = NO_INFLIGHT;
  private nextPacketId = 1;
  private queue: Delivery[] = [];
  private queueHead = 0;
  /** While the stored queue of a resumed session is being read, new deliveries wait behind it. */
  private restoring = false;
  /**
   * Messages that matched the session between attach and CONNACK (the session's subscriptions are live from the
   * attach on, and a storage completion can publish in a microtask in between): delivered once connected, in
   * order, or handed back to the session if the connection closes first. Bounded by the session queue's size.
   */
  private early: Array<{ msg: Message; subs: Subscription[] }> | null = null;
  private corked = false;
  /** `$queue/<name>` subscriptions by filter (queue-consumer.ts); they last as long as the connection. */
  private queueSubs: Map<string, MqttQueueConsumer> | null = null;
  /** Queue consumers subscribed by the SUBSCRIBE being handled, started once its SUBACK is out. */
  private queueStarts: MqttQueueConsumer[] | null = null;
  /** A 'drain' listener is waiting to resume the queue consumers. */
  private drainArmed = false;
  // Callbacks made on first use and kept (through the getters below): a closure costs 56 bytes of heap, and an
  // idle connection needs none of them but `uncork`.
  private queueAckErrorFn: ((err: unknown) => void) | null = null;
  private drainFn: (() => void) | null = null;
  private uncorkFn: (() => void) | null = null;

  private get onQueueAckError(): (err: unknown) => void {
    return (this.queueAckErrorFn ??= (err: unknown) => {
      this.logLimited('warn', 'queue ack failed', { clientId: this.clientId, remote: this.remote, err: errText(err) }, 'mqtt queue ack failed');
    });
  }

  private get onDrain(): () => void {
    return (this.drainFn ??= () => {
      this.drainArmed = false;
      this.resumeQueues();
    });
  }

  private get uncork(): () => void {
    return (this.uncorkFn ??= () => {
      this.corked = false;
      this.stream.uncork();
    });
  }

  private onDurableError(err: unknown): void {
    if (this.state === State.Closed) return;
    this.ctx.logger.warn(
      { clientId: this.clientId, remote: this.remote, err: errText(err) },
      'mqtt publish could not be stored, closing connection',
    );
    // 3.1.1 has no negative PUBACK: closing tells the client the message was not accepted. v5 says why.
    this.disconnectWith(ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, 'message could not be stored');
  }

  constructor(
    private readonly stream: Duplex,
    private readonly ctx: AdapterContext,
    init: MqttConnectionInit = {},
  ) {
    this.opts = init.hub?.opts ?? resolveMqttOptions(init.options);
    this.ownHub = init.hub === undefined;
    if (init.hub) this.hub = init.hub;
    else {
      this.hub = new MqttHub(ctx, { ...this.opts, sysIntervalMs: 0 });
      void this.hub.start();
    }
    this.hub.connections.add(this);
    this.remote = init.remote ?? 'unknown';
    this.address = addressOf(this.remote);
    this.certificate = init.certificate ?? null;
    const ac = this.opts.access;
    if (ac !== null) {
      const port = Number(this.remote.slice(this.remote.lastIndexOf(':') + 1));
      const sock = init.socket ?? (isByteCounter(stream) ? stream : undefined);
      this.client = ac.clients.register({
        protocol: 'mqtt',
        listener: init.listener ?? 'mqtt',
        remoteAddress: this.address,
        remotePort: Number.isInteger(port) && port > 0 ? port : undefined,
        socket: sock,
        kick: (reason) => this.kick(reason),
      });
    }
    this.closed = new Promise((resolve) => {
      this.resolveClosed = resolve;
    });
    (stream as ConnectionStream)[CONNECTION] = this;
    stream.on('data', MqttConnection.onStreamData);
    stream.on('error', MqttConnection.onStreamError);
    // EOF without DISCONNECT is an abnormal end: the will is published [MQTT-3.1.2-8].
    stream.on('end', MqttConnection.onStreamEnd);
    stream.on('close', MqttConnection.onStreamClose);
    if (this.ownHub) {
      // A stand-alone connection (tests) has nobody else to run the tick.
      setTimeout(() => this.checkTimers(Date.now()), this.opts.connectTimeoutMs + 1).unref();
    }
  }

  // The stream's listeners: the same four functions for every connection, each finding its connection on the
  // stream (`this` in an event listener), instead of four closures and their context per connection (~260 bytes).
  private static onStreamData(this: ConnectionStream, chunk: Buffer): void {
    this[CONNECTION].receive(chunk);
  }

  private static onStreamError(this: ConnectionStream, err: Error): void {
    const c = this[CONNECTION];
    c.logLimited('debug', 'socket error', { clientId: c.clientId, remote: c.remote, err: err.message }, 'mqtt socket error');
    c.close('abnormal');
  }

  private static onStreamEnd(this: ConnectionStream): void {
    this[CONNECTION].close('abnormal');
  }

  private static onStreamClose(this: ConnectionStream): void {
    const c = this[CONNECTION];
    c.close('abnormal');
    c.finish();
  }

  /** `inflight`, the connection's own from the first delivery in flight on (to add to it). */
  private ownInflight(): Map<number, Delivery> {
    if (this.inflight === NO_INFLIGHT) this.inflight = new Map();
    return this.inflight;
  }

  /** Outbound messages queued behind the in-flight window. */
  get queued(): number {
    return this.queue.length - this.queueHead;
  }

  get inflightCount(): number {
    return this.inflight.size;
  }

  get isConnected(): boolean {
    return this.state === State.Connected;
  }

  get protocolLevel(): ProtocolLevel {
    return this.level;
  }

  /** The will of this connection, while it has one (persisted with the session). */
  get currentWill(): Will | null {
    return this.will;
  }

  /** Closes the connection for a broker shutdown (no will; v5 DISCONNECT 0x8B); resolves when closed. */
  shutdown(): Promise<void> {
    if (this.state === State.Connected && this.level === 5) {
      this.send(encodeDisconnect(5, ReasonCode.SERVER_SHUTTING_DOWN));
    }
    this.close('shutdown');
    return this.closed;
  }

  /**
   * An administrator kicked the client (client registry): v5 DISCONNECT 0x98 Administrative action, 3.1.1 a plain
   * close (it has no way to say why). The will is published, as for any close the client did not ask for.
   */
  kick(reason: string): void {
    if (this.state === State.Closed) return;
    this.ctx.logger.info({ clientId: this.clientId || undefined, remote: this.remote, reason }, 'mqtt client kicked');
    if (this.state !== State.Connected) {
      this.close('abnormal');
      return;
    }
    this.disconnectWith(ReasonCode.ADMINISTRATIVE_ACTION, reason);
  }

  /** Another connection took this client id over [MQTT-3.1.4-3]: v5 DISCONNECT 0x8E, will published. */
  takenOver(): void {
    if (this.state === State.Closed) return;
    if (this.level === 5 && this.state === State.Connected) this.send(encodeDisconnect(5, ReasonCode.SESSION_TAKEN_OVER));
    this.close('takeover');
  }

  /**
   * Cluster mode: the session leaves this broker without its client having been taken over here: this broker hands
   * it over as it leaves (v5 DISCONNECT 0x8B Server shutting down) or lost it (another broker owns it now: 0x8E).
   * No will from here: the session's stored state has it for its next owner, as for a broker shutdown.
   */
  sessionMoved(reason: typeof ReasonCode.SERVER_SHUTTING_DOWN | typeof ReasonCode.SESSION_TAKEN_OVER): void {
    if (this.state === State.Closed) return;
    if (this.state === State.Connected && this.level === 5) this.send(encodeDisconnect(5, reason));
    this.close('shutdown');
  }

  /** Called by the hub's shared tick: connect timeout, packet timeout, keep-alive. */
  checkTimers(now: number): void {
    if (this.state === State.Closed) return;
    const b = this.replies;
    if (b !== null && b.paused) {
      if (b.taken !== b.seen) {
        b.seen = b.taken;
        b.since = now;
      } else if (now - b.since >= this.opts.packetTimeoutMs) {
        this.logLimited(
          'info',
          'replies unread',
          { clientId: this.clientId || undefined, remote: this.remote, unsentReplies: b.unsent, bufferedBytes: this.stream.writableLength, packetTimeoutMs: this.opts.packetTimeoutMs },
          'mqtt client does not read its replies, closing connection',
        );
        // v5: 0x97 as for a slow consumer; the client is not reading it anyway.
        this.disconnectWith(ReasonCode.QUOTA_EXCEEDED, `replies not read within ${this.opts.packetTimeoutMs} ms`);
        return;
      }
    }
    // A packet that has started must finish in time, whatever the keep-alive (0 turns keep-alive off): a client
    // must not pin a partial packet's memory forever. While we hold reading paused its bytes wait in the
    // socket: not its fault (resumeReading starts the clock again).
    if (this.partialSince !== 0 && !this.readPaused && now - this.partialSince >= this.opts.packetTimeoutMs) {
      this.hub.stats.packetTimeouts++;
      this.logLimited(
        'info',
        'packet timeout',
        { clientId: this.clientId || undefined, remote: this.remote, heldBytes: this.pendingBytes, packetTimeoutMs: this.opts.packetTimeoutMs },
        'mqtt packet not completed in time, closing connection',
      );
      // v5: 0x8D, the one reason code (section 3.14.2.1) for a client that did not send in time.
      this.disconnectWith(ReasonCode.KEEP_ALIVE_TIMEOUT, `packet not completed within ${this.opts.packetTimeoutMs} ms`);
      return;
    }
    if (this.state === State.AwaitingConnect || (this.state === State.Authenticating && this.session === null && !this.readPaused)) {
      // [MQTT-3.1.0-1] the first packet must be CONNECT, and it must come reasonably soon.
      if (now - this.openedAt >= this.opts.connectTimeoutMs) {
        this.logLimited('info', 'connect timeout', { remote: this.remote }, 'mqtt connect timeout, closing connection');
        this.close('abnormal');
      }
      return;
    }
    if (this.state !== State.Connected || this.keepaliveMs === 0 || this.readPaused) return;
    // [MQTT-3.1.2-24] close if nothing arrives for 1.5 x keep-alive. While we hold reading paused the
    // client's packets wait in the socket: not its fault.
    if (now - this.lastRx >= this.keepaliveMs * 1.5) {
      this.logLimited(
        'info',
        'keep-alive timeout',
        { clientId: this.clientId, remote: this.remote, keepalive: this.keepaliveMs / 1000 },
        'mqtt keep-alive timeout, closing connection',
      );
      this.disconnectWith(ReasonCode.KEEP_ALIVE_TIMEOUT, 'keep alive timeout');
    }
  }

  // ---------------------------------------------------------------- inbound bytes

  private receive(chunk: Buffer): void {
    this.lastRx = Date.now();
    if (this.state === State.Closed) return;
    // The usual case, nothing held: the chunk is parsed as it came (no array per read).
    if (this.pendingBytes === 0 && !this.readPaused) {
      this.parse(chunk);
      return;
    }
    if (this.pending === NO_BUFFERS) this.pending = [];
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    // A large packet arrives in many chunks: collect them and parse once it is complete.
    if (this.pendingBytes < this.needBytes || this.readPaused) {
      this.hold();
      return;
    }
    this.parse(null);
  }

  /**
   * Counts the bytes held in `pending` (an unfinished packet, or what arrived while reading is paused) in the
   * hub-wide `partialBytes`. When this connection's growth would take the total over `maxPartialBytes` it is
   * this connection that is closed, never one that already holds its share.
   */
  private hold(): void {
    const n = this.pendingBytes;
    const total = this.hub.partialBytes - this.held + n;
    if (n > this.held && total > this.opts.maxPartialBytes) {
      this.hub.stats.partialBytesRefused++;
      this.logLimited(
        'warn',
        'partial bytes',
        { clientId: this.clientId || undefined, remote: this.remote, heldBytes: n, partialBytes: this.hub.partialBytes, maxPartialBytes: this.opts.maxPartialBytes },
        'mqtt unfinished packets over the memory limit, closing connection',
      );
      // v5 section 3.14.2.1: 0x97 Quota exceeded, "an implementation or administrative imposed limit has been
      // exceeded". Not 0x95 (Packet too large): the packet is within the Maximum Packet Size.
      this.disconnectWith(ReasonCode.QUOTA_EXCEEDED, 'server memory for unfinished packets is exhausted');
      return;
    }
    this.hub.partialBytes = total;
    if (total > this.hub.partialBytesPeak) this.hub.partialBytesPeak = total;
    this.held = n;
    if (this.partialSince === 0) this.partialSince = Date.now();
  }

  /** Nothing held any more. */
  private release(): void {
    this.hub.partialBytes -= this.held;
    this.held = 0;
    this.partialSince = 0;
  }

  /** Parses `chunk` (nothing was held), or else what `pending` holds. */
  private parse(chunk: Buffer | null): void {
    const buf = chunk ?? (this.pending.length === 1 ? this.pending[0] : Buffer.concat(this.pending, this.pendingBytes));
    this.pending = NO_BUFFERS;
    this.pendingBytes = 0;
    this.needBytes = 0;
    let off = 0;
    try {
      while (off < buf.length && !this.readPaused && this.state !== State.Closed) {
        const r = parsePacket(buf, off, this.opts.maxPacketSize, this.level);
        if (r === INCOMPLETE) {
          const need = peekFrameLength(buf, off);
          this.needBytes = need > 0 ? need : 0;
          break;
        }
        off += r.bytesConsumed;
        this.handle(r.packet);
      }
    } catch (err) {
      this.fail(err);
      return;
    }
    if (off < buf.length && this.state !== State.Closed) {
      // A tail is copied: a view would keep the whole chunk (up to a full packet) in memory for a few bytes.
      const rest = off === 0 ? buf : Buffer.from(buf.subarray(off));
      this.pending = [rest];
      this.pendingBytes = rest.length;
      // Packets were consumed: what is left is a new packet, its clock starts now.
      if (off > 0) this.partialSince = 0;
      this.hold();
    } else if (this.held !== 0 || this.partialSince !== 0) this.release();
  }

  private pauseReading(): void {
    if (this.readPaused) return;
    this.readPaused = true;
    this.stream.pause();
  }

  private resumeReading(): void {
    // A quota's hold-back ends on its own timer (throttle()), not with the other reasons to pause.
    if (!this.readPaused || this.state === State.Closed || this.throttleTimer !== null) return;
    // Too many replies unread: reading waits for them alone now (replyTaken resumes it).
    const b = this.replies;
    if (b !== null && b.unsent >= this.opts.maxPendingAcks) {
      this.holdForReplies(b);
      return;
    }
    this.readPaused = false;
    if (this.pendingBytes > 0 && this.pendingBytes >= this.needBytes) this.parse(null);
    // The rest of a packet may have waited in the socket while we did not read: its clock starts again.
    if (this.partialSince !== 0) this.partialSince = Date.now();
    // parse() may have closed the connection or paused again.
    if (!this.readPaused && (this.state as State) !== State.Closed) this.stream.resume();
  }

  /** Protocol errors close this connection only, with one log line; anything else is a bug, logged as such. */
  private fail(err: unknown): void {
    if (this.state === State.Closed) return;
    if (err instanceof MqttProtocolError) {
      this.logLimited(
        'warn',
        'protocol error',
        { clientId: this.clientId || undefined, remote: this.remote, err: err.message },
        'mqtt protocol error, closing connection',
      );
      if (this.state === State.AwaitingConnect) {
        if (err.protocolLevel === 5) {
          // [MQTT-4.13.1-1] a v5 CONNECT that is malformed or breaks the protocol gets a CONNACK with the reason.
          this.send(encodeConnack({ type: 'connack', sessionPresent: false, returnCode: err.reasonCode, properties: {} }, 5));
          this.close('refused');
          return;
        }
        if (err.connackReturnCode !== undefined) {
          this.send(encodeConnack({ type: 'connack', sessionPresent: false, returnCode: err.connackReturnCode }));
          this.close('refused');
          return;
        }
        this.close('abnormal');
        return;
      }
      // [MQTT-4.13.2-1] v5: a DISCONNECT with the reason code before closing.
      this.disconnectWith(err.reasonCode, err.reason);
      return;
    }
    this.ctx.logger.error(
      { clientId: this.clientId || undefined, remote: this.remote, err },
      'mqtt connection failed unexpectedly, closing it',
    );
    this.disconnectWith(ReasonCode.UNSPECIFIED_ERROR, 'internal error');
  }

  /** A line a client can trigger: at a bounded rate per address (and overall), with the count of what was suppressed. */
  private logLimited(level: 'debug' | 'info' | 'warn', event: string, fields: Record<string, unknown>, msg: string): void {
    this.hub.logLimit.log(level, logKey(`mqtt ${event}`, this.address), fields, msg);
  }

  /** Server-initiated close: v5 gets a DISCONNECT with `reason` first [MQTT-3.14.0-1]; the will goes out. */
  private disconnectWith(reason: number, text: string): void {
    if (this.state === State.Closed) return;
    if (this.level === 5 && this.state === State.Connected) {
      this.send(encodeDisconnect(5, reason, this.requestProblemInfo ? { reasonString: text } : undefined));
      this.close('refused');
    } else {
      this.close('abnormal');
    }
  }

  // ---------------------------------------------------------------- packets

  private handle(p: MqttPacket): void {
    if (this.state === State.AwaitingConnect) {
      if (p.type !== 'connect') throw new MqttProtocolError(`first packet is ${p.type}, not connect`, '[MQTT-3.1.0-1]');
      this.onConnect(p);
      return;
    }
    if (this.state === State.Authenticating) {
      // [MQTT-4.12.0-4] during enhanced authentication only AUTH (or DISCONNECT) may come.
      if (p.type === 'auth') this.onAuth(p);
      else if (p.type === 'disconnect') this.close('disconnect');
      else throw new MqttProtocolError(`${p.type} during authentication`, '[MQTT-4.12.0-4]', undefined, ReasonCode.PROTOCOL_ERROR);
      return;
    }
    switch (p.type) {
      case 'publish':
        this.onPublish(p);
        return;
      case 'puback':
        this.onPuback(p.packetId);
        return;
      case 'pubrec':
        this.onPubrec(p.packetId, p.reasonCode ?? 0);
        return;
      case 'pubrel':
        this.onPubrel(p.packetId);
        return;
      case 'pubcomp':
        this.onPubcomp(p.packetId);
        return;
      case 'subscribe':
        this.onSubscribe(p);
        return;
      case 'unsubscribe':
        this.onUnsubscribe(p);
        return;
      case 'pingreq':
        this.reply(PINGRESP); // [MQTT-3.12.4-1]
        return;
      case 'disconnect':
        this.onDisconnect(p);
        return;
      case 'auth':
        this.onAuth(p);
        return;
      case 'connect':
        throw new MqttProtocolError('second CONNECT', '[MQTT-3.1.0-2]', undefined, ReasonCode.PROTOCOL_ERROR);
      default:
        // CONNACK, SUBACK, UNSUBACK, PINGRESP travel server to client only.
        throw new MqttProtocolError(`${p.type} is not a client-to-server packet`, '[MQTT-4.8.0-1]', undefined, ReasonCode.PROTOCOL_ERROR);
    }
  }

  // ---------------------------------------------------------------- CONNECT and authentication

  private onConnect(p: ConnectPacket): void {
    this.level = p.protocolLevel;
    const props = p.properties ?? {};
    let clientId = p.clientId;
    if (clientId.length === 0) {
      if (!p.cleanSession && this.level !== 5) {
        // [MQTT-3.1.3-8] an empty id only makes sense for a session that is not kept.
        this.refuse(ConnackCode.IDENTIFIER_REJECTED, 'empty client id with clean session 0 [MQTT-3.1.3-8]');
        return;
      }
      // [MQTT-3.1.3-6] (v5 [MQTT-3.1.3-6] too, returned as Assigned Client Identifier [MQTT-3.2.2-16]).
      clientId = `flowmq-${randomBytes(8).toString('hex')}`;
      this.assignedId = clientId;
    }
    this.clientId = clientId;
    this.keepaliveMs = p.keepalive * 1000;
    this.will = p.will;
    if (this.level === 5) {
      this.clientReceiveMax = props.receiveMaximum ?? 65535;
      this.clientMaxPacket = props.maximumPacketSize ?? Number.MAX_SAFE_INTEGER;
      this.clientAliasMax = props.topicAliasMaximum ?? 0;
      this.requestProblemInfo = props.requestProblemInformation !== 0;
      this.requestResponse = props.requestResponseInformation;
    }
    if (!this.hub.hasRoom()) {
      this.hub.stats.connectionsRefused++;
      this.refuse(this.level === 5 ? ReasonCode.QUOTA_EXCEEDED : ConnackCode.SERVER_UNAVAILABLE, 'connection limit reached');
      return;
    }
    if (props.authenticationMethod !== undefined && this.opts.access !== null && SCRAM_METHODS.has(props.authenticationMethod)) {
      // [MQTT-4.12] enhanced authentication with SCRAM: the client-first message comes in the CONNECT.
      this.authMethod = props.authenticationMethod;
      this.scramAuth = true;
      this.pendingConnect = p;
      this.state = State.Authenticating;
      this.scram = startSaslExchange(this.opts.access.guard, this.authMethod as 'SCRAM-SHA-256' | 'SCRAM-SHA-512', this.address, { protocol: 'mqtt' });
      this.scramStep(props.authenticationData ?? Buffer.alloc(0), false);
      return;
    }
    if (props.authenticationMethod !== undefined) {
      // Under the control plane only its SCRAM methods are offered: a hook's 'ok' would carry no identity.
      const hook = this.opts.access !== null ? null : this.opts.enhancedAuth;
      if (hook === null) {
        this.refuse(ReasonCode.BAD_AUTHENTICATION_METHOD, `authentication method ${props.authenticationMethod} is not supported`);
        return;
      }
      this.authMethod = props.authenticationMethod;
      this.pendingConnect = p;
      this.state = State.Authenticating;
      this.runEnhancedAuth(props.authenticationData ?? null, false);
      return;
    }
    if (this.opts.access !== null) {
      this.pendingConnect = p;
      // [MQTT-3.1.4-5] nothing after CONNECT is processed before the CONNECT is accepted.
      this.state = State.Authenticating;
      this.pauseReading();
      this.login(this.opts.access, p);
      return;
    }
    let auth: AuthResult | Promise<AuthResult>;
    try {
      auth = this.opts.authenticate(clientId, p.username, p.password, this.address);
    } catch (err) {
      this.authFailed(err);
      return;
    }
    this.pendingConnect = p;
    // [MQTT-3.1.4-5] nothing after CONNECT is processed before the CONNECT is accepted.
    this.state = State.Authenticating;
    this.pauseReading();
    if (typeof auth === 'string') {
      this.accept(auth, undefined);
      return;
    }
    auth.then(
      (r) => this.accept(r, undefined),
      (err: unknown) => this.authFailed(err),
    );
  }

  private assignedId: string | null = null;

  /**
   * Username/password through the control plane (the directory's users, then the webhook for unknown ones). No
   * username: anonymous, if the broker lets MQTT clients in without credentials. While nobody could log in (no
   * users, no webhook) and anonymous access is allowed, credentials are not checked at all: the zero-setup broker
   * lets everyone in, as it did before users existed (and as Mosquitto does without a password file).
   */
  private login(ac: AccessControl, p: ConnectPacket): void {
    const anonymous = ac.anonymousAllowed('mqtt');
    // A verified client certificate logs in as the user it names, unless the client sent a username: credentials win.
    const cert = p.username === null && this.certificate !== null ? this.certificate() : null;
    if (cert !== null) {
      if (cert.verdict === 'ok') this.loggedIn(cert.principal, undefined);
      else {
        this.logLimited('info', 'certificate refused', { clientId: this.clientId, remote: this.remote, user: cert.user }, 'mqtt client certificate names no user');
        this.accept('bad-credentials', undefined);
      }
      return;
    }
    if (p.username === null || (!ac.hasUsers && anonymous)) {
      if (!anonymous) {
        this.accept('not-authorized', undefined);
        return;
      }
      this.loggedIn(ac.principal(null), undefined);
      return;
    }
    ac.password(p.username, p.password, this.address, 'mqtt').then(
      (r) => {
        if (r.verdict === 'ok') this.loggedIn(r.principal, undefined);
        else this.accept(r.verdict === 'busy' ? 'busy' : 'bad-credentials', undefined);
      },
      (err: unknown) => this.authFailed(err),
    );
  }

  /**
   * The client proved who it is: its authorization, the will's topic (refused: v5 0x87 Not authorized, 3.1.1 0x05,
   * the decision's mapping), its namespace's connection quota (v5 0x97 Quota exceeded, 3.1.1 0x03 Server
   * unavailable), then the session.
   */
  private loggedIn(principal: Principal, authProps: Properties | undefined): void {
    if (this.state === State.Closed) return;
    const ac = this.opts.access!;
    const access = ac.accessFor(principal, 'mqtt', this.address);
    const v5 = this.level === 5;
    const will = this.pendingConnect?.will ?? null;
    if (will !== null && !access.can('publish', 'topic', will.topic)) {
      this.refuse(v5 ? ReasonCode.NOT_AUTHORIZED : ConnackCode.NOT_AUTHORIZED, `not authorized to publish the will to ${will.topic}`);
      return;
    }
    const lease = ac.quotas.connect(principal);
    if ('refused' in lease) {
      this.refuse(v5 ? ReasonCode.QUOTA_EXCEEDED : ConnackCode.SERVER_UNAVAILABLE, lease.refused);
      return;
    }
    this.access = access;
    this.lease = lease;
    if (this.client !== null) {
      this.client.user = principal.user;
      this.client.namespace = principal.namespace;
      this.client.clientId = this.clientId;
    }
    this.accept('ok', authProps);
  }

  /** One step of a SCRAM exchange carried in CONNECT / AUTH (section 4.12); `reauth`: on a connected client (0x19). */
  private scramStep(data: Buffer, reauth: boolean): void {
    const ex = this.scram!;
    const method = this.authMethod!;
    this.pauseReading();
    Promise.resolve(ex.step(data)).then(
      (r) => {
        if (this.state === State.Closed) return;
        if (r.state === 'continue') {
          // [MQTT-4.12.0-2] AUTH 0x18 Continue authentication, with the same method.
          this.send(encodeAuth(ReasonCode.CONTINUE_AUTHENTICATION, { authenticationMethod: method, authenticationData: r.challenge }));
          this.resumeReading();
          return;
        }
        this.scram = null;
        if (r.state === 'failed') {
          this.logLimited('info', 'scram failed', { clientId: this.clientId, remote: this.remote, user: r.username, reason: r.reason }, 'mqtt SCRAM authentication failed');
          const code = r.busy === true ? ReasonCode.SERVER_BUSY : ReasonCode.NOT_AUTHORIZED;
          if (reauth) this.disconnectWith(code, 're-authentication failed');
          else this.refuse(code, r.busy === true ? 'authentication: server busy, try again later' : 'authentication failed');
          return;
        }
        const principal = this.opts.access!.principal(r.principal);
        if (reauth) {
          // Re-authentication renews the same identity; becoming someone else on an open connection is not offered.
          if (this.access === null || this.access.principal.user !== r.principal) {
            this.disconnectWith(ReasonCode.NOT_AUTHORIZED, 're-authentication as another user');
            return;
          }
          this.send(encodeAuth(ReasonCode.SUCCESS, { authenticationMethod: method, authenticationData: r.challenge }));
          this.resumeReading();
          return;
        }
        // The server-final message (v=...) goes in the CONNACK's Authentication Data.
        this.loggedIn(principal, { authenticationMethod: method, authenticationData: r.challenge });
      },
      (err: unknown) => this.authFailed(err),
    );
  }

  private runEnhancedAuth(data: Buffer | null, reauth: boolean): void {
    const hook = this.opts.enhancedAuth!;
    const step = this.authStep++;
    let r: EnhancedAuthResult | Promise<EnhancedAuthResult>;
    try {
      r = hook({ clientId: this.clientId, method: this.authMethod!, data, step, reauth });
    } catch (err) {
      this.authFailed(err);
      return;
    }
    const settle = (res: EnhancedAuthResult) => {
      if (this.state === State.Closed) return;
      if (res.result === 'continue') {
        // [MQTT-4.12.0-2] the server continues with AUTH 0x18 carrying the same method.
        this.send(encodeAuth(ReasonCode.CONTINUE_AUTHENTICATION, { authenticationMethod: this.authMethod!, authenticationData: res.data }));
        this.resumeReading();
        return;
      }
      if (res.result === 'fail') {
        if (reauth) this.disconnectWith(ReasonCode.NOT_AUTHORIZED, 're-authentication failed');
        else this.refuse(ReasonCode.NOT_AUTHORIZED, 'enhanced authentication failed');
        return;
      }
      this.authStep = 0;
      if (reauth) {
        this.send(encodeAuth(ReasonCode.SUCCESS, { authenticationMethod: this.authMethod!, authenticationData: res.data }));
        this.resumeReading();
        return;
      }
      this.pauseReading();
      this.accept('ok', { authenticationMethod: this.authMethod!, authenticationData: res.data });
    };
    if ('then' in r) {
      this.pauseReading();
      r.then(settle, (err: unknown) => this.authFailed(err));
    } else settle(r);
  }

  private onAuth(p: AuthPacket): void {
    if (this.level !== 5) throw new MqttProtocolError('AUTH below MQTT 5', '[MQTT-4.8.0-1]');
    const method = p.properties?.authenticationMethod;
    // [MQTT-4.12.0-5] [MQTT-4.12.1-1] AUTH carries the method of the CONNECT; re-authentication needs one.
    if (this.authMethod === null || method !== this.authMethod) {
      throw new MqttProtocolError('AUTH with another (or no) authentication method', '[MQTT-4.12.0-5]', undefined, ReasonCode.PROTOCOL_ERROR);
    }
    if (this.scramAuth) {
      const data = p.properties?.authenticationData ?? Buffer.alloc(0);
      if (this.state === State.Connected) {
        if (p.reasonCode === ReasonCode.RE_AUTHENTICATE) {
          if (this.scram !== null) throw new MqttProtocolError('re-authentication while one is under way', '[MQTT-4.12.1-1]', undefined, ReasonCode.PROTOCOL_ERROR);
          this.scram = startSaslExchange(this.opts.access!.guard, method as 'SCRAM-SHA-256' | 'SCRAM-SHA-512', this.address, { protocol: 'mqtt' });
        } else if (p.reasonCode !== ReasonCode.CONTINUE_AUTHENTICATION || this.scram === null) {
          throw new MqttProtocolError('AUTH without re-authentication', '[MQTT-4.12.1-1]', undefined, ReasonCode.PROTOCOL_ERROR);
        }
        this.scramStep(data, true);
        return;
      }
      if (p.reasonCode !== ReasonCode.CONTINUE_AUTHENTICATION || this.scram === null) {
        throw new MqttProtocolError('AUTH during connect must continue authentication', '[MQTT-4.12.0-1]', undefined, ReasonCode.PROTOCOL_ERROR);
      }
      this.scramStep(data, false);
      return;
    }
    if (this.state === State.Connected) {
      if (p.reasonCode !== ReasonCode.RE_AUTHENTICATE && this.authStep === 0) {
        throw new MqttProtocolError('AUTH without re-authentication', '[MQTT-4.12.1-1]', undefined, ReasonCode.PROTOCOL_ERROR);
      }
      this.runEnhancedAuth(p.properties?.authenticationData ?? null, true);
      return;
    }
    if (p.reasonCode !== ReasonCode.CONTINUE_AUTHENTICATION) {
      throw new MqttProtocolError('AUTH during connect must continue authentication', '[MQTT-4.12.0-1]', undefined, ReasonCode.PROTOCOL_ERROR);
    }
    this.runEnhancedAuth(p.properties?.authenticationData ?? null, false);
  }

  private authFailed(err: unknown): void {
    this.ctx.logger.error({ clientId: this.clientId, remote: this.remote, err }, 'mqtt authenticator failed');
    this.refuse(this.level === 5 ? ReasonCode.SERVER_UNAVAILABLE : ConnackCode.SERVER_UNAVAILABLE, 'authenticator failed');
  }

  private accept(auth: AuthResult, authProps: Properties | undefined): void {
    if (this.state === State.Closed) return;
    if (auth === 'busy') {
      // 3.1.1 has no "busy": 0x03 Server unavailable is its nearest (section 3.2.2.3); v5 has 0x89 (section 3.2.2.2).
      this.refuse(this.level === 5 ? ReasonCode.SERVER_BUSY : ConnackCode.SERVER_UNAVAILABLE, 'authentication: server busy, try again later');
      return;
    }
    if (auth !== 'ok') {
      const v5 = this.level === 5;
      this.refuse(
        auth === 'bad-credentials'
          ? v5
            ? ReasonCode.BAD_USER_NAME_OR_PASSWORD
            : ConnackCode.BAD_USERNAME_OR_PASSWORD
          : v5
            ? ReasonCode.NOT_AUTHORIZED
            : ConnackCode.NOT_AUTHORIZED,
        `authentication: ${auth}`,
      );
      return;
    }
    const p = this.pendingConnect!;
    this.pendingConnect = null;
    const props = p.properties ?? {};
    // Session lifetime: 3.1.1 Clean Session 0 keeps it (up to the configured maximum); v5 says how long.
    const requested = this.level === 5 ? (props.sessionExpiryInterval ?? 0) : p.cleanSession ? 0 : EXPIRY_NEVER;
    const expiry = Math.min(requested, this.opts.maxSessionExpiry);
    this.hub.attach(this, this.clientId, p.cleanSession, expiry, this.level, this.access).then(
      ({ session, present }) => this.connected(session, present, requested, expiry, authProps),
      (err: unknown) => {
        // Cluster mode: UNAVAILABLE is another broker holding the session and not handing it over yet (retriable).
        if (isFlowError(err, 'UNAVAILABLE')) this.logLimited('info', 'session unavailable', { clientId: this.clientId, remote: this.remote, err: errText(err) }, 'mqtt session not available here yet');
        else this.ctx.logger.error({ clientId: this.clientId, err: errText(err) }, 'mqtt session could not be loaded');
        this.refuse(this.level === 5 ? ReasonCode.SERVER_UNAVAILABLE : ConnackCode.SERVER_UNAVAILABLE, 'session store failed');
      },
    );
  }

  private connected(session: MqttSession, present: boolean, requested: number, expiry: number, authProps: Properties | undefined): void {
    const early = this.early;
    this.early = null;
    if (this.state === State.Closed) {
      // Closed while the session was loading: give it back, with what matched it meanwhile (stored or dropped as
      // for any offline session).
      this.hub.detach(session, this, [], null);
      if (early !== null && !session.ended) for (const e of early) session.deliver(e.msg, e.subs);
      else if (early !== null) for (let i = 0; i < early.length; i++) this.hub.dropped('closed', true);
      return;
    }
    this.session = session;
    this.state = State.Connected;
    if (this.access !== null) this.authorizeSession(session, present);
    let connackProps: Properties | undefined;
    if (this.level === 5) {
      connackProps = { ...authProps };
      // [MQTT-3.2.2-16] an assigned client id is returned to the client.
      if (this.assignedId !== null) connackProps.assignedClientIdentifier = this.assignedId;
      if (expiry !== requested) connackProps.sessionExpiryInterval = expiry;
      connackProps.receiveMaximum = this.opts.maxInflight;
      if (this.opts.maxQos < 2) connackProps.maximumQoS = this.opts.maxQos;
      connackProps.maximumPacketSize = this.opts.maxPacketSize;
      if (this.opts.topicAliasMaximum > 0) connackProps.topicAliasMaximum = this.opts.topicAliasMaximum;
      const ka = this.opts.maxKeepalive;
      if (ka > 0 && (this.keepaliveMs === 0 || this.keepaliveMs > ka * 1000)) {
        // [MQTT-3.2.2-21] the client must use the Server Keep Alive instead of its own.
        connackProps.serverKeepAlive = ka;
        this.keepaliveMs = ka * 1000;
      }
      if ((this.pendingRequestResponse ?? 0) === 1) connackProps.responseInformation = `flowmq/response/${this.clientId}`;
    }
    // [MQTT-3.2.2-1] [MQTT-3.2.2-2] [MQTT-3.2.2-3] Session Present says whether a stored session was resumed.
    this.send(encodeConnack({ type: 'connack', sessionPresent: present, returnCode: 0, properties: connackProps }, this.level));
    // Not `level`: that key is the log line's own level for pino and every log parser.
    this.ctx.logger.debug({ clientId: this.clientId, remote: this.remote, protocolVersion: this.level, present }, 'mqtt client connected');
    // Stored messages first (restore() holds newer ones behind them), then those that matched during the attach.
    if (present) this.restore(session);
    if (early !== null) for (const e of early) this.deliver(e.msg, e.subs);
    if (!present) this.resumeReading();
  }

  /**
   * The session now acts for this connection's identity (also while offline, until another connection resumes it).
   * A resumed session's subscriptions were granted to whoever had it before, maybe another user, maybe under other
   * policies: each is checked again, and one the identity may not have is removed (its filter is told to nobody:
   * MQTT has no way to say so outside a SUBACK; the client sees no more messages on it, and a log line says why).
   */
  private authorizeSession(s: MqttSession, present: boolean): void {
    const access = this.access!;
    if (!present || s.subs.size === 0) return;
    let removed = false;
    for (const [f, sub] of s.subs) {
      if (access.subscription(splitShared(f).filter) !== 'deny') continue;
      this.ctx.engine.unsubscribe(sub);
      s.subs.delete(f);
      removed = true;
      this.logLimited('info', 'subscription dropped', { clientId: this.clientId, remote: this.remote, filter: f }, 'mqtt stored subscription not authorized for this client, removed');
    }
    if (removed && s.persistent) this.hub.persist(s);
  }

  private get pendingRequestResponse(): number | undefined {
    return this.requestResponse;
  }
  private requestResponse: number | undefined;

  /**
   * A resumed session: messages stored while it was offline (and the last connection's unacknowledged ones,
   * which are re-sent with DUP and their original packet ids [MQTT-4.4.0-1]) go out before anything newer.
   */
  private restore(session: MqttSession): void {
    this.restoring = true;
    this.hub.takeQueue(session).then(
      (stored) => {
        if (this.state === State.Closed) {
          // Closed meanwhile: the messages go back to the store with whatever else was unacknowledged.
          return;
        }
        this.restoring = false;
        const fresh: Delivery[] = [];
        const now = Date.now();
        for (const d of stored) {
          if (d.msg.expiresAt !== undefined && d.msg.expiresAt <= now && !d.released) {
            this.hub.untrack(session, d);
            this.drop('expired', d.counted);
            continue;
          }
          // Queued while offline under another identity or other policies: this one must be allowed it now.
          if (!d.released && !session.admit(d.msg.topic)) {
            this.hub.untrack(session, d);
            this.drop('notAuthorized', d.counted);
            continue;
          }
          if (d.packetId !== 0 && !this.inflight.has(d.packetId)) {
            this.ownInflight().set(d.packetId, d);
            if (d.released) this.send(encodeIdOnly('pubrel', d.packetId, this.level));
            else this.writePublish(d, d.packetId, true, now);
          } else fresh.push(d);
        }
        if (fresh.length > 0) {
          const rest = this.queue.slice(this.queueHead);
          this.queue = fresh.concat(rest);
          this.queueHead = 0;
        }
        this.drainQueue();
        this.resumeReading();
      },
      (err: unknown) => {
        this.ctx.logger.error({ clientId: this.clientId, err: errText(err) }, 'mqtt stored messages could not be read');
        this.restoring = false;
        this.resumeReading();
      },
    );
  }

  /** CONNACK with a failure code, then close [MQTT-3.2.2-5]; the will was never accepted so it is dropped. */
  private refuse(code: number, why: string): void {
    this.logLimited('info', 'connect refused', { clientId: this.clientId || undefined, remote: this.remote, code, why }, 'mqtt connect refused');
    this.will = null;
    const props = this.level === 5 && this.requestProblemInfo ? { reasonString: why } : this.level === 5 ? {} : undefined;
    this.send(encodeConnack({ type: 'connack', sessionPresent: false, returnCode: code, properties: props }, this.level));
    this.close('refused');
  }

  private onDisconnect(p: DisconnectPacket): void {
    const reason = p.reasonCode ?? 0;
    const exp = p.properties?.sessionExpiryInterval;
    const s = this.session;
    if (exp !== undefined && s !== null) {
      // [MQTT-3.14.2-2] a session that was to end with the connection cannot be made to last now.
      if (s.expiry === 0 && exp !== 0) {
        throw new MqttProtocolError('DISCONNECT sets a session expiry after CONNECT set 0', '[MQTT-3.14.2-2]', undefined, ReasonCode.PROTOCOL_ERROR);
      }
      s.expiry = Math.min(exp, this.opts.maxSessionExpiry);
    }
    // [MQTT-3.14.4-3] a normal DISCONNECT discards the will; v5 0x04 asks for it to be published.
    if (reason !== ReasonCode.DISCONNECT_WITH_WILL) this.will = null;
    this.close('disconnect');
  }

  // ---------------------------------------------------------------- inbound publish

  private onPublish(p: PublishPacket): void {
    this.stats.publishesIn++;
    this.hub.stats.messagesReceived++;
    const v5 = this.level === 5;
    const props = p.properties;
    let topic = p.topic;
    if (v5 && props !== undefined) {
      // [MQTT-3.3.4-6] a client's PUBLISH carries no Subscription Identifier.
      if (props.subscriptionIdentifiers !== undefined) {
        throw new MqttProtocolError('PUBLISH from a client with a subscription identifier', '[MQTT-3.3.4-6]', undefined, ReasonCode.PROTOCOL_ERROR);
      }
      const alias = props.topicAlias;
      if (alias !== undefined) {
        // [MQTT-3.3.2-10] an alias above the Topic Alias Maximum we granted is an error (0x94).
        if (alias > this.opts.topicAliasMaximum) {
          throw new MqttProtocolError(`topic alias ${alias} above the maximum`, '[MQTT-3.3.2-10]', undefined, ReasonCode.TOPIC_ALIAS_INVALID);
        }
        this.inAliases ??= new Map();
        if (topic.length > 0) this.inAliases.set(alias, topic);
        else {
          const t = this.inAliases.get(alias);
          if (t === undefined) {
            // Section 3.3.2.3.4: an alias with an empty topic must have been set on this connection.
            throw new MqttProtocolError(`topic alias ${alias} was never defined`, undefined, undefined, ReasonCode.PROTOCOL_ERROR);
          }
          topic = t;
        }
      }
    }
    if (p.qos > 0 && v5 && this.inQos1 + this.sessionAwaitingRel() >= this.opts.maxInflight && !(p.qos === 2 && this.session!.awaitingRel.has(p.packetId))) {
      // [MQTT-3.3.4-7] the client sent more unacknowledged QoS 1/2 publishes than our Receive Maximum.
      throw new MqttProtocolError('receive maximum exceeded', '[MQTT-3.3.4-7]', undefined, ReasonCode.RECEIVE_MAXIMUM_EXCEEDED);
    }
    if (p.qos === 2 && this.session!.awaitingRel.has(p.packetId)) {
      // Re-sent QoS 2 publish before PUBREL: acknowledge again, do not deliver twice (section 4.3.3), once the
      // first copy is durable.
      this.queueAck('pubrec', p.packetId, this.session!.relNotDurable.get(p.packetId) ?? null, 0);
      return;
    }
    if (levels(topic) > this.opts.maxTopicLevels) {
      // Our configured limit, not a spec rule: 3.1.1 can only close the connection.
      if (!v5) throw new MqttProtocolError(`topic has more than ${this.opts.maxTopicLevels} levels`);
      if (p.qos === 0) throw new MqttProtocolError('topic has too many levels', undefined, undefined, ReasonCode.TOPIC_NAME_INVALID);
      // v5 refuses the message alone: PUBACK/PUBREC 0x90 (section 3.4.2.1), the connection stays.
      this.queueAck(p.qos === 1 ? 'puback' : 'pubrec', p.packetId, null, ReasonCode.TOPIC_NAME_INVALID);
      return;
    }
    const access = this.access;
    if (access !== null && !access.open && !access.can('publish', 'topic', topic)) {
      this.hub.stats.publishesDenied++;
      // v5 refuses the message alone: PUBACK / PUBREC 0x87 Not authorized (a PUBREC >= 0x80 ends a QoS 2 exchange,
      // section 4.3.3). 3.1.1 has no refusal for a PUBLISH: the message is acknowledged and dropped, as Mosquitto
      // does (closing would make the client resend it forever). QoS 0: dropped.
      if (p.qos === 0) return;
      if (v5) {
        this.queueAck(p.qos === 1 ? 'puback' : 'pubrec', p.packetId, null, ReasonCode.NOT_AUTHORIZED);
        return;
      }
      // The plain PUBACK below gives back a receive-window slot: take it first. A 3.1.1 QoS 2 refusal is not
      // remembered: its PUBREL is answered with PUBCOMP all the same (onPubrel).
      if (p.qos === 1) this.inQos1++;
      this.queueAck(p.qos === 1 ? 'puback' : 'pubrec', p.packetId, null, 0);
      return;
    }
    if (this.client !== null) this.client.messagesIn++;
    if (this.lease !== null) {
      const wait = this.lease.chargeIn(1, p.payload.length);
      if (wait > 0) this.throttle(wait);
    }
    const msg: Message = {
      topic,
      payload: p.payload,
      key: null,
      headers: [],
      timestamp: Date.now(),
      qos: p.qos,
      retain: p.retain,
      origin: this.session!.id,
    };
    if (props !== undefined) {
      if (props.userProperties) msg.headers = props.userProperties.map(([k, v]) => ({ key: k, value: Buffer.from(v) }));
      if (props.messageExpiryInterval !== undefined) msg.expiresAt = msg.timestamp + props.messageExpiryInterval * 1000;
      if (props.contentType !== undefined) msg.contentType = props.contentType;
      if (props.responseTopic !== undefined) {
        // [MQTT-3.3.2-14] the Response Topic is a topic name: no wildcards.
        if (/[+#]/.test(props.responseTopic)) {
          throw new MqttProtocolError('response topic with wildcards', '[MQTT-3.3.2-14]', undefined, ReasonCode.PROTOCOL_ERROR);
        }
        msg.responseTopic = props.responseTopic;
      }
      if (props.correlationData !== undefined) msg.correlationData = Buffer.from(props.correlationData);
      if (props.payloadFormatIndicator !== undefined) msg.payloadFormat = props.payloadFormatIndicator;
    }
    let durable: Promise<void> | null;
    try {
      durable = this.ctx.engine.publish(msg);
    } catch (err) {
      if (storageRefusal(err) !== null) {
        this.storeRefused(p.qos === 0 ? 'none' : p.qos === 1 ? 'puback' : 'pubrec', p.packetId, err, null);
        return;
      }
      // The core refused the message (its own topic rules): 3.1.1 can only close [MQTT-4.8.0-1].
      if (isFlowError(err)) throw new MqttProtocolError(`publish refused: ${err.message}`, '[MQTT-4.8.0-1]', undefined, ReasonCode.TOPIC_NAME_INVALID);
      throw err;
    }
    if (p.qos === 0) {
      // Nothing is sent back, but a captured message counts among the pending acks until it is stored, so a
      // QoS 0 publisher faster than the streams' storage is held back (reading stops) like a QoS 1 one.
      if (durable !== null) this.queueAck('none', 0, durable, 0);
      return;
    }
    if (p.qos === 2) {
      const s = this.session!;
      const id = p.packetId;
      s.relIds().add(id);
      if (durable === null) {
        if (s.persistent) this.hub.persist(s);
      } else {
        // Stored with the session only once the message is durable (see MqttSession.relNotDurable).
        const stored = durable.then(() => {
          if (s.relNotDurable.get(id) !== stored) return;
          s.relNotDurable.delete(id);
          if (s.persistent) this.hub.persist(s);
        });
        s.relPending().set(id, stored);
        stored.catch(() => {
          if (s.relNotDurable.get(id) === stored) s.relNotDurable.delete(id);
        });
      }
    } else this.inQos1++;
    // ...and once the deliveries to persistent sessions are in their store queues (written at the next tick, so
    // that a kill -9 after the PUBACK loses none of them whatever the store's commit latency).
    const queued = this.hub.queueWrites();
    if (queued !== null) durable = durable === null ? queued : Promise.all([durable, queued]).then(() => undefined);
    // QoS 1: PUBACK once every capturing stream has the message durably; QoS 2: PUBREC likewise.
    this.queueAck(p.qos === 1 ? 'puback' : 'pubrec', p.packetId, durable, 0);
  }

  /**
   * A namespace quota says to hold the client back for `ms`: reading stops (TCP pushes back on the client) and
   * resumes when the time has passed, unless another reason to hold it (acks waiting for storage) still stands.
   */
  private throttle(ms: number): void {
    if (this.throttleTimer !== null || this.state === State.Closed) return;
    this.hub.stats.throttled++;
    this.pauseReading();
    this.throttleTimer = setTimeout(() => {
      this.throttleTimer = null;
      if (this.state === State.Connected && this.acks.length - this.acksHead < this.opts.maxPendingAcks) this.resumeReading();
    }, ms);
  }

  private sessionAwaitingRel(): number {
    return this.session?.awaitingRel.size ?? 0;
  }

  private onPubrel(id: number): void {
    const s = this.session!;
    // Exactly-once inbound: the message was published when it first arrived; forget its id now.
    const known = s.awaitingRel.delete(id);
    if (known && s.persistent) this.hub.persist(s);
    // v5 (section 3.7.2.1): an unknown id is answered with 0x92 Packet Identifier not found.
    this.reply(encodeIdOnly('pubcomp', id, this.level, known || this.level !== 5 ? 0 : ReasonCode.PACKET_IDENTIFIER_NOT_FOUND));
  }

  /** Acks go out in the order the publishes arrived, whatever order storage completes in. */
  private queueAck(type: PendingAck['type'], packetId: number, durable: Promise<void> | null, reason: number): void {
    if (durable === null && this.acksHead === this.acks.length) {
      this.sendAck(type, packetId, reason);
      return;
    }
    const entry: PendingAck = { type, packetId, done: durable === null, reason };
    this.acks.push(entry);
    if (durable !== null) {
      const session = this.session;
      durable.then(
        () => {
          entry.done = true;
          this.flushAcks();
        },
        (err: unknown) => {
          if (storageRefusal(err) === null) return this.onDurableError(err);
          this.storeRefused(type, packetId, err, entry, session);
        },
      );
    }
    if (this.acks.length - this.acksHead >= this.opts.maxPendingAcks) this.pauseReading();
  }

  /**
   * Storage could not take an inbound publish (a full disk, the free-space reserve, a failed write, a stream
   * partition fenced by another broker): nothing was stored, so the client must send it again later. v5 refuses the
   * message alone, the connection stays: PUBACK / PUBREC 0x97 Quota exceeded for a full disk or the reserve, 0x80
   * Unspecified error for an I/O error or a fenced partition (sections
   * 3.4.2.1, 3.5.2.1; a PUBREC >= 0x80 ends a QoS 2 exchange, 4.3.3). 3.1.1 has no negative acknowledgement: the
   * connection is closed, and the client sends the message again when it reconnects [MQTT-4.4.0-1]. QoS 0 is
   * dropped. Logged as a storage condition at a bounded rate, not as the client's protocol error. `entry` is the
   * acknowledgement already queued for it (a write that failed after the publish was accepted), or null.
   */
  private storeRefused(type: PendingAck['type'], packetId: number, err: unknown, entry: PendingAck | null, s = this.session): void {
    // A QoS 2 message that was not stored must not be taken for a duplicate when it comes again (also when this
    // connection is gone by now: the session, `s`, lives on).
    if (type === 'pubrec' && entry !== null && s !== null && s.awaitingRel.delete(packetId) && s.persistent) this.hub.persist(s);
    if (this.state === State.Closed) return;
    const full = storageRefusal(err) === 'full';
    const v5 = this.level === 5;
    this.logLimited(
      'warn',
      'storage',
      { clientId: this.clientId, remote: this.remote, qos: type === 'none' ? 0 : type === 'puback' ? 1 : 2, err: err instanceof Error ? err.message : String(err) },
      type === 'none' ? 'mqtt QoS 0 publish dropped: storage cannot take it now' : v5 ? 'mqtt publish refused: storage cannot take it now' : 'mqtt publish could not be stored: closing the connection (3.1.1 has no negative acknowledgement), the client resends it',
    );
    if (type !== 'none' && !v5) {
      this.disconnectWith(ReasonCode.UNSPECIFIED_ERROR, 'message could not be stored');
      return;
    }
    const reason = type === 'none' ? 0 : full ? ReasonCode.QUOTA_EXCEEDED : ReasonCode.UNSPECIFIED_ERROR;
    if (entry === null) {
      this.queueAck(type, packetId, null, reason);
      return;
    }
    // The publish counted in the client's window (inQos1) when it was accepted; a failure PUBACK does not uncount it.
    if (type === 'puback' && this.inQos1 > 0) this.inQos1--;
    entry.reason = reason;
    entry.done = true;
    this.flushAcks();
  }

  private sendAck(type: PendingAck['type'], packetId: number, reason: number): void {
    if (type === 'none') return;
    if (type === 'puback' && reason === 0 && this.inQos1 > 0) this.inQos1--;
    this.reply(encodeIdOnly(type, packetId, this.level, reason));
  }

  private flushAcks(): void {
    if (this.state === State.Closed) return;
    const acks = this.acks;
    while (this.acksHead < acks.length && acks[this.acksHead].done) {
      const a = acks[this.acksHead++];
      this.sendAck(a.type, a.packetId, a.reason);
    }
    if (this.acksHead === acks.length) {
      acks.length = 0;
      this.acksHead = 0;
    } else if (this.acksHead > 1024 && this.acksHead * 2 > acks.length) {
      acks.splice(0, this.acksHead);
      this.acksHead = 0;
    }
    if (this.readPaused && this.state === State.Connected && acks.length - this.acksHead < this.opts.maxPendingAcks / 2) {
      this.resumeReading();
    }
  }

  // ---------------------------------------------------------------- subscriptions

  private onSubscribe(p: SubscribePacket): void {
    const subId = p.properties?.subscriptionIdentifiers?.[0];
    // [MQTT-3.8.4-4] several filters are handled as a sequence of SUBSCRIBEs, answered by one SUBACK whose
    // return codes follow the request order [MQTT-3.8.4-5]. Retained messages follow the SUBACK.
    const retained: Array<{ sub: Subscription; isNew: boolean }> = [];
    const codes = p.subscriptions.map((s) => this.subscribeOne(s, subId, retained));
    this.reply(encodeSuback({ type: 'suback', packetId: p.packetId, returnCodes: codes, properties: this.level === 5 ? {} : undefined }, this.level));
    if (this.session!.persistent) this.hub.persist(this.session!);
    for (const r of retained) this.sendRetained(r.sub, r.isNew);
    const starts = this.queueStarts;
    if (starts !== null) {
      this.queueStarts = null;
      for (const c of starts) {
        c.started = true;
        c.handle.resume(c);
      }
    }
  }

  private subscribeOne(req: SubscriptionRequest, subId: number | undefined, retained: Array<{ sub: Subscription; isNew: boolean }>): number {
    const v5 = this.level === 5;
    const invalidFilter = v5 ? ReasonCode.TOPIC_FILTER_INVALID : SUBACK_FAILURE;
    if (req.filter.startsWith(QUEUE_PREFIX)) return this.subscribeQueue(req);
    const { group, filter } = splitShared(req.filter);
    if (group !== undefined) {
      // Shared subscription `$share/<group>/<filter>` (standard in MQTT 5, accepted from 3.1.1 clients too).
      if (group.length === 0 || filter.length === 0 || group.includes('+') || group.includes('#')) return invalidFilter;
      // [MQTT-3.8.3-4] No Local on a shared subscription is a Protocol Error.
      if (req.noLocal) throw new MqttProtocolError('no local on a shared subscription', '[MQTT-3.8.3-4]', undefined, ReasonCode.PROTOCOL_ERROR);
    }
    try {
      validateFilter(filter);
    } catch {
      return invalidFilter;
    }
    if (levels(filter) > this.opts.maxTopicLevels) return invalidFilter;
    // A shared subscription is authorized by its filter (the group name is not a resource). 'filter': granted, and
    // each delivery is checked by the admit predicate every subscription of the session carries.
    if (this.access !== null && this.access.subscription(filter) === 'deny') return v5 ? ReasonCode.NOT_AUTHORIZED : SUBACK_FAILURE;
    const granted = (req.qos < this.opts.maxQos ? req.qos : this.opts.maxQos) as QoS;
    const data: SubData = {
      filter: req.filter,
      noLocal: req.noLocal === true,
      retainAsPublished: req.retainAsPublished === true,
      retainHandling: req.retainHandling ?? 0,
      subscriptionId: subId,
    };
    const s = this.session!;
    let sub: Subscription;
    try {
      sub = this.ctx.engine.subscribe(filter, s, this.access !== null ? { qos: granted, group, data, admit: s.admit } : { qos: granted, group, data });
    } catch (err) {
      if (!isFlowError(err)) throw err;
      this.logLimited('debug', 'subscription refused', { clientId: this.clientId, remote: this.remote, filter: req.filter, err: err.message }, 'mqtt subscription refused');
      return invalidFilter;
    }
    // [MQTT-3.8.4-3] an identical filter replaces the existing subscription. The new one is added before the
    // old one is removed, so the flow of publications is not interrupted.
    const old = s.subs.get(req.filter);
    if (old) this.ctx.engine.unsubscribe(old);
    s.subs.set(req.filter, sub);
    // Retained messages are not sent to shared subscriptions (v5 section 4.8.2); Retain Handling decides.
    if (group === undefined && data.retainHandling !== 2) retained.push({ sub, isNew: old === undefined });
    return granted;
  }

  /**
   * `$queue/<name>`: consume the queue `<name>` (everything after the prefix, verbatim). Granted QoS 1 (the PUBACK
   * is the queue ack) or 0 (no-ack); refused when the queue does not exist, is another connection's exclusive
   * queue, or has an exclusive consumer. Not kept with a persistent session: the client subscribes again on
   * reconnect (the queue keeps the messages meanwhile).
   */
  private subscribeQueue(req: SubscriptionRequest): number {
    const refused = this.level === 5 ? ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR : SUBACK_FAILURE;
    const name = req.filter.slice(QUEUE_PREFIX.length);
    if (this.access !== null && !this.access.can('subscribe', 'queue', name)) return this.level === 5 ? ReasonCode.NOT_AUTHORIZED : SUBACK_FAILURE;
    const handle = name.length > 0 ? this.ctx.engine.getQueue(name) : undefined;
    if (handle === undefined || handle.def.exclusiveOwner !== null) {
      this.logLimited('debug', 'queue subscription refused', { clientId: this.clientId, remote: this.remote, filter: req.filter }, 'mqtt queue subscription refused: no such queue');
      return refused;
    }
    const max = this.opts.maxQos < 1 ? this.opts.maxQos : 1;
    const granted = (req.qos < max ? req.qos : max) as QoS;
    const c = new MqttQueueConsumer(handle, req.filter, this.clientId, granted === 0, this);
    const subs = (this.queueSubs ??= new Map());
    // [MQTT-3.8.4-3] the same filter again replaces the subscription (deliveries in flight stay acknowledgeable).
    const old = subs.get(req.filter);
    if (old) {
      subs.delete(req.filter);
      old.handle.cancel(old);
    }
    try {
      handle.consume(c);
    } catch (err) {
      if (!isFlowError(err)) throw err;
      this.logLimited('debug', 'queue subscription refused', { clientId: this.clientId, remote: this.remote, filter: req.filter, err: err.message }, 'mqtt queue subscription refused');
      return refused;
    }
    subs.set(req.filter, c);
    // Deliveries start after the SUBACK (onSubscribe), as retained messages do.
    (this.queueStarts ??= []).push(c);
    return granted;
  }

  /** QueueConsumerHost: room for one more queue delivery (connected, nothing waiting, window and socket open). */
  queueCredit(c: MqttQueueConsumer): boolean {
    if (!c.started || this.state !== State.Connected || this.restoring || this.queueHead < this.queue.length || this.queueSubs?.get(c.filter) !== c) return false;
    if (this.stream.writableLength > this.opts.writeHighWaterMark) {
      if (!this.drainArmed && this.stream.writableNeedDrain) {
        this.drainArmed = true;
        this.stream.once('drain', this.onDrain);
      }
      return false;
    }
    return c.noAck || this.inflight.size < this.window();
  }

  /** QueueConsumerHost: sends a queue delivery (the queue asked queueCredit just before). */
  deliverFromQueue(c: MqttQueueConsumer, qd: QueueDelivery): void {
    try {
      const access = this.access;
      if (access !== null && !access.open && !access.can('subscribe', 'queue', c.handle.def.name)) {
        // The policy changed since the SUBSCRIBE: the message goes back to its queue and the subscription ends.
        c.handle.nack(qd.id, true).catch(() => undefined);
        if (this.queueSubs?.get(c.filter) === c) {
          this.queueSubs.delete(c.filter);
          c.handle.cancel(c);
        }
        this.queueCancelled(c, 'not authorized any more');
        return;
      }
      // A message without a topic (AMQP default exchange) is published under the subscription's filter.
      const msg = qd.msg.topic.length > 0 ? qd.msg : { ...qd.msg, topic: c.filter };
      const d = newDelivery(msg, c.noAck ? 0 : 1, false, null, null, false) as QueueBoundDelivery;
      d.queueConsumer = c;
      d.queueId = qd.id;
      if (c.noAck) {
        this.writePublish(d, 0, false, Date.now());
        return;
      }
      let id = this.nextPacketId;
      while (this.inflight.has(id)) id = id === 0xffff ? 1 : id + 1;
      this.nextPacketId = id === 0xffff ? 1 : id + 1;
      if (!this.writePublish(d, id, false, Date.now())) {
        // Too large for this client: rejected (dead-lettered if the queue says so) rather than retried forever.
        c.handle.nack(qd.id, false).catch(() => undefined);
        return;
      }
      d.packetId = id;
      this.ownInflight().set(id, d);
    } catch (err) {
      this.fail(err);
    }
  }

  /** QueueConsumerHost: the queue was deleted; the subscription ends (MQTT cannot tell the client). */
  queueCancelled(c: MqttQueueConsumer, reason: string): void {
    if (this.queueSubs?.get(c.filter) === c) this.queueSubs.delete(c.filter);
    this.logLimited('debug', 'queue subscription ended', { clientId: this.clientId, remote: this.remote, filter: c.filter, reason }, 'mqtt queue subscription ended');
  }

  /** Window room again (PUBACK, drained socket or queue): queue consumers may take more. */
  private resumeQueues(): void {
    if (this.queueSubs === null || this.state !== State.Connected) return;
    for (const c of this.queueSubs.values()) c.handle.resume(c);
  }

  /** [MQTT-3.3.1-6] retained messages matching a new subscription, with RETAIN 1 [MQTT-3.3.1-8]. */
  private sendRetained(sub: Subscription, isNew: boolean): void {
    const d = sub.options.data as SubData;
    // [MQTT-3.3.1-10] Retain Handling 1: only when the subscription did not exist.
    if (d.retainHandling === 1 && !isNew) return;
    const now = Date.now();
    const admit = this.session!.admit;
    this.ctx.engine.retained.match(sub.filter, (msg) => {
      if (msg.expiresAt !== undefined && msg.expiresAt <= now) return;
      // Retained messages follow the subscription's policy as live ones do.
      if (!admit(msg.topic)) return;
      const qos = (msg.qos < sub.options.qos ? msg.qos : sub.options.qos) as QoS;
      this.route(newDelivery(msg, qos, true, d.subscriptionId !== undefined ? [d.subscriptionId] : null, null, false));
    });
  }

  private onUnsubscribe(p: UnsubscribePacket): void {
    const s = this.session!;
    const codes: number[] = [];
    for (const f of p.filters) {
      // [MQTT-3.10.4-1] filters compare character by character.
      const qc = this.queueSubs?.get(f);
      if (qc) {
        // Deliveries in flight stay acknowledgeable (their PUBACK still acks them) until the connection ends.
        this.queueSubs!.delete(f);
        qc.handle.cancel(qc);
        codes.push(ReasonCode.SUCCESS);
        continue;
      }
      const sub = s.subs.get(f);
      if (sub) {
        this.ctx.engine.unsubscribe(sub);
        s.subs.delete(f);
        codes.push(ReasonCode.SUCCESS);
      } else codes.push(ReasonCode.NO_SUBSCRIPTION_EXISTED);
    }
    if (s.persistent) this.hub.persist(s);
    // [MQTT-3.10.4-4] [MQTT-3.10.4-5] UNSUBACK even when nothing matched (v5 says so per filter).
    this.reply(encodeUnsuback({ type: 'unsuback', packetId: p.packetId, reasonCodes: codes, properties: {} }, this.level));
  }

  // ---------------------------------------------------------------- outbound delivery

  /**
   * Called (through the session) by the engine, synchronously, for every publish matching one or more of our
   * subscriptions. Never throws (a bug here must not break the publisher's connection).
   */
  deliver(msg: Message, subs: Subscription[]): void {
    if (this.state !== State.Connected) {
      // Attached, CONNACK on its way: keep it for the connection (or the session, if the connection fails).
      if (this.state !== State.Closed && (this.early?.length ?? 0) < this.opts.maxQueued) {
        (this.early ??= []).push({ msg, subs });
        return;
      }
      // Closing: the message does not reach the client.
      this.hub.dropped('closed', true);
      return;
    }
    try {
      // [MQTT-3.3.5-1] the maximum QoS over every matching subscription, capped by the message's own QoS.
      let granted = 0;
      let retain = false;
      let ids: number[] | null = null;
      let shared: Subscription | null = null;
      let allShared = true;
      let any = false;
      const selfOrigin = msg.origin === this.session?.id;
      for (let k = 0; k < subs.length; k++) {
        const s = subs[k];
        const d = s.options.data as SubData | undefined;
        if (d !== undefined) {
          // [MQTT-3.8.3-3] No Local: not back to the connection that published it.
          if (d.noLocal && selfOrigin) continue;
          if (d.retainAsPublished && msg.retain) retain = true; // [MQTT-3.3.1-12]
          if (d.subscriptionId !== undefined) (ids ??= []).push(d.subscriptionId); // [MQTT-3.3.4-3]
        }
        any = true;
        if (s.options.qos > granted) granted = s.options.qos;
        if (s.options.group !== undefined) shared ??= s;
        else allShared = false;
      }
      if (!any) {
        this.hub.notDelivered();
        return;
      }
      // [MQTT-3.3.2-5] an expired message is not delivered.
      if (msg.expiresAt !== undefined && msg.expiresAt <= Date.now()) {
        this.drop('expired', true);
        return;
      }
      const qos = (msg.qos < granted ? msg.qos : granted) as QoS;
      if (qos === 0 && !retain && ids === null && this.queueHead === this.queue.length && !this.restoring && (this.level !== 5 || (isPlain(msg) && this.clientAliasMax === 0))) {
        this.sendQos0Plain(msg);
        return;
      }
      this.route(newDelivery(msg, qos, retain, ids, allShared ? shared : null, true));
    } catch (err) {
      this.fail(err);
    }
  }

  /** Sends now, or queues behind the window (order is kept: once anything waits, everything after it waits). */
  private route(d: Delivery): void {
    if (this.queueHead < this.queue.length || this.restoring) this.enqueue(d);
    else if (d.qos === 0) this.sendQos0(d, false);
    else if (this.inflight.size < this.window()) this.sendQos(d);
    else this.enqueue(d);
  }

  /** [MQTT-3.3.4-9] no more unacknowledged QoS 1/2 than the client's Receive Maximum. */
  private window(): number {
    return this.clientReceiveMax < this.opts.maxInflight ? this.clientReceiveMax : this.opts.maxInflight;
  }

  private sendQos0Plain(msg: Message): void {
    // A client that does not read its socket gets no more QoS 0 messages until it catches up.
    if (this.stream.writableLength > this.opts.writeHighWaterMark) {
      if (this.opts.slowConsumer === 'disconnect') {
        this.queue.push(newDelivery(msg, 0, false, null, null, true));
        this.slowConsumer('write buffer full');
      } else this.drop('writeBuffer', true);
      return;
    }
    const frame = plainQos0Frame(msg, this.level === 5);
    // [MQTT-3.1.2-24] nothing larger than the client's Maximum Packet Size is sent; it is discarded.
    if (frame.length > this.clientMaxPacket) {
      this.drop('tooLarge', true);
      return;
    }
    this.stats.publishesOut++;
    this.hub.stats.messagesSent++;
    this.send(frame);
    this.sent(frame.length);
  }

  /** A PUBLISH went out: the registry counts it, the namespace's outbound byte quota is charged. */
  private sent(bytes: number): void {
    if (this.client !== null) this.client.messagesOut++;
    if (this.lease !== null) {
      const wait = this.lease.chargeOut(bytes);
      if (wait > 0) this.throttle(wait);
    }
  }

  /** `queued`: `d` is the head of the queue (drainQueue), else it has not been queued. */
  private sendQos0(d: Delivery, queued: boolean): void {
    if (this.stream.writableLength > this.opts.writeHighWaterMark) {
      if (this.opts.slowConsumer === 'disconnect') {
        if (!queued) this.queue.push(d);
        this.slowConsumer('write buffer full');
      } else this.drop('writeBuffer', d.counted);
      return;
    }
    this.writePublish(d, 0, false, Date.now());
  }

  private sendQos(d: Delivery): void {
    let id = this.nextPacketId;
    while (this.inflight.has(id)) id = id === 0xffff ? 1 : id + 1;
    this.nextPacketId = id === 0xffff ? 1 : id + 1;
    if (!this.writePublish(d, id, false, Date.now())) {
      if (d.stored !== 'none') this.hub.untrack(this.session!, d);
      return;
    }
    d.packetId = id;
    this.ownInflight().set(id, d);
    // Persistent session: the message is in the store, with the packet id it was sent with, until acknowledged.
    if (d.stored === 'none') this.hub.track(this.session!, d);
    else this.hub.touch(this.session!, d);
  }

  /** Encodes and writes one PUBLISH; false when it was too large for the client and discarded. */
  private writePublish(d: Delivery, id: number, dup: boolean, now: number): boolean {
    const msg = d.msg;
    let frame: Buffer;
    if (this.level === 5) {
      const props = messageProps(msg, now);
      if (d.subIds !== null) props.subscriptionIdentifiers = d.subIds;
      let topic = msg.topic;
      // Server -> client topic aliases, never on re-sends (aliases do not outlive a connection [MQTT-3.3.2-7]).
      if (this.clientAliasMax > 0 && !dup) {
        this.outAliases ??= new Map();
        const a = this.outAliases.get(topic);
        if (a !== undefined) {
          props.topicAlias = a;
          topic = '';
        } else if (this.outAliases.size < this.clientAliasMax) {
          const na = this.outAliases.size + 1;
          this.outAliases.set(topic, na);
          props.topicAlias = na;
        }
      }
      frame = encodePublishFrame(topic, msg.payload, d.qos, d.retain, dup, id, props);
    } else {
      frame = encodePublishFrame(msg.topic, msg.payload, d.qos, d.retain, dup, id);
    }
    // [MQTT-3.1.2-24] a packet over the client's Maximum Packet Size is discarded, as if it had been sent.
    if (frame.length > this.clientMaxPacket) {
      this.drop('tooLarge', d.counted);
      return false;
    }
    this.stats.publishesOut++;
    this.hub.stats.messagesSent++;
    this.send(frame);
    this.sent(frame.length);
    return true;
  }

  /**
   * Bounded queue behind the in-flight window: when full, QoS 0 messages are dropped first, then the new
   * message; or, with the slow-consumer policy 'disconnect', the client is disconnected instead.
   */
  private enqueue(d: Delivery): void {
    if (this.queue.length - this.queueHead >= this.opts.maxQueued) {
      if (this.opts.slowConsumer === 'disconnect') {
        // The message goes to the session with the rest (kept if it is persistent), then the client goes.
        this.queue.push(d);
        if (d.qos !== 0) this.hub.track(this.session!, d);
        this.slowConsumer('queue full');
        return;
      }
      if (d.qos === 0) {
        this.drop('queueFull', d.counted);
        return;
      }
      let k = this.queueHead;
      while (k < this.queue.length && this.queue[k].qos !== 0) k++;
      if (k === this.queue.length) {
        this.drop('queueFull', d.counted);
        return;
      }
      const [evicted] = this.queue.splice(k, 1);
      this.drop('queueFull', evicted.counted);
    }
    this.queue.push(d);
    if (d.qos !== 0) this.hub.track(this.session!, d);
  }

  /** A message for this client did not reach it: counted as dropped (and not delivered). */
  private drop(cause: keyof MqttDropCounts, counted: boolean): void {
    this.stats.dropped++;
    this.hub.dropped(cause, counted);
  }

  /**
   * Slow-consumer policy 'disconnect' (as nats-server does with a slow consumer): a client is over its limit
   * as soon as a message for it would be dropped because it does not keep up, i.e. its queue behind the
   * in-flight window holds `maxQueued` messages (the window full of unacknowledged QoS 1/2), or its socket
   * holds more than `writeHighWaterMark` unsent bytes. The queue is the grace; the message that finds it full
   * closes the connection (v5 DISCONNECT 0x97 Quota exceeded, section 3.14.2.1; 3.1.1 a plain close). A
   * persistent session keeps what was in flight and queued (already written through) and that message; in a
   * session that ends with its connection they are counted as dropped.
   */
  private slowConsumer(why: string): void {
    const s = this.session!;
    this.hub.stats.slowConsumerDisconnects++;
    this.logLimited(
      'warn',
      'slow consumer',
      { clientId: this.clientId, remote: this.remote, why, inflight: this.inflight.size, queued: this.queued, bufferedBytes: this.stream.writableLength },
      'mqtt slow consumer, disconnecting',
    );
    // Written while the session is still connected (the store's connected bound): nothing is trimmed.
    this.hub.flushSession(s);
    this.disconnectWith(ReasonCode.QUOTA_EXCEEDED, `slow consumer: ${why}`);
  }

  private drainQueue(): void {
    const q = this.queue;
    const now = Date.now();
    while (this.queueHead < q.length && this.state === State.Connected && !this.restoring) {
      const d = q[this.queueHead];
      if (d.msg.expiresAt !== undefined && d.msg.expiresAt <= now) {
        // [MQTT-3.3.2-5] expired while waiting: not sent, and no longer kept.
        if (d.stored !== 'none') this.hub.untrack(this.session!, d);
        this.drop('expired', d.counted);
        this.queueHead++;
        continue;
      }
      if (d.qos === 0) {
        this.sendQos0(d, true);
        // The slow-consumer policy closed the connection (the queue went to the session with d at its head).
        if ((this.state as State) === State.Closed) return;
      } else if (this.inflight.size < this.window()) this.sendQos(d);
      else break;
      this.queueHead++;
    }
    if (this.queueHead === q.length) {
      this.queue = [];
      this.queueHead = 0;
    } else if (this.queueHead > 1024 && this.queueHead * 2 > q.length) {
      q.splice(0, this.queueHead);
      this.queueHead = 0;
    }
    if (this.queueSubs !== null) this.resumeQueues();
  }

  private onPuback(id: number): void {
    const e = this.inflight.get(id);
    // An unknown id (or a QoS 2 id) is ignored: nothing in 3.1.1 lets us report it.
    if (e === undefined || e.qos !== 1) return;
    this.inflight.delete(id);
    if (isQueueBound(e)) {
      // The queue ack: the message leaves its queue.
      e.queueConsumer.handle.ack(e.queueId).catch(this.onQueueAckError);
    } else if (e.stored !== 'none') this.hub.untrack(this.session!, e);
    this.drainQueue();
  }

  private onPubrec(id: number, reason: number): void {
    const e = this.inflight.get(id);
    if (e === undefined || e.qos !== 2) {
      // v5: PUBREL 0x92 for an id we do not know (section 3.6.2.1).
      if (this.level === 5) this.reply(encodeIdOnly('pubrel', id, 5, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND));
      return;
    }
    if (reason >= 0x80) {
      // Section 4.3.3: a PUBREC with a failure code ends the exchange; the client refused the message.
      this.inflight.delete(id);
      if (e.stored !== 'none') this.hub.untrack(this.session!, e);
      this.drainQueue();
      return;
    }
    // The message is now the client's; from here only PUBREL/PUBCOMP remain (section 4.3.3), also after a
    // broker restart: the stored entry records it.
    e.released = true;
    if (e.stored !== 'none') this.hub.touch(this.session!, e);
    this.reply(encodeIdOnly('pubrel', id, this.level));
  }

  private onPubcomp(id: number): void {
    const e = this.inflight.get(id);
    if (e === undefined || e.qos !== 2 || !e.released) return;
    this.inflight.delete(id);
    if (e.stored !== 'none') this.hub.untrack(this.session!, e);
    this.drainQueue();
  }

  // ---------------------------------------------------------------- writes and close

  /**
   * Writes are corked for the rest of the current tick and flushed together (one writev) on the next tick,
   * so a burst of deliveries or acks becomes a single syscall.
   */
  private send(buf: Buffer, written?: () => void): void {
    if (this.stream.destroyed) return;
    if (!this.corked) {
      this.corked = true;
      this.stream.cork();
      process.nextTick(this.uncork);
    }
    this.stream.write(buf, written);
  }

  /**
   * A reply to one of the client's packets: counted until the socket takes it, and past `maxPendingAcks` unsent
   * ones the connection stops reading (TCP pushes back on the client) until half of them are out. Every byte queued
   * for a client counts against its limit, not only deliveries.
   */
  private reply(buf: Buffer): void {
    if (this.stream.destroyed) return;
    let b = this.replies;
    if (b === null) {
      const fresh: ReplyBacklog = { unsent: 0, taken: 0, paused: false, since: 0, seen: 0, done: () => this.replyTaken(fresh) };
      b = this.replies = fresh;
    }
    b.unsent++;
    this.send(buf, b.done);
    // While another reason holds reading (auth, storage, a quota), resumeReading takes the backlog into account.
    if (b.unsent >= this.opts.maxPendingAcks && !this.readPaused && this.state === State.Connected) {
      this.holdForReplies(b);
      this.pauseReading();
    }
  }

  private holdForReplies(b: ReplyBacklog): void {
    if (b.paused) return;
    b.paused = true;
    b.since = Date.now();
    b.seen = b.taken;
  }

  /** The write callback of a reply (also called, with an error, when the stream is destroyed first). */
  private replyTaken(b: ReplyBacklog): void {
    b.unsent--;
    b.taken++;
    if (this.state === State.Closed) return;
    if (b.paused) {
      if (b.unsent <= this.opts.maxPendingAcks / 2) {
        b.paused = false;
        this.resumeReading();
      }
    } else if (b.unsent === 0 && this.replies === b) this.replies = null;
  }

  private close(kind: CloseKind): void {
    if (this.state === State.Closed) return;
    const wasConnected = this.state === State.Connected;
    this.state = State.Closed;
    this.hub.connections.delete(this);
    const will = this.will;
    this.will = null;
    const s = this.session;
    if (s !== null) {
      // Unacknowledged deliveries, oldest first: what was in flight, then what waited.
      // Queue deliveries are not the session's: they go back to their queues below.
      const unacked: Delivery[] = [];
      for (const d of this.inflight.values()) if (!isQueueBound(d)) unacked.push(d);
      for (let k = this.queueHead; k < this.queue.length; k++) unacked.push(this.queue[k]);
      // DISCONNECT cleared the will unless it asked for it (v5 0x04); a broker shutdown is not the client's failure.
      const publishWill = will !== null && wasConnected && kind !== 'shutdown';
      this.hub.detach(s, this, unacked, publishWill ? will : null);
      this.session = null;
    }
    if (this.queueSubs !== null) {
      // Unacknowledged queue deliveries go back to their queues, redelivered, for other consumers.
      for (const c of this.queueSubs.values()) c.handle.cancel(c);
      const owners = new Set<MqttQueueConsumer>(this.queueSubs.values());
      for (const d of this.inflight.values()) if (isQueueBound(d)) owners.add(d.queueConsumer);
      for (const c of owners) c.handle.release(c.owner);
      this.queueSubs = null;
    }
    if (this.drainArmed) {
      this.stream.off('drain', this.onDrain);
      this.drainArmed = false;
    }
    this.inflight.clear();
    this.queue = [];
    this.queueHead = 0;
    this.acks.length = 0;
    this.acksHead = 0;
    this.pending = NO_BUFFERS;
    this.pendingBytes = 0;
    this.release();
    this.inAliases = null;
    this.outAliases = null;
    if (this.throttleTimer !== null) {
      clearTimeout(this.throttleTimer);
      this.throttleTimer = null;
    }
    this.lease?.release();
    this.lease = null;
    this.client?.close();
    this.scram = null;
    if (this.ownHub) this.hub.close();

    const st = this.stream;
    if (kind === 'abnormal' || kind === 'takeover') {
      if (kind === 'takeover' && this.level === 5) st.end();
      else st.destroy();
      if (kind === 'takeover' && this.level === 5) {
        this.lingerTimer = setTimeout(() => st.destroy(), this.opts.closeLingerMs);
        this.lingerTimer.unref();
      }
    } else if (!st.destroyed) {
      // Flush what is queued (CONNACK refusal, DISCONNECT, last acks), then FIN; destroy if the peer never closes.
      st.end();
      this.lingerTimer = setTimeout(() => st.destroy(), this.opts.closeLingerMs);
      this.lingerTimer.unref();
    }
    if (st.destroyed && st.closed) this.finish();
  }

  private finish(): void {
    if (this.lingerTimer) {
      clearTimeout(this.lingerTimer);
      this.lingerTimer = null;
    }
    this.resolveClosed();
  }
}

function levels(topic: string): number {
  let n = 1;
  for (let i = 0; i < topic.length; i++) if (topic.charCodeAt(i) === 0x2f) n++;
  return n;
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function isByteCounter(x: unknown): x is { readonly bytesRead: number; readonly bytesWritten: number } {
  const o = x as { bytesRead?: unknown; bytesWritten?: unknown };
  return typeof o.bytesRead === 'number' && typeof o.bytesWritten === 'number';
}

/** `remote` ("address:port", as the listeners give it) without its port; undefined when the address is unknown. */
function addressOf(remote: string): string | undefined {
  const i = remote.lastIndexOf(':');
  const a = i > 0 && /^(\d+|\?)$/.test(remote.slice(i + 1)) ? remote.slice(0, i) : remote;
  return a === '' || a === '?' || a === 'unknown' ? undefined : a;
}
