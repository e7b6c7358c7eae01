/**
 * Client certificates (mTLS) on every TLS listener, the same way for each protocol.
 *
 * With `--tls-client-ca` set, a TLS listener asks each client for a certificate (`tlsClientOptions`, merged into
 * its `tls.createServer` options). With `--tls-client-auth require` the handshake fails for a client without a
 * certificate that chains to that CA; with `request` (the default) the handshake succeeds anyway, and only a
 * certificate Node verified (`socket.authorized`) counts. A verified certificate names a directory user through
 * `--tls-cert-user` (the subject's CN, or the first e-mail or DNS subjectAltName): `certificateLogin` answers that
 * user's principal, or 'bad' when the directory has no such user (refused like a wrong password: a certificate is
 * a credential for an identity that exists, never a way to make one up). A client that also sends credentials is
 * checked on those instead: they win (one certificate per device, several accounts behind it).
 */
import { readFileSync } from 'node:fs';
import type { TLSSocket } from 'node:tls';
import { FlowError } from '../core/index.js';
import type { Principal } from './policy.js';

export type CertUserField = 'cn' | 'san-email' | 'san-dns';

export interface ClientCertSettings {
  tlsClientCa: string | null;
  tlsClientAuth: 'request' | 'require';
  tlsCertUser: CertUserField;
}

/** Extra `tls.createServer` options for client certificates; empty when mTLS is off. Reads the CA file once. */
export function tlsClientOptions(config: ClientCertSettings): { ca?: Buffer; requestCert?: boolean; rejectUnauthorized?: boolean } {
  if (config.tlsClientCa === null) return {};
  let ca: Buffer;
  try {
    ca = readFileSync(config.tlsClientCa);
  } catch (err) {
    throw new FlowError('CONFIG_ERROR', `tls-client-ca ${config.tlsClientCa}: ${(err as Error).message}`);
  }
  if (!ca.toString('latin1').includes('-----BEGIN CERTIFICATE-----')) {
    throw new FlowError('CONFIG_ERROR', `tls-client-ca ${config.tlsClientCa}: no PEM certificate in it`);
  }
  return { ca, requestCert: true, rejectUnauthorized: config.tlsClientAuth === 'require' };
}

/**
 * Node renders subjectAltName as `DNS:a.example, email:x@y, IP Address:10.0.0.1`; a value holding a comma or a
 * quote comes JSON-quoted (`DNS:"a, b"`). Answers the values of one type, in order.
 */
export function subjectAltNames(text: string | undefined, type: 'DNS' | 'email' | 'URI'): string[] {
  if (!text) return [];
  const out: string[] = [];
  const re = /([A-Za-z ]+):("(?:[^"\\]|\\.)*"|[^,]*)(?:, |$)/g;
  for (let m = re.exec(text); m !== null && m[0] !== ''; m = re.exec(text)) {
    if (m[1] !== type) continue;
    let v = m[2];
    if (v.startsWith('"')) {
      try {
        v = JSON.parse(v) as string;
      } catch {
        continue;
      }
    }
    out.push(v);
  }
  return out;
}

/** The username a verified client certificate names, or null (no certificate, not verified, no such field). */
export function certificateUser(socket: TLSSocket, field: CertUserField): string | null {
  if (!socket.authorized) return null;
  const cert = socket.getPeerCertificate();
  if (!cert || Object.keys(cert).length === 0) return null;
  let name: string | undefined;
  if (field === 'cn') {
    const cn: unknown = cert.subject?.CN;
    // Several CNs: ambiguous, so none (the issuing CA decides what certificates say; we do not guess).
    name = typeof cn === 'string' ? cn : undefined;
  } else {
    name = subjectAltNames(cert.subjectaltname, field === 'san-email' ? 'email' : 'DNS')[0];
  }
  return name !== undefined && name !== '' ? name : null;
}

/**
 * The login a client certificate gives: null when it gives none (no verified certificate: go on with credentials
 * or anonymous access), the principal of the user it names, or 'bad' when the directory has no such user.
 */
export function certificateLogin(
  access: { directory: { lookup(username: string): unknown }; principal(username: string): Principal },
  socket: TLSSocket,
  field: CertUserField,
): { verdict: 'ok'; user: string; principal: Principal } | { verdict: 'bad'; user: string } | null {
  const user = certificateUser(socket, field);
  if (user === null) return null;
  if (access.directory.lookup(user) === undefined) return { verdict: 'bad', user };
  return { verdict: 'ok', user, principal: access.principal(user) };
}
