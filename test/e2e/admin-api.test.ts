/**
 * The admin API of a real bin/flowmq (no users: loopback bootstrap): a stream created with a binding through the
 * API, messages published with MQTT.js, seen in the message browser; live binding change; the OpenAPI document;
 * /readyz; and the first user created over loopback closing the door behind it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import { eventually, FlowmqProcess } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

describe('e2e: admin API resources on a real broker', () => {
  let broker: FlowmqProcess;
  before(async () => {
    // No KIP-134 initial rebalance delay: the Kafka groups here have one member; 3 s per group proves nothing.
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('creates a stream bound to a filter, shows MQTT publishes in the message browser, and rebinds it live', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'plant', partitions: 1, bindings: ['plant/+/temp'] });
    const client = await mqtt.connectAsync(broker.mqttUrl, { clientId: 'api-e2e' });
    try {
      await client.publishAsync('plant/1/temp', '21.5', { qos: 1 });
      await client.publishAsync('plant/2/temp', Buffer.from([0xff, 0xfe]), { qos: 1 });
      await client.publishAsync('plant/1/humidity', '40', { qos: 1 });
      const page = await broker.api<{
        items: Array<{ offset: number; topic: string; value: string; encoding: string }>;
        next: number | null;
        highWatermark: number;
      }>('GET', '/api/v1/streams/plant/messages?partition=0&offset=0&limit=10');
      assert.deepEqual(
        page.items.map((m) => [m.offset, m.topic, m.encoding === 'utf8' ? m.value : Buffer.from(m.value, 'base64').toString('hex')]),
        [
          [0, 'plant/1/temp', '21.5'],
          [1, 'plant/2/temp', 'fffe'],
        ],
      );
      assert.equal(page.next, null);
      assert.equal(page.highWatermark, 2);
      const changed = await broker.api<{ bindings: string[] }>('PATCH', '/api/v1/streams/plant', { bindings: ['plant/#'] });
      assert.deepEqual(changed.bindings, ['plant/#']);
      await client.publishAsync('plant/1/humidity', '41', { qos: 1 });
      const after = await broker.api<{ items: Array<{ topic: string; value: string }> }>('GET', '/api/v1/streams/plant/messages?offset=2');
      assert.deepEqual(
        after.items.map((m) => [m.topic, m.value]),
        [['plant/1/humidity', '41']],
      );
    } finally {
      await client.endAsync();
    }
  });

  it('serves its OpenAPI document and readiness', async () => {
    const doc = (await (await fetch(`${broker.http}/api/v1/openapi.json`)).json()) as { openapi: string; paths: Record<string, unknown> };
    assert.match(doc.openapi, /^3\./);
    assert.ok(doc.paths['/api/v1/streams/{name}/messages']);
    assert.equal((await fetch(`${broker.http}/readyz`)).status, 200);
    const overview = await broker.api<{ streams: number; users: number }>('GET', '/api/v1/overview');
    assert.equal(overview.streams, 1);
    assert.equal(overview.users, 0);
  });

  it('shows a Kafka consumer group with its lag, resets its offsets to the earliest, and deletes it', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'orders', partitions: 2 });
    const kafka = new Kafka({ brokers: [broker.kafka], clientId: 'api-e2e', logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic: 'orders', messages: Array.from({ length: 6 }, (_, i) => ({ key: `k${i}`, value: `order ${i}` })) });
    const consumer = kafka.consumer({ groupId: 'billing' });
    let seen = 0;
    await consumer.connect();
    await consumer.subscribe({ topics: ['orders'], fromBeginning: true });
    await consumer.run({ autoCommitInterval: 50, eachMessage: async () => void seen++ });
    type Group = { name: string; protocol: string; state: string; members: number; lag: number | null };
    await eventually(async () => seen === 6, 20_000, 'the group consumed the six messages');
    await eventually(
      async () => (await broker.api<{ items: Group[] }>('GET', '/api/v1/consumer-groups')).items.find((g) => g.name === 'billing')?.lag === 0,
      20_000,
      'offsets committed',
    );
    await consumer.disconnect();
    await producer.send({ topic: 'orders', messages: [{ value: 'late 1' }, { value: 'late 2' }, { value: 'late 3' }] });
    await producer.disconnect();
    const list = await broker.api<{ items: Group[] }>('GET', '/api/v1/consumer-groups');
    const billing = list.items.find((g) => g.name === 'billing')!;
    assert.deepEqual([billing.protocol, billing.members, billing.lag], ['kafka', 0, 3]);
    const reset = await broker.api<{ lag: number; offsets: Array<{ committed: number }> }>('POST', '/api/v1/consumer-groups/billing/reset', {
      stream: 'orders',
      to: 'earliest',
    });
    assert.equal(reset.lag, 9);
    assert.deepEqual(
      reset.offsets.map((o) => o.committed),
      [0, 0],
    );
    const detail = await broker.api<{ offsets: Array<{ stream: string; partition: number; end: number }> }>('GET', '/api/v1/consumer-groups/billing');
    assert.equal(
      detail.offsets.reduce((n, o) => n + o.end, 0),
      9,
    );
    await broker.api('DELETE', '/api/v1/consumer-groups/billing');
    const gone = await fetch(`${broker.http}/api/v1/consumer-groups/billing`);
    assert.equal(gone.status, 404);
  });

  it('lists connected MQTT clients and their sessions, kicks a client, and deletes a connected session (client kicked first)', async () => {
    type Client = { id: string; protocol: string; clientId: string | null };
    const opts = { protocolVersion: 5 as const, reconnectPeriod: 0, clean: false, properties: { sessionExpiryInterval: 3600 } };
    const keeper = await mqtt.connectAsync(broker.mqttUrl, { ...opts, clientId: 'keeper' });
    const other = await mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, clientId: 'other' });
    try {
      await keeper.subscribeAsync('k/#', { qos: 1 });
      const clients = await broker.api<{ items: Client[] }>('GET', '/api/v1/clients?protocol=mqtt');
      assert.deepEqual(clients.items.map((c) => c.clientId).sort(), ['keeper', 'other']);
      const sessions = await broker.api<{ items: Array<{ clientId: string; connected: boolean; subscriptions: Array<{ filter: string }> }> }>(
        'GET',
        '/api/v1/mqtt/sessions',
      );
      const k = sessions.items.find((x) => x.clientId === 'keeper')!;
      assert.equal(k.connected, true);
      assert.deepEqual(
        k.subscriptions.map((x) => x.filter),
        ['k/#'],
      );

      const kicked = new Promise<number | undefined>((resolve) => other.on('disconnect', (p) => resolve(p.reasonCode)));
      const id = clients.items.find((c) => c.clientId === 'other')!.id;
      await broker.api('DELETE', `/api/v1/clients/${id}`);
      assert.equal(await kicked, 0x98, 'MQTT v5 DISCONNECT Administrative action');

      const closed = new Promise<void>((resolve) => keeper.once('close', () => resolve()));
      await broker.api('DELETE', '/api/v1/mqtt/sessions/keeper');
      await closed;
      const after = await broker.api<{ items: Array<{ clientId: string }> }>('GET', '/api/v1/mqtt/sessions');
      assert.ok(!after.items.some((x) => x.clientId === 'keeper'), 'the session is gone from the store');
    } finally {
      await keeper.endAsync(true).catch(() => undefined);
      await other.endAsync(true).catch(() => undefined);
    }
  });

  it('closes the loopback bootstrap once the first user exists', async () => {
    await broker.api('POST', '/api/v1/users', { username: 'first', password: 'first-pw', groups: ['admins'] });
    const anon = await fetch(`${broker.http}/api/v1/streams`);
    assert.equal(anon.status, 401);
    broker.credentials = { username: 'first', password: 'first-pw' };
    const list = await broker.api<{ items: Array<{ name: string }> }>('GET', '/api/v1/streams');
    assert.deepEqual(
      list.items.map((s) => s.name),
      ['orders', 'plant'],
    );
  });
});
