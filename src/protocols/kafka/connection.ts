/**
 * One Kafka client connection over any Duplex (TCP socket, TLS socket, a test pair).
 *
 * - Framing: every request is a 4-byte big-endian size followed by that many bytes. A negative size or one above
 *   `maxRequestBytes` cannot be a valid request (and must not make us buffer gigabytes): the connection is
 *   logged and closed. Before SASL authentication on a listener that requires it, and during any SASL exchange,
 *   the limit is `saslMaxReceiveBytes` (Kafka's sasl.server.max.receive.size). Received bytes are copied straight
 *   into the frame they belong to (the listener may hand them over in a read buffer it reuses, see read-into.ts);
 *   frames come from the adapter's FramePool and Produce frames go back to it once their request is finished (the
 *   storage copies what it keeps).
 * - Memory a size prefix alone can pin: a frame is taken whole when its size arrives only while the adapter's
 *   budget of bytes-not-yet-arrived allows (FramePool.reserve); otherwise it is gathered in pieces of the bytes
 *   received. A failed allocation (RangeError: the process is out of memory) closes this connection, not the
 *   process.
 * - Timeouts, checked by the listener's sweep (`sweep`, no timer per connection): a request must be received
 *   whole within `requestReceiveTimeoutMs` of its first bytes; a connection to a SASL listener must authenticate
 *   within `authTimeoutMs`; an idle one (nothing in flight, nothing moving) is closed after
 *   `connectionsMaxIdleMs` (Kafka's connections.max.idle.ms). The hot path only counts: no clock read per read.
 * - Pipelining: clients send several requests without waiting (max.in.flight). Each request gets a slot in
 *   arrival order; handlers run concurrently (a Produce waiting for durability must not hold up the next one),
 *   and responses are written strictly in request order, as the protocol requires, by flushing the slots at the
 *   head of the queue as they complete.
 * - Writes are corked and released on the next tick, so responses completing together leave in one writev.
 * - Backpressure: with too many unanswered requests (`maxInFlightRequests`), or responses waiting in the socket's
 *   buffer above its high-water mark (the client does not read them), the connection stops dispatching requests,
 *   between two requests of one read too (the rest of that read is kept, at most one read's worth), and stops
 *   reading until it catches up: a client that pipelines requests and never reads cannot make the broker encode
 *   and hold more than that many responses. One whose responses make no progress for `responseSendTimeoutMs`
 *   is closed.
 * - Errors: a malformed request (truncated, bad lengths, trailing bytes) closes this connection with a log line
 *   (the protocol has no way to answer a request the broker cannot parse). An unknown API or an unadvertised
 *   version is answered with UNSUPPORTED_VERSION and the connection stays open (ApiVersions in its v0 layout
 *   per KIP-511). Nothing a client sends can throw out of this class. Every line a client can cause goes through
 *   the adapter's LogLimiter, keyed by the event and the client's address.
 * - SASL: on a listener that requires it, any API but ApiVersions, SaslHandshake and SaslAuthenticate before
 *   authentication closes the connection with a log line, as Kafka's SASL listeners do. After SaslHandshake v0
 *   the next frames are raw SASL tokens (no request header) until the exchange ends (see sasl.ts).
 */
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { KafkaAdapter } from './adapter.js';
import {
  ApiKey,
  ApiVersionsApi,
  KafkaErrorCode,
  KafkaProtocolError,
  apiName,
  encodeResponse,
  readRequestPrefix,
  supportsVersion,
  type RequestPrefix,
} from './codec/index.js';
import { CLOSE_CONNECTION, type ConnectionInfo, type KafkaListenerInfo, type RouteResult } from './route.js';
import { SaslSession, stepRawToken } from './sasl.js';
import { DEFAULT_NAMESPACE, namespaceNames, ReadLease, type NamespaceNames } from '../../core/index.js';
import { MAX_FRAME_BYTES } from './frame-pool.js';
import { CloseSignal } from '../listener.js';
import { logKey } from '../../util/log-limit.js';
import { ANONYMOUS, type Access, type ClientEntry, type Principal, type QuotaLease } from '../../control/index.js';

/** Pieces of a gathered frame smaller than this are joined as they arrive (a trickle must not cost an object per byte). */
const SMALL_PIECE_BYTES = 4096;

const PLAINTEXT_LISTENER: KafkaListenerInfo = { name: 'kafka', tls: false, saslRequired: false };

