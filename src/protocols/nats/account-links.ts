/**
 * Operator mode's exports and imports: the account JWTs' `exports` and `imports` claims as the namespaces' links
 * (src/core/links.ts), in the shape the users file takes (src/core/links-config.ts). An account is the namespace its
 * JWT names (auth-jwt.ts); an import names its exporter by the account's public key.
 *
 * - Export `{subject, type: stream|service, response_type: Singleton|Stream|Chunked, token_req}`: public unless
 *   `token_req`; a private export is granted to the importers whose import carries a valid activation token (an
 *   `activation` JWT signed by the exporting account or one of its signing keys, naming the importer as its
 *   subject, its subject covering the import's, not expired).
 * - Import `{account, subject, type, to, local_subject}`: a stream's `local_subject` is its mapping and its `to` a
 *   prefix (nats-server's jwt v2 reading); a service's `local_subject` (or `to`) is the subject the importer
 *   publishes on. An import of an account not preloaded, or not valid, is refused with its reason.
 */
import { subjectCovers, validateImports, type ExportConfig, type ImportConfig, type NamespaceLinkDef } from '../../core/index.js';
import { verifiedActivation, type NatsOperators } from './auth-jwt.js';

function str(x: unknown): string | undefined {
  return typeof x === 'string' && x !== '' ? x : undefined;
}

function list(x: unknown): Array<Record<string, unknown>> {
  return Array.isArray(x) ? x.filter((e): e is Record<string, unknown> => e !== null && typeof e === 'object') : [];
}

/** The links the account JWTs define, and the claims that could not be taken (for the log). */
export function accountLinks(
  ops: NatsOperators,
  nowSec = Math.floor(Date.now() / 1000),
): { defs: NamespaceLinkDef[]; refused: Array<{ account: string; claim: string; reason: string }> } {
  const accounts = ops.listAccounts();
  const byKey = new Map(accounts.map((a) => [a.key, a]));
  const refused: Array<{ account: string; claim: string; reason: string }> = [];
  const imports = new Map<string, ImportConfig[]>();
  /** Private exports granted by activation: exporter key + export subject → importer namespaces. */
  const granted = new Map<string, Set<string>>();
  for (const a of accounts) {
    const out: ImportConfig[] = [];
    for (const imp of list(a.claims.nats?.imports)) {
      const subject = str(imp.subject);
      const from = str(imp.account);
      const type = imp.type === 'service' ? 'service' : imp.type === 'stream' ? 'stream' : undefined;
      const claim = `${String(imp.type)} ${String(from)}:${String(subject)}`;
      const exporter = from === undefined ? undefined : byKey.get(from);
      if (subject === undefined || type === undefined || exporter === undefined) {
        refused.push({ account: a.namespace, claim, reason: exporter === undefined ? 'the exporting account is not preloaded' : 'no subject or type' });
        continue;
      }
      const local = str(imp.local_subject);
      const to = str(imp.to);
      const raw: Record<string, unknown> = { [type]: { account: exporter.namespace, subject } };
      if (type === 'stream') {
        if (local !== undefined) raw.to = local;
        else if (to !== undefined) raw.prefix = to;
      } else if ((local ?? to) !== undefined) raw.to = local ?? to;
      let parsed: ImportConfig;
      try {
        parsed = validateImports([raw], `account ${a.namespace}`)[0]!;
      } catch (err) {
        refused.push({ account: a.namespace, claim, reason: (err as Error).message });
        continue;
      }
      const token = str(imp.token);
      if (token !== undefined) {
        const own = (iss: string): boolean => iss === exporter.key || exporter.signingKeys.has(iss);
        const act = verifiedActivation(token, own, nowSec);
        const actSubject = str(act?.nats?.subject);
        if (act !== null && act.sub === a.key && actSubject !== undefined && subjectCovers(actSubject, subject)) {
          const k = `${exporter.key}\u0000${type}`;
          let g = granted.get(k);
          if (g === undefined) granted.set(k, (g = new Set()));
          g.add(`${actSubject}\u0000${a.namespace}`);
        } else refused.push({ account: a.namespace, claim, reason: 'activation token not valid for this import' });
      }
      out.push(parsed);
    }
    imports.set(a.key, out);
  }
  const defs: NamespaceLinkDef[] = [];
  for (const a of accounts) {
    const exports: ExportConfig[] = [];
    for (const e of list(a.claims.nats?.exports)) {
      const subject = str(e.subject);
      const type = e.type === 'service' ? 'service' : e.type === 'stream' ? 'stream' : undefined;
      if (subject === undefined || type === undefined) {
        refused.push({ account: a.namespace, claim: `export ${String(e.subject)}`, reason: 'no subject or type' });
        continue;
      }
      const x: ExportConfig = { [type]: subject };
      const rt = str(e.response_type)?.toLowerCase();
      if (type === 'service' && (rt === 'singleton' || rt === 'stream' || rt === 'chunked')) x.response_type = rt;
      if (e.token_req === true) {
        // Private: the importers an activation token of this account grants it to (their token's subject covers it).
        const g = granted.get(`${a.key}\u0000${type}`) ?? new Set<string>();
        x.accounts = [...g].filter((v) => subjectCovers(subject, v.split('\u0000')[0]!)).map((v) => v.split('\u0000')[1]!);
      }
      exports.push(x);
    }
    const imps = imports.get(a.key) ?? [];
    if (exports.length > 0 || imps.length > 0) defs.push({ namespace: a.namespace, exports, imports: imps });
  }
  return { defs, refused };
}
