/**
 * The AMQP adapter against the control plane, with amqplib over a real listener: logins through access.password,
 * virtual host = namespace, every method checked against the policies (channel.close 403 ACCESS_REFUSED with
 * RabbitMQ's text, the connection stays), policies changed live on open channels and consumers, namespace quotas
 * (connections 530, publish rate back-pressure) and the client registry (connection_name, counters, kick 320).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import pino from 'pino';
import { Engine } from '../../../src/core/index.js';
import { AmqpAdapter } from '../../../src/protocols/amqp/adapter.js';
import { resolveAmqpOptions } from '../../../src/protocols/amqp/options.js';
import { startAmqpListener } from '../../../src/protocols/amqp/server.js';
import { bindingFilter } from '../../../src/protocols/amqp/channel.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawAmqp } from '../../e2e/amqp-helpers.js';
import { testControl, type TestControl } from './access-helpers.js';

let control: TestControl;
let engine: Engine;
let listener: ProtocolListener;
let port: number;
const open: ChannelModel[] = [];

before(async () => {
  control = await testControl({ anonymous: false });
  const d = control.directory;
  await d.putNamespace({ name: 'tenant-a' });
  await d.putNamespace({ name: 'tiny', quotas: { maxConnections: 1 } });
  await d.putNamespace({ name: 'slow', quotas: { publishRate: 5 } });
  await d.putNamespace({ name: 'thin', quotas: { bytesOutRate: 1000 } });
  await d.putNamespace({ name: 'full', quotas: { maxStorageBytes: 1000 } });
  await d.addUser({ username: 'alice', password: 'alice-pw' });
  await d.addUser({ username: 'root', password: 'root-pw', groups: ['admins'] });
  await d.addUser({ username: 'ten', password: 'ten-pw', namespace: 'tenant-a' });
  await d.addUser({ username: 'tiny', password: 'tiny-pw', namespace: 'tiny' });
  await d.addUser({ username: 'slow', password: 'slow-pw', namespace: 'slow' });
  await d.addUser({ username: 'thin', password: 'thin-pw', namespace: 'thin' });
  await d.addUser({ username: 'full', password: 'full-pw', namespace: 'full' });
  // Once a policy exists, what none allows is denied (default mode auto); admins may do everything.
  await d.putPolicy({
    name: 'alice-own',
    effect: 'allow',
    actions: ['publish', 'subscribe', 'create', 'delete', 'describe', 'alter'],
    resources: ['queue:alice-*', 'exchange:amq.topic', 'topic:alice/#'],
    principals: ['user:alice'],
  });
  await d.putPolicy({
    name: 'everyone-open',
    effect: 'allow',
    actions: ['*'],
    resources: ['queue:open-*'],
    principals: ['user:ten', 'user:tiny', 'user:slow', 'user:thin', 'user:full'],
  });
  const storage = new MemoryStreams();
  engine = new Engine(storage, storage);
  await engine.load();
  const adapter = new AmqpAdapter(
    { engine, logger: pino({ level: 'silent' }), brokerId: 1 },
    resolveAmqpOptions({ heartbeatSec: 0, memoryHighWatermark: 0 }),
    control.access,
  );
  listener = await startAmqpListener(adapter, { host: '127.0.0.1', port: 0 });
  port = listener.address().port;
});

after(async () => {
  await Promise.allSettled(open.map((c) => c.close()));
  await listener.close();
  engine.close();
  await control.close();
});

function url(user: string, pass: string, vhost = ''): string {
  return `amqp://${encodeURIComponent(user)}:${encodeURIComponent(pass)}@127.0.0.1:${port}${vhost === '' ? '' : '/' + encodeURIComponent(vhost)}?heartbeat=0`;
}

async function connect(user: string, pass: string, opts: { vhost?: string; name?: string } = {}): Promise<ChannelModel> {
  const c = await amqp.connect(url(user, pass, opts.vhost), opts.name !== undefined ? { clientProperties: { connection_name: opts.name } } : {});
  c.on('error', () => undefined);
  open.push(c);
  return c;
}

/** A channel whose closing error (channel.close from the broker) is kept. */
async function channel(c: ChannelModel): Promise<Channel & { closedWith: Promise<Error> }> {
  const ch = (await c.createChannel()) as Channel & { closedWith: Promise<Error> };
  ch.closedWith = new Promise((resolve) => ch.on('error', resolve));
  return ch;
}

