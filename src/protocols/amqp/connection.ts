/**
 * One AMQP 0-9-1 client connection over any Duplex (TCP socket, TLS socket, a test pair).
 *
 * - Handshake (§2.2.4): the 8-byte protocol header `AMQP 0 0 9 1` (anything else is answered with ours and the
 *   socket closed, §4.2.2), connection.start / start-ok (PLAIN or AMQPLAIN, checked through the control plane's
 *   access.password; a refusal is connection.close 403 as RabbitMQ with authentication_failure_close; a guard
 *   that is busy closes the socket without an answer so the client retries), tune / tune-ok (channel-max,
 *   frame-max, heartbeat: the client's values where lower), open: the virtual host is the user's namespace (`/`
 *   or empty names it, as does its own name; any other is 530 NOT_ALLOWED with RabbitMQ's text), and the
 *   namespace's connection quota is taken there (over it: 530). The whole handshake must finish within
 *   handshakeTimeoutMs.
 * - Control plane: every connection is in the client registry from accept to close (user, namespace and
 *   connection_name once known; messages in and out); a kick is connection.close 320 CONNECTION_FORCED. Policies
 *   are checked per method by the channels (channel.close 403 ACCESS_REFUSED); the namespace's publish and
 *   bytes-in rates stop reading the socket for the time the quota asks, its bytes-out rate holds deliveries back.
 * - Framing (§4.2.3): type, channel, size, payload, frame-end 0xCE. A frame above the negotiated frame-max, a bad
 *   frame-end or an unknown type closes the connection with 501; method payloads are decoded by the codec, whose
 *   AmqpCodecError carries the spec's code (502, 503, 505, 540). Bytes are copied only into the frame they belong to
 *   when it spans reads (the listener may hand them in a reused read buffer, see read-into.ts); such a frame is
 *   taken whole only while the broker's budget of memory ahead of arrival has room, else it grows with its bytes,
 *   and partly received bodies are bounded per connection and over the broker (intake.ts, bodyBytes).
 * - Heartbeats (§4.2.7): checked by the listener's sweep (one timer per listener): a heartbeat frame goes out when
 *   nothing was sent for half the interval; a peer silent for two intervals is dropped. The hot path only counts.
 * - Errors: a hard error (§1.5.2) sends connection.close and ignores everything but close / close-ok until the
 *   peer answers (or a second passes); a soft error closes the channel only (see channel.ts).
 * - Writes are corked and released on the next tick, so the frames of a burst of deliveries or confirms leave in
 *   one writev. Consumers see the socket's unsent bytes (hasCredit false above socketHighWater) and get deliveries
 *   again on 'drain'. Every byte queued counts: above socketHighWater the socket is not read either (a client that
 *   sends requests and never reads cannot make us queue more), and no progress for sendTimeoutMs closes it.
 * - Back-pressure on input: methods waiting behind a channel's asynchronous operation (declare, bind, get...) are
 *   bounded per connection; past MAX_BACKLOG the socket stops being read until they are done; so are publishes
 *   whose store writes have not settled (credit.ts). While a resource
 *   alarm is raised, a connection that publishes stops reading before its next publish (see adapter.ts).
 */
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { Access, ClientEntry, ClientRegistration, Principal, QuotaLease } from '../../control/index.js';
import { ANONYMOUS } from '../../control/index.js';
import { certificateLogin, certificateUser } from '../../control/certs.js';
import { TLSSocket } from 'node:tls';
import { logKey } from '../../util/log-limit.js';
import type { AmqpAdapter, AlarmListener, AuthOutcome } from './adapter.js';
import { AmqpChannel } from './channel.js';
import type { AmqpChannelHost, ClientCapabilities, WriteCallbacks } from './types.js';
import { AmqpError, replyText, toAmqpError } from './errors.js';
import { Gather } from './intake.js';
import { PublishCredit } from './credit.js';
import { AmqpCodecError, FRAME_MIN_SIZE, HEARTBEAT_FRAME, PROTOCOL_HEADER, decodeMethodPayload, methodFrame, type AmqpMethod } from './wire.js';
import { decodeTableEntries, fieldString } from './codec/index.js';

const VERSION = '0.1.0';

/** Frames up to this size are taken whole when their size arrives, without asking the ahead budget. */
const SMALL_FRAME = 512;

/** Methods waiting behind asynchronous operations, over all channels, before the socket stops being read. */
const MAX_BACKLOG = 1024;
/** How long a connection.close we sent waits for close-ok. */
const CLOSE_OK_TIMEOUT_MS = 1000;

const enum St {
  /** Waiting for the 8-byte protocol header. */
  Header,
  /** connection.start sent; waiting for start-ok. */
  StartOk,
  /** Checking the credentials. */
  Authenticating,
  /** connection.tune sent; waiting for tune-ok. */
  TuneOk,
  /** Tuned; waiting for connection.open. */
  Open,
  Opened,
  /** connection.close sent; waiting for close-ok. */
  Closing,
  Done,
}

export interface AmqpConnectionInit {
  id: string;
  remoteAddress?: string;
  remotePort?: number;
  /** The listener's name in the client registry ("amqp", "amqps"). */
  listener?: string;
  /** See KafkaConnectionInit.attachInput: read into a shared buffer; bytes are valid during the call only. */
  attachInput?: (receive: (bytes: Buffer) => void) => boolean;
}

const NO_CAPABILITIES: ClientCapabilities = Object.freeze({ blocked: false, cancelNotify: false });

