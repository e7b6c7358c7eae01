import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it, before, after } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { DASHBOARD_ROOT, registerDashboard } from '../../src/control/dashboard.js';

/** Every file of the built dashboard, relative to its root ("pages/streams.js"). */
function files(dir = DASHBOARD_ROOT): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [relative(DASHBOARD_ROOT, join(dir, e.name))]));
}

describe('dashboard: static files', () => {
  let app: FastifyInstance;
  before(async () => {
    // The admin API's server calls registerDashboard(app); a bare fastify is enough to test what it adds.
    app = Fastify();
    await registerDashboard(app);
    await app.ready();
  });
  after(() => app.close());

  it('the build copied the files next to the compiled module', () => {
    const list = files();
    for (const f of ['index.html', 'app.js', 'api.js', 'dom.js', 'chart.js', 'style.css', 'pages/overview.js', 'pages/streams.js']) {
      assert.ok(list.includes(f), `${f} missing from ${DASHBOARD_ROOT} (is the copy step in package.json "build"?)`);
    }
  });

  it('serves the page at / and /dashboard/, and redirects /dashboard', async () => {
    for (const url of ['/', '/dashboard/']) {
      const res = await app.inject({ url });
      assert.equal(res.statusCode, 200, url);
      assert.match(String(res.headers['content-type']), /^text\/html/);
      assert.match(res.body, /<title>FlowMQ<\/title>/);
      assert.equal(res.headers['cache-control'], 'no-cache');
    }
    const redirect = await app.inject({ url: '/dashboard' });
    assert.equal(redirect.statusCode, 301);
    assert.equal(redirect.headers.location, '/dashboard/');
  });

  it('serves every file with its type and nothing outside the directory', async () => {
    const types: Record<string, RegExp> = { js: /^(text|application)\/javascript/, css: /^text\/css/, html: /^text\/html/, svg: /^image\/svg\+xml/ };
    for (const f of files()) {
      const res = await app.inject({ url: `/dashboard/${f}` });
      assert.equal(res.statusCode, 200, f);
      assert.match(String(res.headers['content-type']), types[f.split('.').pop()!], f);
      assert.equal(res.body, readFileSync(join(DASHBOARD_ROOT, f), 'utf8'));
    }
    for (const url of ['/dashboard/../dashboard.js', '/dashboard/%2e%2e/dashboard.js', '/dashboard/..%2fdashboard.js', '/dashboard/nope.js']) {
      const res = await app.inject({ url });
      assert.equal(res.statusCode, 404, url);
    }
  });

  it('every script, style and module import the page names exists', async () => {
    const refs = new Set<string>();
    const index = readFileSync(join(DASHBOARD_ROOT, 'index.html'), 'utf8');
    for (const m of index.matchAll(/(?:src|href)="(\/dashboard\/[^"]+)"/g)) refs.add(m[1]);
    for (const f of files().filter((x) => x.endsWith('.js'))) {
      const text = readFileSync(join(DASHBOARD_ROOT, f), 'utf8');
      for (const m of text.matchAll(/^import [^;]*? from '([^']+)';/gms)) {
        refs.add(new URL(m[1], `http://x/dashboard/${f}`).pathname);
      }
    }
    assert.ok(refs.size > 10, `only ${refs.size} references found`);
    for (const ref of refs) {
      const res = await app.inject({ url: ref });
      assert.equal(res.statusCode, 200, `${ref} is referenced but not served`);
    }
  });

  it('loads nothing from elsewhere and has no inline script (the CSP allows only script-src self)', () => {
    for (const f of files()) {
      const text = readFileSync(join(DASHBOARD_ROOT, f), 'utf8');
      // SVG's xmlns is a name, not a download.
      const urls = [...text.matchAll(/(?:https?:)?\/\/[a-z0-9.-]+\.[a-z]{2,}[^\s'")]*/gi)].map((m) => m[0]).filter((u) => !u.startsWith('http://www.w3.org/'));
      assert.deepEqual(urls, [], `${f} names another site`);
      if (f.endsWith('.html')) {
        assert.doesNotMatch(text, /<script(?![^>]*\bsrc=)[^>]*>/i, `${f} has an inline script`);
        assert.doesNotMatch(text, /\son[a-z]+=/i, `${f} has an inline event handler`);
        assert.doesNotMatch(text, /\sstyle=/i, `${f} has an inline style`);
      }
      if (f.endsWith('.js')) assert.doesNotMatch(text, /\.innerHTML\s*=|insertAdjacentHTML|\beval\(|new Function\(/, `${f} builds markup from strings`);
    }
  });
});
