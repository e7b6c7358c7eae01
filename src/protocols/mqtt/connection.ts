/**
 * One MQTT connection: protocol state for one client over any Duplex stream (TCP, TLS, WebSocket stream, a
 * test pair). It talks to the routing core only (`ctx.engine`), never to storage.
 *
 * Inbound: bytes -> codec -> packets -> engine.publish / subscribe / unsubscribe.
 * Outbound: the engine calls `deliver()` synchronously for every matching publish; this class turns it into a
 * PUBLISH frame under its own flow control (in-flight window, bounded queue, write high-water mark), so a slow
 * consumer can never make the broker's memory grow without bound.
 *
 * Decisions (see also README.md in this folder):
 * - Granted QoS = min(requested, options.maxQos), default maxQos 2: outbound QoS 2 is implemented (PUBLISH ->
 *   PUBREC -> PUBREL -> PUBCOMP), so there is no reason to downgrade.
 * - Sessions are not persisted yet: a CleanSession=0 client gets Session Present = 0 [MQTT-3.2.2-3] and its
 *   subscriptions and in-flight messages end with the connection.
 * - The will is published on every close that is not a DISCONNECT: socket error or EOF, keep-alive timeout,
 *   protocol error, session takeover. Not on broker shutdown (that is not the client's failure).
 */
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type { Message, QoS, Subscriber, Subscription } from '../../core/index.js';
import { FlowError, isFlowError } from '../../core/index.js';
import type { AdapterContext } from '../types.js';
import {
  ConnackCode,
  INCOMPLETE,
  MqttProtocolError,
  SUBACK_FAILURE,
  encodeConnack,
  encodeIdOnly,
  encodePublishFrame,
  encodeSuback,
  parsePacket,
  peekFrameLength,
  type ConnectPacket,
  type MqttPacket,
  type ProtocolLevel,
  type PublishPacket,
  type SubscribePacket,
  type UnsubscribePacket,
  type Will,
} from './codec/index.js';

// ------------------------------------------------------------------ options

/** Outcome of authentication; maps to CONNACK 0x00 / 0x04 / 0x05 (and to v5 reason codes later). */
export type AuthResult = 'ok' | 'bad-credentials' | 'not-authorized';

/**
 * The single authentication hook: the control plane plugs its user store in here. May be synchronous (no
 * extra latency on connect) or asynchronous (packets after CONNECT wait until it settles [MQTT-3.1.4-5]).
 */
export type Authenticator = (
  clientId: string,
  username: string | null,
  password: Buffer | null,
) => AuthResult | Promise<AuthResult>;

export interface MqttOptions {
  /** Largest accepted packet in bytes, fixed header included; a larger one closes the connection. */
  maxPacketSize?: number;
  /** The first packet must be a CONNECT within this many ms. */
  connectTimeoutMs?: number;
  /** Outbound QoS 1/2 messages awaiting acknowledgement, per connection. */
  maxInflight?: number;
  /** Outbound messages waiting behind a full in-flight window, per connection; beyond it messages are dropped. */
  maxQueued?: number;
  /** When this many bytes wait in the socket's write buffer, QoS 0 deliveries to the client are dropped. */
  writeHighWaterMark?: number;
  /** Highest QoS granted to a subscription. */
  maxQos?: QoS;
  /** Inbound QoS 1/2 publishes awaiting durable storage before the connection stops reading. */
  maxPendingAcks?: number;
  /** A connection closed by the server is destroyed if the peer has not closed it after this many ms. */
  closeLingerMs?: number;
  authenticate?: Authenticator;
}

export type ResolvedMqttOptions = Required<MqttOptions>;

export const allowAll: Authenticator = () => 'ok';

export const MQTT_DEFAULTS: ResolvedMqttOptions = {
  maxPacketSize: 1024 * 1024,
  connectTimeoutMs: 10_000,
  maxInflight: 100,
  maxQueued: 1000,
  writeHighWaterMark: 1024 * 1024,
  maxQos: 2,
  maxPendingAcks: 1000,
  closeLingerMs: 2000,
  authenticate: allowAll,
};

