// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * The cluster harness itself, and what an operator sees of membership: three `bin/flowmq --cluster` processes on
 * one PostgreSQL and one s3rver form one cluster (GET /api/v1/cluster on any of them lists three live brokers with
 * their endpoints, `flowmq cluster status` prints them), a broker killed with kill -9 is shown dead once its lease
 * expired, HAProxy in front reaches a live broker, and --cluster with the embedded backends is refused with a clear
 * message.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import mqtt from 'mqtt';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startCluster, startRefused, type TestCluster } from '../helpers/cluster.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

describe('cluster harness: three brokers, membership, kill -9', { timeout: 90_000 }, () => {
  let c: TestCluster;
  let browser: Browser | null = null;
  let page: Page | null = null;
  before(async () => {
    c = await startCluster({ brokers: 3, leaseMs: 1500 });
  });
  after(async () => {
    await browser?.close();
    await c?.close();
  });

  it('every broker sees the same three live brokers, each with its endpoints', async () => {
    for (const b of c.brokers) {
      const s = await c.status({ via: b.id });
      assert.equal(s.enabled, true);
      assert.equal(s.broker, b.id);
      assert.equal(s.leaseMs, 1500);
      assert.deepEqual(
        s.brokers.map((x) => [x.id, x.alive, x.leaving]),
        [
          [1, true, false],
          [2, true, false],
          [3, true, false],
        ],
      );
      const me = s.brokers.find((x) => x.self);
      assert.equal(me?.id, b.id);
      // The advertised endpoints are the ports the broker really bound.
      assert.equal(me?.endpoints.mqtt?.port, b.proc.ports.mqtt);
      assert.equal(me?.endpoints.kafka?.port, b.proc.ports.kafka);
      assert.equal(me?.endpoints.http?.port, b.proc.ports.http);
      assert.ok((me?.endpoints.cluster?.port ?? 0) > 0, 'the channel endpoint is advertised');
      assert.ok(s.brokers.every((x) => x.leaseRemainingMs > 0));
    }
  });

  it('`flowmq cluster status` prints the brokers (table and --json)', async () => {
    const t = await c.cli(['cluster', 'status']);
    assert.equal(t.code, 0, t.stderr);
    assert.match(t.stdout, /BROKER/);
    for (const id of [1, 2, 3]) assert.match(t.stdout, new RegExp(`^\\*?${id}\\s+alive`, 'm'));
    const j = await c.cli(['cluster', 'status', '--json']);
    assert.equal(j.code, 0, j.stderr);
    const parsed = JSON.parse(j.stdout) as { enabled: boolean; brokers: Array<{ id: number; alive: boolean }> };
    assert.equal(parsed.enabled, true);
    assert.deepEqual(
      parsed.brokers.map((b) => b.id),
      [1, 2, 3],
    );
  });

  it("the dashboard's Cluster page shows the three brokers (chromium)", async () => {
    assert.ok(existsSync(CHROMIUM), `${CHROMIUM} missing (apt-get install chromium)`);
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
    page = await (await browser.newContext()).newPage();
    // No user exists: the page on the broker's machine acts as the bootstrap administrator.
    await page.goto(`${c.broker(1).http}/#/cluster`);
    await page.locator('tr[data-broker]').nth(2).waitFor({ timeout: 15_000 });
    const states = await page.$$eval('tr[data-broker]', (rows) => rows.map((r) => [r.getAttribute('data-broker'), r.getAttribute('data-state')]));
    assert.deepEqual(states, [
      ['1', 'alive'],
      ['2', 'alive'],
      ['3', 'alive'],
    ]);
    const text = await page.innerText('#view');
    assert.match(text, /3 alive of 3 registered/);
    assert.match(text, /this one/);
    assert.doesNotMatch(text, /\bnull\b|\bundefined\b|\bNaN\b|\[object Object\]/, text);
  });

  it('HAProxy in front reaches a broker (MQTT round trip through the proxy)', async () => {
    assert.ok(c.haproxy);
    const client = await mqtt.connectAsync(c.haproxy.mqttUrl, { clientId: 'via-proxy', protocolVersion: 5, reconnectPeriod: 0 });
    try {
      const got = new Promise<string>((resolve) => client.on('message', (_t, p) => resolve(p.toString())));
      await client.subscribeAsync('harness/ping', { qos: 0 });
      await client.publishAsync('harness/ping', 'pong', { qos: 1 });
      assert.equal(await got, 'pong');
    } finally {
      await client.endAsync();
    }
  });

  it('kill -9 of a broker: the others show it dead once its lease expired; the rest stay alive', async () => {
    await c.kill(3);
    const s = await c.waitBrokerDead(3, 15_000);
    const dead = s.brokers.find((b) => b.id === 3);
    // Still registered (a kill -9 says no goodbye), with its lease run out.
    assert.ok(dead, 'the killed broker is still listed');
    assert.equal(dead.alive, false);
    assert.ok(dead.leaseRemainingMs <= 0);
    assert.deepEqual(
      s.brokers.filter((b) => b.alive).map((b) => b.id),
      [1, 2],
    );
    // The two survivors agree.
    const s2 = await c.status({ via: 2 });
    assert.deepEqual(
      s2.brokers.filter((b) => b.alive).map((b) => b.id),
      [1, 2],
    );
    // The dashboard's page follows by itself (it refreshes every 2 s).
    await page!.locator('tr[data-broker="3"][data-state="dead"]').waitFor({ timeout: 10_000 });
  });

  it('a new broker joins the running cluster', async () => {
    await c.startBroker({ id: 4 });
    await c.waitBrokerAlive(4);
    const s = await c.status({ via: 4 });
    assert.deepEqual(
      s.brokers.filter((b) => b.alive).map((b) => b.id),
      [1, 2, 4],
    );
  });

  it('a graceful stop deregisters at once (no lease to wait for)', async () => {
    const r = await c.stop(4);
    assert.equal(r.code, 0);
    const s = await c.status({ via: 1 });
    assert.ok(!s.brokers.some((b) => b.id === 4), 'a broker that left is no longer registered');
  });
});

describe('cluster refusals', { timeout: 60_000 }, () => {
  it('--cluster with the embedded backends is refused with a clear message', async () => {
    const r = await startRefused(['--cluster', '--broker-id', '1', '--cluster-secret', 'x'.repeat(20)]);
    assert.equal(r.code, 2, `exit code ${r.code}: ${r.stdout}\n${r.stderr}`);
    const out = r.stdout + r.stderr;
    assert.match(out, /--cluster needs shared backends/);
    assert.match(out, /--metastore postgres/);
    assert.match(out, /--wal postgres/);
    assert.match(out, /s3:\/\//);
  });

  it('--cluster without a secret is refused', async () => {
    const r = await startRefused([
      '--cluster',
      '--broker-id',
      '1',
      '--metastore',
      'postgres://nobody@127.0.0.1:1/x',
      '--wal',
      'postgres',
      '--object-store',
      's3://bucket/p',
    ]);
    assert.equal(r.code, 2, `exit code ${r.code}: ${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout + r.stderr, /--cluster-secret/);
  });
});
