/**
 * TLS on the cluster channel (see channel.ts for the channel's design, docs/security.md for the operator's view).
 *
 * Modes (`--cluster-tls`, the same on every broker):
 * - `psk`: TLS 1.3 with an external pre-shared key derived from the cluster secret (HKDF-SHA256), no certificate.
 *   TLS 1.3 runs it in psk_dhe_ke mode (an X25519 exchange under the key): each connection's keys are fresh and a
 *   later leak of the secret does not decrypt recorded traffic. A peer with another secret fails the handshake (its
 *   binder does not verify).
 * - `cert`: mutual TLS 1.3: each broker presents its certificate (`--cluster-tls-cert/key`) and checks the peer's
 *   against `--cluster-tls-ca`, both ways. Any certificate that CA signed is a broker of the cluster (host names are
 *   not checked: brokers are dialed at the addresses they registered), so the CA should be the cluster's own.
 * - `off`: plaintext, as before channel TLS existed.
 * The HMAC handshake of channel-handshake.ts runs unchanged inside TLS in both TLS modes (the secret is still proved;
 * the broker ids and incarnations are still checked), and so do the framing and everything after it.
 *
 * Accepting: the listener stays a plain TCP server. TLS dialers speak first (their ClientHello) where plaintext
 * dialers wait for our HELLO, so the acceptor reads the first bytes: a TLS record goes to the TLS server, anything
 * else, or silence for half the handshake timeout, is answered with a plaintext REFUSE frame saying why (a broker
 * with `--cluster-tls off`, or one older than channel TLS), so a mixed cluster during an upgrade fails at once and
 * clearly on both sides instead of timing out. A certificate the CA did not sign is refused with a REFUSE frame over
 * TLS (the dialer logs the reason). Failed TLS handshakes are logged (rate-limited) with what to check.
 */
import { hkdfSync } from 'node:crypto';
import type { Socket } from 'node:net';
import { connect, createSecureContext, createServer, type SecureContext, type Server, type TLSSocket } from 'node:tls';
import { FlowError } from '../core/index.js';
import { encodeFrame, T } from './channel-conn.js';

export type ChannelTlsMode = 'off' | 'psk' | 'cert';

export interface ChannelTlsOptions {
  mode: ChannelTlsMode;
  /** cert mode: PEM certificate (chain) of this broker, its key, and the CA(s) peers' certificates must chain to. */
  cert?: string | Buffer;
  key?: string | Buffer;
  ca?: string | Buffer;
}

/** The identity both ends name in PSK mode: the derivation's version (another derivation, another identity). */
const PSK_IDENTITY = 'flowmq-cluster-psk/1';
/** TLS 1.3 suites; AES-128-GCM first (AES-NI), ChaCha20 for machines without. SHA-256 ones: PSK mode needs one. */
const SUITES = 'TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384';

/** Accepted connections in their TLS handshake at once (more are closed at accept). */
const MAX_PENDING = 256;

/** A connection's key among the pending ones (a TLS socket has its raw socket's remote address and port). */
const peerKey = (s: Socket): string => `${s.remoteAddress ?? '?'}|${s.remotePort ?? 0}`;

/** The TLS pre-shared key of the cluster channel: HKDF-SHA256 over the cluster secret, 32 bytes. */
export function channelPsk(secret: string): Buffer {
  return Buffer.from(hkdfSync('sha256', Buffer.from(secret, 'utf8'), 'flowmq cluster channel', 'tls 1.3 external psk v1', 32));
}

/** What the acceptor needs of the channel: refusals are counted and logged as the channel's others. */
export interface TlsHost {
  readonly handshakeMs: number;
  refused(kind: string, address: string | undefined, fields: Record<string, unknown>, msg: string): void;
}

/** The cluster channel's TLS side in one mode: the acceptor's TLS server, the dialer's connect, error explanations. */
export class ChannelTls {
  readonly mode: 'psk' | 'cert';
  private readonly context: SecureContext;
  private readonly psk: Buffer;
  private readonly server: Server;
  /** Raw sockets between accept and the end of their TLS handshake, by remote address and port. */
  readonly pending = new Map<string, Socket>();