class MqttConfigError extends FlowError {
  constructor(message: string) {
    super('CONFIG_ERROR', message);
  }
}

/** Fills defaults and validates; throws FlowError('CONFIG_ERROR') on nonsense. */
export function resolveMqttOptions(opts: MqttOptions = {}): ResolvedMqttOptions {
  const o: ResolvedMqttOptions = { ...MQTT_DEFAULTS };
  for (const [k, v] of Object.entries(opts)) if (v !== undefined) Object.assign(o, { [k]: v });
  const positive = (name: keyof MqttOptions, v: number, max = Number.MAX_SAFE_INTEGER) => {
    if (!Number.isInteger(v) || v < 1 || v > max) {
      throw new MqttConfigError(`mqtt option ${name} must be an integer in 1..${max}, got ${v}`);
    }
  };
  positive('maxPacketSize', o.maxPacketSize, 268_435_455 + 5);
  positive('connectTimeoutMs', o.connectTimeoutMs);
  positive('maxInflight', o.maxInflight, 65535);
  positive('maxQueued', o.maxQueued);
  positive('writeHighWaterMark', o.writeHighWaterMark);
  positive('maxPendingAcks', o.maxPendingAcks, 65535);
  positive('closeLingerMs', o.closeLingerMs);
  if (o.maxQos !== 0 && o.maxQos !== 1 && o.maxQos !== 2) throw new MqttConfigError('mqtt option maxQos must be 0, 1 or 2');
  if (typeof o.authenticate !== 'function') throw new MqttConfigError('mqtt option authenticate must be a function');
  return o;
}

// ------------------------------------------------------------------ client registry

/**
 * Connected client ids of one listener, for session takeover: a second connection with the same client id
 * closes the first [MQTT-3.1.4-2]. (Cluster-wide takeover comes with the cluster layer.)
 */
export class MqttClientRegistry {
  private readonly byId = new Map<string, MqttConnection>();

  get size(): number {
    return this.byId.size;
  }

  get(clientId: string): MqttConnection | undefined {
    return this.byId.get(clientId);
  }

  /** Registers `conn` under `clientId`; returns the connection it replaces, if any. */
  claim(clientId: string, conn: MqttConnection): MqttConnection | undefined {
    const prev = this.byId.get(clientId);
    this.byId.set(clientId, conn);
    return prev === conn ? undefined : prev;
  }

  /** Removes `conn`, unless another connection has taken its client id over since. */
  release(clientId: string, conn: MqttConnection): void {
    if (this.byId.get(clientId) === conn) this.byId.delete(clientId);
  }
}

// ------------------------------------------------------------------ connection

const enum State {
  AwaitingConnect,
  Authenticating,
  Connected,
  Closed,
}

/** Why the connection ends; decides the will and how the socket is closed. */
type CloseKind =
  /** Client sent DISCONNECT: no will [MQTT-3.14.4-3]. */
  | 'disconnect'
  /** Client vanished or broke the protocol: will is published, socket destroyed. */
  | 'abnormal'
  /** Server-side close after a final packet (CONNACK refusal): flush, then end. */
  | 'refused'
  /** Another connection took the client id over: will is published. */
  | 'takeover'
  /** Listener shutting down: no will, flush, then end. */
  | 'shutdown';

/** An outbound QoS 1/2 PUBLISH awaiting its acknowledgements. */
interface Inflight {
  msg: Message;
  qos: 1 | 2;
  /** QoS 2: false until PUBREC (then PUBREL is sent and PUBCOMP awaited). */
  released: boolean;
}

/** A delivery waiting behind a full in-flight window. */
interface Queued {
  msg: Message;
  qos: QoS;
}

