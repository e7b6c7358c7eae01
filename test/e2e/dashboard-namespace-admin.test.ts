/**
 * The web dashboard as a namespace administrator (issue 29), in Debian's chromium driven by playwright-core against
 * the real bin/flowmq: ann administers t1 (`allow admin namespace:t1`). Tenants' objects are made with real clients
 * (kafkajs topics and a consumer group over SASL PLAIN, amqplib queues in each tenant's vhost): t1's `ann-orders`,
 * `ann-queue`, group `ann-billing`, user `tia`; namespace `zeta`'s `zeta-secret`, `zeta-hidden-queue`, group
 * `zeta-billing`, user `zed`; `default`'s `root-private` stream. Logged in through the page, ann goes through every
 * page of the menu: each loads (no page refused to her), the overview counts t1's objects, the connections page lists
 * her tenant's AMQP connection, and no page shows a name of `zeta` or of `default`.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import amqp from 'amqplib';
import kafkajsPkg from 'kafkajs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { eventually, FlowmqProcess } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

const USERS = `
users:
  - {username: root, password: root-pw, groups: [admins]}
  - {username: ann, password: ann-pw, namespace: t1}
  - {username: tia, password: tia-pw, namespace: t1}
  - {username: zed, password: zed-pw, namespace: zeta}
namespaces:
  - {name: t1}
  - {name: zeta}
policies:
  - {name: ann-admin, effect: allow, actions: [admin], resources: ["namespace:t1"], principals: ["user:ann"]}
  - {name: zed-admin, effect: allow, actions: [admin], resources: ["namespace:zeta"], principals: ["user:zed"]}
  - {name: t1-all, namespace: t1, effect: allow, actions: ["*"], resources: ["stream:*", "topic:#", "group:*", "queue:*", "exchange:*"], principals: ["user:ann"]}
  - {name: zeta-all, namespace: zeta, effect: allow, actions: ["*"], resources: ["stream:*", "topic:#", "group:*", "queue:*", "exchange:*"], principals: ["user:zed"]}
`;
/** Names of other namespaces, none of which ann may ever see. */
const FOREIGN = ['zeta', 'zed', 'zeta-secret', 'zeta-hidden-queue', 'zeta-billing', 'root-private', 'root', 'zed-admin', 'zeta-all', 'ann-admin'];

