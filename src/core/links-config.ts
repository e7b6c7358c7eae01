/**
 * Exports and imports between namespaces (NATS accounts), as they are written: nats-server's account configuration
 * (`accounts { A { exports: [...] } B { imports: [...] } }`), which the users file, the admin API and the nats.js test
 * shim take as is, and the account JWT's `exports` / `imports` claims (converted to it by the NATS adapter). This file
 * validates them (pure); links.ts makes them work.
 *
 *   exports:
 *     - {stream: "prices.>"}                              # public: any namespace may import it
 *     - {stream: "orders.>", accounts: [t2]}               # only t2 may
 *     - {service: "svc.>", response_type: singleton}       # request/reply (singleton, stream or chunked)
 *   imports:
 *     - {stream: {account: t1, subject: "prices.>"}, prefix: "t1"}   # seen in the importer as t1.prices.>
 *     - {stream: {account: t1, subject: "orders.>"}, to: "in.>"}     # seen as in.> (wildcards carried over)
 *     - {service: {account: t1, subject: "svc.>"}, to: "t1svc.>"}    # requests on t1svc.x reach t1's svc.x
 *
 * Subjects are NATS subjects (`*` one token, `>` the rest), because that is how the two accounts' clients name
 * them; an MQTT topic `prices/x` is the subject `prices.x` (the separator swap), so other protocols are covered too.
 */
import { FlowError } from './errors.js';
import { NS_ROOT } from './namespaces.js';

export type ResponseType = 'singleton' | 'stream' | 'chunked';

/** One export, as written (nats-server's keys). Exactly one of `stream` and `service`. */
export interface ExportConfig {
  stream?: string;
  service?: string;
  /** The namespaces allowed to import it; absent: public. */
  accounts?: string[];
  /** A service's responses: one (singleton, the default) or several (stream, chunked) per request. */
  response_type?: ResponseType;
}

/** One import, as written. Exactly one of `stream` and `service`. */
export interface ImportConfig {
  stream?: { account: string; subject: string };
  service?: { account: string; subject: string };
  /** A stream: the subject the importer sees (wildcards as the export's); a service: the subject it publishes on. */
  to?: string;
  /** A stream: a token prefix put before the exporter's subject (`prefix.subject`). */
  prefix?: string;
}

export interface NamespaceLinksConfig {
  exports?: ExportConfig[];
  imports?: ImportConfig[];
}

/** One namespace's exports and imports (links.ts's input). */
export interface NamespaceLinkDef {
  namespace: string;
  exports: ExportConfig[];
  imports: ImportConfig[];
}

const NAMESPACE_NAME = /^[A-Za-z0-9._@-]{1,128}$/;
const RESPONSE_TYPES: readonly string[] = ['singleton', 'stream', 'chunked'];

function bad(where: string, what: string): FlowError {
  return new FlowError('INVALID_ARGUMENT', `${where}: ${what}`);
}

function isObject(x: unknown): x is Record<string, unknown> {
  return x !== null && typeof x === 'object' && !Array.isArray(x);
}

/** A NATS subject (wildcards allowed where `wild`), as nats-server accepts it in an account's exports and imports. */
export function checkLinkSubject(s: unknown, where: string, wild = true): string {
  if (typeof s !== 'string' || s.length === 0 || s.length > 1024) throw bad(where, 'a subject must be a non-empty string');
  const tokens = s.split('.');
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    // eslint-disable-next-line no-control-regex
    if (t.length === 0 || /[\s\u0000-\u001f\u007f]/.test(t)) throw bad(where, `invalid subject "${s}"`);
    if ((t === '*' || t === '>') && !wild) throw bad(where, `"${s}" must not hold wildcards`);
    if (t === '>' && i !== tokens.length - 1) throw bad(where, `">" must be the last token of "${s}"`);
    if (t.includes('+') || t.includes('#')) throw bad(where, `invalid subject "${s}"`);
  }
  // `$ns` is the reserved space of qualified names (namespaces.ts): no link names it.
  if (tokens[0] === NS_ROOT) throw bad(where, `"${s}" is in the reserved $ns space`);
  return s;
}

function checkAccount(a: unknown, where: string): string {
  if (typeof a !== 'string' || !NAMESPACE_NAME.test(a)) throw bad(where, 'account must be a namespace name');
  return a;
}