/** An inbound QoS 1/2 publish whose PUBACK / PUBREC waits for durability; sent strictly in arrival order. */
interface PendingAck {
  type: 'puback' | 'pubrec';
  packetId: number;
  done: boolean;
}

export interface MqttConnectionStats {
  /** Outbound messages dropped by flow control (slow consumer). */
  dropped: number;
  publishesIn: number;
  publishesOut: number;
}

const PINGRESP = Buffer.from([0xd0, 0x00]);

/**
 * Fan-out cache: the engine delivers one message to every matching subscriber back to back, and a QoS 0
 * frame with retain=0 is the same bytes for all of them, so it is encoded once.
 */
let lastFrameMsg: Message | null = null;
let lastFrame: Buffer | null = null;

function qos0Frame(msg: Message): Buffer {
  if (msg !== lastFrameMsg || lastFrame === null) {
    // [MQTT-3.3.1-9] live deliveries carry RETAIN 0.
    lastFrame = encodePublishFrame(msg.topic, msg.payload, 0, false, false, 0);
    lastFrameMsg = msg;
  }
  return lastFrame;
}

export interface MqttConnectionInit {
  options?: MqttOptions | ResolvedMqttOptions;
  /** Client ids of the listener (session takeover); a private one when omitted. */
  registry?: MqttClientRegistry;
  /** Peer address for logs. */
  remote?: string;
}

export class MqttConnection implements Subscriber {
  /** Subscriber id for the engine: "mqtt:<client id>". */
  id = 'mqtt:';
  clientId = '';
  readonly remote: string;
  readonly stats: MqttConnectionStats = { dropped: 0, publishesIn: 0, publishesOut: 0 };
  /** Resolves once the stream has closed and every resource is released. */
  readonly closed: Promise<void>;

  private readonly opts: ResolvedMqttOptions;
  private readonly registry: MqttClientRegistry;
  private state = State.AwaitingConnect;
  private level: ProtocolLevel = 4;
  private will: Will | null = null;
  private keepaliveMs = 0;
  private lastRx = Date.now();
  private connectTimer: NodeJS.Timeout | null = null;
  private keepaliveTimer: NodeJS.Timeout | null = null;
  private lingerTimer: NodeJS.Timeout | null = null;
  private resolveClosed!: () => void;

  // inbound bytes not parsed yet, and how many are needed before parsing can progress
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private needBytes = 0;
  /** Reading paused by us (async authentication, or too many inbound acks waiting for storage). */
  private readPaused = false;

  // inbound QoS 1/2
  private readonly acks: PendingAck[] = [];
  private acksHead = 0;
  /** QoS 2 packet ids whose PUBREC was (or will be) sent and whose PUBREL has not arrived. */
  private readonly awaitingRel = new Set<number>();

  // outbound
  /** Subscriptions by the filter string the client sent (including any `$share/<group>/` prefix). */
  private readonly subs = new Map<string, Subscription>();
  private readonly inflight = new Map<number, Inflight>();
  private nextPacketId = 1;
  private queue: Queued[] = [];
  private queueHead = 0;
  private corked = false;

  private readonly onData = (chunk: Buffer) => this.receive(chunk);
  private readonly uncork = () => {
    this.corked = false;
    this.stream.uncork();
  };
  private readonly onDurableError = (err: unknown) => {
    if (this.state === State.Closed) return;
    this.ctx.logger.warn(
      { clientId: this.clientId, remote: this.remote, err: errText(err) },
      'mqtt publish could not be stored, closing connection',
    );
    // MQTT 3.1.1 has no negative PUBACK: closing tells the client the message was not accepted.
    this.close('abnormal');
  };

