#!/usr/bin/env node
// Writes the generated references into docs/ (between their markers) from the built tables: `npm run docs`.
// `node scripts/docs.mjs --check` only says which parts differ (exit 1), as test/cli/reference.test.ts does.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

const ROOT = resolve(dirname(new URL(import.meta.url).pathname), '..');
const { GENERATED, withPart } = await import(join(ROOT, 'dist/src/cli/reference.js'));
const check = process.argv.includes('--check');
let stale = 0;
for (const file of new Set(GENERATED.map((p) => p.file))) {
  const path = join(ROOT, file);
  const before = readFileSync(path, 'utf8');
  let after = before;
  for (const part of GENERATED.filter((p) => p.file === file)) after = withPart(after, part.name, part.render());
  if (after === before) continue;
  stale++;
  if (check) console.log(`${file}: out of date (npm run docs)`);
  else {
    writeFileSync(path, after);
    console.log(`wrote ${file}`);
  }
}
process.exit(check && stale > 0 ? 1 : 0);
