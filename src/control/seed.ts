/**
 * The users file (`--users-file`): a way to seed the directory from a file kept with the deployment, read at each
 * start. YAML or JSON, either a list of users or a mapping:
 *
 *   users:                       # {username, password and/or nkey (NATS user public NKey), groups?, namespace?}
 *     - {username: admin, password: change-me, groups: [admins]}
 *     - {username: sensor-1, password: s1, namespace: plant-a}
 *   groups: [ops, {name: devs, description: developers}]
 *   namespaces:                  # {name, description?, quotas?, exports?, imports?}
 *     - {name: plant-a, quotas: {maxConnections: 100, publishRate: 1000}}
 *     - name: plant-b              # NATS account exports and imports (src/core/links-config.ts)
 *       exports: [{stream: "telemetry.>", accounts: [plant-a]}, {service: "ops.>"}]
 *       imports: [{stream: {account: plant-a, subject: "alerts.>"}, prefix: "a"}]
 *   policies:                    # PolicyDef without createdAt (see policy.ts)
 *     - {name: sensors-publish, effect: allow, actions: [publish], resources: ["topic:sensors/#"], principals: ["group:ops"]}
 *
 * What the file names is created only when absent: the directory (changed live through the API and the CLI) is
 * the truth, the file only gives it a start. One exception, so that an operator who edits the file's password of a
 * user the file created sees it apply at the next start: the password of such a user is set again when it no
 * longer matches the file, unless it was last set through the API or the CLI (`passwordSource`), which wins.
 * Errors name the file and the entry, never a password.
 */
import { FlowError, validateNamespaceLinks, type ExportConfig, type ImportConfig } from '../core/index.js';
import { parseYaml } from '../util/yaml.js';
import { validateName, validateQuotas, type Directory, type Quotas } from './directory.js';
import { validatePolicy, type PolicyDef } from './policy.js';
import { validateUserNkey } from './nkeys.js';
import { MemoryUserStore, readUsersFile, type PasswordHash } from './users.js';

export interface SeedUser {
  username: string;
  /** At least one of password and nkey. */
  password?: string;
  /** A NATS user public NKey (`U...`). */
  nkey?: string;
  groups?: string[];
  namespace?: string;
}

export interface UsersFile {
  users: SeedUser[];
  groups: Array<{ name: string; description?: string }>;
  namespaces: Array<{ name: string; description?: string; quotas: Quotas; exports?: ExportConfig[]; imports?: ImportConfig[] }>;
  policies: Array<Omit<PolicyDef, 'createdAt'>>;
}

const TOP_KEYS = ['users', 'groups', 'namespaces', 'policies'];

function isObject(x: unknown): x is Record<string, unknown> {
  return x !== null && typeof x === 'object' && !Array.isArray(x);
}

/** Runs a validator, turning its INVALID_ARGUMENT into the file's CONFIG_ERROR naming where. */
function checked<T>(where: string, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    throw new FlowError('CONFIG_ERROR', `${where}: ${(e as Error).message}`);
  }
}

function list(doc: Record<string, unknown>, key: string, source: string): unknown[] {
  const v = doc[key];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new FlowError('CONFIG_ERROR', `users file ${source}: ${key} must be a list`);
  return v;
}

