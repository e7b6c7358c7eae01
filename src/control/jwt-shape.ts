/**
 * Whether a credential is a JWT, apart from oidc.ts: every login asks it, while the verifier and jose (~40 modules,
 * ~30 ms of CPU to load) load only in a broker that accepts OIDC tokens (oidc-open.ts; issue 28: start time).
 */

/** JWS compact serialization: three base64url parts, the header a JSON object (so it starts `eyJ`, `{"`). */
const JWT_SHAPE = /^eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$/;

/** Whether a credential is shaped like a JWT (and so goes to the verifier, not the password check). */
export function looksLikeJwt(s: string | Buffer): boolean {
  const str = typeof s === 'string' ? s : s.length > 16384 ? '' : s.toString('latin1');
  return str.length <= 16384 && JWT_SHAPE.test(str);
}