/** Wildcards of a subject in order: `*` per single-token wildcard, then `>` when it ends so. */
export function wildcardShape(s: string): string {
  let out = '';
  for (const t of s.split('.')) if (t === '*' || t === '>') out += t;
  return out;
}

/**
 * Validates one namespace's exports and imports (users file, admin API, nats.js test shim): answers them in their
 * canonical shape (only the keys above). Throws INVALID_ARGUMENT naming `where` and the entry.
 */
export function validateNamespaceLinks(raw: unknown, where: string): Required<NamespaceLinksConfig> {
  if (raw === undefined || raw === null) return { exports: [], imports: [] };
  if (!isObject(raw)) throw bad(where, 'expected {exports?, imports?}');
  return { exports: validateExports(raw.exports, where), imports: validateImports(raw.imports, where) };
}

export function validateExports(raw: unknown, where: string): ExportConfig[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw bad(where, 'exports must be a list');
  return raw.map((e: unknown, i) => {
    const at = `${where}: export ${i + 1}`;
    if (!isObject(e)) throw bad(at, 'expected {stream: subject} or {service: subject}');
    const unknown = Object.keys(e).filter((k) => !['stream', 'service', 'accounts', 'response_type'].includes(k));
    if (unknown.length > 0) throw bad(at, `unknown key ${unknown[0]}`);
    if ((e.stream === undefined) === (e.service === undefined)) throw bad(at, 'exactly one of stream and service');
    const out: ExportConfig = e.stream !== undefined ? { stream: checkLinkSubject(e.stream, at) } : { service: checkLinkSubject(e.service, at) };
    if (e.accounts !== undefined) {
      if (!Array.isArray(e.accounts)) throw bad(at, 'accounts must be a list of namespace names');
      out.accounts = e.accounts.map((a) => checkAccount(a, at));
    }
    if (e.response_type !== undefined) {
      if (out.service === undefined) throw bad(at, 'response_type is for services');
      if (typeof e.response_type !== 'string' || !RESPONSE_TYPES.includes(e.response_type.toLowerCase())) {
        throw bad(at, 'response_type must be singleton, stream or chunked');
      }
      out.response_type = e.response_type.toLowerCase() as ResponseType;
    }
    return out;
  });
}

export function validateImports(raw: unknown, where: string): ImportConfig[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw bad(where, 'imports must be a list');
  return raw.map((e: unknown, i) => {
    const at = `${where}: import ${i + 1}`;
    if (!isObject(e)) throw bad(at, 'expected {stream: {account, subject}} or {service: {account, subject}}');
    const unknown = Object.keys(e).filter((k) => !['stream', 'service', 'to', 'prefix'].includes(k));
    if (unknown.length > 0) throw bad(at, `unknown key ${unknown[0]}`);
    if ((e.stream === undefined) === (e.service === undefined)) throw bad(at, 'exactly one of stream and service');
    const src = e.stream ?? e.service;
    if (!isObject(src)) throw bad(at, 'expected {account, subject}');
    const from = { account: checkAccount(src.account, at), subject: checkLinkSubject(src.subject, at) };
    const out: ImportConfig = e.stream !== undefined ? { stream: from } : { service: from };
    if (e.prefix !== undefined) {
      if (out.stream === undefined) throw bad(at, 'prefix is for streams (a service takes to)');
      out.prefix = checkLinkSubject(e.prefix, at, false);
    }
    if (e.to !== undefined) {
      if (out.prefix !== undefined) throw bad(at, 'prefix and to exclude each other');
      const to = checkLinkSubject(e.to, at);
      // The wildcards carry the tokens across: the same ones on both sides.
      if (wildcardShape(to) !== wildcardShape(from.subject)) throw bad(at, `"${to}" must have the wildcards of "${from.subject}"`);
      out.to = to;
    }
    return out;
  });
}

/** validateNamespaceLinks, keeping only the non-empty lists (how a namespace stores them). */
export function compactLinks(raw: { exports?: unknown; imports?: unknown }, where: string): NamespaceLinksConfig {
  const l = validateNamespaceLinks({ exports: raw.exports, imports: raw.imports }, where);
  return { ...(l.exports.length > 0 ? { exports: l.exports } : {}), ...(l.imports.length > 0 ? { imports: l.imports } : {}) };
}