/** Parses a users file (see the module comment). Errors name the file and the entry, never a password. */
export function parseUsersFile(text: string, source: string): UsersFile {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    throw new FlowError('CONFIG_ERROR', `users file ${source}: ${(e as Error).message.split('\n')[0]}`);
  }
  if (Array.isArray(doc)) doc = { users: doc };
  if (!isObject(doc) || !Object.keys(doc).some((k) => TOP_KEYS.includes(k))) {
    throw new FlowError('CONFIG_ERROR', `users file ${source}: expected a list of {username, password}, or a mapping of ${TOP_KEYS.join(', ')}`);
  }
  const unknown = Object.keys(doc).filter((k) => !TOP_KEYS.includes(k));
  if (unknown.length > 0) throw new FlowError('CONFIG_ERROR', `users file ${source}: unknown key ${unknown[0]} (expected ${TOP_KEYS.join(', ')})`);

  const namespaces = list(doc, 'namespaces', source).map((e, i) => {
    const where = `users file ${source}: namespace ${i + 1}`;
    if (!isObject(e)) throw new FlowError('CONFIG_ERROR', `${where}: expected {name, description?, quotas?, exports?, imports?}`);
    const name = checked(where, () => validateName('namespace', e.name));
    const quotas = checked(`${where} (${name})`, () => validateQuotas(e.quotas ?? {}));
    const links = checked(`${where} (${name})`, () => validateNamespaceLinks({ exports: e.exports, imports: e.imports }, 'links'));
    return {
      name,
      ...(typeof e.description === 'string' ? { description: e.description } : {}),
      quotas,
      ...(links.exports.length > 0 ? { exports: links.exports } : {}),
      ...(links.imports.length > 0 ? { imports: links.imports } : {}),
    };
  });

  const groups = list(doc, 'groups', source).map((e, i) => {
    const where = `users file ${source}: group ${i + 1}`;
    const g = typeof e === 'string' ? { name: e } : e;
    if (!isObject(g)) throw new FlowError('CONFIG_ERROR', `${where}: expected a name or {name, description?}`);
    const name = checked(where, () => validateName('group', g.name));
    return { name, ...(typeof g.description === 'string' ? { description: g.description } : {}) };
  });

  const policies = list(doc, 'policies', source).map((e, i) => {
    const where = `users file ${source}: policy ${i + 1}${isObject(e) && typeof e.name === 'string' ? ` (${e.name})` : ''}`;
    if (!isObject(e)) throw new FlowError('CONFIG_ERROR', `${where}: expected {name, effect, actions, resources, principals}`);
    const { createdAt: _ignored, ...def } = checked(where, () => validatePolicy({ ...(e as unknown as PolicyDef), source: 'file', createdAt: 0 }));
    return def;
  });

  const seen = new Set<string>();
  const users = list(doc, 'users', source).map((e: unknown, i) => {
    const where = `users file ${source}: entry ${i + 1}`;
    if (!isObject(e)) throw new FlowError('CONFIG_ERROR', `${where}: expected {username, password}`);
    const { username, password, nkey, groups: ug, namespace } = e;
    // A username travels in SASL PLAIN (NUL-separated) and SCRAM (',' and '=' escaped): refuse control characters.
    // eslint-disable-next-line no-control-regex
    if (typeof username !== 'string' || username === '' || /[\u0000-\u001f\u007f]/.test(username)) {
      throw new FlowError('CONFIG_ERROR', `${where}: username must be a non-empty string without control characters`);
    }
    if (password === undefined && nkey === undefined) throw new FlowError('CONFIG_ERROR', `${where} (${username}): a password or an nkey is needed`);
    if (password !== undefined && (typeof password !== 'string' || password === '')) {
      throw new FlowError('CONFIG_ERROR', `${where} (${username}): password must be a non-empty string`);
    }
    if (seen.has(username)) throw new FlowError('CONFIG_ERROR', `${where}: duplicate username ${username}`);
    seen.add(username);
    const u: SeedUser = { username, ...(password === undefined ? {} : { password: password as string }) };
    if (nkey !== undefined) u.nkey = checked(`${where} (${username})`, () => validateUserNkey(nkey));
    if (ug !== undefined) {
      if (!Array.isArray(ug)) throw new FlowError('CONFIG_ERROR', `${where} (${username}): groups must be a list`);
      u.groups = ug.map((g) => checked(`${where} (${username})`, () => validateName('group', g)));
    }
    // A namespace made earlier through the API will do too: checked against the directory when seeding.
    if (namespace !== undefined) u.namespace = checked(`${where} (${username})`, () => validateName('namespace', namespace));
    return u;
  });
  return { users, groups, namespaces, policies };
}

export async function loadUsersFile(path: string): Promise<MemoryUserStore> {
  const users = parseUsersFile(await readUsersFile(path), path).users;
  return MemoryUserStore.fromPasswords(users.flatMap((u) => (u.password === undefined ? [] : [{ username: u.username, password: u.password }])));
}