describe('e2e: dashboard as a namespace administrator', { timeout: 120_000 }, () => {
  let dir = '';
  let broker: FlowmqProcess;
  let browser: Browser;
  const problems: string[] = [];

  const kafka = (user: string) =>
    new Kafka({
      clientId: `dash-${user}`,
      brokers: [broker.kafka],
      sasl: { mechanism: 'plain', username: user, password: `${user}-pw` },
      logLevel: logLevel.NOTHING,
    });
  /** A topic, one record in it and a consumer group that read it, as `user`. */
  const tenantKafka = async (user: string, topic: string, group: string) => {
    const k = kafka(user);
    const admin = k.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 1 }] });
    await admin.disconnect();
    const producer = k.producer();
    await producer.connect();
    await producer.send({ topic, messages: [{ value: `${user}-record` }] });
    await producer.disconnect();
    const consumer = k.consumer({ groupId: group });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve) => void consumer.run({ eachMessage: async () => resolve() }));
    await consumer.commitOffsets([{ topic, partition: 0, offset: '1' }]);
    await consumer.disconnect();
  };
  const tenantQueue = async (user: string, vhost: string, queue: string) => {
    const conn = await amqp.connect(`amqp://${user}:${user}-pw@127.0.0.1:${broker.ports.amqp}/${vhost}`);
    const ch = await conn.createConfirmChannel();
    await ch.assertQueue(queue, { durable: true });
    ch.sendToQueue(queue, Buffer.from('m'));
    await ch.waitForConfirms();
    await conn.close();
  };

  /** The text of `page`'s view once `wanted` is in it (the page's calls answered; '': once the network is idle). */
  const pageText = async (page: Page, name: string, wanted: string): Promise<string> => {
    await page.click(`#nav a[data-page="${name}"]`);
    if (wanted !== '') await page.locator('#view', { hasText: wanted }).waitFor({ timeout: 10_000 });
    // Let the page's other calls land too: a second look after the network is idle.
    await page.waitForLoadState('networkidle');
    return page.innerText('#view');
  };

  before(async () => {
    assert.ok(existsSync(CHROMIUM), `${CHROMIUM} missing (apt-get install chromium)`);
    dir = mkdtempSync(join(tmpdir(), 'flowmq-dash-ns-'));
    writeFileSync(join(dir, 'users.yaml'), USERS);
    broker = await FlowmqProcess.start({ args: ['--users-file', join(dir, 'users.yaml'), '--kafka-group-initial-rebalance-delay', '0'] });
    broker.credentials = { username: 'root', password: 'root-pw' };
    await broker.api('POST', '/api/v1/streams', { name: 'root-private', partitions: 1 });
    await tenantKafka('ann', 'ann-orders', 'ann-billing');
    await tenantKafka('zed', 'zeta-secret', 'zeta-billing');
    await tenantQueue('ann', 't1', 'ann-queue');
    await tenantQueue('zed', 'zeta', 'zeta-hidden-queue');
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
  });

  after(async () => {
    await browser?.close();
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it("shows ann t1's streams, queues, groups, users and usage, and nothing of another namespace", async () => {
    const context = await browser.newContext({ viewport: { width: 1360, height: 860 } });
    const page = await context.newPage();
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    await page.goto(`${broker.http}/`);
    await page.locator('#login').waitFor();
    await page.fill('#login-username', 'ann');
    await page.fill('#login-password', 'ann-pw');
    await page.click('#login-submit');
    await page.locator('#nav').waitFor({ state: 'visible' });

    const seen: Record<string, string> = {};
    seen.streams = await pageText(page, 'streams', 'ann-orders');
    seen.queues = await pageText(page, 'queues', 'ann-queue');
    seen.groups = await pageText(page, 'groups', 'ann-billing');
    seen.users = await pageText(page, 'users', 'tia');
    assert.match(seen.users, /\bann\b/);
    seen.policies = await pageText(page, 'policies', 't1-all');
    seen.namespaces = await pageText(page, 'namespaces', 't1');
    seen.overview = await pageText(page, 'overview', '');
    // The overview counts t1's objects: one stream, one queue, two users, one policy (not the broker's).
    const stats = async () => Promise.all(['streams', 'queues', 'users', 'policies'].map(async (id) => (await page.textContent(`#stat-${id}`))?.trim()));
    await eventually(async () => (await stats()).join() === '1,1,2,1', 10_000, 'the overview of t1: 1,1,2,1').catch(async (e: Error) => {
      throw new Error(`${e.message}; shown: ${(await stats()).join()}; ${await page.innerText('#view')}`);
    });
    seen.overview = await page.innerText('#view');
    // One AMQP connection of each tenant open: ann's is listed (namespace t1), zed's is not.
    const conns = await Promise.all(
      ['ann:t1', 'zed:zeta'].map((uv) => amqp.connect(`amqp://${uv.split(':')[0]}:${uv.split(':')[0]}-pw@127.0.0.1:${broker.ports.amqp}/${uv.split(':')[1]}`)),
    );
    try {
      seen.connections = await pageText(page, 'connections', 't1');
    } finally {
      for (const c of conns) await c.close();
    }
    for (const [name, text] of Object.entries(seen)) {
      assert.doesNotMatch(text, /Could not load/, `${name}:\n${text}`);
      for (const f of FOREIGN) assert.doesNotMatch(text, new RegExp(`(^|[^\\w-])${f}($|[^\\w-])`), `${name} shows ${f}:\n${text}`);
    }
    assert.deepEqual(problems, []);
    await context.close();
  });
});