/** Where a connection's stream keeps its connection, for the stream's listeners (KafkaConnection.onStreamData...). */
const CONNECTION = Symbol('KafkaConnection');
type ConnectionStream = Duplex & { [CONNECTION]: KafkaConnection };

/**
 * What a connection holds until it needs its own (an empty array or Set costs ~30-170 bytes of heap, and an idle
 * connection gathers no frame in pieces and has no long poll waiting for its close): shared; adding to either throws
 * (the array is frozen; the Set's `add` is replaced), so a missed swap fails loudly instead of mixing connections.
 */
const NO_PARTS = Object.freeze([]) as unknown as Buffer[];
const NO_LISTENERS: Set<() => void> = new (class extends Set<() => void> {
  override add(): this {
    throw new Error('NO_LISTENERS is shared: take an own Set before adding');
  }
})();

/** APIs a client may use before authenticating on a listener that requires SASL (as Kafka). */
const PRE_AUTH_APIS: ReadonlySet<number> = new Set([ApiKey.ApiVersions, ApiKey.SaslHandshake, ApiKey.SaslAuthenticate]);

export interface KafkaConnectionInit {
  id: string;
  /**
   * Connects the connection's input to its transport, for a listener that reads sockets itself (readInto):
   * returns false when it cannot, and the connection reads 'data' events. Bytes given to `receive` are copied
   * during the call.
   */
  attachInput?: (receive: (bytes: Buffer) => void) => boolean;
  localAddress?: string;
  localPort?: number;
  remoteAddress?: string;
  remotePort?: number;
  /** The listener the connection arrived on; default a plaintext listener without SASL. */
  listener?: KafkaListenerInfo;
  /** Byte counters of the transport (a net.Socket), for the client registry. */
  socket?: { readonly bytesRead: number; readonly bytesWritten: number };
  /** The user a verified client certificate logged in (mTLS); SASL, when the client uses it, wins. */
  certUser?: string | null;
}

interface Slot {
  done: boolean;
  /** Encoded response frame; null when the request gets no response (Produce acks=0); or close here. */
  result: RouteResult;
  /** Storage memory the response points into (Fetch): released once the response is written or dropped. */
  lease: ReadLease | null;
}

export class KafkaConnection implements ConnectionInfo {
  readonly id: string;
  readonly localAddress: string | undefined;
  readonly localPort: number | undefined;
  readonly remoteAddress: string | undefined;
  private readonly remote: string;
  readonly listener: KafkaListenerInfo;
  /** Made on first use (see `sasl`): most connections never authenticate with SASL. */
  private saslSession: SaslSession | null = null;
  /** Made on first use (see `log`): a pino child and its bindings are ~250 bytes an idle connection rarely needs. */
  private childLog: Logger | null = null;
  /** Tells the listener (and whoever asks for `closed`) that the connection has closed. */
  readonly closeSignal = new CloseSignal();
  private isDone = false;

  /** The size prefix being received: its bytes so far (big-endian) and how many of its 4 are in. */
  private sizeBytes = 0;
  private sizeHave = 0;
  /** Size of the frame being received (-1 while its size prefix is incomplete) and how many of its bytes are in. */
  private frameSize = -1;
  private frameHave = 0;
  /**
   * Where the frame's bytes go: a pooled buffer of its size, taken when the size arrived, or null for a frame
   * that did not fit in the adapter's budget of memory ahead of arrival (or is above MAX_FRAME_BYTES)...
   */
  private frame: Buffer | null = null;
  /** ...whose bytes not yet arrived this connection counts in the budget (frameSize - frameHave, or 0)... */
  private reserved = 0;
  /**
   * ...or the pieces of a frame gathered as its bytes arrive, joined when complete: a size prefix alone must not
   * make the broker allocate up to maxRequestBytes per connection.
   */
  private largeParts: Buffer[] = NO_PARTS;
  private gathering = false;
  /** Counters the sweep compares with what it saw last time (the hot path does not read the clock). */
  private activity = 0;
  private framesDone = 0;
  /** What the last sweep saw (`swept*`), and since when the connection is idle or a request partly received. */
  private sweptActivity = -1;
  private sweptFramesDone = -1;
  private activeAt = 0;
  private partialSince = -1;
  /** Response bytes the socket held at the last sweep, and when they last went down (or were none). */
  private sweptUnsent = 0;
  private sentAt = 0;
  private readonly openedAt: number;
  private readonly pending: Slot[] = [];
  /**
   * Bytes read but not dispatched yet because the connection had to stop (see updateFlow); null when none. At most
   * about one read: the stream is paused when this is set.
   */
  private held: Buffer | null = null;
  /** receive() is running (a flush inside it must not start on `held`). */
  private receiving = false;
  private paused = false;
  private corked = false;
  /** The client finished sending: end our side once every pending response is written. */
  private ended = false;
  private released = false;
  /** NO_LISTENERS until the first (see onClose). */
  private closeListeners: Set<() => void> = NO_LISTENERS;
  /** Control plane (see ConnectionInfo): set by `openSession` before the first API that needs a principal. */
  access: Access | null = null;
  names: NamespaceNames = namespaceNames(DEFAULT_NAMESPACE);
  quota: QuotaLease | null = null;
  readonly client: ClientEntry | null = null;
  /** The user of a verified client certificate (mTLS): authenticated without SASL, as Kafka's SSL principal. */
  readonly certUser: string | null;
  /** KIP-219 muting: reading stops until this timer fires. */
  private muted: NodeJS.Timeout | null = null;
  private mutedUntil = 0;