/** The connection a stream belongs to, for the stream's event listeners (shared by every connection). */
const CONNECTION = Symbol('amqp connection');
type Owned = Duplex & { [CONNECTION]: AmqpConnection };

/**
 * Also its own entry's registration in the client registry (protocol, listener, address, socket, kick), so that an
 * idle connection is one object more than its socket rather than several (issue 24: memory per idle connection).
 */
export class AmqpConnection implements AlarmListener, ClientRegistration, AmqpChannelHost {
  readonly id: string;
  readonly remoteAddress: string | undefined;
  readonly remotePort: number | undefined;
  /** The listener's name in the client registry ("amqp", "amqps"). */
  readonly listener: string;
  readonly closed: Promise<void>;
  private resolveClosed: () => void = () => undefined;
  private st = St.Header;
  /** Frame-max for frames we receive and send (negotiated at tune-ok). */
  frameMax: number;
  private channelMax: number;
  private heartbeatMs = 0;
  /** The authenticated user (null: anonymous). */
  user: string | null = null;
  /** Who the connection acts as, and its view of the policies (set at login). */
  principal: Principal = ANONYMOUS;
  access!: Access;
  /** The name the client logged in with, for refusal texts ("guest" for anonymous, as RabbitMQ's default user). */
  loginName = 'guest';
  /** The virtual host the client opened, as it named it (refusal texts say "in vhost '<this>'"). */
  vhost = '/';
  /** The namespace's quota lease, from connection.open to close. */
  private lease: QuotaLease | null = null;
  /** This connection in the client registry. */
  private entry: ClientEntry | null = null;
  /** Deliveries are held back (bytes-out quota) until this time. */
  private sendHoldUntil = 0;
  private sendHoldTimer: NodeJS.Timeout | null = null;
  private readTimer: NodeJS.Timeout | null = null;
  private readUntil = 0;
  /** Capabilities the client announced in start-ok (set then: until login nobody looks). */
  capabilities: ClientCapabilities = NO_CAPABILITIES;
  /**
   * Open channels: the first in a field of its own (most connections use one), the others in a map made when a
   * second one opens.
   */
  private firstChannel: AmqpChannel | null = null;
  private moreChannels: Map<number, AmqpChannel> | null = null;
  private logger: Logger | null = null;

  // input assembly
  /** The protocol header, or a frame header split over reads (taken when first needed). */
  private head: Buffer | null = null;
  private headHave = 0;
  /** A frame taken whole when its size arrived, `frameHave` bytes of it received... */
  private frame: Buffer | null = null;
  private frameHave = 0;
  /** ...with this many bytes still counted in the broker's budget of memory ahead of arrival; */
  private reserved = 0;
  /** or a frame growing with the bytes that arrive. */
  private gather: Gather | null = null;
  /** Memory held by this connection's partly received message bodies (see intake.ts). */
  private bodyHeld = 0;

  // flow
  private corked = false;
  private backlog = 0;
  private pausedFor = 0; // bit 1: backlog, 2: alarm, 4: store writes in flight, 8: quota, 16: unsent bytes, 32: body budget
  /** Set once the client published: an alarm stops its reading. */
  publisher = false;
  private alarmReason: string | null = null;
  /** A consumer was refused a delivery for the socket's sake: resume consumers on 'drain'. */
  starved = false;

  // sweep
  private readonly openedAt = Date.now();
  private inCount = 0;
  private outCount = 0;
  /** inCount / outCount when the sweep last saw them change, and when that was. */
  private seenIn = -1;
  private seenOut = -1;
  private seenInAt: number;
  private seenOutAt: number;
  private closeSentAt = 0;
  private admitted = false;

  constructor(
    readonly stream: Duplex,
    readonly adapter: AmqpAdapter,
    init: AmqpConnectionInit,
  ) {
    this.id = init.id;
    this.remoteAddress = init.remoteAddress;
    this.remotePort = init.remotePort;
    this.listener = init.listener ?? 'amqp';
    // §4.2.3: until tune-ok, frames up to frame-min-size (a stranger cannot make us buffer more before logging in).
    this.frameMax = FRAME_MIN_SIZE;
    this.channelMax = adapter.options.channelMax;
    this.closed = new Promise<void>((resolve) => {
      this.resolveClosed = resolve;
    });
    this.seenInAt = this.seenOutAt = this.openedAt;
    // One listener function per event for every connection (no closures per connection).
    (stream as Owned)[CONNECTION] = this;
    stream.on('error', AmqpConnection.onStreamError);
    stream.on('close', AmqpConnection.onStreamClose);
    stream.on('end', AmqpConnection.onStreamEnd);
    stream.on('drain', AmqpConnection.onStreamDrain);
    if (!adapter.admit(this)) {
      this.adapter.logLimit.log('warn', logKey('amqp connection refused', this.remoteAddress), { remote: this.remoteAddress, max: adapter.options.maxConnections }, 'amqp connection refused: amqp-max-connections reached');
      this.destroy();
      return;
    }
    this.admitted = true;
    this.access = adapter.access.accessFor(ANONYMOUS, 'amqp', init.remoteAddress);
    this.entry = adapter.access.clients.register(this);
    if (!init.attachInput?.((bytes) => this.receive(bytes))) {
      stream.on('data', (chunk: Buffer | string) => this.receive(typeof chunk === 'string' ? Buffer.from(chunk) : chunk));
      stream.resume();
    }
  }