async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** amqplib rejects some RPCs with the channel.close frame itself, others with an Error naming the code. */
const is403 = (e: unknown): boolean => /403/.test(String((e as Error).message)) || (e as { fields?: { replyCode?: number } }).fields?.replyCode === 403;

/**
 * Logs in and opens `vhost` with a raw client; answers the connection.close the broker sent instead of open-ok
 * (amqplib reports only "Expected ConnectionOpenOk; got <ConnectionClose>", not its text), or null on open-ok.
 */
async function openRefusal(user: string, pass: string, vhost: string): Promise<{ replyCode: number; replyText: string } | null> {
  const raw = await RawAmqp.open(port);
  try {
    raw.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'));
    assert.equal((await raw.method())?.method, 'ConnectionStart');
    raw.send('ConnectionStartOk', 0, { clientProperties: {}, mechanism: 'PLAIN', response: Buffer.from(`\0${user}\0${pass}`), locale: 'en_US' });
    const tune = await raw.method();
    assert.equal(tune?.method, 'ConnectionTune');
    raw.send('ConnectionTuneOk', 0, { channelMax: 0, frameMax: tune!.fields.frameMax as number, heartbeat: 0 });
    raw.send('ConnectionOpen', 0, { virtualHost: vhost, capabilities: '', insist: false });
    const r = await raw.method();
    if (r?.method === 'ConnectionOpenOk') return null;
    assert.equal(r?.method, 'ConnectionClose');
    return { replyCode: r!.fields.replyCode as number, replyText: r!.fields.replyText as string };
  } finally {
    raw.close();
  }
}

const REFUSED = (what: string, user = 'alice', vhost = '/') => `ACCESS_REFUSED - access to ${what} in vhost '${vhost}' refused for user '${user}'`;

describe('AMQP logins through the control plane', { timeout: 30_000 }, () => {
  it('refuses a wrong password and an unknown user with 403 ACCESS_REFUSED', async () => {
    await assert.rejects(amqp.connect(url('alice', 'wrong')), /ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN/);
    await assert.rejects(amqp.connect(url('nobody', 'x')), /ACCESS_REFUSED/);
  });

  it('refuses anonymous logins when anonymous AMQP is off', async () => {
    await assert.rejects(
      amqp.connect(`amqp://127.0.0.1:${port}?heartbeat=0`, { credentials: { mechanism: 'PLAIN', response: () => Buffer.from('\0\0') } }),
      /ACCESS_REFUSED/,
    );
  });

  it('lets a right password in and registers the client with its user, namespace and connection_name', async () => {
    const c = await connect('ten', 'ten-pw', { name: 'billing-worker' });
    const e = control.access.clients.list().find((x) => x.clientId === 'billing-worker');
    assert.ok(e, 'registered');
    assert.deepEqual([e.reg.protocol, e.reg.listener, e.user, e.namespace], ['amqp', 'amqp', 'ten', 'tenant-a']);
    await c.close();
    await until(() => control.access.clients.get(e.id) === undefined, 'the entry to leave once closed');
  });
});