  constructor(
    private readonly stream: Duplex,
    private readonly adapter: KafkaAdapter,
    init: KafkaConnectionInit,
  ) {
    this.id = init.id;
    this.localAddress = init.localAddress;
    this.localPort = init.localPort;
    this.remoteAddress = init.remoteAddress;
    this.listener = init.listener ?? PLAINTEXT_LISTENER;
    this.certUser = init.certUser ?? null;
    this.remote = `${init.remoteAddress ?? '?'}:${init.remotePort ?? '?'}`;
    this.openedAt = Date.now();
    this.activeAt = this.openedAt;
    this.sentAt = this.openedAt;
    (stream as ConnectionStream)[CONNECTION] = this;
    if (!init.attachInput?.((bytes) => this.receive(bytes))) {
      stream.on('data', KafkaConnection.onStreamData);
      stream.resume(); // a socket accepted paused (pauseOnConnect) stays paused until told
    }
    stream.on('drain', KafkaConnection.onStreamDrain);
    stream.on('end', KafkaConnection.onStreamEnd);
    stream.on('error', KafkaConnection.onStreamError);
    stream.on('close', KafkaConnection.onStreamClose);
    const ac = adapter.options.access;
    if (ac) {
      this.client = ac.clients.register({
        protocol: 'kafka',
        listener: this.listener.name,
        remoteAddress: init.remoteAddress,
        remotePort: init.remotePort,
        socket: init.socket,
        kick: (reason) => {
          this.log.info({ reason }, 'client kicked: closing connection');
          this.destroy();
        },
      });
    }
    if (adapter.logger.isLevelEnabled('debug')) this.log.debug('connection opened');
  }