  private static onStreamError(this: Duplex, err: Error): void {
    const c = (this as Owned)[CONNECTION];
    c.log.debug({ err: err.message }, 'amqp connection error');
    c.destroy();
  }

  private static onStreamClose(this: Duplex): void {
    (this as Owned)[CONNECTION].teardown();
  }

  private static onStreamEnd(this: Duplex): void {
    (this as Owned)[CONNECTION].destroy();
  }

  private static onStreamDrain(this: Duplex): void {
    (this as Owned)[CONNECTION].drained();
  }

  private static uncork(c: AmqpConnection): void {
    c.corked = false;
    c.stream.uncork();
  }

  /** ClientRegistration: the protocol. */
  get protocol(): string {
    return 'amqp';
  }

  /** ClientRegistration: bytes in and out (a net.Socket's counters). */
  get socket(): { readonly bytesRead: number; readonly bytesWritten: number } | undefined {
    return 'bytesRead' in this.stream ? (this.stream as unknown as { bytesRead: number; bytesWritten: number }) : undefined;
  }

  /** The connection's logger (made when first needed: most connections never log). */
  get log(): Logger {
    return (this.logger ??= this.adapter.logger.child({ conn: this.id, remote: `${this.remoteAddress ?? '?'}:${this.remotePort ?? '?'}` }));
  }

  get isOpen(): boolean {
    return this.st === St.Opened;
  }

  // ------------------------------------------------------------------ output

  send(buf: Buffer | Buffer[]): void {
    if (this.st === St.Done) return;
    if (!this.corked) {
      this.corked = true;
      this.stream.cork();
      process.nextTick(AmqpConnection.uncork, this);
    }
    if (Array.isArray(buf)) for (const b of buf) this.stream.write(b);
    else this.stream.write(buf);
    this.outCount++;
    // Every byte queued for the client counts: replies, confirms and heartbeats as well as deliveries. Above the
    // allowance the client is not read (it cannot make us queue more) until its socket drains.
    if (this.stream.writableLength > this.adapter.options.socketHighWater && (this.pausedFor & 16) === 0) this.outputBlocked();
  }

  /** When the socket went over socketHighWater without draining since, and how much it held when last looked at. */
  private stalledAt = 0;
  private stalledBytes = 0;

  private outputBlocked(): void {
    // 'drain' comes only after a write that returned false (an allowance below the stream's own high-water mark).
    if (!this.stream.writableNeedDrain) return;
    this.adapter.stats.outputPauses++;
    this.pauseReading(16);
    this.stalledAt = Date.now();
    this.stalledBytes = this.stream.writableLength;
  }

  sendMethod(channel: number, m: AmqpMethod): void {
    this.send(methodFrame(channel, m));
  }

  /** True when the socket holds more unsent bytes than consumers may add to. */
  get congested(): boolean {
    return this.stream.writableLength > this.adapter.options.socketHighWater;
  }

  /** Resolves once the socket's unsent bytes are below socketHighWater (at once if they are). */
  uncongested(): Promise<void> {
    if (!this.congested || !this.stream.writableNeedDrain || this.st === St.Done) return Promise.resolve();
    return new Promise<void>((resolve) => (this.drainWaiters ??= []).push(resolve));
  }

  private drainWaiters: Array<() => void> | null = null;

  private drained(): void {
    if ((this.pausedFor & 16) !== 0) {
      this.stalledAt = 0;
      this.resumeReading(16);
    }
    if (this.drainWaiters !== null) {
      const w = this.drainWaiters;
      this.drainWaiters = null;
      for (const f of w) f();
    }
    if (!this.starved || this.st !== St.Opened) return;
    this.starved = false;
    for (const ch of this.channelList()) ch.resumeConsumers();
  }

  // ------------------------------------------------------------------ input

  private receive(chunk: Buffer): void {
    this.inCount++;
    let pos = 0;
    const n = chunk.length;
    if (this.st === St.Header && this.headHave === 0 && n >= 8) {
      // The protocol header in one read, as clients send it: no buffer of our own for it.
      if (chunk.compare(PROTOCOL_HEADER, 0, 8, 0, 8) !== 0) {
        this.head = Buffer.from(chunk.subarray(0, 8));
        return this.badHeader();
      }
      pos = 8;
      this.start();
    } else if (this.st === St.Header) {
      const head = (this.head ??= Buffer.allocUnsafe(8));
      const take = Math.min(8 - this.headHave, n);
      chunk.copy(head, this.headHave, 0, take);
      this.headHave += take;
      pos = take;
      if (this.headHave < 8) {
        // A client that sends something else than "AMQP" can be answered at once (§4.2.2).
        if (head.subarray(0, Math.min(this.headHave, 4)).compare(PROTOCOL_HEADER, 0, Math.min(this.headHave, 4)) !== 0) this.badHeader();
        return;
      }
      this.headHave = 0;
      if (!head.equals(PROTOCOL_HEADER)) return this.badHeader();
      this.start();
    }
    while (pos < n && this.st !== St.Done) {
      if (this.frame !== null) {
        // A frame taken whole when its size arrived (its missing bytes reserved in the ahead budget).
        const take = Math.min(this.frame.length - this.frameHave, n - pos);
        chunk.copy(this.frame, this.frameHave, pos, pos + take);
        this.frameHave += take;
        pos += take;
        if (this.reserved > 0) {
          this.adapter.input.unreserve(take);
          this.reserved -= take;
        }
        if (this.frameHave < this.frame.length) return;
        const f = this.frame;
        this.frame = null;
        this.frameHave = 0;
        this.onFrame(f, 0, f.length, true);
        continue;
      }
      if (this.gather !== null) {
        // A frame growing with the bytes that arrive (the ahead budget had no room for it).
        const g = this.gather;
        const take = Math.min(g.size - g.have, n - pos);
        const done = g.add(chunk.subarray(pos, pos + take));
        pos += take;
        if (!done) return;
        this.gather = null;
        this.onFrame(g.frame, 0, g.size, true);
        continue;
      }
      if (this.headHave > 0 || n - pos < 7) {
        const head = (this.head ??= Buffer.allocUnsafe(8));
        const take = Math.min(7 - this.headHave, n - pos);
        chunk.copy(head, this.headHave, pos, pos + take);
        this.headHave += take;
        pos += take;
        if (this.headHave < 7) return;
        this.headHave = 0;
        const size = head.readUInt32BE(3);
        if (!this.sizeOk(size)) return;
        this.startFrame(head.subarray(0, 7), size + 8);
        continue;
      }
      const size = chunk.readUInt32BE(pos + 3);
      if (!this.sizeOk(size)) return;
      const total = size + 8;
      if (n - pos >= total) {
        this.onFrame(chunk, pos, pos + total, false);
        pos += total;
        continue;
      }
      this.startFrame(chunk.subarray(pos, n), total);
      pos = n;
    }
  }