export interface SeedFigures {
  users: number;
  passwords: number;
  groups: number;
  namespaces: number;
  policies: number;
}

/**
 * Seeds the directory from a parsed users file: namespaces first (users name them), then groups, users, policies;
 * each only when absent. Passwords of users the file created are set again where they no longer match the file
 * (`verify`: the guard's verifier, scrypt off libuv's pool), unless last set through the API. Answers what changed.
 */
export async function seedDirectory(
  directory: Directory,
  file: UsersFile,
  source: string,
  verify: (password: string, stored: PasswordHash) => Promise<'ok' | 'bad' | 'busy'>,
): Promise<SeedFigures> {
  const figures: SeedFigures = { users: 0, passwords: 0, groups: 0, namespaces: 0, policies: 0 };
  for (const n of file.namespaces) if (await directory.seedNamespace(n)) figures.namespaces++;
  for (const g of file.groups) if (await directory.seedGroup(g)) figures.groups++;
  for (const u of file.users) {
    if (u.namespace !== undefined && !directory.namespace(u.namespace)) {
      throw new FlowError('CONFIG_ERROR', `users file ${source}: user ${u.username}: namespace "${u.namespace}" does not exist (add it under namespaces)`);
    }
    if (await directory.seedUser(u)) {
      figures.users++;
      continue;
    }
    const info = directory.user(u.username);
    const rec = directory.lookup(u.username);
    if (!info || !rec || info.source !== 'file') continue;
    // The file's nkey wins for a user the file made (the key is public: nothing to verify).
    if (u.nkey !== undefined && info.nkey !== u.nkey) await directory.setNkey(u.username, u.nkey);
    if (u.password === undefined || directory.passwordSource(u.username) !== 'file') continue;
    let v = await verify(u.password, rec.passwordHash);
    // Nothing else checks passwords at start, but a full queue is still possible in principle: ask once more.
    if (v === 'busy') v = await verify(u.password, rec.passwordHash);
    if (v === 'bad') {
      await directory.setPassword(u.username, u.password, { source: 'file' });
      figures.passwords++;
    }
  }
  for (const p of file.policies) if (await directory.seedPolicy(p)) figures.policies++;
  return figures;
}

/** What a reload of the users file changed beyond seedDirectory's figures. */
export interface ReloadFigures extends SeedFigures {
  policiesUpdated: number;
  policiesRemoved: number;
}

/** A policy as JSON with sorted keys, without createdAt: equal strings, the same policy. */
function policyKey(p: PolicyDef): string {
  const { createdAt: _c, ...rest } = p;
  return JSON.stringify(rest, (_k, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/**
 * The users file read again while the broker runs (SIGHUP): seeded as at start (what is absent is created, file
 * passwords set again), and its policies made the truth for the policies the file made (`source` file): a changed
 * one is replaced, one the file no longer names is removed. Policies made through the API or the CLI, and users,
 * are left alone (a user the file no longer names keeps its account: removing logins is the administrator's call).
 */
export async function reloadDirectory(
  directory: Directory,
  file: UsersFile,
  source: string,
  verify: (password: string, stored: PasswordHash) => Promise<'ok' | 'bad' | 'busy'>,
): Promise<ReloadFigures> {
  const figures: ReloadFigures = { ...(await seedDirectory(directory, file, source, verify)), policiesUpdated: 0, policiesRemoved: 0 };
  const current = new Map(directory.policies.defs().map((p) => [p.name, p]));
  const named = new Set<string>();
  for (const p of file.policies) {
    named.add(p.name);
    const have = current.get(p.name);
    if (have === undefined || have.source !== 'file') continue;
    const want = validatePolicy({ ...p, source: p.source ?? 'file', createdAt: have.createdAt });
    if (policyKey(want) === policyKey(have)) continue;
    await directory.putPolicy(want);
    figures.policiesUpdated++;
  }
  for (const [name, p] of current) {
    if (p.source !== 'file' || named.has(name)) continue;
    await directory.deletePolicy(name);
    figures.policiesRemoved++;
  }
  return figures;
}