  constructor(
    opts: ChannelTlsOptions,
    secret: string,
    private readonly host: TlsHost,
    private readonly open: (socket: TLSSocket) => void,
  ) {
    if (opts.mode === 'off') throw new FlowError('CONFIG_ERROR', 'ChannelTls is for the TLS modes');
    this.mode = opts.mode;
    this.psk = channelPsk(secret);
    if (this.mode === 'cert' && (!opts.cert || !opts.key || !opts.ca))
      throw new FlowError('CONFIG_ERROR', 'cluster channel TLS with certificates needs --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca');
    const base = { minVersion: 'TLSv1.3' as const, ciphers: SUITES, ...(this.mode === 'cert' ? { cert: opts.cert, key: opts.key, ca: opts.ca } : {}) };
    try {
      this.context = createSecureContext(base);
    } catch (err) {
      throw new FlowError('CONFIG_ERROR', `cluster channel TLS: cannot use the certificate, key or CA: ${(err as Error).message}`, { cause: err });
    }
    const psk = this.psk;
    // The server takes the options themselves (it makes its own context; `secureContext` is the client's option).
    this.server = createServer({
      ...base,
      handshakeTimeout: host.handshakeMs,
      ...(this.mode === 'cert'
        ? // Verified here, not by OpenSSL: a peer whose certificate is not the CA's gets a REFUSE saying so.
          { requestCert: true, rejectUnauthorized: false }
        : { pskCallback: (_s: TLSSocket, identity: string) => (identity === PSK_IDENTITY ? psk : null) }),
    });
    this.server.on('secureConnection', (s: TLSSocket) => this.secured(s));
    this.server.on('tlsClientError', (err: Error & { code?: string }, s: TLSSocket) => {
      this.host.refused('tls', s.remoteAddress, { reason: this.explainAccepting(err) }, 'cluster channel: TLS handshake with a dialer failed');
      s.destroy();
    });
  }

  /** Options of a TLS connection to a peer (the dialer). */
  connect(host: string, port: number): TLSSocket {
    const psk = this.psk;
    return connect({
      host,
      port,
      secureContext: this.context,
      minVersion: 'TLSv1.3',
      // Peers are dialed at their registered address; the CA (cert mode) or the key (psk mode) is the check.
      checkServerIdentity: () => undefined,
      ...(this.mode === 'psk' ? { pskCallback: () => ({ psk, identity: PSK_IDENTITY }) } : {}),
    });
  }

  /** An accepted TCP connection: TLS if it starts with a TLS record, else refused in plaintext with the reason. */
  accept(raw: Socket): void {
    if (this.pending.size >= MAX_PENDING) {
      this.host.refused('busy', raw.remoteAddress, {}, 'cluster channel: too many connections in their TLS handshake; closing one');
      raw.destroy();
      return;
    }
    const key = peerKey(raw);
    this.pending.set(key, raw);
    let seen = false;
    const done = () => {
      clearTimeout(probe);
      clearTimeout(timer);
      if (this.pending.get(key) === raw) this.pending.delete(key);
    };
    raw.on('error', () => undefined);
    raw.once('close', done);
    // Silence: a plaintext dialer waiting for our HELLO. Decided after the I/O of that turn (a loaded loop runs
    // timers before reading what arrived meanwhile).
    const probe = setTimeout(
      () =>
        setImmediate(() => {
          if (!seen) this.refusePlain(raw, 'the dialer started no TLS handshake');
        }),
      Math.max(1, Math.floor(this.host.handshakeMs / 2)),
    );
    const timer = setTimeout(() => {
      if (this.pending.get(key) === raw) raw.destroy();
    }, this.host.handshakeMs + 1000);
    raw.once('data', (chunk: Buffer) => {
      seen = true;
      clearTimeout(probe);
      // A TLS handshake record: content type 22, version 3.x.
      if (chunk[0] !== 0x16 || chunk[1] !== 0x03) return this.refusePlain(raw, 'the dialer sent no TLS handshake');
      raw.pause();
      raw.unshift(chunk);
      this.server.emit('connection', raw);
    });
  }

