/**
 * MQTT sessions in cluster mode, in one process: two (or three) brokers, each a Cluster over one MemoryClusterStore
 * with LocalHub channels, its own Engine and MQTT listener, all sharing one session store whose writes are fenced by
 * the store's owner rows (MemorySessionStore + MemoryClusterStore.check). No live forwarding between the engines
 * here (that is the live part's): messages are published on the engine of the broker that owns the session.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { Cluster, LocalHub, MemoryClusterStore, type ClusterStore } from '../../../src/cluster/index.js';
import { Engine, MemorySessionStore, makeMessage, type SessionStore } from '../../../src/core/index.js';
import { startMqttListener, type MqttListener } from '../../../src/protocols/mqtt/index.js';
import { ReasonCode } from '../../../src/protocols/mqtt/codec/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, sleep, until } from './helpers.js';

const logger = pino({ level: 'silent' });

interface Node {
  id: number;
  cluster: Cluster;
  engine: Engine;
  listener: MqttListener;
  port: number;
  /** Makes the broker's heartbeats fail from now on (a crash, or a pause, as the store sees it). */
  kill(): void;
  close(): Promise<void>;
}

interface World {
  store: MemoryClusterStore;
  sessions: SessionStore;
  links: LocalHub;
  nodes: Node[];
}

let worlds: World[] = [];
afterEach(async () => {
  for (const w of worlds) for (const n of w.nodes) await n.close().catch(() => undefined);
  worlds = [];
});

function world(): World {
  const store = new MemoryClusterStore();
  const w: World = {
    store,
    sessions: new MemorySessionStore({ fence: (clientId, epoch) => store.check('session', clientId, epoch) }),
    links: new LocalHub(),
    nodes: [],
  };
  worlds.push(w);
  return w;
}

async function node(w: World, id: number, leaseMs = 60_000): Promise<Node> {
  let dead = false;
  // The broker's own view of the shared store: once killed its heartbeats fail (the others see its lease expire).
  const view = Object.create(w.store) as ClusterStore;
  view.heartbeat = async (...args) => {
    if (dead) throw new Error('killed');
    return w.store.heartbeat(...args);
  };
  view.register = async (...args) => {
    if (dead) throw new Error('killed');
    return w.store.register(...args);
  };
  const cluster = await Cluster.start({ store: view, info: { id, version: 'test', endpoints: {} }, leaseMs, logger });
  cluster.channel = w.links.channel(id);
  const storage = new MemoryStreams({ sessions: w.sessions });
  const engine = new Engine(storage, storage);
  await engine.load();
  const listener = await startMqttListener({ engine, logger, brokerId: id }, { host: '127.0.0.1', port: 0 }, { cluster, sysIntervalMs: 0, tickMs: 50 });
  cluster.begin();
  let closed = false;
  const n: Node = {
    id,
    cluster,
    engine,
    listener,
    port: listener.address().port,
    kill() {
      dead = true;
      w.links.disconnect(id);
    },
    async close() {
      if (closed) return;
      closed = true;
      if (!dead) await cluster.leave();
      await listener.close();
      await cluster.close();
    },
  };
  w.nodes.push(n);
  return n;
}

const v5 = (_clientId: string, expiry = 3600, cleanSession = false) => ({
  protocolLevel: 5 as const,
  cleanSession,
  properties: { sessionExpiryInterval: expiry },
});

async function connect5(port: number, clientId: string, expiry = 3600, cleanSession = false): Promise<{ c: RawClient; present: boolean }> {
  const c = await RawClient.open(port);
  c.level = 5;
  c.send({ type: 'connect', protocolName: 'MQTT', keepalive: 0, clientId, will: null, username: null, password: null, ...v5(clientId, expiry, cleanSession) });
  const ack = await c.next('connack');
  assert.equal(ack.returnCode, 0, `CONNACK of ${clientId} on port ${port}`);
  return { c, present: ack.sessionPresent };
}

