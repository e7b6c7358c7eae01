/**
 * Users and their credentials: the protocol-neutral store every adapter authenticates against.
 *
 * Passwords are never kept. At load time each password is turned into
 * - one SCRAM credential per SCRAM mechanism (RFC 5802 section 3: salt, iteration count, StoredKey, ServerKey),
 *   which is all a SCRAM server needs, and which cannot be replayed as a password;
 * - one scrypt hash (RFC 7914) for mechanisms that receive the password itself (SASL PLAIN, MQTT CONNECT).
 * A separate slow hash for PLAIN keeps the SCRAM keys from doubling as a cheap password oracle.
 */
import { createHash, createHmac, pbkdf2, randomBytes, scrypt } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { FlowError } from '../core/index.js';
import { SCRAM_MECHANISMS, type ScramMechanism } from '../config/sasl-mechanisms.js';
import type { RabbitHash } from './rabbit-hash.js';

const pbkdf2Async = promisify(pbkdf2);
const scryptAsync = promisify(scrypt) as (
  password: string | Buffer,
  salt: Buffer,
  keylen: number,
  opts: { N: number; r: number; p: number },
) => Promise<Buffer>;

/** Hash of a SCRAM mechanism (RFC 7677 for SHA-256; SHA-512 as Kafka's KIP-84 offers it). */
export function scramHash(mechanism: ScramMechanism): 'sha256' | 'sha512' {
  return mechanism === 'SCRAM-SHA-256' ? 'sha256' : 'sha512';
}

/**
 * The slow hash of a password for mechanisms that receive the password itself (scrypt, RFC 7914, with SCRYPT's
 * cost). Checking a password against it is the PasswordGuard's job (password-guard.ts): it runs scrypt on its own
 * worker thread, never on libuv's thread pool, which the WAL's file writes need.
 */
export interface PasswordHash {
  readonly salt: Buffer;
  readonly hash: Buffer;
}

/** What a SCRAM server stores per user and mechanism (RFC 5802 section 3). */
export interface ScramCredential {
  readonly salt: Buffer;
  readonly iterations: number;
  readonly storedKey: Buffer;
  readonly serverKey: Buffer;
}

export interface UserRecord {
  readonly username: string;
  /** The user's credential for a SCRAM mechanism (undefined: this user cannot use it). */
  scram(mechanism: ScramMechanism): ScramCredential | undefined;
  /** The slow hash a clear-text password (SASL PLAIN, MQTT CONNECT) is checked against, by the PasswordGuard. */
  readonly passwordHash: PasswordHash;
  /**
   * Set for a user imported with a RabbitMQ password hash alone (no clear password, so no scrypt hash or SCRAM keys):
   * clear-text passwords are checked against it instead (rabbit-hash.ts).
   */
  readonly rabbitOnly?: RabbitHash;
}

/** The store adapters see; a metastore-backed one can replace the file-backed one without touching them. */
export interface UserStore {
  lookup(username: string): UserRecord | undefined;
  readonly size: number;
}

/**
 * Kafka refuses SCRAM iteration counts below 4096 (KIP-84), and so do KafkaJS and librdkafka clients; 4096 is
 * also the example count of RFC 7677.
 */
export const DEFAULT_SCRAM_ITERATIONS = 4096;

/**
 * scrypt cost of the PLAIN hash: N=2^14, r=8, p=1 (16 MiB, ~50 ms of one core). A check is computed on the
 * PasswordGuard's worker thread; the hashes made at start-up (the users file, before any listener opens) still use
 * node:crypto's async scrypt on libuv's pool, which has nothing else to do then.
 */
export const SCRYPT = { N: 16384, r: 8, p: 1 } as const;
export const SCRYPT_KEYLEN = 32;

/** RFC 5802 section 3: SaltedPassword = Hi(password, salt, i) is PBKDF2 with HMAC-H; then the two keys. */
export function scramCredentialFromSalted(mechanism: ScramMechanism, salted: Buffer, salt: Buffer, iterations: number): ScramCredential {
  const h = scramHash(mechanism);
  const clientKey = createHmac(h, salted).update('Client Key').digest();
  return {
    salt,
    iterations,
    storedKey: createHash(h).update(clientKey).digest(),
    serverKey: createHmac(h, salted).update('Server Key').digest(),
  };
}

export async function deriveScramCredential(
  mechanism: ScramMechanism,
  password: string,
  salt: Buffer,
  iterations = DEFAULT_SCRAM_ITERATIONS,
): Promise<ScramCredential> {
  const h = scramHash(mechanism);
  // RFC 5802 wants the password SASLprep-normalised; NFKC is its core and is what clients send for ASCII.
  const salted = await pbkdf2Async(Buffer.from(password.normalize('NFKC'), 'utf8'), salt, iterations, h === 'sha256' ? 32 : 64, h);
  return scramCredentialFromSalted(mechanism, salted, salt, iterations);
}

class HashedUser implements UserRecord {
  constructor(
    readonly username: string,
    private readonly creds: ReadonlyMap<ScramMechanism, ScramCredential>,
    readonly passwordHash: PasswordHash,
  ) {}

  scram(mechanism: ScramMechanism): ScramCredential | undefined {
    return this.creds.get(mechanism);
  }
}

/**
 * Checked for a user that does not exist: it costs one scrypt like a real check, so response times do not tell
 * which usernames exist, and no password matches its random hash.
 */
export const DUMMY_PASSWORD_HASH: PasswordHash = { salt: randomBytes(16), hash: randomBytes(SCRYPT_KEYLEN) };

export class MemoryUserStore implements UserStore {
  private readonly users = new Map<string, UserRecord>();

  lookup(username: string): UserRecord | undefined {
    return this.users.get(username);
  }

  get size(): number {
    return this.users.size;
  }

  /** Adds a user from a clear-text password, keeping only derived credentials. */
  async add(username: string, password: string, iterations = DEFAULT_SCRAM_ITERATIONS): Promise<void> {
    const creds = new Map<ScramMechanism, ScramCredential>();
    for (const m of SCRAM_MECHANISMS) creds.set(m, await deriveScramCredential(m, password, randomBytes(24), iterations));
    const plainSalt = randomBytes(16);
    const plainHash = await scryptAsync(Buffer.from(password, 'utf8'), plainSalt, SCRYPT_KEYLEN, SCRYPT);
    this.users.set(username, new HashedUser(username, creds, { salt: plainSalt, hash: plainHash }));
  }

  static async fromPasswords(entries: ReadonlyArray<{ username: string; password: string }>): Promise<MemoryUserStore> {
    const s = new MemoryUserStore();
    await Promise.all(entries.map((e) => s.add(e.username, e.password)));
    return s;
  }
}

export async function readUsersFile(path: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (e) {
    throw new FlowError('CONFIG_ERROR', `users file ${path}: ${(e as Error).message}`);
  }
}