  private secured(s: TLSSocket): void {
    this.pending.delete(peerKey(s));
    if (this.mode === 'cert' && !s.authorized) {
      const why = s.authorizationError ? String(s.authorizationError) : 'no certificate';
      const reason = `the dialer's certificate is not signed by this broker's --cluster-tls-ca (${why})`;
      this.host.refused('tls-cert', s.remoteAddress, { reason }, 'cluster channel: connection refused');
      s.end(encodeFrame(T.REFUSE, Buffer.from(JSON.stringify({ reason: `your certificate is not signed by its --cluster-tls-ca (${why})` }))));
      setTimeout(() => s.destroy(), 1000).unref();
      return;
    }
    this.open(s);
  }

  private refusePlain(raw: Socket, what: string): void {
    if (raw.destroyed) return;
    const reason = `its cluster channel is encrypted (--cluster-tls ${this.mode}) and ${what}: is the dialer's --cluster-tls off, or is it a FlowMQ version without channel TLS? Every broker needs the same --cluster-tls`;
    this.host.refused('tls-plaintext', raw.remoteAddress, { reason }, 'cluster channel: connection refused');
    raw.end(encodeFrame(T.REFUSE, Buffer.from(JSON.stringify({ reason }))));
    setTimeout(() => raw.destroy(), 1000).unref();
  }

  /** A failed TLS handshake of an accepted connection, in words. */
  explainAccepting(err: Error & { code?: string }): string {
    const code = err.code ?? '';
    if (code === 'ERR_SSL_BINDER_DOES_NOT_VERIFY') return `the dialer's TLS pre-shared key differs: its --cluster-secret is not ours (${code})`;
    if (code === 'ERR_SSL_NO_SHARED_CIPHER' || code === 'ERR_SSL_NO_SUITABLE_SIGNATURE_ALGORITHM')
      return this.mode === 'psk'
        ? `the dialer offered no pre-shared key: its --cluster-tls is not psk (${code})`
        : `the dialer's TLS does not match ours (its --cluster-tls psk, ours cert?) (${code})`;
    if (code === 'ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE') return `the dialer presented no certificate: its --cluster-tls is not cert (${code})`;
    if (code === 'ERR_TLS_HANDSHAKE_TIMEOUT') return `no TLS handshake within ${this.host.handshakeMs} ms`;
    return `${err.message.split('\n')[0]}${code ? ` (${code})` : ''}`;
  }

  /** A failed TLS handshake with a peer we dialed, in words. */
  explainDialing(err: Error & { code?: string }): string {
    const code = err.code ?? '';
    if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || code === 'ERR_SSL_PACKET_LENGTH_TOO_LONG' || code === 'ERR_SSL_RECORD_LAYER_FAILURE')
      return `it does not speak TLS on the cluster channel (its --cluster-tls is off, or it is a FlowMQ version without channel TLS; ours is ${this.mode}) (${code})`;
    if (this.mode === 'psk' && (code === 'ERR_SSL_SSLV3_ALERT_ILLEGAL_PARAMETER' || code === 'ERR_SSL_TLSV1_ALERT_DECRYPT_ERROR'))
      return `it refused our TLS pre-shared key: its --cluster-secret is not ours (${code})`;
    if (code === 'ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE' || code === 'ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED')
      return `it refused our TLS handshake: is its --cluster-tls the same as ours (${this.mode})? (${code})`;
    if (code.startsWith('ERR_SSL_') && code.includes('ALERT'))
      return `it refused our TLS handshake (${code}): ${this.mode === 'cert' ? 'does its --cluster-tls-ca sign our certificate?' : 'is its --cluster-tls psk?'}`;
    if (/CERT|SELF_SIGNED|UNABLE_TO|ISSUER/.test(code))
      return this.mode === 'cert'
        ? `its certificate is not signed by our --cluster-tls-ca (${code})`
        : `it answered with a certificate, not our pre-shared key: its --cluster-tls is cert, ours psk (${code})`;
    return err.message;
  }

  close(): void {
    for (const r of this.pending.values()) r.destroy();
    this.pending.clear();
  }
}
