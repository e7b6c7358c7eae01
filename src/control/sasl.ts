/**
 * Server side of the SASL mechanisms PLAIN (RFC 4616) and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677),
 * over a UserStore. Protocol-neutral: an exchange takes the client's tokens and returns challenges; the Kafka
 * adapter carries them in SaslAuthenticate (KIP-152) or raw frames, and MQTT 5.0 AUTH could carry them too.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { PasswordGuard, PasswordVerdict } from './password-guard.js';
import { isSaslMechanism, type SaslMechanism, type ScramMechanism } from '../config/sasl-mechanisms.js';
import { scramHash, type ScramCredential, type UserStore } from './users.js';

/**
 * Result of one step. `failed` carries a reason for the log (never a password) and the username when one was
 * read, so failures can be attributed; `busy` when the password guard could not check it now (try again later).
 */
export type SaslStepResult =
  | { state: 'continue'; challenge: Buffer }
  | { state: 'done'; challenge: Buffer; principal: string }
  | { state: 'failed'; reason: string; username?: string; busy?: boolean };

export interface SaslExchange {
  readonly mechanism: string;
  step(token: Buffer): SaslStepResult | Promise<SaslStepResult>;
}

export interface SaslServerOptions {
  /** Server nonce part (RFC 5802 `r=` suffix); injectable for the RFC 7677 test vector. Default: 18 random bytes, base64. */
  nonce?: () => string;
  /** Secret for fake salts of unknown users; default random per process. */
  fakeSaltSecret?: Buffer;
  /** The protocol carrying the exchange, for the guard's log lines ("kafka", "mqtt"). Default "kafka". */
  protocol?: string;
  /**
   * How PLAIN checks the password it receives; default the guard's own check. The protocols pass the control
   * plane's `access.password`, which also asks the webhook about users the directory does not know.
   */
  checkPassword?: (username: string, password: Buffer, remoteAddress: string | undefined) => Promise<PasswordVerdict>;
}

/**
 * Starts one authentication exchange with a mechanism of SASL_MECHANISMS. Every password or proof check goes
 * through `guard` (throttled per `remoteAddress` and username; PLAIN's scrypt on the guard's worker thread).
 */
export function startSaslExchange(guard: PasswordGuard, mechanism: SaslMechanism, remoteAddress?: string, opts: SaslServerOptions = {}): SaslExchange {
  const protocol = opts.protocol ?? 'kafka';
  if (mechanism !== 'PLAIN') return new ScramExchange(guard, mechanism, remoteAddress, opts, protocol);
  const check = opts.checkPassword ?? ((u, p, r) => guard.check(u, p, r, `${protocol} PLAIN`));
  return new PlainExchange(check, remoteAddress);
}

// ------------------------------------------------------------------------------------------------ PLAIN

/** RFC 4616: one message `[authzid] NUL authcid NUL passwd`, UTF-8; the server answers with success or failure. */
class PlainExchange implements SaslExchange {
  readonly mechanism = 'PLAIN';
  private used = false;

  constructor(
    private readonly check: (username: string, password: Buffer, remoteAddress: string | undefined) => Promise<PasswordVerdict>,
    private readonly remoteAddress: string | undefined,
  ) {}

  async step(token: Buffer): Promise<SaslStepResult> {
    if (this.used) return { state: 'failed', reason: 'PLAIN takes a single message' };
    this.used = true;
    const first = token.indexOf(0);
    const second = first < 0 ? -1 : token.indexOf(0, first + 1);
    if (second < 0 || token.indexOf(0, second + 1) >= 0) return { state: 'failed', reason: 'malformed PLAIN message' };
    const authzid = token.subarray(0, first).toString('utf8');
    const username = token.subarray(first + 1, second).toString('utf8');
    const password = token.subarray(second + 1);
    if (username === '' || password.length === 0) return { state: 'failed', reason: 'empty PLAIN username or password', username };
    // Acting as another identity is not offered: the authorization id must be empty or the user's own (as Kafka).
    if (authzid !== '' && authzid !== username) return { state: 'failed', reason: 'authorization id differs from the username', username };
    const verdict = await this.check(username, password, this.remoteAddress);
    if (verdict === 'busy') return { state: 'failed', reason: 'server busy: password not checked', username, busy: true };
    if (verdict !== 'ok') return { state: 'failed', reason: 'invalid username or password', username };
    return { state: 'done', challenge: Buffer.alloc(0), principal: username };
  }
}

// ------------------------------------------------------------------------------------------------ SCRAM

const PROCESS_FAKE_SALT_SECRET = randomBytes(32);

/** Splits `k=v,k=v` attributes (RFC 5802 section 5.1); values may hold '=' but not ','. */
function attributes(s: string): Array<[string, string]> | null {
  const out: Array<[string, string]> = [];
  for (const part of s.split(',')) {
    if (part.length < 2 || part[1] !== '=') return null;
    out.push([part[0], part.slice(2)]);
  }
  return out;
}