  constructor(
    private readonly stream: Duplex,
    private readonly ctx: AdapterContext,
    init: MqttConnectionInit = {},
  ) {
    this.opts = resolveMqttOptions(init.options);
    this.registry = init.registry ?? new MqttClientRegistry();
    this.remote = init.remote ?? 'unknown';
    this.closed = new Promise((resolve) => {
      this.resolveClosed = resolve;
    });
    stream.on('data', this.onData);
    stream.on('error', (err: Error) => {
      this.ctx.logger.debug({ clientId: this.clientId, remote: this.remote, err: err.message }, 'mqtt socket error');
      this.close('abnormal');
    });
    // EOF without DISCONNECT is an abnormal end: the will is published [MQTT-3.1.2-8].
    stream.on('end', () => this.close('abnormal'));
    stream.on('close', () => {
      this.close('abnormal');
      this.finish();
    });
    // [MQTT-3.1.0-1] the first packet must be CONNECT, and it must come reasonably soon.
    this.connectTimer = setTimeout(() => {
      this.connectTimer = null;
      if (this.state !== State.AwaitingConnect) return;
      this.ctx.logger.info({ remote: this.remote }, 'mqtt connect timeout, closing connection');
      this.close('abnormal');
    }, this.opts.connectTimeoutMs);
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

  /** Closes the connection for a broker shutdown (no will); resolves when the stream has closed. */
  shutdown(): Promise<void> {
    this.close('shutdown');
    return this.closed;
  }

  // ---------------------------------------------------------------- inbound bytes

  private receive(chunk: Buffer): void {
    this.lastRx = Date.now();
    if (this.state === State.Closed) return;
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    // A large packet arrives in many chunks: collect them and parse once it is complete.
    if (this.pendingBytes < this.needBytes || this.readPaused) return;
    this.parse();
  }

  private parse(): void {
    const buf = this.pending.length === 1 ? this.pending[0] : Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
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
      const rest = off === 0 ? buf : buf.subarray(off);
      this.pending.push(rest);
      this.pendingBytes = rest.length;
    }
  }

  private pauseReading(): void {
    if (this.readPaused) return;
    this.readPaused = true;
    this.stream.pause();
  }

  private resumeReading(): void {
    if (!this.readPaused || this.state === State.Closed) return;
    this.readPaused = false;
    if (this.pendingBytes > 0 && this.pendingBytes >= this.needBytes) this.parse();
    // parse() may have closed the connection or paused again.
    if (!this.readPaused && (this.state as State) !== State.Closed) this.stream.resume();
  }

  /** Protocol errors close this connection only, with one log line; anything else is a bug, logged as such. */
  private fail(err: unknown): void {
    if (this.state === State.Closed) return;
    if (err instanceof MqttProtocolError) {
      this.ctx.logger.warn(
        { clientId: this.clientId || undefined, remote: this.remote, err: err.message },
        'mqtt protocol error, closing connection',
      );
      if (err.connackReturnCode !== undefined && this.state === State.AwaitingConnect) {
        this.send(encodeConnack({ type: 'connack', sessionPresent: false, returnCode: err.connackReturnCode }));
        this.close('refused');
      } else {
        this.close('abnormal');
      }
      return;
    }
    this.ctx.logger.error(
      { clientId: this.clientId || undefined, remote: this.remote, err },
      'mqtt connection failed unexpectedly, closing it',
    );
    this.close('abnormal');
  }

  // ---------------------------------------------------------------- packets

  private handle(p: MqttPacket): void {
    if (this.state === State.AwaitingConnect) {
      if (p.type !== 'connect') throw new MqttProtocolError(`first packet is ${p.type}, not connect`, '[MQTT-3.1.0-1]');
      this.onConnect(p);
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
        this.onPubrec(p.packetId);
        return;
      case 'pubrel':
        // Exactly-once inbound: the message was published when it first arrived; forget its id now.
        this.awaitingRel.delete(p.packetId);
        this.send(encodeIdOnly('pubcomp', p.packetId, this.level));
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
        this.send(PINGRESP); // [MQTT-3.12.4-1]
        return;
      case 'disconnect':
        this.will = null; // [MQTT-3.14.4-3]
        this.close('disconnect');
        return;
      case 'connect':
        throw new MqttProtocolError('second CONNECT', '[MQTT-3.1.0-2]');
      default:
        // CONNACK, SUBACK, UNSUBACK, PINGRESP travel server to client only.
        throw new MqttProtocolError(`${p.type} is not a client-to-server packet`, '[MQTT-4.8.0-1]');
    }
  }