async function subscribe(c: RawClient, filter: string, qos: 0 | 1 | 2 = 1): Promise<void> {
  c.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter, qos, noLocal: false, retainAsPublished: false, retainHandling: 0 }] });
  await c.next('suback');
}

function publish(engine: Engine, topic: string, body: string): void {
  engine.publish(makeMessage(topic, Buffer.from(body), { qos: 1 }));
}

/** Receives `n` PUBLISH packets (acknowledging QoS 1), payloads in order. */
async function receive(c: RawClient, n: number): Promise<string[]> {
  const out: string[] = [];
  while (out.length < n) {
    const p = await c.next('publish', 5000);
    out.push(p.payload.toString());
    if (p.qos === 1) c.send({ type: 'puback', packetId: p.packetId! });
  }
  return out;
}

describe('MQTT sessions across brokers (in process)', () => {
  it('a CONNECT on B takes over the client connected to A (v5 DISCONNECT 0x8E) and resumes its session', async () => {
    const w = world();
    const a = await node(w, 1);
    const b = await node(w, 2);
    const first = await connect5(a.port, 'dev-1');
    assert.equal(first.present, false);
    await subscribe(first.c, 'cmd/#');
    const before = await w.store.owner('session', 'dev-1');
    assert.equal(before?.owner, 1, 'the session is owned where its client connected');

    const second = await connect5(b.port, 'dev-1');
    const d = await first.c.next('disconnect');
    assert.equal(d.reasonCode, ReasonCode.SESSION_TAKEN_OVER);
    await first.c.waitClosed();
    assert.equal(second.present, true, 'the session (with its subscription) was resumed on B');
    const after = await w.store.owner('session', 'dev-1');
    assert.equal(after?.owner, 2);
    assert.ok(after!.epoch > before!.epoch, 'the takeover bumped the epoch');
    assert.equal(a.cluster.owns('session', 'dev-1'), null, 'A let go of it');

    // The subscription lives on B now, not on A.
    publish(b.engine, 'cmd/x', 'on-b');
    assert.deepEqual(await receive(second.c, 1), ['on-b']);
    assert.equal(a.listener.hub.sessions.has('dev-1'), false, 'A dropped its copy');
    second.c.destroy();
  });

  it('resumes an offline persistent session on another broker with the messages queued for it', async () => {
    const w = world();
    const a = await node(w, 1);
    const b = await node(w, 2);
    const first = await connect5(a.port, 'dev-2');
    await subscribe(first.c, 'data/#');
    first.c.send({ type: 'disconnect', reasonCode: 0 });
    await first.c.waitClosed();
    await until(() => a.listener.hub.sessions.get('dev-2')?.conn === null, 'the session offline on A');
    // Offline, the session keeps queueing at its owner.
    for (let i = 0; i < 3; i++) publish(a.engine, `data/${i}`, `m${i}`);
    await until(() => a.listener.hub.queueWrites() === null, 'queue writes issued');
    assert.equal((await w.sessions.readQueue('dev-2', 10)).length, 3);

    const second = await connect5(b.port, 'dev-2');
    assert.equal(second.present, true);
    assert.deepEqual(await receive(second.c, 3), ['m0', 'm1', 'm2']);
    assert.equal(a.listener.hub.sessions.has('dev-2'), false, 'A dropped its copy');
    assert.equal((await w.store.owner('session', 'dev-2'))?.owner, 2);
    second.c.destroy();
  });

  it('a clean session is claimed while connected, taken over across brokers, and its owner row goes when it ends', async () => {
    const w = world();
    const a = await node(w, 1);
    const b = await node(w, 2);
    const first = await connect5(a.port, 'dev-3', 0, true);
    assert.equal((await w.store.owner('session', 'dev-3'))?.owner, 1);
    const second = await connect5(b.port, 'dev-3', 0, true);
    assert.equal((await first.c.next('disconnect')).reasonCode, ReasonCode.SESSION_TAKEN_OVER);
    assert.equal(second.present, false);
    assert.equal((await w.store.owner('session', 'dev-3'))?.owner, 2);
    second.c.send({ type: 'disconnect', reasonCode: 0 });
    await second.c.waitClosed();
    await until(() => b.cluster.owns('session', 'dev-3') === null, 'B lets go of the ended session');
    for (let i = 0; i < 100 && (await w.store.owner('session', 'dev-3')) !== null; i++) await sleep(10);
    assert.equal(await w.store.owner('session', 'dev-3'), null, 'the owner row of the ended session is gone');
    assert.equal(await w.sessions.getSession('dev-3'), null);
  });

  it('a broker that lost a session cannot write it any more (fenced) and stops serving it', async () => {
    const w = world();
    const a = await node(w, 1);
    const b = await node(w, 2);
    const first = await connect5(a.port, 'dev-4');
    await subscribe(first.c, 'f/#');
    first.c.send({ type: 'disconnect', reasonCode: 0 });
    await first.c.waitClosed();
    await until(() => a.listener.hub.sessions.get('dev-4')?.conn === null, 'offline on A');
    // B takes the session without A (as if A were paused and had not answered): the claim forced over A.
    w.links.disconnect(1);
    const epoch = await b.cluster.claim('session', 'dev-4', { force: true });
    assert.ok(epoch > 1);
    assert.equal((await w.sessions.readQueue('dev-4', 10)).length, 0);
    // A still believes it owns the session: what it queues for it is refused by the store...
    publish(a.engine, 'f/late', 'late');
    await until(() => !a.listener.hub.sessions.has('dev-4'), 'A drops the fenced session');
    assert.equal(a.cluster.owns('session', 'dev-4'), null);
    assert.equal((await w.sessions.readQueue('dev-4', 10)).length, 0, 'nothing of the fenced owner reached the store');
    // ...and it no longer queues for it.
    publish(a.engine, 'f/later', 'later');
    await sleep(0);
    assert.equal((await w.sessions.readQueue('dev-4', 10)).length, 0);
    // B's own writes go through (the session's record under B's epoch).
    const rec = await w.sessions.getSession('dev-4');
    assert.ok(rec !== null);
  });

  it('a publish reaching a session the broker lost (its write fenced) is not acknowledged: the publisher sends it again', async () => {
    const w = world();
    const a = await node(w, 1);
    const b = await node(w, 2);
    const sub = await connect5(a.port, 'dev-9');
    await subscribe(sub.c, 'g/#');
    sub.c.send({ type: 'disconnect', reasonCode: 0 });
    await sub.c.waitClosed();
    await until(() => a.listener.hub.sessions.get('dev-9')?.conn === null, 'offline on A');
    // B takes the session without A (as a broker thawed after SIGSTOP past its lease finds it): A still serves it.
    w.links.disconnect(1);
    await b.cluster.claim('session', 'dev-9', { force: true });
    const pub = await connect5(a.port, 'pub-9', 0, true);
    pub.c.send({ type: 'publish', topic: 'g/late', payload: Buffer.from('late'), qos: 1, packetId: 7, retain: false, dup: false, properties: {} });
    const ack = await pub.c.next('puback', 5000);
    assert.equal(ack.packetId, 7);
    assert.equal(ack.reasonCode, ReasonCode.UNSPECIFIED_ERROR, 'stored for nobody: not acknowledged as stored (v5 0x80)');
    assert.equal((await w.sessions.readQueue('dev-9', 10)).length, 0);
    pub.c.destroy();
  });

  it("a dead broker's offline session is taken over by its placement broker and keeps queueing there", async () => {
    const w = world();
    const lease = 400;
    const a = await node(w, 1, lease);
    const b = await node(w, 2, lease);
    const c = await node(w, 3, lease);
    const first = await connect5(a.port, 'dev-5');
    await subscribe(first.c, 'o/#');
    first.c.send({ type: 'disconnect', reasonCode: 0 });
    await first.c.waitClosed();
    await until(() => a.listener.hub.sessions.get('dev-5')?.conn === null, 'offline on A');
    publish(a.engine, 'o/1', 'before');
    await until(() => a.listener.hub.queueWrites() === null, 'queued on A');

    a.kill();
    await until(() => [b, c].some((n) => n.cluster.owns('session', 'dev-5') !== null), 'a surviving broker takes the orphan', 10_000);
    const heir = [b, c].find((n) => n.cluster.owns('session', 'dev-5') !== null)!;
    assert.equal(heir.id, heir.cluster.placement('session', 'dev-5'), 'the orphan went to its placement broker');
    assert.ok(heir.listener.hub.sessions.has('dev-5'), 'loaded offline on its new owner');
    // Offline on its new owner, the session queues what is published there.
    publish(heir.engine, 'o/2', 'after');
    await until(() => heir.listener.hub.queueWrites() === null, 'queued on the heir');

    // The client comes back on the other surviving broker: the session moves again, with both messages.
    const other = heir === b ? c : b;
    const back = await connect5(other.port, 'dev-5');
    assert.equal(back.present, true);
    assert.deepEqual(await receive(back.c, 2), ['before', 'after']);
    back.c.destroy();
    first.c.destroy();
  });

  it('a CONNECT for a session held by a broker that does not answer is refused as unavailable, never forced, until its lease expires', async () => {
    const w = world();
    const lease = 600;
    const a = await node(w, 1, lease);
    const b = await node(w, 2, lease);
    const first = await connect5(a.port, 'dev-6');
    await subscribe(first.c, 'u/#');
    // A is cut off from the channel but its lease is live: it cannot be asked, so B must not take the session.
    w.links.disconnect(1);
    const refused = await RawClient.open(b.port);
    refused.level = 5;
    refused.send({ type: 'connect', protocolName: 'MQTT', keepalive: 0, clientId: 'dev-6', will: null, username: null, password: null, ...v5('dev-6') });
    const ack = await refused.next('connack');
    assert.equal(ack.returnCode, ReasonCode.SERVER_UNAVAILABLE);
    assert.equal((await w.store.owner('session', 'dev-6'))?.owner, 1, 'still owned by A');
    refused.destroy();
    // A dies (its heartbeats stop): once its lease has expired the claim succeeds, and the session is resumed.
    a.kill();
    let resumed: { c: RawClient; present: boolean } | null = null;
    for (let i = 0; i < 100 && resumed === null; i++) {
      const c = await RawClient.open(b.port);
      c.level = 5;
      c.send({ type: 'connect', protocolName: 'MQTT', keepalive: 0, clientId: 'dev-6', will: null, username: null, password: null, ...v5('dev-6') });
      const r = await c.next('connack');
      if (r.returnCode === 0) resumed = { c, present: r.sessionPresent };
      else {
        c.destroy();
        await sleep(50);
      }
    }
    assert.ok(resumed !== null, 'resumed on B after A died');
    assert.equal(resumed.present, true);
    assert.equal((await w.store.owner('session', 'dev-6'))?.owner, 2);
    resumed.c.destroy();
    first.c.destroy();
  });

  it('a broker leaving hands its sessions over at once: its clients get 0x8B, the sessions are owned and queue elsewhere', async () => {
    const w = world();
    const a = await node(w, 1);
    const b = await node(w, 2);
    const online = await connect5(a.port, 'dev-7');
    await subscribe(online.c, 'l/#');
    const offline = await connect5(a.port, 'dev-8');
    await subscribe(offline.c, 'l/#');
    offline.c.send({ type: 'disconnect', reasonCode: 0 });
    await offline.c.waitClosed();
    await until(() => a.listener.hub.sessions.get('dev-8')?.conn === null, 'dev-8 offline on A');
    publish(a.engine, 'l/0', 'queued-on-a');
    await until(() => a.listener.hub.queueWrites() === null, 'queued on A');

    await a.cluster.leave();
    assert.equal((await online.c.next('disconnect')).reasonCode, ReasonCode.SERVER_SHUTTING_DOWN);
    assert.equal(a.listener.hub.sessions.size, 0, 'A holds no session any more');
    // B is the only broker left: it takes both (released rows) at its next reconcile, and loads them offline.
    b.cluster.kick();
    await until(() => b.cluster.owns('session', 'dev-7') !== null && b.cluster.owns('session', 'dev-8') !== null, 'B owns both sessions', 10_000);
    assert.ok(b.listener.hub.sessions.has('dev-7') && b.listener.hub.sessions.has('dev-8'));
    publish(b.engine, 'l/1', 'queued-on-b');
    await until(() => b.listener.hub.queueWrites() === null, 'queued on B');
    const back7 = await connect5(b.port, 'dev-7');
    const back8 = await connect5(b.port, 'dev-8');
    assert.equal(back7.present, true);
    assert.equal(back8.present, true);
    // dev-7 was online when l/0 went out: sent, never acknowledged, so it is re-sent on resume, before the rest.
    assert.deepEqual(await receive(back7.c, 2), ['queued-on-a', 'queued-on-b']);
    assert.deepEqual(await receive(back8.c, 2), ['queued-on-a', 'queued-on-b']);
    back7.c.destroy();
    back8.c.destroy();
    online.c.destroy();
  });

  it('a broker in cluster mode loads no stored session at start, only those it comes to own', async () => {
    const w = world();
    const state = JSON.stringify({ level: 5, expiry: 3600, subs: [{ f: 'x/#', q: 1 }], rel: [] });
    for (let i = 0; i < 5; i++)
      await w.sessions.putSession({ clientId: `stored-${i}`, protocol: 'mqtt', state, expiresAt: Date.now() + 3_600_000, updatedAt: Date.now() });
    const a = await node(w, 1);
    assert.equal(a.listener.hub.sessions.size, 0, 'nothing loaded at start');
    const { c, present } = await connect5(a.port, 'stored-3');
    assert.equal(present, true, 'a stored session is loaded when its client connects');
    assert.deepEqual([...a.listener.hub.sessions.keys()], ['stored-3']);
    c.destroy();
  });

  it("deleting a session on a broker that does not hold it ends it at its holder (admin API's delete)", async () => {
    const w = world();
    const a = await node(w, 1);
    const b = await node(w, 2);
    const { c } = await connect5(a.port, 'dev-9');
    await subscribe(c, 'd/#');
    assert.equal(await b.listener.hub.cluster!.delete('dev-9'), true);
    assert.equal((await c.next('disconnect')).reasonCode, ReasonCode.ADMINISTRATIVE_ACTION);
    assert.equal(a.listener.hub.sessions.has('dev-9'), false, 'ended at its holder');
    for (let i = 0; i < 100 && (await w.store.owner('session', 'dev-9')) !== null; i++) await sleep(10);
    assert.equal(await w.store.owner('session', 'dev-9'), null, 'its owner row went with it');
    assert.equal(await w.sessions.getSession('dev-9'), null);
    assert.equal(await b.listener.hub.cluster!.delete('dev-9'), false, 'nothing left to delete');
  });

  it('a single broker (no cluster) loads stored sessions at start, as before', async () => {
    const sessions = new MemorySessionStore();
    const storage = new MemoryStreams({ sessions });
    const engine = new Engine(storage, storage);
    await engine.load();
    const l1 = await startMqttListener({ engine, logger, brokerId: 1 }, { host: '127.0.0.1', port: 0 }, { sysIntervalMs: 0 });
    const { c } = await connect5(l1.address().port, 'solo');
    await subscribe(c, 's/#');
    c.send({ type: 'disconnect', reasonCode: 0 });
    await c.waitClosed();
    await l1.close();
    const engine2 = new Engine(storage, storage);
    await engine2.load();
    const l2 = await startMqttListener({ engine: engine2, logger, brokerId: 1 }, { host: '127.0.0.1', port: 0 }, { sysIntervalMs: 0 });
    try {
      assert.ok(l2.hub.sessions.has('solo'), 'loaded at start');
    } finally {
      await l2.close();
    }
  });
});