  // The stream's listeners: the same functions for every connection, each finding its connection on the stream
  // (`this` in an event listener), instead of closures per connection (~330 bytes with their context).
  private static onStreamData(this: ConnectionStream, chunk: Buffer | string): void {
    this[CONNECTION].receive(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
  }

  private static onStreamDrain(this: ConnectionStream): void {
    this[CONNECTION].updateFlow();
  }

  private static onStreamEnd(this: ConnectionStream): void {
    const c = this[CONNECTION];
    c.ended = true;
    c.maybeEnd();
  }

  private static onStreamError(this: ConnectionStream, err: Error): void {
    const c = this[CONNECTION];
    if (c.adapter.logger.isLevelEnabled('debug')) c.log.debug({ err }, 'connection error');
    c.destroy();
  }

  private static onStreamClose(this: ConnectionStream): void {
    this[CONNECTION].handleStreamClose();
  }

  /** The connection's logger (its id and peer bound), made on first use. */
  get log(): Logger {
    return (this.childLog ??= this.adapter.logger.child({ conn: this.id, remote: this.remote }));
  }

  /** SASL state (handshake, exchange, principal), made on first use. */
  get sasl(): SaslSession {
    return (this.saslSession ??= new SaslSession());
  }

  /** SASL completed, or a verified client certificate named a user (mTLS). */
  private get isAuthenticated(): boolean {
    return this.saslSession?.authenticated === true || this.certUser !== null;
  }

  /** Resolves when the connection closes (the promise is made when first asked for). */
  get closed(): Promise<void> {
    return this.closeSignal.closed;
  }

  isClosed(): boolean {
    return this.isDone;
  }

  onClose(fn: () => void): () => void {
    if (this.released) {
      fn();
      return () => undefined;
    }
    if (this.closeListeners === NO_LISTENERS) this.closeListeners = new Set();
    const listeners = this.closeListeners;
    listeners.add(fn);
    return () => listeners.delete(fn);
  }

  /** Closes the connection now; pending responses are dropped. */
  close(): void {
    this.destroy();
  }

  /**
   * The listener's periodic check (every fraction of the shortest limit): closes this connection when a request
   * has been arriving for longer than requestReceiveTimeoutMs, when it has not authenticated within authTimeoutMs
   * on a listener that requires SASL, or when it has been idle for connectionsMaxIdleMs. Times are measured from
   * the first sweep that saw the change, so a limit is kept to within one sweep interval.
   */
  sweep(now: number): void {
    if (this.isDone) return;
    const o = this.adapter.options;
    if (this.activity !== this.sweptActivity) {
      this.sweptActivity = this.activity;
      this.activeAt = now;
    }
    const partial = this.frameSize >= 0 || this.sizeHave > 0;
    if (!partial) this.partialSince = -1;
    // While the connection is paused it is the broker that holds the rest of the request back (backpressure).
    else if (this.partialSince < 0 || this.framesDone !== this.sweptFramesDone || this.paused) this.partialSince = now;
    this.sweptFramesDone = this.framesDone;
    // Responses waiting in the socket's buffer: progress is the buffer getting shorter (or empty) between sweeps.
    // While it is not, the connection does not read either (backpressure), so nothing else moves it.
    const unsent = this.stream.writableLength;
    if (unsent === 0 || unsent < this.sweptUnsent) this.sentAt = now;
    this.sweptUnsent = unsent;
    if (unsent > 0 && now - this.sentAt >= o.responseSendTimeoutMs) {
      this.limitedLog(
        'warn',
        { unsentBytes: unsent, inFlight: this.pending.length, limitMs: o.responseSendTimeoutMs },
        'client does not read its responses: closing connection',
      );
      this.destroy();
    } else if (partial && now - this.partialSince >= o.requestReceiveTimeoutMs) {
      this.limitedLog(
        'warn',
        { size: this.frameSize, received: this.frameHave, limitMs: o.requestReceiveTimeoutMs },
        'request not received whole in time: closing connection',
      );
      this.destroy();
    } else if (this.saslSession !== null && this.saslSession.expired(now)) {
      // KIP-368: the session's credential expired and the client did not re-authenticate in time.
      this.limitedLog('info', { principal: this.saslSession.principal }, 'SASL session expired without re-authentication: closing connection');
      this.destroy();
    } else if (this.listener.saslRequired && !this.isAuthenticated && now - this.openedAt >= o.authTimeoutMs) {
      this.limitedLog('info', { listener: this.listener.name, limitMs: o.authTimeoutMs }, 'no SASL authentication in time: closing connection');
      this.destroy();
    } else if (!partial && this.pending.length === 0 && now - this.activeAt >= o.connectionsMaxIdleMs) {
      this.limitedLog('debug', { limitMs: o.connectionsMaxIdleMs }, 'idle connection: closing (connections.max.idle.ms)');
      this.destroy();
    }
  }

  /**
   * A line a client can cause: through the adapter's limiter, keyed by the message and the client's address (for
   * handlers too, e.g. SASL failures).
   */
  limitedLog(level: 'debug' | 'info' | 'warn' | 'error', fields: Record<string, unknown>, msg: string): void {
    this.adapter.logLimit.log(level, logKey(msg, this.remoteAddress), { conn: this.id, remote: this.remote, ...fields }, msg);
  }

  // ---------------------------------------------------------------- input

  /** Copies received bytes into the frames they belong to and dispatches each complete frame. */
  private receive(bytes: Buffer): void {
    this.activity++;
    if (this.held !== null) {
      // Bytes of a read that was under way when the connection stopped: they wait behind the others.
      this.held = Buffer.concat([this.held, bytes]);
      this.updateFlow();
      return;
    }
    this.consume(bytes);
    this.updateFlow();
  }

  /** receiveFrames, keeping (a copy of) what it could not dispatch; a failure closes the connection. */
  private consume(bytes: Buffer): void {
    this.receiving = true;
    try {
      const used = this.receiveFrames(bytes);
      // `bytes` may be the listener's read buffer, reused by the next read: the rest is copied.
      if (used < bytes.length && !this.isDone) this.held = Buffer.from(bytes.subarray(used));
    } catch (err) {
      // An allocation that failed (RangeError: Array buffer allocation failed) concerns this connection's frame:
      // the process goes on, the connection is closed (its frame's memory goes with it).
      if (err instanceof RangeError) {
        this.adapter.frames.allocationFailures++;
        this.limitedLog('error', { err, size: this.frameSize }, 'frame allocation failed: closing connection');
      } else {
        this.limitedLog('error', { err }, 'receiving a request failed: closing connection');
      }
      this.destroy();
    } finally {
      this.receiving = false;
    }
  }

  /** Returns how many of `bytes` it used: all, unless the connection must stop before the next request. */
  private receiveFrames(bytes: Buffer): number {
    const frames = this.adapter.frames;
    let pos = 0;
    while (!this.isDone) {
      // Between two requests: one read may hold thousands of small ones (a 64 KiB read is 4,000 Metadata requests,
      // each answered by kilobytes), so the limits are checked per request, not per read.
      if (this.frameSize < 0 && this.sizeHave === 0 && pos < bytes.length && this.mustStop()) return pos;
      if (this.frameSize < 0) {
        while (this.sizeHave < 4 && pos < bytes.length) {
          this.sizeBytes = ((this.sizeBytes << 8) | bytes[pos++]) >>> 0;
          this.sizeHave++;
        }
        if (this.sizeHave < 4) break;
        this.sizeHave = 0;
        const size = this.sizeBytes | 0; // int32, as readInt32BE
        this.sizeBytes = 0;
        const o = this.adapter.options;
        // KIP-43 / sasl.server.max.receive.size: until SASL completes (on a listener requiring it), or while an
        // exchange is under way, only small requests are read.
        const saslLimited = !this.isAuthenticated && (this.listener.saslRequired || (this.saslSession !== null && this.saslSession.mechanism !== null));
        const max = saslLimited ? o.saslMaxReceiveBytes : o.maxRequestBytes;
        if (size < 0 || size > max) {
          if (saslLimited && size >= 0 && size <= o.maxRequestBytes) {
            this.limitedLog('warn', { size, max, listener: this.listener.name }, 'request too large before SASL authentication: closing connection');
          } else {
            this.limitedLog('warn', { size, max }, 'invalid request size: closing connection');
          }
          this.destroy();
          return pos;
        }
        this.frameSize = size;
        this.frameHave = 0;
        // Take the whole frame now if its bytes are here or the budget of memory ahead of arrival has room. Not for a
        // client that has yet to authenticate: its requests are small and rare, and strangers must not be able to
        // use up the budget that authenticated producers' fast path needs.
        const ahead = size - Math.min(size, bytes.length - pos);
        if (ahead === 0 || (!saslLimited && size <= MAX_FRAME_BYTES && frames.reserve(ahead))) {
          this.reserved = ahead;
          this.frame = frames.take(size);
        } else {
          this.gathering = true;
          frames.gathering++;
          frames.gathered++;
        }
      }
      const k = Math.min(this.frameSize - this.frameHave, bytes.length - pos);
      if (this.frame !== null) {
        bytes.copy(this.frame, this.frameHave, pos, pos + k);
        this.frameHave += k;
        // What is still to come stays reserved (the first copy was never counted).
        const left = this.frameSize - this.frameHave;
        if (left < this.reserved) {
          frames.unreserve(this.reserved - left);
          this.reserved = left;
        }
      } else {
        if (k > 0) this.gather(bytes.subarray(pos, pos + k));
        this.frameHave += k;
      }
      pos += k;
      if (this.frameHave < this.frameSize) break;
      let frame = this.frame;
      if (frame === null) {
        frame = frames.take(this.frameSize);
        let at = 0;
        for (const p of this.largeParts) at += p.copy(frame, at);
        this.gathering = false;
        frames.gathering--;
      }
      this.frame = null;
      this.largeParts = NO_PARTS;
      this.frameSize = -1;
      this.framesDone++;
      this.dispatch(frame);
    }
    return bytes.length;
  }

  /** Keeps a copy of received bytes of a gathered frame; small ones are joined to a small last piece. */
  private gather(bytes: Buffer): void {
    if (this.largeParts === NO_PARTS) this.largeParts = [];
    const parts = this.largeParts;
    const last = parts.length - 1;
    if (bytes.length < SMALL_PIECE_BYTES && last >= 0 && parts[last].length < SMALL_PIECE_BYTES) {
      parts[last] = Buffer.concat([parts[last], bytes]);
    } else {
      parts.push(Buffer.from(bytes));
    }
  }

  private dispatch(frame: Buffer): void {
    if (this.saslSession?.raw === true) {
      this.dispatchRawToken(frame);
      return;
    }
    let prefix: RequestPrefix;
    try {
      prefix = readRequestPrefix(frame);
    } catch (err) {
      this.reject(err, undefined);
      return;
    }
    if (this.adapter.logger.isLevelEnabled('trace')) {
      this.log.trace({ api: apiName(prefix.apiKey), version: prefix.apiVersion, correlationId: prefix.correlationId }, 'request');
    }
    if (this.saslSession !== null && this.saslSession.expired(Date.now()) && !PRE_AUTH_APIS.has(prefix.apiKey)) {
      // KIP-368: a request on a session whose credential expired closes the connection, as Kafka does.
      this.limitedLog('info', { api: apiName(prefix.apiKey), principal: this.saslSession.principal }, 'request on an expired SASL session: closing connection');
      this.destroy();
      return;
    }
    if (this.listener.saslRequired && !this.isAuthenticated && !PRE_AUTH_APIS.has(prefix.apiKey)) {
      this.limitedLog(
        'warn',
        { api: apiName(prefix.apiKey), version: prefix.apiVersion, listener: this.listener.name },
        'request before SASL authentication: closing connection',
      );
      this.destroy();
      return;
    }
    if (this.access === null && this.adapter.options.access && !PRE_AUTH_APIS.has(prefix.apiKey) && !this.openSession()) return;
    const route = this.adapter.route(prefix.apiKey);
    if (!route) {
      this.limitedLog(
        'warn',
        { api: apiName(prefix.apiKey), apiKey: prefix.apiKey, version: prefix.apiVersion, correlationId: prefix.correlationId },
        'unsupported API: answered UNSUPPORTED_VERSION',
      );
      this.answerUnsupported(prefix);
      return;
    }
    if (!supportsVersion(route.codec, prefix.apiVersion)) {
      if (prefix.apiKey === ApiKey.ApiVersions) {
        // KIP-511: a client may open with a newer ApiVersions than the broker knows. Answer UNSUPPORTED_VERSION in
        // the v0 layout (which every version can read, and why ApiVersions responses keep header v0) with the
        // supported ranges, so the client retries with the highest version we support.
        const chunks = encodeResponse(ApiVersionsApi, 0, prefix.correlationId, {
          errorCode: KafkaErrorCode.UNSUPPORTED_VERSION,
          apiKeys: this.adapter.apiVersions,
          throttleTimeMs: 0,
        });
        this.pending.push({ done: true, result: chunks, lease: null });
        this.flush();
        return;
      }
      this.limitedLog(
        'warn',
        { api: route.codec.name, version: prefix.apiVersion, supported: `${route.codec.minVersion}-${route.codec.maxVersion}` },
        'unsupported API version: answered UNSUPPORTED_VERSION',
      );
      this.answerUnsupported(prefix);
      return;
    }
    const slot: Slot = { done: false, result: null, lease: new ReadLease() };
    // A Produce frame is finished with once its handler settles (the storage copied the batches during the append).
    const recycle = prefix.apiKey === ApiKey.Produce ? () => this.adapter.frames.give(frame) : undefined;
    let response: Promise<RouteResult>;
    try {
      response = route.run(this.adapter, this, frame, slot.lease!);
    } catch (err) {
      slot.lease!.release();
      recycle?.();
      this.reject(err, prefix);
      return;
    }
    this.pending.push(slot);
    response.then(
      (result) => {
        recycle?.();
        slot.done = true;
        slot.result = result;
        this.flush();
      },
      (err: unknown) => {
        recycle?.();
        slot.lease!.release();
        this.reject(err, prefix);
      },
    );
  }

  /** A raw SASL token (after SaslHandshake v0): answered with a bare token, or the connection closes. */
  private dispatchRawToken(token: Buffer): void {
    const slot: Slot = { done: false, result: null, lease: null };
    this.pending.push(slot);
    stepRawToken({ conn: this }, token).then(
      (answer) => {
        slot.done = true;
        slot.result = answer === null ? CLOSE_CONNECTION : [answer];
        this.flush();
      },
      (err: unknown) => this.reject(err, undefined),
    );
  }

  /**
   * Answers a request for an API or version this broker does not offer. Clients only send what ApiVersions
   * advertised, so this is a client ignoring it; the layout it expects is unknown here, so the answer is the
   * one layout every Kafka client can read for any API: response header v0 followed by the error code
   * UNSUPPORTED_VERSION (35), as KIP-511 does for ApiVersions. The connection stays open: the request was
   * well framed, and the client may go on with the APIs it is offered.
   */
  private answerUnsupported(prefix: RequestPrefix): void {
    const frame = Buffer.alloc(10);
    frame.writeInt32BE(6, 0);
    frame.writeInt32BE(prefix.correlationId, 4);
    frame.writeInt16BE(KafkaErrorCode.UNSUPPORTED_VERSION, 8);
    this.pending.push({ done: true, result: [frame], lease: null });
    this.flush();
  }

  private reject(err: unknown, prefix: RequestPrefix | undefined): void {
    const req = prefix ? { api: apiName(prefix.apiKey), version: prefix.apiVersion, correlationId: prefix.correlationId } : {};
    if (err instanceof KafkaProtocolError) {
      this.limitedLog('warn', { ...req, reason: err.reason, detail: err.message }, 'malformed request: closing connection');
    } else {
      this.limitedLog('error', { ...req, err }, 'request failed: closing connection');
    }
    this.destroy();
  }

  // ---------------------------------------------------------------- control plane

  /**
   * Takes the connection's principal (SASL's, else anonymous when allowed), its Access and a quota lease. False
   * (and the connection closed) when anonymous clients are not allowed or the namespace's connection quota is
   * reached: Kafka has no reply for either outside SASL, so the connection is closed with a log line.
   */
  private openSession(): boolean {
    const ac = this.adapter.options.access;
    if (!ac) return true;
    let principal: Principal;
    const sasl = this.saslSession;
    if (sasl !== null && sasl.authenticated && sasl.identity !== null) principal = sasl.identity;
    else if (sasl !== null && sasl.authenticated && sasl.principal !== null) principal = ac.principal(sasl.principal);
    else if (this.certUser !== null) principal = ac.principal(this.certUser);
    else if (this.adapter.options.anonymous) principal = ANONYMOUS;
    else {
      this.limitedLog('warn', { listener: this.listener.name }, 'anonymous Kafka clients are not allowed: closing connection');
      this.destroy();
      return false;
    }
    const lease = ac.quotas.connect(principal);
    if ('refused' in lease) {
      this.limitedLog('warn', { user: principal.user, namespace: principal.namespace, reason: lease.refused }, 'connection quota reached: closing connection');
      this.destroy();
      return false;
    }
    this.quota?.release();
    this.quota = lease;
    const names = namespaceNames(principal.namespace);
    this.names = names;
    this.access = names.isDefault
      ? ac.accessFor(principal, 'kafka', this.remoteAddress)
      : ac.namespacedAccessFor(principal, names, 'kafka', this.remoteAddress);
    if (this.client) {
      this.client.user = principal.user;
      this.client.namespace = principal.namespace;
    }
    return true;
  }

  authenticated(): boolean {
    if (!this.adapter.options.access) return true;
    // An anonymous session (requests before SaslHandshake) gives way to the authenticated one.
    this.quota?.release();
    this.quota = null;
    this.access = null;
    return this.openSession();
  }

  /**
   * A KIP-368 re-authentication succeeded: the same principal, a new credential (its groups may have changed with
   * the token); the quota lease stays.
   */
  reauthenticated(): void {
    const ac = this.adapter.options.access;
    const sasl = this.saslSession;
    if (!ac || sasl === null || sasl.identity === null) return;
    this.access = ac.accessFor(sasl.identity, 'kafka', this.remoteAddress);
  }

  throttle(ms: number): void {
    if (ms <= 0 || this.isDone) return;
    const until = Date.now() + ms;
    if (until <= this.mutedUntil) return;
    this.mutedUntil = until;
    if (this.muted) clearTimeout(this.muted);
    this.muted = setTimeout(() => {
      this.muted = null;
      this.mutedUntil = 0;
      this.updateFlow();
    }, ms);
    this.updateFlow();
  }

  // ---------------------------------------------------------------- output

  private flush(): void {
    if (this.isDone) return;
    while (this.pending.length > 0 && this.pending[0].done) {
      const slot = this.pending.shift()!;
      const result = slot.result;
      if (result === null || result === CLOSE_CONNECTION || !Array.isArray(result) || slot.lease === null || slot.lease.empty) {
        slot.lease?.release();
      }
      if (result === null) continue;
      this.activity++;
      if (result === CLOSE_CONNECTION) {
        this.closeAfterWrites();
        return;
      }
      if (!this.corked) {
        this.corked = true;
        this.stream.cork();
        process.nextTick(this.uncork);
      }
      if (!Array.isArray(result)) {
        // A last answer (failed authentication): write it, then close.
        for (const c of result.frame) this.stream.write(c);
        this.closeAfterWrites();
        return;
      }
      if (slot.lease !== null && !slot.lease.empty && result.length > 0) {
        // The response points into storage memory: it is given back once the socket has taken the bytes (the write
        // callback also runs when the connection is destroyed first).
        const lease = slot.lease;
        for (let i = 0; i < result.length - 1; i++) this.stream.write(result[i]);
        this.stream.write(result[result.length - 1], () => lease.release());
      } else {
        for (const c of result) this.stream.write(c);
      }
    }
    this.updateFlow();
    this.maybeEnd();
  }

  private readonly uncork = (): void => {
    this.corked = false;
    if (!this.isDone) this.stream.uncork();
  };

  /** Whether to stop taking requests: muted by a quota, too many in flight, or responses not draining. */
  private mustStop(): boolean {
    return this.muted !== null || this.pending.length >= this.adapter.options.maxInFlightRequests || this.stream.writableNeedDrain;
  }

  private updateFlow(): void {
    if (this.isDone) return;
    // Requests held back go first, as far as the limits now allow (consume keeps what it cannot dispatch).
    while (this.held !== null && !this.receiving && !this.isDone && !this.mustStop()) {
      const held = this.held;
      this.held = null;
      this.consume(held);
    }
    if (this.isDone) return;
    const stop = this.held !== null || this.mustStop();
    if (stop && !this.paused) {
      this.paused = true;
      this.stream.pause();
    } else if (!stop && this.paused) {
      this.paused = false;
      this.stream.resume();
    }
  }

  private maybeEnd(): void {
    if (this.ended && this.pending.length === 0 && this.held === null && !this.isDone) this.stream.end();
  }

  // ---------------------------------------------------------------- teardown

  /** Stops reading, lets the responses already written go out, then closes. */
  private closeAfterWrites(): void {
    if (this.isDone) return;
    this.isDone = true;
    // end() flushes corked writes before finishing; destroy once they are out.
    this.stream.end(() => this.stream.destroy());
    this.release();
  }

  private destroy(): void {
    if (this.isDone) return;
    this.isDone = true;
    this.stream.destroy();
    this.release();
  }

  private handleStreamClose(): void {
    this.isDone = true;
    this.release();
  }

  private release(): void {
    if (this.released) return;
    this.released = true;
    // The budget and counts this connection's unfinished frame held.
    if (this.reserved > 0) this.adapter.frames.unreserve(this.reserved);
    this.reserved = 0;
    if (this.gathering) this.adapter.frames.gathering--;
    this.gathering = false;
    this.frameSize = -1;
    this.frame = null;
    this.largeParts = NO_PARTS;
    this.held = null;
    for (const slot of this.pending) slot.lease?.release();
    this.pending.length = 0;
    if (this.muted) clearTimeout(this.muted);
    this.muted = null;
    this.quota?.release();
    this.client?.close();
    // Its incremental fetch sessions go with it.
    this.adapter.fetchSessions.removeOwner(this.id);
    if (this.adapter.logger.isLevelEnabled('debug')) this.log.debug('connection closed');
    this.closeSignal.fire(this);
    if (this.closeListeners === NO_LISTENERS) return;
    const listeners = [...this.closeListeners];
    this.closeListeners.clear();
    for (const fn of listeners) fn();
  }
}
