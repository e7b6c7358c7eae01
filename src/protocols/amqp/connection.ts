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
 *
 * Rooms: connection-state.ts (the state, output, flow, hard errors, sweep and teardown); update-secret.ts
 * (connection.update-secret); this file keeps the input (framing) and the connection class (handshake, login, tune,
 * open) and opens channels (channel.ts).
 */
import type { Duplex } from 'node:stream';
import type { ClientRegistration } from '../../control/index.js';
import { ADMIN_GROUP, ANONYMOUS, guestIn, type Principal } from '../../control/index.js';
import { namespaceNames } from '../../core/namespaces.js';
import { ensureVhost } from './vhost.js';
import { certificateLogin, certificateUser } from '../../control/certs.js';
import { TLSSocket } from 'node:tls';
import { logKey } from '../../util/log-limit.js';
import type { AmqpAdapter, AlarmListener, AuthOutcome } from './adapter.js';
import { AmqpChannel } from './channel.js';
import type { AmqpChannelHost } from './types.js';
import { AmqpError } from './errors.js';
import { Gather } from './intake.js';
import { FRAME_MIN_SIZE, PROTOCOL_HEADER, decodeMethodPayload, type AmqpMethod } from './wire.js';
import { decodeTableEntries, fieldString } from './codec/index.js';
import { AmqpConnectionState, St, type AmqpConnectionInit } from './connection-state.js';
import { updateSecret, type SecretHolder } from './update-secret.js';

const VERSION = '0.1.0';

/** Frames up to this size are taken whole when their size arrives, without asking the ahead budget. */
const SMALL_FRAME = 512;

export type { AmqpConnectionInit };

/** The connection a stream belongs to, for the stream's event listeners (shared by every connection). */
const CONNECTION = Symbol('amqp connection');
type Owned = Duplex & { [CONNECTION]: AmqpConnection };

/**
 * Also its own entry's registration in the client registry (protocol, listener, address, socket, kick), so that an
 * idle connection is one object more than its socket rather than several (issue 24: memory per idle connection).
 */
export class AmqpConnection extends AmqpConnectionState implements AlarmListener, ClientRegistration, AmqpChannelHost, SecretHolder {
  /** The username and mechanism of the login (connection.update-secret checks a new secret for the same username). */
  loginUsername = '';
  loginMechanism = '';
  /** The client-properties of start-ok, as decoded (the management API shows them). */
  clientProperties: Record<string, unknown> | null = null;