  /**
   * A frame of `total` bytes of which `first` arrived: taken whole if the broker's budget of memory ahead of arrival
   * has room for the rest (one copy, no growing), else gathered as its bytes arrive (see intake.ts).
   */
  private startFrame(first: Buffer, total: number): void {
    const ahead = total - first.length;
    // Not for a connection still in its handshake: its frames are small and few, and strangers must not use up the
    // budget that open connections' large frames need (as the Kafka listener does before SASL).
    if (total <= SMALL_FRAME || (this.st === St.Opened && this.adapter.input.reserve(ahead))) {
      if (total > SMALL_FRAME) this.reserved = ahead;
      this.frame = Buffer.allocUnsafe(total);
      first.copy(this.frame, 0);
      this.frameHave = first.length;
      return;
    }
    this.adapter.input.gathered++;
    this.gather = new Gather(total, first);
  }

  private sizeOk(size: number): boolean {
    if (size + 8 <= this.frameMax) return true;
    this.protocolError(new AmqpError(501, `frame size ${size + 8} exceeds frame-max ${this.frameMax}`));
    return false;
  }

  private badHeader(): void {
    // §4.2.2: answer with the protocol header we support, then close.
    this.adapter.logLimit.log('info', logKey('amqp bad protocol header', this.remoteAddress), { remote: this.remoteAddress, header: this.head!.subarray(0, this.headHave || 8).toString('hex') }, 'amqp: bad protocol header');
    this.st = St.Done;
    this.stream.end(PROTOCOL_HEADER);
    setTimeout(() => this.destroy(), 1000).unref();
  }

  /**
   * One whole frame in buf[start, end). `owned`: the buffer is this frame's own (else a view into a read buffer that
   * is reused: what is kept must be copied).
   */
  private onFrame(buf: Buffer, start: number, end: number, owned: boolean): void {
    if (buf[end - 1] !== 0xce) return this.protocolError(new AmqpError(501, `bad frame-end octet 0x${(buf[end - 1] ?? 0).toString(16)}`));
    const type = buf[start]!;
    const ch = buf.readUInt16BE(start + 1);
    const payload = buf.subarray(start + 7, end - 1);
    try {
      if (this.st === St.Closing) {
        // §2.2.4 / 4.2.2: after connection.close only close and close-ok count.
        if (type === 1 && ch === 0) {
          const m = decodeMethodPayload(payload);
          if (m.name === 'connection.close-ok') this.destroy();
          else if (m.name === 'connection.close') {
            this.sendMethod(0, { name: 'connection.close-ok' } as AmqpMethod);
            this.finish();
          }
        }
        return;
      }
      switch (type) {
        case 1: {
          const m = decodeMethodPayload(payload);
          if (ch === 0) this.connectionMethod(m);
          else this.channelMethod(ch, m);
          return;
        }
        case 2:
        case 3: {
          if (this.st !== St.Opened) throw new AmqpError(505, 'content frame before the connection is open');
          const c = this.channel(ch);
          if (ch === 0 || c === undefined) throw new AmqpError(504, `content frame on channel ${ch}, which is not open`);
          if (type === 2) c.onHeader(payload);
          else c.onBody(payload, owned);
          return;
        }
        case 8:
          if (ch !== 0) throw new AmqpError(501, 'heartbeat frame on a channel other than 0');
          return;
        default:
          throw new AmqpError(501, `unknown frame type ${type}`);
      }
    } catch (err) {
      this.protocolError(err);
    }
  }

  /** A hard error: logged (rate limited) and the connection closed with its code. */
  protocolError(err: unknown): void {
    if (this.st === St.Done || this.st === St.Closing) return;
    let e: AmqpError;
    if (err instanceof AmqpCodecError) e = new AmqpError(err.replyCode, err.message, err.classId, err.methodId);
    else e = toAmqpError(err);
    this.adapter.stats.connectionErrors++;
    if (e.code === 541) this.log.error({ err }, 'amqp: internal error');
    else this.adapter.logLimit.log('info', logKey('amqp connection error', this.remoteAddress), { remote: this.remoteAddress, conn: this.id, code: e.code, err: e.message }, 'amqp: connection error');
    this.closeWith(e.code, e.message, e.classId, e.methodId);
  }