describe('AMQP virtual host = namespace', { timeout: 30_000 }, () => {
  it("opens '/' (the user's own namespace) and its name, and refuses any other with 530 NOT_ALLOWED", async () => {
    await (await amqp.connect(url('ten', 'ten-pw', '/'))).close();
    await (await amqp.connect(url('ten', 'ten-pw', 'tenant-a'))).close();
    await assert.rejects(amqp.connect(url('ten', 'ten-pw', 'default')), /ConnectionClose/);
    assert.deepEqual(await openRefusal('ten', 'ten-pw', 'default'), {
      replyCode: 530,
      replyText: "NOT_ALLOWED - access to vhost 'default' refused for user 'ten'",
    });
    assert.deepEqual(await openRefusal('alice', 'alice-pw', 'tenant-a'), {
      replyCode: 530,
      replyText: "NOT_ALLOWED - access to vhost 'tenant-a' refused for user 'alice'",
    });
    assert.equal(await openRefusal('alice', 'alice-pw', 'default'), null);
    // An unknown vhost is not found (RabbitMQ's text); an admin opens every vhost.
    assert.deepEqual(await openRefusal('ten', 'ten-pw', 'no-such'), { replyCode: 530, replyText: 'NOT_ALLOWED - vhost no-such not found' });
    assert.equal(await openRefusal('root', 'root-pw', 'tenant-a'), null);
  });
});

describe('AMQP authorization', { timeout: 30_000 }, () => {
  let alice: ChannelModel;
  let root: ChannelModel;
  let admin: Channel;
  before(async () => {
    alice = await connect('alice', 'alice-pw');
    root = await connect('root', 'root-pw');
    admin = await root.createChannel();
    await admin.assertQueue('bob-q');
  });

  it('allows what the policies allow: declare, bind on amq.topic, publish, consume', async () => {
    const ch = await channel(alice);
    await ch.assertQueue('alice-in');
    await ch.bindQueue('alice-in', 'amq.topic', 'alice.#');
    ch.publish('amq.topic', 'alice.x', Buffer.from('hello'));
    ch.sendToQueue('alice-in', Buffer.from('direct'));
    const got: string[] = [];
    await new Promise<void>((resolve) => {
      void ch.consume('alice-in', (m) => {
        if (m === null) return;
        got.push(m.content.toString());
        ch.ack(m);
        if (got.length === 2) resolve();
      });
    });
    assert.deepEqual(got.sort(), ['direct', 'hello']);
    await ch.close();
  });

  it('refuses a publish to a queue it may not publish to with 403, and the connection stays', async () => {
    const ch = await channel(alice);
    ch.sendToQueue('bob-q', Buffer.from('x'));
    const err = await ch.closedWith;
    assert.match(err.message, /403/);
    assert.ok(err.message.includes(REFUSED("queue 'bob-q'")), err.message);
    const again = await alice.createChannel();
    await again.checkQueue('alice-in');
    await again.close();
    assert.equal((await admin.checkQueue('bob-q')).messageCount, 0, 'nothing reached the queue');
  });

  it('refuses a publish on amq.topic to a topic it may not publish to', async () => {
    const ch = await channel(alice);
    ch.publish('amq.topic', 'secret.plans', Buffer.from('x'));
    const err = await ch.closedWith;
    assert.ok(
      err.message.includes("ACCESS_REFUSED - access to topic 'secret.plans' in exchange 'amq.topic' in vhost '/' refused for user 'alice'"),
      err.message,
    );
  });

  it('refuses consume and get on a queue it may not read, and declaring one it may not create', async () => {
    let ch = await channel(alice);
    await assert.rejects(
      ch.consume('bob-q', () => undefined),
      /403/,
    );
    assert.ok((await ch.closedWith).message.includes(REFUSED("queue 'bob-q'")));
    ch = await channel(alice);
    await assert.rejects(ch.get('bob-q'), is403);
    ch = await channel(alice);
    await assert.rejects(ch.assertQueue('bob-2'), /403/);
    assert.ok((await ch.closedWith).message.includes(REFUSED("queue 'bob-2'")));
    ch = await channel(alice);
    await assert.rejects(ch.checkQueue('bob-q'), is403, 'a passive declare needs describe');
    ch = await channel(alice);
    await assert.rejects(ch.assertExchange('alice-x', 'fanout'), /403/);
    assert.ok((await ch.closedWith).message.includes(REFUSED("exchange 'alice-x'")));
    ch = await channel(alice);
    await assert.rejects(ch.deleteQueue('bob-q'), is403);
    ch = await channel(alice);
    await assert.rejects(ch.purgeQueue('bob-q'), is403);
    assert.equal((await admin.checkQueue('bob-q')).consumerCount, 0);
  });

  it('refuses a binding on amq.topic whose key reaches a topic it may not read', async () => {
    const ch = await channel(alice);
    await assert.rejects(ch.bindQueue('alice-in', 'amq.topic', '#'), /403/);
    assert.ok((await ch.closedWith).message.includes("access to topic '#' in exchange 'amq.topic'"));
  });

  it('lets a server-named exclusive queue be declared without a policy', async () => {
    const ch = await channel(alice);
    const q = await ch.assertQueue('', { exclusive: true });
    assert.match(q.queue, /^amq\.gen-/);
    await ch.close();
  });

  it('applies a policy changed live to an open channel: the next publish is refused', async () => {
    const ch = await channel(alice);
    await ch.assertQueue('alice-live');
    ch.sendToQueue('alice-live', Buffer.from('before'));
    await ch.checkQueue('alice-live'); // a round trip: the publish before it was taken
    await control.directory.putPolicy({
      name: 'no-live-publish',
      effect: 'deny',
      actions: ['publish'],
      resources: ['queue:alice-live'],
      principals: ['user:alice'],
    });
    ch.sendToQueue('alice-live', Buffer.from('after'));
    const err = await ch.closedWith;
    assert.ok(err.message.includes(REFUSED("queue 'alice-live'")), err.message);
    assert.equal((await admin.checkQueue('alice-live')).messageCount, 1, 'only the publish before the policy reached the queue');
    await control.directory.deletePolicy('no-live-publish');
  });

  it('applies a policy changed live to an open consumer: its channel is closed with 403, the message stays queued', async () => {
    const ch = await channel(alice);
    await ch.assertQueue('alice-sub');
    const got: string[] = [];
    let first!: () => void;
    const firstSeen = new Promise<void>((r) => (first = r));
    await ch.consume('alice-sub', (m) => {
      if (m === null) return;
      got.push(m.content.toString());
      ch.ack(m);
      first();
    });
    admin.sendToQueue('alice-sub', Buffer.from('m1'));
    await firstSeen;
    await control.directory.putPolicy({
      name: 'no-live-sub',
      effect: 'deny',
      actions: ['subscribe'],
      resources: ['queue:alice-sub'],
      principals: ['user:alice'],
    });
    admin.sendToQueue('alice-sub', Buffer.from('m2'));
    const err = await ch.closedWith;
    assert.ok(err.message.includes(REFUSED("queue 'alice-sub'")), err.message);
    assert.deepEqual(got, ['m1']);
    const left = await admin.get('alice-sub', { noAck: true });
    assert.ok(left !== false && left.content.toString() === 'm2', 'm2 was not delivered to the refused consumer');
    await control.directory.deletePolicy('no-live-sub');
  });
});

