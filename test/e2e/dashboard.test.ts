/**
 * The web dashboard in a real browser: Debian's chromium (/usr/bin/chromium, headless; `--no-sandbox` as root,
 * as in CI) driven by playwright-core against the real bin/flowmq. It logs in through the page, creates a stream
 * bound to `dash/#`, publishes with MQTT.js and sees the message in the stream's message browser; a page without a
 * session shows the login form and the API refuses calls without the session.
 *
 * FLOWMQ_SCREENSHOTS=<dir> also saves screenshots of the main pages there (docs/screenshots/ are made so:
 * `FLOWMQ_SCREENSHOTS=docs/screenshots node --test dist/test/e2e/dashboard.test.js`).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import amqp from 'amqplib';
import kafkajsPkg from 'kafkajs';
import mqtt from 'mqtt';
import { chromium, type Browser, type Page } from 'playwright-core';
import { eventually, FlowmqProcess } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ADMIN = { username: 'admin', password: 'dash-board-pass' };

describe('e2e: dashboard in chromium', () => {
  let broker: FlowmqProcess;
  let browser: Browser;
  /** Console errors and uncaught exceptions of every page (a CSP refusal shows up here). */
  const problems: string[] = [];

  const newPage = async (): Promise<Page> => {
    const context = await browser.newContext({ viewport: { width: 1360, height: 860 } });
    const page = await context.newPage();
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('console', (m) => {
      // Refusals this test provokes on purpose (no session: 401; no CSRF token: 403) are logged by the browser.
      if (m.type() === 'error' && !/Failed to load resource: the server responded with a status of 40[13]/.test(m.text()))
        problems.push(`console: ${m.text()}`);
    });
    return page;
  };

  const login = async (page: Page) => {
    await page.goto(`${broker.http}/`);
    await page.locator('#login').waitFor();
    await page.fill('#login-username', ADMIN.username);
    await page.fill('#login-password', ADMIN.password);
    await page.click('#login-submit');
    await page.locator('#nav').waitFor({ state: 'visible' });
  };

  /** No page shows a value it failed to format ("null", "undefined", "NaN", "[object Object]"). */
  const assertClean = async (page: Page) => {
    const text = await page.innerText('#view');
    assert.doesNotMatch(text, /\bnull\b|\bundefined\b|\bNaN\b|\[object Object\]/, text);
  };

  before(async () => {
    assert.ok(existsSync(CHROMIUM), `${CHROMIUM} missing (apt-get install chromium)`);
    // No KIP-134 wait for the two one-member Kafka groups of the screenshots (3 s each otherwise).
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0'] });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      // Chromium's sandbox cannot start as root (CI containers run as root).
      args: process.getuid?.() === 0 ? ['--no-sandbox'] : [],
    });
  });

  after(async () => {
    await browser?.close();
    await broker?.stop();
    broker?.cleanup();
  });

  it('bootstrap: with no user yet, the page on the broker machine creates the first one, then asks to sign in', async () => {
    const page = await newPage();
    await page.goto(`${broker.http}/`);
    await page.locator('#nav').waitFor({ state: 'visible' });
    assert.equal(await page.textContent('#who-name'), 'bootstrap admin (no users yet)');
    await page.click('#nav a[data-page="users"]');
    await page.locator('#user-create').waitFor();
    await page.fill('#user-name', ADMIN.username);
    await page.fill('#user-password', ADMIN.password);
    await page.fill('#user-groups', 'admins');
    await page.click('#user-create button[type="submit"]');
    // The list reloads after the creation, and that call is no longer let in: the page asks for a login.
    await page.locator('#login').waitFor();
    broker.credentials = ADMIN;
    assert.equal(await page.textContent('#login-error'), 'The first user exists now: sign in as an administrator.');
    assert.equal(await page.locator('#flash.error').isVisible(), false);
    const admin = await broker.api<{ groups: string[] }>('GET', `/api/v1/users/${ADMIN.username}`);
    assert.deepEqual(admin.groups, ['admins']);
    await page.context().close();
  });

  it('without a session: the page shows the login form and the API refuses calls', async () => {
    const page = await newPage();
    await page.goto(`${broker.http}/`);
    await page.locator('#login').waitFor();
    assert.equal(await page.locator('#nav').isVisible(), false);
    // credentials 'omit': the browser has no session here anyway, and the 401's Basic challenge would otherwise
    // make it wait for its own password dialog.
    const statuses = await page.evaluate(async () => {
      const get = await fetch('/api/v1/streams', { credentials: 'omit' });
      const post = await fetch('/api/v1/streams', {
        method: 'POST',
        credentials: 'omit',
        headers: { 'content-type': 'application/json' },
        body: '{"name":"sneaky"}',
      });
      return [get.status, post.status];
    });
    assert.deepEqual(statuses, [401, 401]);
    // A wrong password is refused on the form, and nothing is let in.
    await page.fill('#login-username', ADMIN.username);
    await page.fill('#login-password', 'wrong');
    await page.click('#login-submit');
    await page.locator('#login-error').waitFor({ state: 'visible' });
    assert.equal(await page.textContent('#login-error'), 'Invalid username or password.');
    assert.equal(await page.locator('#nav').isVisible(), false);
    await page.context().close();
  });

  it('logs in, creates a stream bound to dash/#, and shows a message published with MQTT.js', async () => {
    const page = await newPage();
    await login(page);
    assert.equal(await page.textContent('#who-name'), ADMIN.username);

    await page.click('#nav a[data-page="streams"]');
    await page.locator('#stream-create').waitFor();
    await page.fill('#stream-name', 'dash-stream');
    await page.fill('#stream-bindings', 'dash/#');
    await page.click('#stream-create button[type="submit"]');
    await page.locator('tr[data-stream="dash-stream"]').waitFor();
    const created = await broker.api<{ bindings: string[]; partitions: number }>('GET', '/api/v1/streams/dash-stream');
    assert.deepEqual(created.bindings, ['dash/#']);
    await assertClean(page);

    await page.click('tr[data-stream="dash-stream"] a');
    await page.locator('#browse-results').waitFor();
    await page.locator('#browse-results p.empty').waitFor();

    const client = await mqtt.connectAsync(broker.mqttUrl, { ...ADMIN, clientId: 'dash-publisher', reconnectPeriod: 0 });
    try {
      await client.publishAsync('dash/x', 'hello from MQTT.js', { qos: 1 });
    } finally {
      await client.endAsync();
    }
    await page.click('button:text-is("Latest")');
    const row = page.locator('#browse-results tr[data-offset="0"]');
    await row.waitFor();
    assert.match(await row.innerText(), /hello from MQTT\.js/);
    // The browser shows a null key as a muted "null": that one is meant.
    assert.equal(await row.locator('td').nth(2).innerText(), 'null');

    // With the session cookie, a state-changing call without the session's CSRF token is refused.
    const csrf = await page.evaluate(
      async () => (await fetch('/api/v1/streams/dash-stream', { method: 'DELETE', headers: { 'content-type': 'application/json' } })).status,
    );
    assert.equal(csrf, 403);
    await page.context().close();
  });

  it('adds a user, and adds, edits and deletes a policy through the forms', async () => {
    const page = await newPage();
    page.on('dialog', (d) => void d.accept());
    await login(page);
    await page.goto(`${broker.http}/#/users`);
    await page.locator('#user-create').waitFor();
    await page.fill('#user-name', 'viewer');
    await page.fill('#user-password', 'viewer-pass');
    await page.fill('#user-groups', 'readers');
    await page.click('#user-create button[type="submit"]');
    await page.locator('tr[data-user="viewer"]').waitFor();
    const viewer = await broker.api<{ username: string; groups: string[] }>('GET', '/api/v1/users/viewer');
    assert.deepEqual(viewer.groups, ['readers']);

    await page.goto(`${broker.http}/#/policies`);
    await page.locator('#policy-form').waitFor();
    await page.fill('#policy-name', 'readers-dash');
    await page.check('#policy-form input[data-action="subscribe"]');
    await page.fill('#policy-resources', 'topic:dash/#\nstream:dash-*');
    await page.fill('#policy-principals', 'group:readers');
    await page.click('#policy-form button[type="submit"]');
    await page.locator('tr[data-policy="readers-dash"]').waitFor();
    type Policy = { effect: string; actions: string[]; resources: string[]; principals: string[] };
    const added = await broker.api<Policy>('GET', '/api/v1/policies/readers-dash');
    assert.deepEqual(added, { ...added, effect: 'allow', actions: ['subscribe'], resources: ['topic:dash/#', 'stream:dash-*'], principals: ['group:readers'] });

    await page.click('tr[data-policy="readers-dash"] button:text-is("Edit")');
    assert.equal(await page.inputValue('#policy-name'), 'readers-dash');
    await page.check('#policy-form input[data-action="describe"]');
    await page.click('#policy-form button[type="submit"]');
    await eventually(async () => (await broker.api<Policy>('GET', '/api/v1/policies/readers-dash')).actions.length === 2, 10_000, 'the edited policy');
    assert.deepEqual((await broker.api<Policy>('GET', '/api/v1/policies/readers-dash')).actions, ['subscribe', 'describe']);

    await page.click('tr[data-policy="readers-dash"] button:text-is("Delete")');
    await page.locator('tr[data-policy="readers-dash"]').waitFor({ state: 'detached' });
    const gone = await fetch(`${broker.http}/api/v1/policies/readers-dash`, {
      headers: { authorization: `Basic ${Buffer.from(`${ADMIN.username}:${ADMIN.password}`).toString('base64')}` },
    });
    assert.equal(gone.status, 404);
    await page.context().close();
  });

  it('draws live rates on the overview and logs out', async () => {
    const page = await newPage();
    await login(page);
    await page.goto(`${broker.http}/#/overview`);
    await page.locator('#chart-messages').waitFor();
    await eventually(async () => (await page.textContent('#stat-streams')) === '1', 10_000, 'the stream count');
    // A rate needs two samples: the chart's label names the latest rate once the second one arrived.
    await eventually(async () => /^messages per second: in \d/.test((await page.getAttribute('#chart-messages', 'aria-label')) ?? ''), 15_000, 'a rate sample');
    assert.match((await page.textContent('#stat-connections')) ?? '', /^\d+$/);
    await assertClean(page);
    for (const name of ['connections', 'queues', 'groups', 'users', 'policies', 'namespaces', 'health']) {
      await page.click(`#nav a[data-page="${name}"]`);
      await page.locator(`#view .page[data-page="${name}"] h1`).waitFor();
      await page.locator('#view table, #view p.empty').first().waitFor();
      const text = await page.innerText('#view');
      assert.doesNotMatch(text, /Could not load this page/, `${name}: ${text}`);
      assert.doesNotMatch(text, /\bundefined\b|\bNaN\b|\[object Object\]/, `${name}: ${text}`);
      // Usage per namespace: traffic and bytes stored (hot tier and objects).
      if (name === 'namespaces') assert.match(text, /stored \d[^\n]*\(hot \d[^)]*objects \d/, text);
    }

    // The session ends on the server, not only in this browser: its cookie no longer opens the API.
    const cookie = (await page.context().cookies()).find((c) => c.name === 'flowmq_session');
    assert.ok(cookie, 'the login set the session cookie');
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, 'Strict');
    const withCookie = () => fetch(`${broker.http}/api/v1/session`, { headers: { cookie: `flowmq_session=${cookie.value}` } }).then((r) => r.status);
    assert.equal(await withCookie(), 200);
    await page.click('#logout');
    await page.locator('#login').waitFor();
    assert.equal(await withCookie(), 401);
    await page.context().close();
  });

  it('showed no script error and no CSP refusal', async () => {
    const dir = process.env.FLOWMQ_SCREENSHOTS;
    if (dir) await screenshots(dir);
    assert.deepEqual(problems, []);
  });

  /** The screenshots in docs/screenshots/ (docs/operations.md): some traffic and definitions, then each main page. */
  async function screenshots(dir: string): Promise<void> {
    mkdirSync(dir, { recursive: true });
    await broker.api('POST', '/api/v1/streams', { name: 'factory-telemetry', partitions: 3, bindings: ['factory/+/telemetry'], retention: '7d' });
    await broker.api('POST', '/api/v1/queues', { name: 'jobs', durable: true });
    const amqpConn = await amqp.connect(`amqp://${ADMIN.username}:${ADMIN.password}@127.0.0.1:${broker.ports.amqp}`);
    const ch = await amqpConn.createConfirmChannel();
    for (let i = 0; i < 42; i++) ch.sendToQueue('jobs', Buffer.from(JSON.stringify({ job: i })), { persistent: true });
    await ch.waitForConfirms();
    await amqpConn.close();
    await broker.api('POST', '/api/v1/users', { username: 'sensor-gw', password: 'gateway-pass', groups: ['devices'] });
    await broker.api('POST', '/api/v1/groups', { name: 'devices', description: 'field gateways' });
    await broker.api('POST', '/api/v1/policies', {
      name: 'devices-publish',
      effect: 'allow',
      actions: ['publish'],
      resources: ['topic:factory/+/telemetry'],
      principals: ['group:devices'],
      description: 'gateways publish telemetry',
    });
    await broker.api('POST', '/api/v1/policies', {
      name: 'no-admin-topics',
      effect: 'deny',
      actions: ['*'],
      resources: ['topic:$admin/#'],
      principals: ['everyone'],
    });
    await broker.api('POST', '/api/v1/namespaces', { name: 'tenant-a', description: 'first tenant', quotas: { maxConnections: 100, publishRate: 500 } });
    const clients = await Promise.all(
      ['line-1', 'line-2', 'line-3'].map((id) => mqtt.connectAsync(broker.mqttUrl, { ...ADMIN, clientId: id, reconnectPeriod: 0 })),
    );
    const monitor = await mqtt.connectAsync(broker.mqttUrl, { ...ADMIN, clientId: 'monitor', reconnectPeriod: 0 });
    await monitor.subscribeAsync('factory/line-1/#');
    let n = 0;
    const traffic = setInterval(() => {
      clients.forEach((c, i) => {
        for (let k = 0; k < 5 + ((n * (i + 1)) % 7); k++)
          c.publish(`factory/line-${i + 1}/telemetry`, JSON.stringify({ seq: n, temp: 20 + ((n * 7 + i) % 9) }));
      });
      n++;
    }, 200);
    // Two Kafka consumer groups on the telemetry stream: one reading along, one that read a while and left (lag).
    const kafka = new Kafka({
      brokers: [broker.kafka],
      clientId: 'dashboards',
      logLevel: logLevel.NOTHING,
      sasl: { mechanism: 'plain', ...ADMIN },
      retry: { retries: 8, initialRetryTime: 100 },
    });
    const live = kafka.consumer({ groupId: 'alerting' });
    const batch = kafka.consumer({ groupId: 'nightly-export' });
    for (const c of [live, batch]) {
      await c.connect();
      await c.subscribe({ topics: ['factory-telemetry'], fromBeginning: true });
      await c.run({ autoCommitInterval: 100, eachMessage: async () => undefined });
    }
    await eventually(
      async () => (await broker.api<{ items: Array<{ name: string; lag: number | null }> }>('GET', '/api/v1/consumer-groups')).items.length === 2,
      20_000,
      'two groups',
    );
    await new Promise((r) => setTimeout(r, 3000));
    await batch.disconnect();
    try {
      const page = await newPage();
      await login(page);
      const shot = async (hash: string, file: string, ready: string) => {
        await page.goto(`${broker.http}/${hash}`);
        await page.locator(ready).first().waitFor();
        await page.waitForTimeout(300);
        await page.screenshot({ path: join(dir, file), fullPage: true });
      };
      await page.goto(`${broker.http}/#/overview`);
      await page.waitForTimeout(25_000); // a dozen samples for the charts
      await page.screenshot({ path: join(dir, 'overview.png'), fullPage: true });
      // Without a protocol's client registry (an older broker) the table is empty: shoot it anyway.
      await shot('#/connections', 'connections.png', 'tr[data-client], #view p.empty');
      await shot('#/streams', 'streams.png', 'tr[data-stream]');
      await shot('#/streams/factory-telemetry', 'stream-detail.png', '#browse-results tr[data-offset]');
      await shot('#/queues', 'queues.png', 'tr[data-queue]');
      await shot('#/groups', 'consumer-groups.png', 'tr[data-group]');
      await shot('#/groups/alerting', 'consumer-group.png', 'h1');
      await shot('#/policies', 'policies.png', 'tr[data-policy]');
      await shot('#/users', 'users.png', 'tr[data-user]');
      await shot('#/health', 'health.png', 'dl.kv');
      await page.goto(`${broker.http}/`);
      await page.click('#logout');
      await page.locator('#login').waitFor();
      await page.screenshot({ path: join(dir, 'login.png') });
      await page.context().close();
    } finally {
      clearInterval(traffic);
      await live.disconnect();
      await Promise.all([...clients, monitor].map((c) => c.endAsync()));
    }
  }
});
