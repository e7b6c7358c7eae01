/**
 * docs/kafka.md's API table against what ApiVersions advertises: every API a route serves (with SASL and access
 * control, so all of them) has a row, every row names an API that is served, and each row's version range and first
 * flexible version are the codec's. A codec moved to a new version without the table (or the other way round) fails
 * here.
 *
 * A row: `| Name (key), Other (key) | ranges | notes |`; ranges `min-max` (or one number) separated by `,` or `/`,
 * one per API or one for all, then optionally `(F+ flexible)` with one first flexible version per API (or one for
 * all; `-` for an API that has none). No parenthesis: none of the row's APIs has a flexible version.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { KAFKA_ROUTES } from '../../../src/protocols/kafka/index.js';

const ROOT = join(fileURLToPath(import.meta.url), '../../../../..');

interface DocRange {
  name: string;
  min: number;
  max: number;
  /** First flexible version; Infinity for none. */
  flexible: number;
}

/** The API rows of docs/kafka.md's first table (the one headed "API (key)"), by API key. */
function documented(): Map<number, DocRange> {
  const lines = readFileSync(join(ROOT, 'docs/kafka.md'), 'utf8').split('\n');
  const start = lines.findIndex((l) => l.startsWith('| API (key) |'));
  assert.ok(start >= 0, 'docs/kafka.md has no "| API (key) |" table');
  const out = new Map<number, DocRange>();
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    const [apis, versions] = line
      .split('|')
      .slice(1, 3)
      .map((s) => s.trim());
    const keys = [...apis.matchAll(/([A-Za-z]+) \((\d+)\)/g)].map((m) => ({ name: m[1], key: Number(m[2]) }));
    assert.ok(keys.length > 0, `no "Name (key)" in the row: ${line}`);
    const m = /^([\d\s,/-]+?)\s*(?:\(([^)]*)\))?$/.exec(versions);
    assert.ok(m, `versions cell not "ranges (F+ flexible)": ${versions}`);
    const ranges = m[1].split(/[,/]/).map((r) => {
      const [lo, hi] = r.trim().split('-').map(Number);
      return { min: lo, max: hi ?? lo };
    });
    let flex: number[] = keys.map(() => Infinity);
    if (m[2] !== undefined) {
      const f = /^(.*) flexible$/.exec(m[2].trim());
      assert.ok(f, `parenthesis of the versions cell not "(F+ flexible)": ${versions}`);
      flex = f[1].split(/[,/]/).map((x) => {
        const t = x.trim();
        if (t === '-') return Infinity;
        assert.match(t, /^\d+\+$/, `first flexible version "${t}" in ${versions}`);
        return Number(t.slice(0, -1));
      });
    }
    for (const [what, list] of [
      ['ranges', ranges.length],
      ['flexible versions', flex.length],
    ] as const) {
      assert.ok(list === 1 || list === keys.length, `${list} ${what} for ${keys.length} APIs: ${line}`);
    }
    keys.forEach((k, i) => {
      assert.ok(!out.has(k.key), `API key ${k.key} in two rows`);
      const r = ranges.length === 1 ? ranges[0] : ranges[i];
      out.set(k.key, { name: k.name, min: r.min, max: r.max, flexible: flex.length === 1 ? flex[0] : flex[i] });
    });
  }
  return out;
}

describe('docs/kafka.md API table', () => {
  it('lists every advertised API with its version range and first flexible version, and nothing else', () => {
    const docs = documented();
    const served = new Map(KAFKA_ROUTES.map((r) => [r.codec.apiKey, r.codec]));
    for (const [key, c] of served) {
      const d = docs.get(key);
      assert.ok(d, `${c.name} (${key}) is advertised but not in docs/kafka.md's API table`);
      assert.equal(d.name, c.name, `API key ${key}`);
      assert.deepEqual(
        [d.min, d.max],
        [c.minVersion, c.maxVersion],
        `${c.name} (${key}): docs say ${d.min}-${d.max}, ApiVersions ${c.minVersion}-${c.maxVersion}`,
      );
      const flex = c.firstFlexibleVersion > c.maxVersion ? Infinity : c.firstFlexibleVersion;
      assert.equal(d.flexible, flex, `${c.name} (${key}): first flexible version`);
    }
    for (const [key, d] of docs) assert.ok(served.has(key), `docs/kafka.md lists ${d.name} (${key}), which no route serves`);
  });
});