  private onConnect(p: ConnectPacket): void {
    if (this.connectTimer) {
      clearTimeout(this.connectTimer);
      this.connectTimer = null;
    }
    this.level = p.protocolLevel;
    let clientId = p.clientId;
    if (clientId.length === 0) {
      if (!p.cleanSession) {
        // [MQTT-3.1.3-8] an empty id only makes sense for a session that is not kept.
        this.refuse(ConnackCode.IDENTIFIER_REJECTED, 'empty client id with clean session 0 [MQTT-3.1.3-8]');
        return;
      }
      clientId = `flowmq-${randomBytes(8).toString('hex')}`; // [MQTT-3.1.3-6]
    }
    this.clientId = clientId;
    this.id = `mqtt:${clientId}`;
    this.keepaliveMs = p.keepalive * 1000;
    this.will = p.will;
    let auth: AuthResult | Promise<AuthResult>;
    try {
      auth = this.opts.authenticate(clientId, p.username, p.password);
    } catch (err) {
      this.authFailed(err);
      return;
    }
    if (typeof auth === 'string') {
      this.accept(auth);
      return;
    }
    // [MQTT-3.1.4-5] nothing after CONNECT is processed before the CONNECT is accepted.
    this.state = State.Authenticating;
    this.pauseReading();
    auth.then(
      (r) => this.accept(r),
      (err: unknown) => this.authFailed(err),
    );
  }

  private authFailed(err: unknown): void {
    this.ctx.logger.error({ clientId: this.clientId, remote: this.remote, err }, 'mqtt authenticator failed');
    this.refuse(ConnackCode.SERVER_UNAVAILABLE, 'authenticator failed');
  }

  private accept(auth: AuthResult): void {
    if (this.state === State.Closed) return;
    if (auth !== 'ok') {
      this.refuse(
        auth === 'bad-credentials' ? ConnackCode.BAD_USERNAME_OR_PASSWORD : ConnackCode.NOT_AUTHORIZED,
        `authentication: ${auth}`,
      );
      return;
    }
    const prev = this.registry.claim(this.clientId, this);
    if (prev) {
      // [MQTT-3.1.4-2] the existing client with this id is disconnected, before this one is acknowledged.
      this.ctx.logger.info({ clientId: this.clientId, remote: prev.remote }, 'mqtt session taken over');
      prev.close('takeover');
    }
    this.state = State.Connected;
    // Sessions are not persisted yet, so there is never a session present [MQTT-3.2.2-1] [MQTT-3.2.2-3].
    this.send(encodeConnack({ type: 'connack', sessionPresent: false, returnCode: ConnackCode.ACCEPTED }, this.level));
    if (this.keepaliveMs > 0) this.armKeepalive(this.keepaliveMs * 1.5);
    this.ctx.logger.debug({ clientId: this.clientId, remote: this.remote }, 'mqtt client connected');
    this.resumeReading();
  }

  /** CONNACK with a failure code, then close [MQTT-3.2.2-5]; the will was never accepted so it is dropped. */
  private refuse(code: number, why: string): void {
    this.ctx.logger.info({ clientId: this.clientId || undefined, remote: this.remote, code, why }, 'mqtt connect refused');
    this.will = null;
    this.send(encodeConnack({ type: 'connack', sessionPresent: false, returnCode: code }, this.level));
    this.close('refused');
  }