  constructor(stream: Duplex, adapter: AmqpAdapter, init: AmqpConnectionInit) {
    super(stream, adapter, init);
    // One listener function per event for every connection (no closures per connection).
    (stream as Owned)[CONNECTION] = this;
    stream.on('error', AmqpConnection.onStreamError);
    stream.on('close', AmqpConnection.onStreamClose);
    stream.on('end', AmqpConnection.onStreamEnd);
    stream.on('drain', AmqpConnection.onStreamDrain);
    if (!adapter.admit(this)) {
      this.adapter.logLimit.log(
        'warn',
        logKey('amqp connection refused', this.remoteAddress),
        { remote: this.remoteAddress, max: adapter.options.maxConnections },
        'amqp connection refused: amqp-max-connections reached',
      );
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
    this.adapter.logLimit.log(
      'info',
      logKey('amqp bad protocol header', this.remoteAddress),
      { remote: this.remoteAddress, header: this.head!.subarray(0, this.headHave || 8).toString('hex') },
      'amqp: bad protocol header',
    );
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
          direct_reply_to: true,
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
        // The virtual host is a namespace (vhost.ts): `/` (or empty, what clients send unless told) is the user's own
        // namespace, `default` and any other name the namespace of that name, which must exist. Members of the admins
        // group open every vhost; anyone else opens another namespace's as a guest (policy.ts guestIn), with what the
        // allow policies scoped to it grant its user by name (RabbitMQ permissions in that vhost), every deny holding.
        const vh = m.virtualHost;
        const own = this.principal.namespace;
        const ns = vh === '/' || vh === '' ? own : vh;
        if (ns !== own) {
          if (this.adapter.access.directory.namespace(ns) === undefined) throw new AmqpError(530, `vhost ${vh} not found`, 10, 40);
          if (!this.principal.groups.includes(ADMIN_GROUP)) {
            this.principal = guestIn(this.principal, ns);
            this.access = this.adapter.access.accessFor(this.principal, 'amqp', this.remoteAddress);
          }
        }
        // RabbitMQ refuses the virtual host to a user without permissions in it: here, one no policy allows anything
        // (a guest: no allow policy scoped to the namespace names it).
        if (!this.access.grantsAny()) throw new AmqpError(530, `access to vhost '${vh === '' ? '/' : vh}' refused for user '${this.loginName}'`, 10, 40);
        this.vhost = vh === '' ? '/' : vh;
        this.names = namespaceNames(ns);
        if (!this.names.isDefault) this.access.names = this.names;
        if (this.entry !== null) this.entry.namespace = ns;
        const lease = this.adapter.access.quotas.connect(this.principal);
        if ('refused' in lease) {
          this.adapter.stats.connectionsRefused++;
          this.adapter.logLimit.log(
            'info',
            logKey('amqp connection quota', this.remoteAddress),
            { remote: this.remoteAddress, user: this.principal.user, namespace: ns, reason: lease.refused },
            'amqp: connection refused by the namespace quota',
          );
          throw new AmqpError(530, `connection limit of namespace '${ns}' reached`, 10, 40);
        }
        this.lease = lease;
        this.st = St.Opened;
        const opened = (): void => {
          if (this.st !== St.Opened) return;
          this.sendMethod(0, { name: 'connection.open-ok' } as AmqpMethod);
          if (this.alarmReason !== null && this.capabilities.blocked)
            this.sendMethod(0, { name: 'connection.blocked', reason: this.alarmReason } as AmqpMethod);
        };
        // A vhost's amq.direct and the like are made at its first open (clients wait for open-ok before using them).
        if (this.names.isDefault || this.adapter.router.getExchange(this.names.name('amq.direct')) !== undefined) opened();
        else ensureVhost(this.adapter.router, this.names).then(opened, (err: unknown) => this.protocolError(err));
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
      case 'connection.update-secret':
        // RabbitMQ's extension (update-secret.ts); before open-ok it is 503 and checks nothing.
        updateSecret(this, m.newSecret, m.reason);
        return;
      default:
        throw new AmqpError(this.st === St.Opened ? 503 : 503, `${m.name} is not valid on channel 0`);
    }
  }

  private startOk(m: Extract<AmqpMethod, { name: 'connection.start-ok' }>): void {
    const props = m.clientProperties as Record<string, unknown> | undefined;
    this.clientProperties = props ?? null;
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
      throw new AmqpError(
        403,
        `unknown authentication mechanism '${m.mechanism}'; offered ${this.certificateName() !== null ? 'EXTERNAL ' : ''}PLAIN AMQPLAIN`,
        10,
        11,
      );
    }
    this.st = St.Authenticating;
    const mechanism = m.mechanism;
    this.loginUsername = username;
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
      this.loginMechanism = mechanism;
      this.principal = r.principal;
      this.user = r.principal.user;
      if (r.principal.user !== null) this.loginName = r.principal.user;
      this.access = this.adapter.access.accessFor(r.principal, 'amqp', this.remoteAddress);
      if (this.entry !== null) {
        this.entry.user = r.principal.user;
        this.entry.namespace = r.principal.namespace;
      }
      this.st = St.TuneOk;
      this.sendMethod(0, {
        name: 'connection.tune',
        channelMax: this.adapter.options.channelMax,
        frameMax: this.adapter.options.frameMax,
        heartbeat: this.adapter.options.heartbeatSec,
      } as AmqpMethod);
      return;
    }
    this.adapter.logLimit.log(
      'info',
      logKey('amqp login refused', this.remoteAddress),
      { remote: this.remoteAddress, user: r.user, reason: r.reason },
      'amqp: login refused',
    );
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

  /** SecretHolder: the socket is not read while a new secret is checked. */
  pauseForSecret(paused: boolean): void {
    if (paused) this.pauseReading(64);
    else this.resumeReading(64);
  }

  /** SecretHolder: a new secret was accepted; policies are looked up for the principal the check returned. */
  renewed(p: Principal): void {
    // A guest in another vhost stays one (the check answered the user in its own namespace).
    this.principal = this.principal.home === undefined ? p : guestIn(p, this.principal.namespace);
    this.access = this.adapter.access.accessFor(this.principal, 'amqp', this.remoteAddress);
    if (!this.names.isDefault) this.access.names = this.names;
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
}
