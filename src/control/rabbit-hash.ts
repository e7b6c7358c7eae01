/**
 * RabbitMQ's password hashes, as its definitions files and `PUT /api/users/{name}` carry them (`password_hash` with
 * `hashing_algorithm`): base64 of a 4-byte random salt followed by H(salt ‖ UTF-8 password), H being SHA-256
 * (`rabbit_password_hashing_sha256`, RabbitMQ's default since 3.6), SHA-512 or MD5 (the older modules).
 *
 * FlowMQ keeps such a hash only for users that came through the RabbitMQ management API or a definitions import:
 * a user imported with a hash alone has no clear password FlowMQ could derive its scrypt hash and SCRAM keys from, so
 * its PLAIN logins (AMQP, MQTT, NATS, HTTP Basic) are checked against this hash; a user given a clear password gets
 * FlowMQ's own credentials and, beside them, this hash so that an export gives RabbitMQ a working user. It is a fast
 * hash (one SHA-256): weaker against an offline guess than scrypt, exactly as weak as in RabbitMQ; users made
 * otherwise (the admin API, the users file) never get one.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { FlowError } from '../core/index.js';

export const RABBIT_HASHING = {
  rabbit_password_hashing_sha256: 'sha256',
  rabbit_password_hashing_sha512: 'sha512',
  rabbit_password_hashing_md5: 'md5',
} as const;
export type RabbitHashingAlgorithm = keyof typeof RABBIT_HASHING;
export const DEFAULT_RABBIT_HASHING: RabbitHashingAlgorithm = 'rabbit_password_hashing_sha256';

/** A RabbitMQ password hash: the algorithm's name and the base64 text (empty: no password login). */
export interface RabbitHash {
  readonly algorithm: RabbitHashingAlgorithm;
  readonly hash: string;
}

export function rabbitAlgorithm(name: unknown): RabbitHashingAlgorithm {
  if (name === undefined || name === null) return DEFAULT_RABBIT_HASHING;
  if (typeof name === 'string' && name in RABBIT_HASHING) return name as RabbitHashingAlgorithm;
  throw new FlowError('INVALID_ARGUMENT', `unknown hashing_algorithm ${JSON.stringify(name)} (${Object.keys(RABBIT_HASHING).join(', ')})`);
}

export function rabbitHashOf(password: string, algorithm: RabbitHashingAlgorithm = DEFAULT_RABBIT_HASHING, salt = randomBytes(4)): RabbitHash {
  const digest = createHash(RABBIT_HASHING[algorithm]).update(salt).update(Buffer.from(password, 'utf8')).digest();
  return { algorithm, hash: Buffer.concat([salt, digest]).toString('base64') };
}

/** Validates a hash given by a client: base64 of 4 salt bytes and one digest of the algorithm (or empty). */
export function checkRabbitHash(h: RabbitHash): RabbitHash {
  if (h.hash === '') return h;
  const raw = Buffer.from(h.hash, 'base64');
  const len = createHash(RABBIT_HASHING[h.algorithm]).digest().length;
  if (raw.length !== 4 + len || raw.toString('base64') !== h.hash) throw new FlowError('INVALID_ARGUMENT', `password_hash is not a base64 ${h.algorithm} hash`);
  return h;
}

/** Does the password match the hash? Never for an empty hash (RabbitMQ: that user has no password login). */
export function rabbitHashMatches(h: RabbitHash, password: Buffer | string): boolean {
  if (h.hash === '') return false;
  const raw = Buffer.from(h.hash, 'base64');
  const algo = RABBIT_HASHING[h.algorithm];
  if (raw.length < 5) return false;
  const digest = createHash(algo)
    .update(raw.subarray(0, 4))
    .update(typeof password === 'string' ? Buffer.from(password, 'utf8') : password)
    .digest();
  const want = raw.subarray(4);
  return want.length === digest.length && timingSafeEqual(want, digest);
}