/** RFC 5802 section 5.1 saslname: ',' and '=' travel as "=2C" and "=3D"; any other '=' is invalid. */
function decodeSaslName(s: string): string | null {
  if (/=(?!2C|3D)/.test(s)) return null;
  return s.replace(/=2C/g, ',').replace(/=3D/g, '=');
}

/** printable = %x21-2B / %x2D-7E (RFC 5802 section 7): every visible ASCII character but ','. */
const PRINTABLE = /^[\x21-\x2b\x2d-\x7e]+$/;

const enum ScramState {
  ClientFirst,
  ClientFinal,
  Done,
}

/**
 * RFC 5802 section 3 on the server:
 *   client-first  "gs2-header n=user,r=cnonce"        → server-first "r=cnonce+snonce,s=salt,i=iterations"
 *   client-final  "c=base64(gs2-header),r=nonce,p=proof" → server-final "v=ServerSignature"
 * with AuthMessage = client-first-bare "," server-first "," client-final-without-proof,
 * ClientSignature = HMAC(StoredKey, AuthMessage), ClientKey = proof XOR ClientSignature, and the proof valid
 * iff H(ClientKey) = StoredKey.
 */
class ScramExchange implements SaslExchange {
  private state = ScramState.ClientFirst;
  private username = '';
  private cred: ScramCredential | null = null;
  private gs2Header = '';
  private nonce = '';
  private clientFirstBare = '';
  private serverFirst = '';

  private readonly store: UserStore;

  constructor(
    private readonly guard: PasswordGuard,
    readonly mechanism: ScramMechanism,
    private readonly remoteAddress: string | undefined,
    private readonly opts: SaslServerOptions,
    private readonly protocol: string,
  ) {
    this.store = guard.store;
  }

  step(token: Buffer): SaslStepResult | Promise<SaslStepResult> {
    const msg = token.toString('utf8');
    if (this.state === ScramState.ClientFirst) return this.clientFirst(msg);
    if (this.state === ScramState.ClientFinal) return this.throttledClientFinal(msg);
    return { state: 'failed', reason: 'SCRAM exchange already finished', username: this.username };
  }

  /**
   * The proof check itself is two HMACs and a hash (no PBKDF2 per attempt: the salted keys were derived at load,
   * and an unknown user gets a fake salt from one HMAC), but its failures count in the guard's per-address and
   * per-username throttle like PLAIN's, and a throttled address waits before its proof is looked at.
   */
  private async throttledClientFinal(msg: string): Promise<SaslStepResult> {
    this.state = ScramState.Done; // one client-final per exchange, even while this one waits
    if (!(await this.guard.admit(this.username, this.remoteAddress, `${this.protocol} ${this.mechanism}`))) {
      return { state: 'failed', reason: 'server busy: proof not checked', username: this.username, busy: true };
    }
    this.state = ScramState.ClientFinal;
    const r = this.clientFinal(msg);
    if (r.state === 'done') this.guard.succeeded(this.username, this.remoteAddress);
    else if (r.state === 'failed') this.guard.failed(this.username, this.remoteAddress, `${this.protocol} ${this.mechanism}`);
    return r;
  }

  private fail(reason: string): SaslStepResult {
    this.state = ScramState.Done;
    return { state: 'failed', reason, username: this.username || undefined };
  }

  private clientFirst(msg: string): SaslStepResult {
    // gs2-header = gs2-cbind-flag "," [authzid] ",": channel binding ("p=") is not offered over Kafka.
    const m = /^([ny]),(a=[^,]*)?,(.*)$/s.exec(msg);
    if (!m) return this.fail(msg.startsWith('p=') ? 'SCRAM channel binding is not supported' : 'malformed SCRAM client-first message');
    this.gs2Header = `${m[1]},${m[2] ?? ''},`;
    this.clientFirstBare = m[3];
    const attrs = attributes(this.clientFirstBare);
    // client-first-message-bare = [reserved-mext ","] username "," nonce ["," extensions]: "m=" is reserved and
    // must fail (RFC 5802 section 5.1); extensions (Kafka's tokenauth, KIP-48) are not supported and ignored.
    if (!attrs || attrs.length < 2 || attrs[0][0] !== 'n' || attrs[1][0] !== 'r') return this.fail('malformed SCRAM client-first message');
    const username = decodeSaslName(attrs[0][1]);
    const cnonce = attrs[1][1];
    if (username === null || username === '') return this.fail('malformed SCRAM username');
    this.username = username;
    if (!PRINTABLE.test(cnonce)) return this.fail('malformed SCRAM client nonce');
    if (m[2] !== undefined && decodeSaslName(m[2].slice(2)) !== username && m[2] !== 'a=') {
      return this.fail('authorization id differs from the username');
    }
    const snonce = this.opts.nonce?.() ?? randomBytes(18).toString('base64');
    this.nonce = cnonce + snonce;
    const user = this.store.lookup(username);
    const cred = user?.scram(this.mechanism) ?? null;
    this.cred = cred;
    // An unknown user gets a stable fake salt and fails only at the proof, so the exchange does not reveal which
    // usernames exist (RFC 5802 section 9).
    const salt =
      cred?.salt ??
      createHmac('sha256', this.opts.fakeSaltSecret ?? PROCESS_FAKE_SALT_SECRET)
        .update(username)
        .digest()
        .subarray(0, 24);
    const iterations = cred?.iterations ?? 4096;
    this.serverFirst = `r=${this.nonce},s=${salt.toString('base64')},i=${iterations}`;
    this.state = ScramState.ClientFinal;
    return { state: 'continue', challenge: Buffer.from(this.serverFirst, 'utf8') };
  }