  /** Sends connection.close and waits (briefly) for close-ok; before the handshake got far, just closes. */
  closeWith(code: number, text: string, classId = 0, methodId = 0): void {
    if (this.st === St.Done || this.st === St.Closing) return;
    if (this.st === St.Header) return this.destroy();
    this.sendMethod(0, { name: 'connection.close', replyCode: code, replyText: replyText(code, text), classId, methodId } as AmqpMethod);
    this.st = St.Closing;
    this.closeSentAt = Date.now();
    // Channels stop now: their consumers are cancelled and unacked deliveries requeued.
    this.teardownChannels();
    // Only close-ok is read from now on: whatever stopped reading stops no more.
    this.resumeReading(this.pausedFor);
  }

  // ------------------------------------------------------------------ connection class

  private start(): void {
    this.st = St.StartOk;
    this.sendMethod(0, {
      name: 'connection.start',
      versionMajor: 0,
      versionMinor: 9,
      serverProperties: {
        product: 'FlowMQ',
        version: VERSION,
        platform: `Node.js ${process.version}`,
        information: 'https://github.com/flowmq',
        capabilities: {
          publisher_confirms: true,
          exchange_exchange_bindings: true,
          'basic.nack': true,
          consumer_cancel_notify: true,
          'connection.blocked': true,
          consumer_priorities: true,
          authentication_failure_close: true,
          per_consumer_qos: true,
          direct_reply_to: false,
        },
      },
      // EXTERNAL (RabbitMQ's rabbitmq_auth_mechanism_ssl) only when the TLS handshake verified a client
      // certificate that names a user: then the certificate is the credential.
      mechanisms: this.certificateName() !== null ? 'EXTERNAL PLAIN AMQPLAIN' : 'PLAIN AMQPLAIN',
      locales: 'en_US',
    } as AmqpMethod);
  }

  private connectionMethod(m: AmqpMethod): void {
    switch (m.name) {
      case 'connection.start-ok':
        if (this.st !== St.StartOk) throw new AmqpError(503, 'connection.start-ok out of order', 10, 11);
        this.startOk(m);
        return;
      case 'connection.tune-ok':
        if (this.st !== St.TuneOk) throw new AmqpError(503, 'connection.tune-ok out of order', 10, 31);
        this.tuneOk(m);
        return;
      case 'connection.open': {
        if (this.st !== St.Open) throw new AmqpError(503, 'connection.open out of order', 10, 40);
        // The virtual host is the user's namespace: `/` (or empty) names it, and so does its own name.
        const vh = m.virtualHost;
        const ns = this.principal.namespace;
        if (vh !== '/' && vh !== '' && vh !== ns) {
          throw new AmqpError(530, `access to vhost '${vh}' refused for user '${this.loginName}'`, 10, 40);
        }
        this.vhost = vh === '' ? '/' : vh;
        const lease = this.adapter.access.quotas.connect(this.principal);
        if ('refused' in lease) {
          this.adapter.stats.connectionsRefused++;
          this.adapter.logLimit.log('info', logKey('amqp connection quota', this.remoteAddress), { remote: this.remoteAddress, user: this.principal.user, namespace: ns, reason: lease.refused }, 'amqp: connection refused by the namespace quota');
          throw new AmqpError(530, `connection limit of namespace '${ns}' reached`, 10, 40);
        }
        this.lease = lease;
        this.st = St.Opened;
        this.sendMethod(0, { name: 'connection.open-ok' } as AmqpMethod);
        if (this.alarmReason !== null && this.capabilities.blocked) this.sendMethod(0, { name: 'connection.blocked', reason: this.alarmReason } as AmqpMethod);
        return;
      }
      case 'connection.close':
        this.sendMethod(0, { name: 'connection.close-ok' } as AmqpMethod);
        if (m.replyCode !== 200) this.log.debug({ code: m.replyCode, text: m.replyText }, 'amqp: client closed the connection with an error');
        this.finish();
        return;
      case 'connection.close-ok':
        // Without a close of ours outstanding: ignore.
        return;
      default:
        throw new AmqpError(this.st === St.Opened ? 503 : 503, `${m.name} is not valid on channel 0`);
    }
  }

  private startOk(m: Extract<AmqpMethod, { name: 'connection.start-ok' }>): void {
    const props = m.clientProperties as Record<string, unknown> | undefined;
    const caps = props?.capabilities as Record<string, unknown> | undefined;
    const connectionName = props?.connection_name === undefined ? undefined : fieldString(props.connection_name as never);
    if (connectionName !== undefined && this.entry !== null) this.entry.clientId = connectionName;
    if (caps) this.capabilities = { blocked: caps['connection.blocked'] === true, cancelNotify: caps.consumer_cancel_notify === true };
    const response: Buffer = Buffer.isBuffer(m.response) ? m.response : Buffer.from(String(m.response));
    if (m.mechanism === 'EXTERNAL') return this.external();
    let username: string;
    let password: Buffer;
    if (m.mechanism === 'PLAIN') {
      // RFC 4616: [authzid] NUL authcid NUL passwd.
      const a = response.indexOf(0);
      const b = a < 0 ? -1 : response.indexOf(0, a + 1);
      if (b < 0) throw new AmqpError(403, 'ACCESS_REFUSED - malformed PLAIN response', 10, 11);
      username = response.toString('utf8', a + 1, b);
      password = response.subarray(b + 1);
    } else if (m.mechanism === 'AMQPLAIN') {
      const t = decodeTableEntries(response);
      username = fieldString(t.LOGIN as never) ?? '';
      password = Buffer.from(fieldString(t.PASSWORD as never) ?? '', 'utf8');
    } else {
      throw new AmqpError(403, `unknown authentication mechanism '${m.mechanism}'; offered ${this.certificateName() !== null ? 'EXTERNAL ' : ''}PLAIN AMQPLAIN`, 10, 11);
    }
    this.st = St.Authenticating;
    const mechanism = m.mechanism;
    this.adapter.authenticate(username, password, this.remoteAddress).then(
      (r) => this.loggedIn(r, mechanism),
      (err: unknown) => {
        this.log.error({ err }, 'amqp: authentication failed');
        this.destroy();
      },
    );
  }

