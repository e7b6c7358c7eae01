// Points the jsr: imports of a nats.js source tree at local source trees (JSR is not reachable from every machine),
// by rewriting the deno.json files of that tree in place: run it on a scratch copy only.
// Usage: node importmap.mjs <nats.js copy> <package tree>...
// A package tree is a directory with a deno.json naming a JSR package (nkeys.js, nuid.js, jwt.js) or a directory of
// such packages (Deno's standard library: assert/, async/, internal/...). Each jsr:@scope/name[@version][/sub] import
// of a package found locally becomes the file its `exports` names; imports of packages found nowhere (build and
// release tools' @std/cli, @david/dax...; https: modules) are dropped and listed, so that a test needing one fails
// with "Import ... not a dependency" rather than the run reaching for the network. Every export of every local
// package is added to the root import map too: the local packages import each other by bare name (@std/internal/...).
import { readFileSync, writeFileSync, existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [tree, ...pkgTrees] = process.argv.slice(2);
if (!tree || pkgTrees.length === 0) {
  console.error('usage: node importmap.mjs <nats.js copy> <package tree>...');
  process.exit(2);
}
const readJson = (f) => JSON.parse(readFileSync(f, 'utf8'));

/** name -> { version, exports: { '.': fileURL, './sub': fileURL }, imports } */
const local = new Map();
function addPackage(dir) {
  const f = join(dir, 'deno.json');
  if (!existsSync(f)) return false;
  const j = readJson(f);
  if (typeof j.name !== 'string' || !j.exports) return false;
  const ex = typeof j.exports === 'string' ? { '.': j.exports } : j.exports;
  const exports = {};
  for (const [k, v] of Object.entries(ex)) exports[k] = pathToFileURL(resolve(dir, v)).href;
  local.set(j.name, { version: j.version, exports, imports: j.imports ?? {} });
  return true;
}
for (const t of pkgTrees) {
  if (addPackage(t)) continue;
  for (const d of readdirSync(t, { withFileTypes: true })) if (d.isDirectory()) addPackage(join(t, d.name));
}

const root = join(tree, 'deno.json');
const rootJson = readJson(root);
const members = new Set(
  (rootJson.workspace ?? []).map((m) => {
    const j = readJson(join(tree, m, 'deno.json'));
    return j.name;
  }),
);

const dropped = new Set();
function rewrite(imports) {
  const out = {};
  for (const [k, v] of Object.entries(imports ?? {})) {
    const m = /^jsr:(@[^/@]+\/[^/@]+)(?:@[^/]*)?(\/.*)?$/.exec(v);
    if (m && local.has(m[1])) {
      const exports = local.get(m[1]).exports;
      if (m[2]) {
        if (!exports[`.${m[2]}`]) throw new Error(`${v}: no such export in the local ${m[1]}`);
        out[k] = exports[`.${m[2]}`];
      } else {
        // The bare name and its subpaths (`@std/fmt` has no `.`, only `./colors`...).
        for (const [sub, url] of Object.entries(exports)) out[sub === '.' ? k : `${k}${sub.slice(1)}`] = url;
      }
    } else if ((m && !members.has(m[1])) || /^https?:/.test(v)) {
      dropped.add(`${k} (${v})`);
    } else {
      out[k] = v;
    }
  }
  return out;
}

for (const m of ['.', ...(rootJson.workspace ?? [])]) {
  const f = join(tree, m, 'deno.json');
  const j = m === '.' ? rootJson : readJson(f);
  j.imports = rewrite(j.imports);
  if (m === '.') {
    for (const [name, p] of local) {
      for (const [sub, url] of Object.entries(p.exports)) j.imports[sub === '.' ? name : `${name}${sub.slice(1)}`] ??= url;
      // The local packages' own non-jsr imports (nkeys.js's npm:tweetnacl).
      for (const [k, v] of Object.entries(p.imports)) if (!v.startsWith('jsr:')) j.imports[k] ??= v;
    }
  }
  writeFileSync(f, JSON.stringify(j, null, 2) + '\n');
}
const names = [...local].map(([n, p]) => `${n}@${p.version}`);
const std = names.filter((n) => n.startsWith('@std/'));
console.log(
  `local packages: ${std.length} of @std (${std.filter((n) => /^@std\/(assert|async|bytes|fmt|io|path)@/.test(n)).join(' ')}...), ${names.filter((n) => !n.startsWith('@std/')).join(' ')}`,
);
if (dropped.size) console.log(`dropped (not available here): ${[...dropped].join(', ')}`);