describe('AMQP namespace quotas', { timeout: 30_000 }, () => {
  it("refuses a connection over the namespace's connection quota with 530 NOT_ALLOWED", async () => {
    const first = await connect('tiny', 'tiny-pw');
    await assert.rejects(amqp.connect(url('tiny', 'tiny-pw')), /ConnectionClose/);
    assert.deepEqual(await openRefusal('tiny', 'tiny-pw', '/'), { replyCode: 530, replyText: "NOT_ALLOWED - connection limit of namespace 'tiny' reached" });
    assert.ok(control.access.quotas.figures().tiny!.refusedConnections >= 2);
    await first.close();
    const again = await connect('tiny', 'tiny-pw');
    await again.close();
  });

  it('holds a publisher over the publish rate back (the socket is not read), and every message arrives', async () => {
    const c = await connect('slow', 'slow-pw');
    const ch = await c.createChannel();
    await ch.assertQueue('open-slow');
    for (let i = 0; i < 15; i++) ch.sendToQueue('open-slow', Buffer.from(String(i)));
    // A round trip after the publishes: answered once the broker read them all, after the quota let it.
    const q = await ch.checkQueue('open-slow');
    assert.equal(q.messageCount, 15);
    const f = control.access.quotas.figures().slow!;
    assert.ok(f.throttled > 0, `publishes were held back (${JSON.stringify(f)})`);
    const e = control.access.clients.list().find((x) => x.user === 'slow')!;
    assert.equal(e.messagesIn, 15);
    await c.close();
  });
});