  /** The user a verified client certificate names (amqps with --tls-client-ca), or null. */
  private certificateName(): string | null {
    return this.stream instanceof TLSSocket ? certificateUser(this.stream, this.adapter.options.certUser) : null;
  }

  /** SASL EXTERNAL: the verified client certificate names the user, who must exist in the directory. */
  private external(): void {
    const login = this.stream instanceof TLSSocket ? certificateLogin(this.adapter.access, this.stream, this.adapter.options.certUser) : null;
    if (login === null) throw new AmqpError(403, 'EXTERNAL needs a verified client certificate', 10, 11);
    this.st = St.Authenticating;
    if (login.verdict === 'ok') this.loggedIn({ ok: true, principal: login.principal }, 'EXTERNAL');
    else {
      this.adapter.stats.authFailures++;
      this.loggedIn({ ok: false, busy: false, reason: 'the client certificate names no user of the directory', user: login.user }, 'EXTERNAL');
    }
  }

  private loggedIn(r: AuthOutcome, mechanism: string): void {
    if (this.st !== St.Authenticating) return;
    if (r.ok) {
      this.principal = r.principal;
      this.user = r.principal.user;
      if (r.principal.user !== null) this.loginName = r.principal.user;
      this.access = this.adapter.access.accessFor(r.principal, 'amqp', this.remoteAddress);
      if (this.entry !== null) {
        this.entry.user = r.principal.user;
        this.entry.namespace = r.principal.namespace;
      }
      this.st = St.TuneOk;
      this.sendMethod(0, { name: 'connection.tune', channelMax: this.adapter.options.channelMax, frameMax: this.adapter.options.frameMax, heartbeat: this.adapter.options.heartbeatSec } as AmqpMethod);
      return;
    }
    this.adapter.logLimit.log('info', logKey('amqp login refused', this.remoteAddress), { remote: this.remoteAddress, user: r.user, reason: r.reason }, 'amqp: login refused');
    if (r.busy) return this.destroy();
    this.st = St.Open; // so that closeWith sends the close
    this.closeWith(403, `Login was refused using authentication mechanism ${mechanism}`, 10, 11);
  }

  private tuneOk(m: Extract<AmqpMethod, { name: 'connection.tune-ok' }>): void {
    const o = this.adapter.options;
    const fm = m.frameMax === 0 ? o.frameMax : m.frameMax;
    if (fm < FRAME_MIN_SIZE || fm > o.frameMax) throw new AmqpError(530, `frame_max=${m.frameMax} outside ${FRAME_MIN_SIZE}..${o.frameMax}`, 10, 31);
    const cm = m.channelMax === 0 ? o.channelMax : m.channelMax;
    if (cm > o.channelMax) throw new AmqpError(530, `channel_max=${m.channelMax} above the server's ${o.channelMax}`, 10, 31);
    this.frameMax = fm;
    this.channelMax = cm;
    this.heartbeatMs = m.heartbeat * 1000;
    this.st = St.Open;
  }

  // ------------------------------------------------------------------ channels

  private channelMethod(ch: number, m: AmqpMethod): void {
    if (this.st !== St.Opened) throw new AmqpError(504, `${m.name} on channel ${ch} before connection.open`);
    const c = this.channel(ch);
    if (m.name === 'channel.open') {
      if (c !== undefined) throw new AmqpError(504, `second 'channel.open' seen on channel ${ch}`, 20, 10);
      if (ch > this.channelMax) throw new AmqpError(530, `channel ${ch} above channel_max ${this.channelMax}`, 20, 10);
      const opened = new AmqpChannel(this, ch);
      if (this.firstChannel === null) this.firstChannel = opened;
      else (this.moreChannels ??= new Map()).set(ch, opened);
      this.sendMethod(ch, { name: 'channel.open-ok' } as AmqpMethod);
      return;
    }
    if (c === undefined) throw new AmqpError(504, `expected 'channel.open' on channel ${ch}, got '${m.name}'`);
    c.onMethod(m);
  }

  /** The channel finished closing (close-ok sent or received). */
  channelGone(ch: number): void {
    if (this.firstChannel?.ch === ch) this.firstChannel = null;
    else this.moreChannels?.delete(ch);
  }

  private channel(ch: number): AmqpChannel | undefined {
    const c = this.firstChannel;
    if (c !== null && c.ch === ch) return c;
    return this.moreChannels?.get(ch);
  }

  private channelList(): AmqpChannel[] {
    const out = this.moreChannels === null ? [] : [...this.moreChannels.values()];
    if (this.firstChannel !== null) out.push(this.firstChannel);
    return out;
  }

  // ------------------------------------------------------------------ flow

