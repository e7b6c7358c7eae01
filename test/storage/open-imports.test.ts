/**
 * An embedded broker's start loads no service driver: the PostgreSQL driver (pg) and the AWS SDK's S3 client are
 * imported only when the configuration names them (src/storage/open.ts, src/cluster/open-pg-store.ts), and fastify
 * only when the admin API starts, after the protocol listeners (src/control/admin-api.ts). They were ~150 ms of the
 * ~290 ms a broker spent loading modules before it listened, and a restarted broker's clients reconnect within a
 * few hundred milliseconds. Nor does it load, before its listeners are up, the packages only some brokers use: the
 * YAML parser (config and users files), Ajv (the cluster channel), prom-client (made after the listeners), ws (the
 * WebSocket listeners) and the snappy, LZ4 and zstd codecs (compressed Kafka batches): ~105 ms more; nor nkeys.js
 * (NATS NKey and JWT logins: 50-75 ms at load ~10). All are loaded with their first use. This walks the static imports from the CLI's entry and from the broker module through the
 * compiled tree and fails on any path that reaches them, naming it.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

const DIST_SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');
const SERVICE_DRIVERS = new Set(['pg', '@aws-sdk/client-s3', 'fastify', 'yaml', 'ajv', 'prom-client', 'ws', 'snappyjs', 'lz4js', 'fzstd', 'nkeys.js']);

/** Static `import … from` / `export … from` and bare `import '…'` specifiers of a compiled module (not `import(…)`). */
function staticImports(file: string): string[] {
  const src = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of src.matchAll(/^\s*(?:import|export)\s(?:[^;'"]*?\sfrom\s)?['"]([^'"]+)['"]/gm)) out.push(m[1]);
  return out;
}

/** Paths from `entry` to each service driver it imports statically, as "a.js → b.js → pg". */
function driverPaths(entry: string): string[] {
  const parent = new Map<string, string | null>([[entry, null]]);
  const queue = [entry];
  const found: string[] = [];
  const chain = (f: string): string[] => {
    const c: string[] = [];
    for (let x: string | null = f; x !== null; x = parent.get(x) ?? null) c.unshift(relative(DIST_SRC, x));
    return c;
  };
  while (queue.length > 0) {
    const f = queue.shift()!;
    for (const spec of staticImports(f)) {
      if (spec.startsWith('.')) {
        const p = resolve(dirname(f), spec);
        if (!parent.has(p) && existsSync(p)) {
          parent.set(p, f);
          queue.push(p);
        }
      } else if (SERVICE_DRIVERS.has(spec)) found.push([...chain(f), spec].join(' → '));
    }
  }
  return found;
}

describe('the start path of an embedded broker', () => {
  for (const entry of ['cli/main.js', 'cli/commands/start.js', 'broker.js']) {
    it(`${entry} imports no service driver, fastify nor a package loaded on first use statically`, () => {
      const file = join(DIST_SRC, entry);
      assert.ok(existsSync(file), `${file} is built`);
      assert.deepEqual(driverPaths(file), []);
    });
  }

  it('the walk finds a driver where one is imported (the PostgreSQL metastore imports pg)', () => {
    const paths = driverPaths(join(DIST_SRC, 'storage/metastore/postgres.js'));
    assert.ok(
      paths.some((p) => p.endsWith('→ pg')),
      paths.join('\n'),
    );
  });
});