  /** [MQTT-3.1.2-24] close if nothing arrives for 1.5 x keep-alive. */
  private armKeepalive(ms: number): void {
    this.keepaliveTimer = setTimeout(() => {
      this.keepaliveTimer = null;
      if (this.state === State.Closed) return;
      const limit = this.keepaliveMs * 1.5;
      const idle = Date.now() - this.lastRx;
      // While we hold reading paused the client's packets wait in the socket: not its fault.
      if (idle < limit || this.readPaused) {
        this.armKeepalive(this.readPaused ? limit : limit - idle);
        return;
      }
      this.ctx.logger.info({ clientId: this.clientId, remote: this.remote, keepalive: this.keepaliveMs / 1000 }, 'mqtt keep-alive timeout, closing connection');
      this.close('abnormal');
    }, ms);
  }

  // ---------------------------------------------------------------- inbound publish

  private onPublish(p: PublishPacket): void {
    this.stats.publishesIn++;
    if (p.qos === 2 && this.awaitingRel.has(p.packetId)) {
      // Re-sent QoS 2 publish before PUBREL: acknowledge again, do not deliver twice (section 4.3.3).
      this.queueAck('pubrec', p.packetId, null);
      return;
    }
    const msg: Message = {
      topic: p.topic,
      payload: p.payload,
      key: null,
      headers: [],
      timestamp: Date.now(),
      qos: p.qos,
      retain: p.retain, // the retained store comes later; the flag travels with the message for now
      origin: this.id,
    };
    let durable: Promise<void> | null;
    try {
      durable = this.ctx.engine.publish(msg);
    } catch (err) {
      // The core refused the message (its own topic rules): 3.1.1 can only close [MQTT-4.8.0-1].
      if (isFlowError(err)) throw new MqttProtocolError(`publish refused: ${err.message}`, '[MQTT-4.8.0-1]');
      throw err;
    }
    if (p.qos === 0) {
      if (durable !== null) durable.then(undefined, this.onDurableError);
      return;
    }
    if (p.qos === 2) this.awaitingRel.add(p.packetId);
    // QoS 1: PUBACK once every capturing stream has the message durably; QoS 2: PUBREC likewise.
    this.queueAck(p.qos === 1 ? 'puback' : 'pubrec', p.packetId, durable);
  }

  /** Acks go out in the order the publishes arrived, whatever order storage completes in. */
  private queueAck(type: 'puback' | 'pubrec', packetId: number, durable: Promise<void> | null): void {
    if (durable === null && this.acksHead === this.acks.length) {
      this.send(encodeIdOnly(type, packetId, this.level));
      return;
    }
    const entry: PendingAck = { type, packetId, done: durable === null };
    this.acks.push(entry);
    if (durable !== null) {
      durable.then(() => {
        entry.done = true;
        this.flushAcks();
      }, this.onDurableError);
    }
    if (this.acks.length - this.acksHead >= this.opts.maxPendingAcks) this.pauseReading();
  }