  backlogChanged(delta: number): void {
    this.backlog += delta;
    if (this.backlog > MAX_BACKLOG) this.pauseReading(1);
    else if (this.backlog === 0) this.resumeReading(1);
  }

  private pauseReading(bit: number): void {
    if (this.pausedFor === 0) this.stream.pause();
    this.pausedFor |= bit;
  }

  private resumeReading(bit: number): void {
    if ((this.pausedFor & bit) === 0) return;
    this.pausedFor &= ~bit;
    if (this.pausedFor === 0 && this.st !== St.Done) this.stream.resume();
  }

  /**
   * This connection's partly received bodies hold `delta` bytes more (or less). Over the connection's own cap
   * (maxPartialBodyBytes) it is closed with 506 RESOURCE_ERROR; while the broker's partly received bodies are over
   * their budget (partialBodyBudget) it is not read until bodies complete or connections close. Should every
   * connection holding such bodies be waiting, none could finish one: the one that would wait last is closed (506)
   * instead, and its bodies' memory goes back to the others.
   */
  bodyBytes(delta: number): void {
    const was = this.bodyHeld;
    this.bodyHeld += delta;
    const b = this.adapter.input;
    b.partial(delta, was, this.bodyHeld);
    if (delta <= 0) {
      if (this.bodyHeld === 0 && (this.pausedFor & 32) !== 0) {
        b.unwait(this);
        this.resumeReading(32);
      }
      return;
    }
    if (this.st !== St.Opened) return;
    const max = this.adapter.options.maxPartialBodyBytes;
    if (this.bodyHeld > max) {
      b.refusals++;
      this.protocolError(new AmqpError(506, `partly received message bodies hold ${this.bodyHeld} bytes, above the connection's limit of ${max}`));
      return;
    }
    if (!b.overPartial || (this.pausedFor & 32) !== 0) return;
    if (b.waiting + 1 >= b.holders) {
      b.refusals++;
      this.protocolError(new AmqpError(506, `the broker's memory for partly received message bodies (${b.maxPartialBytes} bytes) is used up`));
      return;
    }
    this.pauseReading(32);
    b.wait(this);
  }

  /** The broker's partly received bodies are under their budget again (InputBudget.wait). */
  bodyBudgetFreed(): void {
    this.resumeReading(32);
  }

  /** Publishes whose store writes have not settled (made at the first one: see credit.ts). */
  private credit: PublishCredit | null = null;
  private writeCallbacks: WriteCallbacks | null = null;

  /**
   * A publish's write of `bytes` started: past maxPendingWrites unsettled writes (or maxPendingWriteBytes) the socket
   * is not read until half of them settled, so that a publisher without confirms cannot queue writes faster than
   * storage takes them, nor ahead of other connections' (RabbitMQ's credit flow does the same between its processes).
   */
  writeStarted(bytes: number): void {
    const o = this.adapter.options;
    const c = (this.credit ??= new PublishCredit(o.maxPendingWrites, o.maxPendingWriteBytes));
    const out = c.started(bytes);
    this.adapter.writeStarted(bytes, c);
    if (out) this.pauseReading(4);
  }

  writeSettled(): void {
    const c = this.credit!;
    const bytes = c.bytes;
    const back = c.settled();
    this.adapter.writeSettled(bytes - c.bytes);
    if (back) this.resumeReading(4);
  }

  /** The promise callbacks of a write without a confirm (one pair per connection). */
  get onWrite(): WriteCallbacks {
    return (this.writeCallbacks ??= {
      settled: () => this.writeSettled(),
      failed: (err: unknown) => {
        this.writeSettled();
        this.adapter.storeWriteFailed(err);
      },
    });
  }

  /** A publish arrived: under an alarm the socket is not read further until it clears. */
  published(): void {
    this.publisher = true;
    if (this.alarmReason !== null) this.pauseReading(2);
  }

  /**
   * A publish of `bytes` body bytes was taken: counted in the client registry and charged to the namespace's
   * publish and bytes-in quotas; over them the socket is not read for the time the quota asks (TCP pushes back on
   * the publisher, as RabbitMQ's flow control does).
   */
  chargeIn(bytes: number): void {
    if (this.entry !== null) this.entry.messagesIn++;
    if (this.lease === null) return;
    const wait = this.lease.chargeIn(1, bytes);
    if (wait > 0) this.holdReading(wait);
  }

  private holdReading(ms: number): void {
    const until = Date.now() + ms;
    if (until <= this.readUntil) return;
    this.readUntil = until;
    this.pauseReading(8);
    if (this.readTimer !== null) clearTimeout(this.readTimer);
    this.readTimer = setTimeout(() => {
      this.readTimer = null;
      this.readUntil = 0;
      this.resumeReading(8);
    }, ms);
  }

  /** A delivery of `bytes` body bytes went out: counted, and charged to the namespace's bytes-out quota. */
  chargeOut(bytes: number): void {
    if (this.entry !== null) this.entry.messagesOut++;
    if (this.lease === null) return;
    const wait = this.lease.chargeOut(bytes);
    if (wait <= 0) return;
    const until = Date.now() + wait;
    if (until <= this.sendHoldUntil) return;
    this.sendHoldUntil = until;
    if (this.sendHoldTimer !== null) clearTimeout(this.sendHoldTimer);
    this.sendHoldTimer = setTimeout(() => {
      this.sendHoldTimer = null;
      this.sendHoldUntil = 0;
      if (this.st !== St.Opened) return;
      for (const ch of this.channelList()) ch.resumeConsumers();
    }, wait);
  }

