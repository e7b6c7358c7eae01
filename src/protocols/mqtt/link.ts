/**
 * The state of one MQTT connection and its life: what every packet family (connect.ts, publish-in.ts,
 * subscribe.ts, outbound.ts) reads and writes, and what they all use:
 *
 * - bytes in: framing of the stream's chunks into packets (`receive()`, `parse()`), the hub-wide bound on bytes
 *   of unfinished packets (`hold()`), and read flow control (`pauseReading()` / `resumeReading()`, `throttle()`);
 * - writes: corked per tick (`send()`), and replies to the client's own packets counted until the socket takes
 *   them (`reply()`, the ReplyBacklog);
 * - errors: a protocol error closes this connection alone, logged at a bounded rate (`fail()`, `logLimited()`,
 *   `disconnectWith()`);
 * - timers: none per connection; the hub's shared tick calls `checkTimers()` (connect timeout, packet timeout,
 *   keep-alive, replies unread);
 * - the end: `close()` (will, session detach, queue deliveries back to their queues, every resource released),
 *   and the server-side closes (`shutdown()`, `kick()`, `takenOver()`, `sessionMoved()`).
 *
 * `MqttLink` is abstract: `MqttConnection` (connection.ts) dispatches each packet to its family. The families are
 * functions over the link (as Mosquitto's handle_*.c over `struct mosquitto`), so its state is public to them;
 * nothing outside src/protocols/mqtt/ uses it but through `MqttConnection`'s own members.
 */
import type { Duplex } from 'node:stream';
import type { Access, ClientEntry, Principal, QuotaLease, SaslExchange } from '../../control/index.js';
import { namespaceNames, type Message, type NamespaceNames, type QueueDelivery, type Subscription } from '../../core/index.js';
import { logKey } from '../../util/log-limit.js';
import type { AdapterContext } from '../types.js';
import { CloseSignal } from '../listener.js';
import {
  INCOMPLETE,
  MqttProtocolError,
  ReasonCode,
  encodeConnack,
  encodeDisconnect,
  parsePacket,
  peekFrameLength,
  type ConnectPacket,
  type MqttPacket,
  type ProtocolLevel,
  type Will,
} from './codec/index.js';
import { resolveMqttOptions, type MqttOptions, type ResolvedMqttOptions } from './options.js';
import { MqttHub } from './hub.js';
import { EmptyMap, type Delivery, type MqttSession } from './session.js';
import type { SessionConnection } from './types.js';
import { isQueueBound, type MqttQueueConsumer, type QueueConsumerHost } from './queue-consumer.js';

export const enum State {
  AwaitingConnect,
  Authenticating,
  Connected,
  Closed,
}

/** Why the connection ends; decides the will, the v5 DISCONNECT reason and how the socket is closed. */
export type CloseKind =
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
export interface PendingAck {
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
export interface ReplyBacklog {
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

/** Where a connection's stream keeps its connection, for the stream's listeners (MqttConnection.onStreamData...). */
const CONNECTION = Symbol('MqttConnection');
type ConnectionStream = Duplex & { [CONNECTION]: MqttLink };

/** The in-flight map of every connection with nothing in flight yet (see EmptyMap). */
export const NO_INFLIGHT: Map<number, Delivery> = new EmptyMap();
/** `pending` holding nothing: shared, frozen (adding to it throws). */
const NO_BUFFERS = Object.freeze([]) as unknown as Buffer[];

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

/** The state and life (see the file header); `MqttConnection` is the one subclass. */
export abstract class MqttLink implements QueueConsumerHost, SessionConnection {
  clientId = '';
  /**
   * The namespace of the identity that logged in (core namespaces.ts): topics, filters, `$queue/` names and the
   * session key are qualified with it on the way in and stripped on the way out. `default`: names unchanged.
   */
  names: NamespaceNames = namespaceNames('default');
  readonly remote: string;
  /**
   * The peer's address without its port (undefined when unknown): the key of its rate-limited log lines and of
   * the authenticator's per-address throttle.
   */
  readonly address: string | undefined;
  readonly stats: MqttConnectionStats = { dropped: 0, publishesIn: 0, publishesOut: 0 };
  /** Tells the listener (and whoever asks for `closed`) that the stream has closed and every resource is released. */
  readonly closeSignal = new CloseSignal();

