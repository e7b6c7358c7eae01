/**
 * AMQP and the control plane end to end: amqplib against bin/flowmq with a users file (users, a namespace with a
 * connection quota, policies), and the admin API changing policies and kicking clients while connections are open.
 * Wrong passwords, unauthorized publish and consume (channel.close 403 ACCESS_REFUSED with RabbitMQ's text, the
 * connection stays), a policy changed live on an open channel and an open consumer, the connection quota (530)
 * and a kick (320 CONNECTION_FORCED).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { amqpUrl, startAmqpBroker } from './amqp-helpers.js';
import { eventually, type FlowmqProcess } from './harness.js';

const USERS = `
users:
  - {username: root, password: root-pw, groups: [admins]}
  - {username: alice, password: alice-pw}
  - {username: solo, password: solo-pw, namespace: one}
namespaces:
  - {name: one, quotas: {maxConnections: 1}}
policies:
  - {name: alice-own, effect: allow, actions: [publish, subscribe, create, describe, delete, alter], resources: ["queue:alice-*"], principals: ["user:alice"]}
  # A user no policy allows anything is refused the vhost at connection.open (530, as RabbitMQ without permissions).
  - {name: solo-describe, effect: allow, actions: [describe], resources: ["queue:*"], principals: ["user:solo"]}
`;

/** A channel whose closing error (channel.close from the broker) is kept. */
async function channel(c: ChannelModel): Promise<Channel & { closedWith: Promise<Error> }> {
  const ch = (await c.createChannel()) as Channel & { closedWith: Promise<Error> };
  ch.closedWith = new Promise((resolve) => ch.on('error', resolve));
  return ch;
}

const REFUSED = (queue: string, user = 'alice') => `ACCESS_REFUSED - access to queue '${queue}' in vhost '/' refused for user '${user}'`;

describe('AMQP with users, policies and quotas (bin/flowmq, amqplib, admin API)', { timeout: 60_000 }, () => {
  let broker: FlowmqProcess;
  let dir: string;
  let root: ChannelModel;
  let admin: Channel;
  let alice: ChannelModel;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-amqp-auth-'));
    writeFileSync(join(dir, 'users.yaml'), USERS);
    broker = await startAmqpBroker(['--users-file', join(dir, 'users.yaml')]);
    broker.credentials = { username: 'root', password: 'root-pw' };
    root = await amqp.connect(amqpUrl(broker, 'root', 'root-pw'));
    admin = await root.createChannel();
    await admin.assertQueue('bob-q');
    alice = await amqp.connect(amqpUrl(broker, 'alice', 'alice-pw'), { clientProperties: { connection_name: 'alice-app' } });
    alice.on('error', () => undefined);
  });

  after(async () => {
    await alice?.close().catch(() => undefined);
    await root?.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a wrong password, an unknown user and the default guest with 403 ACCESS_REFUSED', async () => {
    await assert.rejects(amqp.connect(amqpUrl(broker, 'alice', 'nope')), /ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN/);
    await assert.rejects(amqp.connect(amqpUrl(broker, 'mallory', 'x')), /ACCESS_REFUSED/);
    await assert.rejects(amqp.connect(amqpUrl(broker, 'guest', 'guest')), /ACCESS_REFUSED/);
  });

  it('refuses an unauthorized publish and consume with 403, and the connection stays', async () => {
    const ch = await channel(alice);
    ch.sendToQueue('bob-q', Buffer.from('x'));
    assert.ok((await ch.closedWith).message.includes(REFUSED('bob-q')));
    const ch2 = await channel(alice);
    await assert.rejects(
      ch2.consume('bob-q', () => undefined),
      /403/,
    );
    assert.ok((await ch2.closedWith).message.includes(REFUSED('bob-q')));
    // The connection is still there: allowed work goes on.
    const ok = await alice.createChannel();
    await ok.assertQueue('alice-q');
    ok.sendToQueue('alice-q', Buffer.from('fine'));
    const m = await ok.get('alice-q', { noAck: true });
    assert.ok(m !== false && m.content.toString() === 'fine');
    await ok.close();
    assert.equal((await admin.checkQueue('bob-q')).messageCount, 0);
  });

  it('applies a policy changed through the admin API to an open consumer and an open publisher', async () => {
    const consumer = await channel(alice);
    await consumer.assertQueue('alice-live');
    const got: string[] = [];
    let first!: () => void;
    const firstSeen = new Promise<void>((r) => (first = r));
    await consumer.consume('alice-live', (m) => {
      if (m === null) return;
      got.push(m.content.toString());
      consumer.ack(m);
      first();
    });
    const publisher = await channel(alice);
    publisher.sendToQueue('alice-live', Buffer.from('m1'));
    await firstSeen;
    await broker.api('PUT', '/api/v1/policies/alice-no-live', {
      effect: 'deny',
      actions: ['subscribe', 'publish'],
      resources: ['queue:alice-live'],
      principals: ['user:alice'],
    });
    publisher.sendToQueue('alice-live', Buffer.from('m2'));
    assert.ok((await publisher.closedWith).message.includes(REFUSED('alice-live')), 'the open channel is refused its next publish');
    admin.sendToQueue('alice-live', Buffer.from('m3'));
    assert.ok((await consumer.closedWith).message.includes(REFUSED('alice-live')), 'the open consumer is refused its next delivery');
    assert.deepEqual(got, ['m1']);
    const left = await admin.get('alice-live', { noAck: true });
    assert.ok(left !== false && left.content.toString() === 'm3', 'm3 stayed in the queue');
    await broker.api('DELETE', '/api/v1/policies/alice-no-live');
    const again = await alice.createChannel();
    again.sendToQueue('alice-live', Buffer.from('m4'));
    await again.checkQueue('alice-live');
    await again.close();
  });

  it("refuses a connection over the namespace's connection quota (530 NOT_ALLOWED)", async () => {
    const first = await amqp.connect(amqpUrl(broker, 'solo', 'solo-pw'));
    await assert.rejects(amqp.connect(amqpUrl(broker, 'solo', 'solo-pw')), /ConnectionClose/);
    await broker.waitForLog((l) => l.msg === 'amqp: connection refused by the namespace quota' && l.namespace === 'one');
    await first.close();
    // The lease went with the connection: the namespace takes one again.
    await (await amqp.connect(amqpUrl(broker, 'solo', 'solo-pw'))).close();
  });

  it('lists the client with its user and connection_name, and a kick closes it with 320 CONNECTION_FORCED', async () => {
    const list = await broker.api<{ items: Array<{ id: string; user: string; clientId: string; protocol: string; messagesIn: number }> }>(
      'GET',
      '/api/v1/clients?protocol=amqp&user=alice',
    );
    const c = list.items.find((x) => x.clientId === 'alice-app');
    assert.ok(c, JSON.stringify(list));
    assert.ok(c.messagesIn >= 2);
    const closed = new Promise<Error | undefined>((resolve) => alice.on('close', resolve));
    await broker.api('DELETE', `/api/v1/clients/${encodeURIComponent(c.id)}`);
    const err = await closed;
    assert.match(String(err?.message), /320 \(CONNECTION-FORCED\)|CONNECTION_FORCED - kicked by an administrator/);
    await eventually(
      async () => (await broker.api<{ items: unknown[] }>('GET', '/api/v1/clients?protocol=amqp&user=alice')).items.length === 0,
      10_000,
      'the kicked client to leave the list',
    );
  });
});