describe('AMQP storage quota', { timeout: 30_000 }, () => {
  it('refuses a publish over the namespace storage quota with 406 on the channel, the connection stays; publishes resume when usage drops', async () => {
    let stored = 1500;
    control.access.quotas.useStorage(() => new Map([['full', { hot: stored, objects: 0 }]]));
    const c = await connect('full', 'full-pw');
    const ch = await channel(c);
    await ch.assertQueue('open-full');
    ch.sendToQueue('open-full', Buffer.from('refused'));
    const err = await ch.closedWith;
    assert.match(err.message, /406/);
    assert.match(err.message, /over its storage quota \(1500 of 1000 bytes stored\)/);
    stored = 10;
    control.access.quotas.refreshStorage();
    const again = await c.createChannel();
    again.sendToQueue('open-full', Buffer.from('taken'));
    assert.equal((await again.checkQueue('open-full')).messageCount, 1, 'only the publish after the drop');
    assert.equal(control.access.quotas.figures().full!.refusedWrites, 1);
    await c.close();
  });
});

describe('AMQP bytes-out quota', { timeout: 30_000 }, () => {
  it("holds deliveries back over the namespace's bytes-out rate, and every message arrives", async () => {
    const c = await connect('thin', 'thin-pw');
    const ch = await c.createChannel();
    await ch.assertQueue('open-thin');
    const body = Buffer.alloc(600, 'x');
    for (let i = 0; i < 4; i++) ch.sendToQueue('open-thin', body);
    let n = 0;
    await new Promise<void>((resolve) => void ch.consume('open-thin', (m) => m && ++n === 4 && resolve(), { noAck: true }));
    const f = control.access.quotas.figures().thin!;
    assert.ok(f.throttled > 0, `deliveries were held back (${JSON.stringify(f)})`);
    assert.equal(control.access.clients.list().find((x) => x.user === 'thin')!.messagesOut, 4);
    await c.close();
  });
});

describe('AMQP client registry', { timeout: 30_000 }, () => {
  it('counts messages in and out, and a kick closes the connection with 320 CONNECTION_FORCED', async () => {
    const c = await connect('ten', 'ten-pw', { name: 'kick-me' });
    const ch = await c.createChannel();
    await ch.assertQueue('open-kick');
    ch.sendToQueue('open-kick', Buffer.from('one'));
    const m = await new Promise<string>((resolve) => void ch.consume('open-kick', (d) => d && resolve(d.content.toString()), { noAck: true }));
    assert.equal(m, 'one');
    const e = control.access.clients.list().find((x) => x.clientId === 'kick-me')!;
    assert.deepEqual([e.messagesIn, e.messagesOut], [1, 1]);
    const closed = new Promise<Error | undefined>((resolve) => c.on('close', resolve));
    assert.equal(control.access.clients.kick(e.id), true);
    const err = await closed;
    assert.match(String(err?.message), /320/);
    assert.match(String(err?.message), /CONNECTION_FORCED - kicked by an administrator/);
    await until(() => control.access.clients.get(e.id) === undefined, 'the kicked entry to leave');
  });
});

describe('amq.topic binding keys as filters', { timeout: 30_000 }, () => {
  it('maps levels, * and # (a # inside the key ends the filter)', () => {
    assert.equal(bindingFilter('a.*.c'), 'a/+/c');
    assert.equal(bindingFilter('a.#'), 'a/#');
    assert.equal(bindingFilter('a.#.b'), 'a/#');
    assert.equal(bindingFilter('#'), '#');
  });
});