  readonly opts: ResolvedMqttOptions;
  readonly hub: MqttHub;
  private readonly ownHub: boolean;
  session: MqttSession | null = null;
  state = State.AwaitingConnect;
  level: ProtocolLevel = 4;
  will: Will | null = null;
  keepaliveMs = 0;
  private lastRx = Date.now();
  private readonly openedAt = Date.now();
  private lingerTimer: NodeJS.Timeout | null = null;

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
  readPaused = false;
  /** Replies not yet taken by the socket; null while there are none (see ReplyBacklog). */
  private replies: ReplyBacklog | null = null;

  // inbound QoS 1/2
  readonly acks: PendingAck[] = [];
  acksHead = 0;
  /** Inbound QoS 1 publishes not acknowledged yet (v5 Receive Maximum accounting). */
  inQos1 = 0;
  inAliases: Map<number, string> | null = null;

  // v5 client limits
  clientReceiveMax = 65535;
  clientMaxPacket = Number.MAX_SAFE_INTEGER;
  clientAliasMax = 0;
  outAliases: Map<string, number> | null = null;
  requestProblemInfo = true;
  authMethod: string | null = null;
  authStep = 0;
  pendingConnect: ConnectPacket | null = null;
  /** The client id the server assigned (the client sent none), returned in the v5 CONNACK. */
  assignedId: string | null = null;
  /** The v5 CONNECT's Request Response Information. */
  requestResponse: number | undefined;

  // control plane (null without opts.access)
  /** What this connection's identity may do; set at login. */
  access: Access | null = null;
  /** Its namespace's quotas, held from login to close. */
  lease: QuotaLease | null = null;
  /** Its entry in the client registry, from accept to close. */
  readonly client: ClientEntry | null = null;
  /** A SCRAM exchange under way (CONNECT, or a re-authentication). */
  scram: SaslExchange | null = null;
  /** Enhanced authentication is the control plane's SCRAM (not the `enhancedAuth` hook). */
  scramAuth = false;
  /** Reading is held back by a quota until this timer fires. */
  private throttleTimer: NodeJS.Timeout | null = null;
  /**
   * The namespace's bytes-out quota is spent until then (ms since the epoch; 0: not): QoS 0 deliveries are dropped
   * meanwhile (outbound.ts), as MQTT lets a server drop them.
   */
  outHeldUntil = 0;
  readonly certificate: (() => CertificateLogin) | null;

  // outbound
  /** By packet id; NO_INFLIGHT until the first QoS 1/2 delivery (see ownInflight). */
  inflight: Map<number, Delivery> = NO_INFLIGHT;
  nextPacketId = 1;
  queue: Delivery[] = [];
  queueHead = 0;
  /** While the stored queue of a resumed session is being read, new deliveries wait behind it. */
  restoring = false;
  /**
   * Messages that matched the session between attach and CONNACK (the session's subscriptions are live from the
   * attach on, and a storage completion can publish in a microtask in between): delivered once connected, in
   * order, or handed back to the session if the connection closes first. Bounded by the session queue's size.
   */
  early: Array<{ msg: Message; subs: Subscription[] }> | null = null;
  private corked = false;
  /** `$queue/<name>` subscriptions by filter (queue-consumer.ts); they last as long as the connection. */
  queueSubs: Map<string, MqttQueueConsumer> | null = null;
  /** Queue consumers subscribed by the SUBSCRIBE being handled, started once its SUBACK is out. */
  queueStarts: MqttQueueConsumer[] | null = null;
  /** A 'drain' listener is waiting to resume the queue consumers. */
  drainArmed = false;
  // Callbacks made on first use and kept (`uncork` below, outbound.ts's queueAckError and onDrain): a closure costs
  // 56 bytes of heap, and an idle connection needs none of them but `uncork`.
  queueAckErrorFn: ((err: unknown) => void) | null = null;
  drainFn: (() => void) | null = null;
  private uncorkFn: (() => void) | null = null;

  private get uncork(): () => void {
    return (this.uncorkFn ??= () => {
      this.corked = false;
      this.stream.uncork();
    });
  }

