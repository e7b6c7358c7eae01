#!/usr/bin/env node
/**
 * The production entry of `bin/flowmq`: dist/bundle/main.js, the compiled modules of dist/src bundled by esbuild
 * (run by `npm run build` after tsc). Why: a broker start loaded ~370 modules of dist/src one by one through Node's
 * ES module loader, whose resolving, reading and linking (not the code itself) was most of the ~0.3 s to import
 * broker.js (CPU profile: file handles, stats, URL work, package scope lookups per module); one file with a few
 * chunks for the dynamic imports loads in about half that (issue 28: a restarted broker accepts within 300 ms).
 *
 * Nothing changes in what runs: npm packages stay external (loaded from node_modules as before), dynamic imports
 * stay dynamic (chunks, `splitting`), identifiers are not minified (names stay as written, but for a top-level name
 * two modules share, which esbuild suffixes: nothing reads our functions' or classes' `.name`; `keepNames` would keep
 * them by a defineProperty on every function made, the per-connection closures too: +0.55 KB of heap per idle MQTT
 * connection, test/e2e/idle-memory), and each
 * module's `import.meta.url` is replaced by the URL of its own file in dist/src, so that what a module finds beside
 * itself (worker threads, the dashboard's files, package.json) is found where tsc put it. dist/src stays complete:
 * the worker threads, the dashboard and the tests load it as before.
 *
 * Without esbuild installed (a production install without dev dependencies) no bundle is made and bin/flowmq runs
 * dist/src/cli/main.js, as it did before the bundle.
 */
import { rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(ROOT, 'dist/bundle');
const SRC = join(ROOT, 'dist/src');

let esbuild;
try {
  esbuild = await import('esbuild');
} catch (e) {
  if (e?.code !== 'ERR_MODULE_NOT_FOUND') throw e;
  rmSync(OUT, { recursive: true, force: true });
  console.warn('bundle: esbuild is not installed (npm ci installs it): bin/flowmq runs dist/src unbundled, ~0.15 s slower to start');
  process.exit(0);
}

/** Each module's own `import.meta.url`: its file in dist/src, relative to the chunk that ends up holding it. */
const ownUrl = {
  name: 'own-import-meta-url',
  setup(build) {
    build.onLoad({ filter: /\.js$/ }, async (args) => {
      const text = await readFile(args.path, 'utf8');
      if (!args.path.startsWith(SRC) || !text.includes('import.meta.url')) return { contents: text, loader: 'js' };
      // Every chunk is written directly in dist/bundle, so the path from there is the same for all of them.
      const rel = relative(OUT, args.path).split('\\').join('/');
      const url = `new URL(${JSON.stringify(rel)}, import.meta.url).href`;
      return { contents: text.replaceAll('import.meta.url', url), loader: 'js' };
    });
  },
};

rmSync(OUT, { recursive: true, force: true });
await esbuild.build({
  entryPoints: { main: join(SRC, 'cli/main.js') },
  outdir: OUT,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  packages: 'external',
  minifyWhitespace: true,
  minifySyntax: true,
  chunkNames: 'chunk-[hash]',
  logLevel: 'warning',
  plugins: [ownUrl],
});
