/**
 * NATS NKeys as the control plane keeps and checks them: a user's public NKey (`U...`, what nats-server's `nkey`
 * users and a user JWT's subject are) and the ed25519 signature a NATS client makes of the server's nonce.
 *
 * nats-io's `nkeys.js` decodes a key (base32 with a prefix byte and a CRC16, all checked); the signature is checked by
 * node:crypto's ed25519 with that raw key as a JWK. nkeys.js's own verify is tweetnacl in JavaScript: measured on
 * the 2 shared cores (load ~10) at 6.0 ms of CPU per signature against 0.07 ms for node:crypto, and a JWT login checks two
 * (the JWT's and the nonce's) on the event loop. Keys are cached (a user logging in again, the accounts' keys).
 */
import { createPublicKey, verify, type KeyObject } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Prefix } from 'nkeys.js';
import type { Codec } from 'nkeys.js/lib/codec.js';
import { FlowError } from '../core/index.js';

/** The first letter of each kind of public NKey. */
export const NKEY_PREFIX = { operator: 'O', account: 'A', user: 'U', server: 'N' } as const;

/**
 * nkeys.js, loaded on first use (50-75 ms of a start at load ~10, which most brokers never need: no user with an
 * NKey, no operator), synchronously (the package is CommonJS). Its key decoder comes from `lib/codec.js` (fromPublic
 * keeps the decoded key to itself; the package has no `exports` map and is pinned).
 */
let lib: { codec: typeof Codec; prefix: Record<keyof typeof NKEY_PREFIX, Prefix> } | null = null;
function nkeys(): NonNullable<typeof lib> {
  if (lib === null) {
    const req = createRequire(import.meta.url);
    const { Prefix: P } = req('nkeys.js') as typeof import('nkeys.js');
    const { Codec: C } = req('nkeys.js/lib/codec.js') as typeof import('nkeys.js/lib/codec.js');
    lib = { codec: C, prefix: { operator: P.Operator, account: P.Account, user: P.User, server: P.Server } };
  }
  return lib;
}

/** A checked public NKey: its text and the ed25519 key it holds. */
export interface PublicNkey {
  readonly text: string;
  readonly kind: keyof typeof NKEY_PREFIX;
  readonly key: KeyObject;
}

const CACHE_LIMIT = 4096;
const cache = new Map<string, PublicNkey>();

/** A public NKey of the kind (its prefix letter), checksum and length checked; else null. */
export function parsePublicNkey(text: unknown, kind: keyof typeof NKEY_PREFIX): PublicNkey | null {
  if (typeof text !== 'string' || text.length !== 56 || text[0] !== NKEY_PREFIX[kind]) return null;
  const hit = cache.get(text);
  if (hit !== undefined) return hit.kind === kind ? hit : null;
  let k: PublicNkey;
  try {
    const n = nkeys();
    const raw = n.codec.decode(n.prefix[kind], Buffer.from(text, 'latin1'));
    if (raw.length !== 32) return null;
    const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(raw).toString('base64url') }, format: 'jwk' });
    k = { text, kind, key };
  } catch {
    return null;
  }
  if (cache.size >= CACHE_LIMIT) cache.clear();
  cache.set(text, k);
  return k;
}

/** Validates a user's public NKey (`U` and 55 base32 characters); INVALID_ARGUMENT otherwise. */
export function validateUserNkey(text: unknown): string {
  if (parsePublicNkey(text, 'user') === null) throw new FlowError('INVALID_ARGUMENT', 'nkey must be a user public NKey (56 characters starting with U)');
  return text as string;
}

/**
 * Decodes a signature as NATS clients send it (base64url without padding; nats-server also takes standard base64).
 * An ed25519 signature is 64 bytes: anything else is no signature.
 */
export function decodeSignature(text: string | undefined): Uint8Array | null {
  if (text === undefined || text.length === 0 || text.length > 100 || !/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) return null;
  const b = Buffer.from(text, text.includes('+') || text.includes('/') ? 'base64' : 'base64url');
  return b.length === 64 ? b : null;
}

/** Whether `sig` (as sent, or decoded) is `key`'s ed25519 signature of `data`. */
export function verifySignature(key: PublicNkey, data: Uint8Array, sig: string | Uint8Array | undefined): boolean {
  const s = typeof sig === 'string' || sig === undefined ? decodeSignature(sig) : sig;
  if (s === null || s.length !== 64) return false;
  try {
    return verify(null, data, key.key, s);
  } catch {
    return false;
  }
}