  constructor(
    readonly stream: Duplex,
    readonly ctx: AdapterContext,
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
    (stream as ConnectionStream)[CONNECTION] = this;
    stream.on('data', MqttLink.onStreamData);
    stream.on('error', MqttLink.onStreamError);
    // EOF without DISCONNECT is an abnormal end: the will is published [MQTT-3.1.2-8].
    stream.on('end', MqttLink.onStreamEnd);
    stream.on('close', MqttLink.onStreamClose);
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
          {
            clientId: this.clientId || undefined,
            remote: this.remote,
            unsentReplies: b.unsent,
            bufferedBytes: this.stream.writableLength,
            packetTimeoutMs: this.opts.packetTimeoutMs,
          },
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
    // An OIDC token's session ends at its expiry (v5 DISCONNECT 0xA0 Maximum connect time): the client reconnects
    // with a fresh token.
    const exp = this.state === State.Connected ? this.access?.principal.expiresAt : undefined;
    if (exp !== undefined && now >= exp) {
      this.logLimited('info', 'token expired', { clientId: this.clientId, remote: this.remote }, 'mqtt client token expired, closing connection');
      this.disconnectWith(ReasonCode.MAXIMUM_CONNECT_TIME, 'token expired');
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
        {
          clientId: this.clientId || undefined,
          remote: this.remote,
          heldBytes: n,
          partialBytes: this.hub.partialBytes,
          maxPartialBytes: this.opts.maxPartialBytes,
        },
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

  pauseReading(): void {
    if (this.readPaused) return;
    this.readPaused = true;
    this.stream.pause();
  }

  resumeReading(): void {
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
  fail(err: unknown): void {
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
    this.ctx.logger.error({ clientId: this.clientId || undefined, remote: this.remote, err }, 'mqtt connection failed unexpectedly, closing it');
    this.disconnectWith(ReasonCode.UNSPECIFIED_ERROR, 'internal error');
  }

  /** A line a client can trigger: at a bounded rate per address (and overall), with the count of what was suppressed. */
  logLimited(level: 'debug' | 'info' | 'warn', event: string, fields: Record<string, unknown>, msg: string): void {
    this.hub.logLimit.log(level, logKey(`mqtt ${event}`, this.address), fields, msg);
  }

  /** Server-initiated close: v5 gets a DISCONNECT with `reason` first [MQTT-3.14.0-1]; the will goes out. */
  disconnectWith(reason: number, text: string): void {
    if (this.state === State.Closed) return;
    if (this.level === 5 && this.state === State.Connected) {
      this.send(encodeDisconnect(5, reason, this.requestProblemInfo ? { reasonString: text } : undefined));
      this.close('refused');
    } else {
      this.close('abnormal');
    }
  }

  // ---------------------------------------------------------------- quotas

  /**
   * A namespace quota says to hold the client back for `ms`: reading stops (TCP pushes back on the client) and
   * resumes when the time has passed, unless another reason to hold it (acks waiting for storage) still stands.
   */
  throttle(ms: number): void {
    if (this.throttleTimer !== null || this.state === State.Closed) return;
    this.hub.stats.throttled++;
    this.pauseReading();
    this.throttleTimer = setTimeout(() => {
      this.throttleTimer = null;
      if (this.state === State.Connected && this.acks.length - this.acksHead < this.opts.maxPendingAcks) this.resumeReading();
    }, ms);
  }

  // ---------------------------------------------------------------- writes and close

  /**
   * Writes are corked for the rest of the current tick and flushed together (one writev) on the next tick,
   * so a burst of deliveries or acks becomes a single syscall.
   */
  send(buf: Buffer, written?: () => void): void {
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
  reply(buf: Buffer): void {
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

  close(kind: CloseKind): void {
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
      this.stream.off('drain', this.drainFn!);
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
    this.closeSignal.fire(this);
  }

  /** Resolves once the stream has closed and every resource is released. */
  get closed(): Promise<void> {
    return this.closeSignal.closed;
  }

  // ---------------------------------------------------------------- what connection.ts adds

  /** One parsed packet, dispatched by type (connection.ts). */
  protected abstract handle(p: MqttPacket): void;
  abstract deliver(msg: Message, subs: Subscription[]): void;
  abstract queueCredit(c: MqttQueueConsumer): boolean;
  abstract deliverFromQueue(c: MqttQueueConsumer, qd: QueueDelivery): void;
  abstract queueCancelled(c: MqttQueueConsumer, reason: string): void;
}

export function levels(topic: string): number {
  let n = 1;
  for (let i = 0; i < topic.length; i++) if (topic.charCodeAt(i) === 0x2f) n++;
  return n;
}

export function errText(err: unknown): string {
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
