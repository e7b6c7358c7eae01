/**
 * NATS NKeys as the control plane keeps and checks them: a user's public NKey (`U...`, what nats-server's `nkey`
 * users and a user JWT's subject are) and the ed25519 signature a NATS client makes of the server's nonce. The
 * encoding (base32 with a prefix byte and a CRC16) and the signature check are nats-io's `nkeys.js`, not ours.
 */
import { fromPublic, type KeyPair } from 'nkeys.js';
import { FlowError } from '../core/index.js';

/** The first letter of each kind of public NKey. */
export const NKEY_PREFIX = { operator: 'O', account: 'A', user: 'U', server: 'N' } as const;

/** A public NKey of the kind (its prefix letter), checksum and length checked; else null. */
export function parsePublicNkey(text: unknown, kind: keyof typeof NKEY_PREFIX): KeyPair | null {
  if (typeof text !== 'string' || text.length !== 56 || text[0] !== NKEY_PREFIX[kind]) return null;
  try {
    return fromPublic(text);
  } catch {
    return null;
  }
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

/** Whether `sig` (as sent) is `key`'s signature of `data`. */
export function verifySignature(key: KeyPair, data: Uint8Array, sig: string | Uint8Array | undefined): boolean {
  const s = typeof sig === 'string' || sig === undefined ? decodeSignature(sig) : sig;
  if (s === null || s.length !== 64) return false;
  try {
    return key.verify(data, s);
  } catch {
    return false;
  }
}
