/**
 * The OIDC verifier, loaded when a broker is configured for it: jose's ~40 modules cost a start ~30 ms of CPU
 * (measured alone: 25-36 ms), paid before the protocol listeners accept, by every broker that accepts no OIDC token.
 */
import type { OidcOptions, OidcVerifier } from './oidc.js';

export async function openOidcVerifier(opts: OidcOptions): Promise<OidcVerifier> {
  const { OidcVerifier: Verifier } = await import('./oidc.js');
  return new Verifier(opts);
}