  private clientFinal(msg: string): SaslStepResult {
    const attrs = attributes(msg);
    if (!attrs || attrs.length < 3) return this.fail('malformed SCRAM client-final message');
    const [c, r] = attrs;
    const p = attrs[attrs.length - 1];
    if (c[0] !== 'c' || r[0] !== 'r' || p[0] !== 'p') return this.fail('malformed SCRAM client-final message');
    // c= must echo the gs2-header of the client-first message (no channel binding data).
    if (c[1] !== Buffer.from(this.gs2Header, 'utf8').toString('base64')) return this.fail('SCRAM channel binding mismatch');
    // RFC 5802 wants r= to equal the combined nonce. librdkafka (checked with 2.0.2) sends the client nonce once
    // more in front of it, and Kafka's own SCRAM server accepts any r= that ends with the combined nonce, so we
    // do too: the server's fresh nonce is still required (no replay), and the proof covers exactly what was sent.
    if (!r[1].endsWith(this.nonce)) return this.fail('SCRAM nonce mismatch');
    const withoutProof = msg.slice(0, msg.lastIndexOf(',p='));
    const authMessage = `${this.clientFirstBare},${this.serverFirst},${withoutProof}`;
    const cred = this.cred;
    if (!cred) return this.fail('unknown user');
    const h = scramHash(this.mechanism);
    const proof = Buffer.from(p[1], 'base64');
    const clientSignature = createHmac(h, cred.storedKey).update(authMessage).digest();
    if (proof.length !== clientSignature.length) return this.fail('invalid SCRAM proof');
    const clientKey = Buffer.alloc(proof.length);
    for (let i = 0; i < proof.length; i++) clientKey[i] = proof[i] ^ clientSignature[i];
    if (!timingSafeEqual(createHash(h).update(clientKey).digest(), cred.storedKey)) return this.fail('invalid username or password');
    const serverSignature = createHmac(h, cred.serverKey).update(authMessage).digest();
    this.state = ScramState.Done;
    return { state: 'done', challenge: Buffer.from(`v=${serverSignature.toString('base64')}`, 'utf8'), principal: this.username };
  }
}

/** The mechanisms offered over a store, as a protocol adapter consumes them (Kafka's KafkaSaslOptions). */
export function saslProvider(
  guard: PasswordGuard,
  mechanisms: readonly string[],
  opts: SaslServerOptions = {},
): { mechanisms: readonly SaslMechanism[]; start(mechanism: string, remoteAddress?: string): SaslExchange } {
  const offered = mechanisms.filter(isSaslMechanism);
  return {
    mechanisms: offered,
    start(mechanism, remoteAddress) {
      // The adapter only starts mechanisms it was told about; anything else is a bug, refused as a failed exchange.
      if (!isSaslMechanism(mechanism) || !offered.includes(mechanism)) {
        return { mechanism, step: () => ({ state: 'failed', reason: `mechanism ${mechanism} not offered` }) };
      }
      return startSaslExchange(guard, mechanism, remoteAddress, opts);
    },
  };
}

export type PasswordCheck = 'ok' | 'bad-credentials' | 'not-authorized' | 'busy';

/**
 * Username/password authentication for protocols that send both in the clear over their transport (MQTT
 * CONNECT): no username is anonymous (allowed or 'not-authorized'); a username with a wrong or missing password
 * is 'bad-credentials'; 'busy' when the guard could not check it now. The result strings are MQTT's authenticate
 * hook's.
 */
export function passwordAuthenticator(
  guard: PasswordGuard,
  allowAnonymous: boolean,
): (clientId: string, username: string | null, password: Buffer | null, remoteAddress?: string) => PasswordCheck | Promise<PasswordCheck> {
  return (_clientId, username, password, remoteAddress) => {
    if (username === null) return allowAnonymous ? 'ok' : 'not-authorized';
    return guard.check(username, password, remoteAddress, 'mqtt').then((v) => (v === 'ok' ? 'ok' : v === 'busy' ? 'busy' : 'bad-credentials'));
  };
}