  private flushAcks(): void {
    if (this.state === State.Closed) return;
    const acks = this.acks;
    while (this.acksHead < acks.length && acks[this.acksHead].done) {
      const a = acks[this.acksHead++];
      this.send(encodeIdOnly(a.type, a.packetId, this.level));
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
    // [MQTT-3.8.4-4] several filters are handled as a sequence of SUBSCRIBEs, answered by one SUBACK whose
    // return codes follow the request order [MQTT-3.8.4-5].
    const codes = p.subscriptions.map((s) => this.subscribeOne(s.filter, s.qos));
    this.send(encodeSuback({ type: 'suback', packetId: p.packetId, returnCodes: codes }, this.level));
  }

  private subscribeOne(filter: string, requested: QoS): number {
    let group: string | undefined;
    let coreFilter = filter;
    if (filter.startsWith('$share/')) {
      // Shared subscription `$share/<group>/<filter>` (standard in MQTT 5, accepted from 3.1.1 clients too).
      const slash = filter.indexOf('/', 7);
      if (slash < 0) return SUBACK_FAILURE;
      group = filter.slice(7, slash);
      coreFilter = filter.slice(slash + 1);
      if (group.length === 0 || group.includes('+') || group.includes('#')) return SUBACK_FAILURE;
    }
    const granted = (requested < this.opts.maxQos ? requested : this.opts.maxQos) as QoS;
    let sub: Subscription;
    try {
      sub = this.ctx.engine.subscribe(coreFilter, this, { qos: granted, group });
    } catch (err) {
      if (!isFlowError(err)) throw err;
      this.ctx.logger.debug({ clientId: this.clientId, filter, err: err.message }, 'mqtt subscription refused');
      return SUBACK_FAILURE;
    }
    // [MQTT-3.8.4-3] an identical filter replaces the existing subscription. The new one is added before the
    // old one is removed, so the flow of publications is not interrupted.
    const old = this.subs.get(filter);
    if (old) this.ctx.engine.unsubscribe(old);
    this.subs.set(filter, sub);
    return granted;
  }

  private onUnsubscribe(p: UnsubscribePacket): void {
    for (const f of p.filters) {
      // [MQTT-3.10.4-1] filters compare character by character.
      const sub = this.subs.get(f);
      if (sub) {
        this.ctx.engine.unsubscribe(sub);
        this.subs.delete(f);
      }
    }
    // [MQTT-3.10.4-4] [MQTT-3.10.4-5] UNSUBACK even when nothing matched.
    this.send(encodeIdOnly('unsuback', p.packetId, this.level));
  }

  // ---------------------------------------------------------------- outbound delivery

  /**
   * Called by the engine, synchronously, for every publish matching one or more of our subscriptions.
   * Never throws (a bug here must not break the publisher's connection).
   */
  deliver(msg: Message, subs: Subscription[]): void {
    if (this.state !== State.Connected) return;
    try {
      // [MQTT-3.3.5-1] the maximum QoS over every matching subscription, capped by the message's own QoS.
      let granted = 0;
      for (let k = 0; k < subs.length; k++) if (subs[k].options.qos > granted) granted = subs[k].options.qos;
      const qos = (msg.qos < granted ? msg.qos : granted) as QoS;
      // Order is kept: once anything waits, everything after it waits too.
      if (this.queueHead < this.queue.length) this.enqueue(msg, qos);
      else if (qos === 0) this.sendQos0(msg);
      else if (this.inflight.size < this.opts.maxInflight) this.sendQos(msg, qos);
      else this.enqueue(msg, qos);
    } catch (err) {
      this.fail(err);
    }
  }

  private sendQos0(msg: Message): void {
    // A client that does not read its socket gets no more QoS 0 messages until it catches up.
    if (this.stream.writableLength > this.opts.writeHighWaterMark) {
      this.drop();
      return;
    }
    this.stats.publishesOut++;
    this.send(qos0Frame(msg));
  }

  private sendQos(msg: Message, qos: 1 | 2): void {
    let id = this.nextPacketId;
    while (this.inflight.has(id)) id = id === 0xffff ? 1 : id + 1;
    this.nextPacketId = id === 0xffff ? 1 : id + 1;
    this.inflight.set(id, { msg, qos, released: false });
    this.stats.publishesOut++;
    this.send(encodePublishFrame(msg.topic, msg.payload, qos, false, false, id));
  }

  /** Bounded queue behind the in-flight window: when full, QoS 0 messages are dropped first. */
  private enqueue(msg: Message, qos: QoS): void {
    if (this.queue.length - this.queueHead >= this.opts.maxQueued) {
      if (qos === 0) {
        this.drop();
        return;
      }
      let k = this.queueHead;
      while (k < this.queue.length && this.queue[k].qos !== 0) k++;
      if (k === this.queue.length) {
        this.drop();
        return;
      }
      this.queue.splice(k, 1);
      this.drop();
    }
    this.queue.push({ msg, qos });
  }

  private drop(): void {
    this.stats.dropped++;
    this.ctx.engine.stats.dropped++;
  }

  private drainQueue(): void {
    const q = this.queue;
    while (this.queueHead < q.length && this.state === State.Connected) {
      const e = q[this.queueHead];
      if (e.qos === 0) this.sendQos0(e.msg);
      else if (this.inflight.size < this.opts.maxInflight) this.sendQos(e.msg, e.qos);
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
  }

  private onPuback(id: number): void {
    const e = this.inflight.get(id);
    // An unknown id (or a QoS 2 id) is ignored: nothing in 3.1.1 lets us report it.
    if (e === undefined || e.qos !== 1) return;
    this.inflight.delete(id);
    this.drainQueue();
  }

  private onPubrec(id: number): void {
    const e = this.inflight.get(id);
    if (e === undefined || e.qos !== 2) return;
    // The message is now the client's; from here only PUBREL/PUBCOMP remain (section 4.3.3).
    e.released = true;
    this.send(encodeIdOnly('pubrel', id, this.level));
  }

  private onPubcomp(id: number): void {
    const e = this.inflight.get(id);
    if (e === undefined || e.qos !== 2 || !e.released) return;
    this.inflight.delete(id);
    this.drainQueue();
  }

  // ---------------------------------------------------------------- writes and close

  /**
   * Writes are corked for the rest of the current tick and flushed together (one writev) on the next tick,
   * so a burst of deliveries or acks becomes a single syscall.
   */
  private send(buf: Buffer): void {
    if (this.stream.destroyed) return;
    if (!this.corked) {
      this.corked = true;
      this.stream.cork();
      process.nextTick(this.uncork);
    }
    this.stream.write(buf);
  }

  private close(kind: CloseKind): void {
    if (this.state === State.Closed) return;
    const wasConnected = this.state === State.Connected;
    this.state = State.Closed;
    if (this.connectTimer) clearTimeout(this.connectTimer);
    if (this.keepaliveTimer) clearTimeout(this.keepaliveTimer);
    this.connectTimer = this.keepaliveTimer = null;
    for (const sub of this.subs.values()) this.ctx.engine.unsubscribe(sub);
    this.subs.clear();
    if (this.clientId) this.registry.release(this.clientId, this);
    this.inflight.clear();
    this.queue = [];
    this.queueHead = 0;
    this.acks.length = 0;
    this.acksHead = 0;
    this.pending = [];
    this.pendingBytes = 0;
    const will = this.will;
    this.will = null;
    if (will !== null && wasConnected && (kind === 'abnormal' || kind === 'takeover')) this.publishWill(will);

    const s = this.stream;
    if (kind === 'abnormal' || kind === 'takeover') {
      s.destroy();
    } else if (!s.destroyed) {
      // Flush what is queued (CONNACK refusal, last acks), then FIN; destroy if the peer never closes.
      s.end();
      this.lingerTimer = setTimeout(() => s.destroy(), this.opts.closeLingerMs);
      this.lingerTimer.unref();
    }
    if (s.destroyed && s.closed) this.finish();
  }

  private finish(): void {
    if (this.lingerTimer) {
      clearTimeout(this.lingerTimer);
      this.lingerTimer = null;
    }
    this.resolveClosed();
  }

  /** [MQTT-3.1.2-8] the will goes out when the connection ends without DISCONNECT. */
  private publishWill(will: Will): void {
    const msg: Message = {
      topic: will.topic,
      payload: will.payload,
      key: null,
      headers: [],
      timestamp: Date.now(),
      qos: will.qos,
      retain: will.retain, // [MQTT-3.1.2-16] [MQTT-3.1.2-17]
      origin: this.id,
    };
    try {
      const durable = this.ctx.engine.publish(msg);
      if (durable !== null) {
        durable.then(undefined, (err: unknown) =>
          this.ctx.logger.warn({ clientId: this.clientId, err: errText(err) }, 'mqtt will could not be stored'),
        );
      }
    } catch (err) {
      this.ctx.logger.warn({ clientId: this.clientId, err: errText(err) }, 'mqtt will could not be published');
    }
  }
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