  /** Consumers get no deliveries while the bytes-out quota holds them back. */
  get sendsHeld(): boolean {
    return this.sendHoldUntil !== 0;
  }

  /** An administrator kicked the client: connection.close 320 CONNECTION_FORCED (before open: the socket). */
  kick(reason: string): void {
    this.log.info({ user: this.principal.user, reason }, 'amqp: connection kicked');
    if (this.st === St.Opened || this.st === St.Open || this.st === St.TuneOk) this.closeWith(320, reason);
    else this.destroy();
  }

  alarm(reason: string | null): void {
    this.alarmReason = reason;
    if (this.st === St.Opened && this.capabilities.blocked) {
      this.sendMethod(0, reason === null ? ({ name: 'connection.unblocked' } as AmqpMethod) : ({ name: 'connection.blocked', reason } as AmqpMethod));
    }
    if (reason === null) this.resumeReading(2);
    else if (this.publisher) this.pauseReading(2);
  }

  // ------------------------------------------------------------------ life cycle

  /**
   * The listener's periodic check: the handshake deadline, heartbeats both ways, and a close-ok that never came.
   */
  sweep(now: number): void {
    if (this.st === St.Done) return;
    if (this.stalledAt !== 0) {
      // Over its allowance of unsent bytes: the client must be taking them. A socket whose unsent bytes have not gone
      // down for sendTimeoutMs is closed (as RabbitMQ's send_timeout does).
      const w = this.stream.writableLength;
      if (w < this.stalledBytes) {
        this.stalledBytes = w;
        this.stalledAt = now;
      } else if (now - this.stalledAt > this.adapter.options.sendTimeoutMs) {
        this.adapter.stats.sendTimeouts++;
        this.adapter.logLimit.log('info', logKey('amqp send timeout', this.remoteAddress), { remote: this.remoteAddress, unsent: w, timeoutMs: this.adapter.options.sendTimeoutMs }, 'amqp: client takes none of what is sent to it, closing');
        this.destroy();
        return;
      }
    }
    if (this.st === St.Closing) {
      if (now - this.closeSentAt > CLOSE_OK_TIMEOUT_MS) this.destroy();
      return;
    }
    if (this.st !== St.Opened) {
      if (now - this.openedAt > this.adapter.options.handshakeTimeoutMs) {
        this.adapter.logLimit.log('info', logKey('amqp handshake timeout', this.remoteAddress), { remote: this.remoteAddress }, 'amqp: handshake timed out');
        this.destroy();
      }
      return;
    }
    if (this.inCount !== this.seenIn) {
      this.seenIn = this.inCount;
      this.seenInAt = now;
    }
    if (this.outCount !== this.seenOut) {
      this.seenOut = this.outCount;
      this.seenOutAt = now;
    }
    if (this.heartbeatMs === 0) return;
    // Paused by us (back-pressure, alarm): the silence is ours, not the peer's.
    if (this.pausedFor === 0 && now - this.seenInAt > 2 * this.heartbeatMs) {
      this.adapter.logLimit.log('info', logKey('amqp missed heartbeats', this.remoteAddress), { remote: this.remoteAddress, heartbeatSec: this.heartbeatMs / 1000 }, 'amqp: missed heartbeats from client, closing');
      this.destroy();
      return;
    }
    if (now - this.seenOutAt >= this.heartbeatMs / 2) {
      this.send(HEARTBEAT_FRAME);
      this.seenOut = this.outCount;
      this.seenOutAt = now;
    }
  }

  /** Broker shutdown: connection.close 320 (CONNECTION_FORCED), then the socket, within a second. */
  close(): Promise<void> {
    if (this.st === St.Opened) {
      this.closeWith(320, "broker forced connection closure with reason 'shutdown'");
    } else {
      this.destroy();
    }
    return this.closed;
  }

  /** Our close-ok went out (the client closed): end the socket once it is written. */
  private finish(): void {
    this.st = St.Done;
    this.teardownChannels();
    this.stream.end();
    setTimeout(() => this.stream.destroy(), CLOSE_OK_TIMEOUT_MS).unref();
  }

  destroy(): void {
    this.st = St.Done;
    this.stream.destroy();
  }

  private teardownChannels(): void {
    const all = this.channelList();
    this.firstChannel = null;
    this.moreChannels = null;
    for (const c of all) c.teardown();
  }

  private tornDown = false;

  private teardown(): void {
    if (this.tornDown) return;
    this.tornDown = true;
    this.st = St.Done;
    this.teardownChannels();
    if (this.admitted) this.adapter.leave(this);
    this.lease?.release();
    this.lease = null;
    const input = this.adapter.input;
    if (this.reserved > 0) input.unreserve(this.reserved);
    this.reserved = 0;
    this.frame = null;
    this.gather = null;
    input.unwait(this);
    if (this.drainWaiters !== null) {
      const w = this.drainWaiters;
      this.drainWaiters = null;
      for (const f of w) f();
    }
    this.entry?.close();
    if (this.readTimer !== null) clearTimeout(this.readTimer);
    if (this.sendHoldTimer !== null) clearTimeout(this.sendHoldTimer);
    // Exclusive queues go with their connection.
    this.adapter.router.dropExclusive(this.id).then(
      () => this.resolveClosed(),
      (err: unknown) => {
        this.log.warn({ err }, 'amqp: dropping exclusive queues failed');
        this.resolveClosed();
      },
    );
  }
}
