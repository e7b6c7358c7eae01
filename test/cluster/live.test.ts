/**
 * Live pub/sub across brokers in one process: several Engines, each with its Cluster over one MemoryClusterStore and
 * its end of a LocalHub, and the Live hook between them (src/cluster/live.ts, interest.ts).
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { Cluster, followControl, Live, LocalHub, LocalInterest, MemoryClusterStore, RemoteInterest } from '../../src/cluster/index.js';
import {
  Engine,
  liveKey,
  newPublishInfo,
  type LiveHook,
  type Message,
  type Subscriber,
  type SubscribeOptions,
  type Subscription,
} from '../../src/core/index.js';
import { Directory } from '../../src/control/index.js';
import { MemoryControlStore } from '../../src/storage/metastore/control-store.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

const logger = pino({ level: 'silent' });

interface Node {
  id: number;
  cluster: Cluster;
  engine: Engine;
  live: Live;
}

const open: Node[] = [];

async function broker(store: MemoryClusterStore, hub: LocalHub, id: number, leaseMs = 60_000): Promise<Node> {
  const cluster = await Cluster.start({ store, info: { id, version: 'test', endpoints: {} }, leaseMs, logger });
  cluster.channel = hub.channel(id);
  const m = new MemoryStreams();
  const engine = new Engine(m, m);
  const live = await Live.start({ cluster, channel: cluster.channel, engine, logger, syncMs: 50 });
  const n = { id, cluster, engine, live };
  open.push(n);
  return n;
}

async function cluster(count: number, leaseMs?: number): Promise<{ store: MemoryClusterStore; hub: LocalHub; nodes: Node[] }> {
  const store = new MemoryClusterStore();
  const hub = new LocalHub();
  const nodes: Node[] = [];
  for (let i = 1; i <= count; i++) nodes.push(await broker(store, hub, i, leaseMs));
  // Every broker sees the others (the heartbeat's view refresh, done at once here).
  for (const n of nodes) n.cluster.begin();
  await until(() => nodes.every((n) => n.cluster.brokers().filter((b) => b.alive).length === count), 'every broker sees every other');
  return { store, hub, nodes };
}

after(async () => {
  for (const n of open) {
    n.live.close();
    await n.cluster.close();
  }
});

async function until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Waits until `peer`'s table of broker `of` holds `size` entries. */
function tableOf(peer: Node, of: Node): number {
  return peer.live.remoteInterest.peer(of.id)?.size ?? -1;
}

class Collector implements Subscriber {
  readonly got: Message[] = [];
  constructor(readonly id: string) {}
  deliver(msg: Message, _subs: Subscription[]): void {
    this.got.push(msg);
  }
  topics(): string[] {
    return this.got.map((m) => m.topic);
  }
}

function msg(topic: string, payload = topic, extra: Partial<Message> = {}): Message {
  return { topic, payload: Buffer.from(payload), key: null, headers: [], timestamp: Date.now(), qos: 0, retain: false, ...extra };
}

const qos0: SubscribeOptions = { qos: 0 };

describe('interest table', () => {
  it('counts subscriptions per filter, sends deltas, and hands a late broker a snapshot', async () => {
    const { store, hub, nodes } = await cluster(2);
    const [a, b] = nodes;
    const s1 = a.engine.subscribe('sensors/+/t', new Collector('c1'), qos0);
    const s2 = a.engine.subscribe('sensors/+/t', new Collector('c2'), qos0);
    a.engine.subscribe('sensors.*.t', new Collector('n1'), { qos: 0, rule: 'nats' });
    await until(() => tableOf(b, a) === 2, "b knows a's two filters");
    assert.equal(a.live.local.size, 2, 'two subscriptions of one filter are one entry');
    a.engine.unsubscribe(s1);
    await until(() => a.live.local.size === 2 && a.live.stats.deltasSent >= 1, 'still subscribed');
    assert.equal(a.live.local.size, 2);
    a.engine.unsubscribe(s2);
    await until(() => tableOf(b, a) === 1, 'the last subscription of the filter removes it');
    // A broker joining late learns the table by snapshot.
    const c = await broker(store, hub, 3);
    c.cluster.begin();
    a.cluster.kick();
    b.cluster.kick();
    await until(() => tableOf(c, a) === 1 && tableOf(a, c) === 0 && tableOf(b, c) === 0, 'the new broker and the others exchanged tables');
    assert.ok(c.live.stats.snapshotsRequested >= 2);
  });

  it('drops the table of a broker that left, and follows a broker registered again as a new incarnation', async () => {
    const { store, nodes } = await cluster(3, 400);
    const [a, b, c] = nodes;
    a.engine.subscribe('a/#', new Collector('a'), qos0);
    b.engine.subscribe('b/#', new Collector('b'), qos0);
    await until(() => tableOf(c, a) === 1 && tableOf(c, b) === 1 && tableOf(a, b) === 1, 'tables');
    // Every lease expires at once (the store's clock jumps): each broker registers again as a new incarnation.
    const before = [a, b, c].map((n) => n.cluster.incarnation);
    store.now = () => Date.now() + 1000;
    await until(() => [a, b, c].every((n, i) => n.cluster.incarnation !== before[i]), 'new incarnations');
    await until(
      () =>
        c.live.remoteInterest.peer(a.id)?.incarnation === a.cluster.incarnation &&
        c.live.remoteInterest.peer(b.id)?.incarnation === b.cluster.incarnation &&
        tableOf(c, a) === 1 &&
        tableOf(c, b) === 1,
      'c follows the new incarnations',
    );
    c.engine.publish(msg('a/after'));
    const got = new Collector('late');
    a.engine.subscribe('a/after-marker', got, qos0);
    await until(() => tableOf(c, a) === 2, "the new incarnation's deltas apply");
    c.engine.publish(msg('a/after-marker'));
    await until(() => got.got.length === 1, 'forwarding works again');
    // b leaves: the others drop its table at once (membership), nothing is sent to it any more.
    await b.cluster.leave();
    a.cluster.kick();
    c.cluster.kick();
    await until(() => c.live.remoteInterest.peer(b.id) === undefined && a.live.remoteInterest.peer(b.id) === undefined, "b's table dropped");
    const sent = c.live.stats.forwardedMessages;
    c.engine.publish(msg('b/1'));
    assert.equal(c.live.stats.forwardedMessages, sent, 'nothing forwarded for a filter only the departed broker had');
  });

  it('a missed delta is noticed by the next beat and repaired with a snapshot', () => {
    const local = new LocalInterest('inc-1');
    const remote = new RemoteInterest();
    local.add(liveKey('mqtt', undefined, 'a/#'), 'a/#', 'mqtt', undefined);
    remote.replace(7, local.snapshot());
    local.takeDelta(); // seq 1: lost on the way
    local.add(liveKey('mqtt', undefined, 'b/#'), 'b/#', 'mqtt', undefined);
    assert.equal(remote.apply(7, local.takeDelta()!), false, 'seq 2 after seq 0 is a gap');
    remote.replace(7, local.snapshot());
    assert.deepEqual([remote.wants('a/x'), remote.wants('b/x'), remote.wants('c/x')], [true, true, false]);
    assert.equal(remote.apply(7, { i: 'inc-2', s: 3, o: [] }), false, 'a new incarnation needs a snapshot');
    remote.drop(7);
    assert.equal(remote.size, 0);
  });

  it('applies the MQTT $ rule as the engine does', () => {
    const local = new LocalInterest('i');
    const remote = new RemoteInterest();
    local.add(liveKey('mqtt', undefined, '#'), '#', 'mqtt', undefined);
    remote.replace(2, local.snapshot());
    assert.equal(remote.wants('$SYS/x'), false);
    assert.equal(remote.wants('a'), true);
    const l2 = new LocalInterest('j');
    l2.add(liveKey('nats', undefined, '>'), '>', 'nats', undefined);
    remote.replace(3, l2.snapshot());
    assert.equal(remote.wants('$JS/API/INFO'), true, 'NATS > matches $ subjects');
  });
});

describe('live forwarding', () => {
  it('forwards a publish only to the brokers that want it, once each, and never back', async () => {
    const { nodes } = await cluster(3);
    const [a, b, c] = nodes;
    const onA = new Collector('a');
    const onB = new Collector('b');
    const onB2 = new Collector('b2');
    a.engine.subscribe('x/#', onA, qos0);
    b.engine.subscribe('y/#', onB, qos0);
    b.engine.subscribe('y/+', onB2, qos0);
    await until(() => tableOf(c, a) === 1 && tableOf(c, b) === 2 && tableOf(a, b) === 2 && tableOf(b, a) === 1, 'tables exchanged');
    for (const t of ['x/1', 'y/1', 'z/1', 'x/2', 'y/2']) c.engine.publish(msg(t));
    // Markers: the channel keeps order per peer, so once they arrive everything sent before has.
    c.engine.publish(msg('x/end'));
    c.engine.publish(msg('y/end'));
    await until(() => onA.got.length >= 3 && onB.got.length >= 3 && onB2.got.length >= 3, 'markers arrived');
    assert.deepEqual(onA.topics(), ['x/1', 'x/2', 'x/end']);
    assert.deepEqual(onB.topics(), ['y/1', 'y/2', 'y/end']);
    assert.deepEqual(onB2.topics(), ['y/1', 'y/2', 'y/end']);
    assert.equal(c.live.stats.forwardedMessages, 6, 'z/1 went nowhere; b got each of its messages once for two filters');
    assert.equal(a.live.stats.receivedMessages, 3);
    assert.equal(b.live.stats.receivedMessages, 3);
    assert.ok(c.live.stats.forwardedBatches <= 4, `batched (${c.live.stats.forwardedBatches} batches for 6 messages)`);
    // No loop: a message b received from c is not forwarded again (a wants nothing of y/#) and a publish on a reaches
    // b once, and nothing comes back to a.
    a.engine.subscribe('y/#', onA, qos0);
    await until(() => tableOf(b, a) === 2 && tableOf(c, a) === 2, 'a wants y/# too');
    a.engine.publish(msg('y/from-a'));
    b.engine.publish(msg('x/marker-from-b'));
    await until(() => onB.got.length === 4 && onA.got.length === 5, 'delivered');
    assert.deepEqual(onA.topics().slice(3), ['y/from-a', 'x/marker-from-b']);
    assert.equal(a.live.stats.receivedMessages, 4, 'only the marker came to a: its own publish did not come back');
    assert.equal(b.live.stats.forwardedMessages, 1, 'b forwarded only its own publish');
    assert.equal(onB.topics().at(-1), 'y/from-a');
  });

  it("local subscriptions (JetStream's API) are neither advertised nor reached by forwarded messages; $SYS stays home", async () => {
    const { nodes } = await cluster(2);
    const [a, b] = nodes;
    const jsA = new Collector('jsA');
    const jsB = new Collector('jsB');
    a.engine.subscribe('$JS.API.>', jsA, { qos: 0, rule: 'nats', local: true });
    const localB = b.engine.subscribe('$JS.API.>', jsB, { qos: 0, rule: 'nats', local: true });
    const everything = new Collector('all');
    b.engine.subscribe('>', everything, { qos: 0, rule: 'nats' });
    const sys = new Collector('sys');
    b.engine.subscribe('$SYS/#', sys, qos0);
    await until(() => tableOf(a, b) === 2, "a knows b's two advertised filters");
    assert.equal(b.live.local.size, 2, 'the local subscription is not in the interest table');
    a.engine.publish(msg('$SYS/broker/uptime', '1'));
    a.engine.publish(msg('$JS/API/INFO', 'req'));
    await until(() => everything.got.length === 1, 'the plain subscriber on b got the request');
    assert.deepEqual(jsA.topics(), ['$JS/API/INFO'], 'handled once, where it was published');
    assert.deepEqual(jsB.got, [], "not by b's JetStream too");
    assert.deepEqual(sys.got, [], '$SYS of another broker is not forwarded');
    b.engine.unsubscribe(localB);
    assert.equal(b.live.local.size, 2);
  });

  it("batches: a tick's messages travel as one channel message per peer, a tick's interest changes as one delta", async () => {
    const { nodes } = await cluster(3);
    const [a, b, c] = nodes;
    const deltas = a.live.stats.deltasSent;
    const subs: Subscription[] = [];
    const got = new Collector('many');
    for (let i = 0; i < 500; i++) subs.push(a.engine.subscribe(`dev/${i}/#`, got, qos0));
    await until(() => tableOf(b, a) === 500 && tableOf(c, a) === 500, 'the peers know the 500 filters');
    assert.equal(a.live.stats.deltasSent - deltas, 1, 'one delta for 500 subscriptions made in one tick');
    const batches = [b, c].map((n) => n.live.stats.forwardedBatches);
    const sent = [b, c].map((n) => n.live.stats.forwardedMessages);
    for (let i = 0; i < 500; i++) b.engine.publish(msg(`dev/${i}/t`, String(i)));
    for (let i = 0; i < 500; i++) c.engine.publish(msg(`dev/${i}/t`, String(i)));
    await until(() => got.got.length === 1000, 'every message arrived');
    assert.deepEqual(
      [b, c].map((n, k) => n.live.stats.forwardedMessages - sent[k]),
      [500, 500],
    );
    assert.deepEqual(
      [b, c].map((n, k) => n.live.stats.forwardedBatches - batches[k]),
      [1, 1],
      "one batch per peer for a tick's 500 messages",
    );
    const run = Array.from({ length: 500 }, (_, i) => String(i));
    assert.deepEqual(
      got.got.map((m) => m.payload.toString()),
      [...run, ...run],
      "each broker's batch whole and in publish order",
    );
    for (const s of subs) a.engine.unsubscribe(s);
    await until(() => tableOf(b, a) === 0 && tableOf(c, a) === 0, 'all removed');
  });

  it('keeps every property of a forwarded message', async () => {
    const { nodes } = await cluster(2);
    const [a, b] = nodes;
    const got = new Collector('p');
    b.engine.subscribe('props/#', got, { qos: 1 });
    await until(() => tableOf(a, b) === 1, 'table');
    const m = msg('props/1', 'hello', {
      deliverTopic: 'orders/7',
      status: '503',
      responseTopic: 'replies/1',
      correlationData: Buffer.from('c'),
      key: Buffer.from('k'),
      headers: [
        { key: 'h', value: Buffer.from('v') },
        { key: 'n', value: null },
      ],
      qos: 1,
      expiresAt: Date.now() + 60_000,
    });
    a.engine.publish(m);
    await until(() => got.got.length === 1, 'delivered');
    const r = got.got[0];
    assert.equal(r.payload.toString(), 'hello');
    assert.equal(r.key?.toString(), 'k');
    assert.deepEqual(
      r.headers.map((h) => [h.key, h.value?.toString() ?? null]),
      [
        ['h', 'v'],
        ['n', null],
      ],
    );
    assert.equal(r.qos, 1);
    assert.equal(r.expiresAt, m.expiresAt);
    assert.equal(r.deliverTopic, 'orders/7', 'delivery-only properties travel beside the stored encoding');
    assert.equal(r.status, '503');
    assert.equal(r.responseTopic, 'replies/1');
    assert.equal(r.correlationData?.toString(), 'c');
  });

  it('delivers each message of a shared group spanning brokers to exactly one member', async () => {
    const { nodes } = await cluster(3);
    const [a, b, c] = nodes;
    const members: Collector[] = [];
    const join = (n: Node, name: string, filter: string, rule: 'mqtt' | 'nats') => {
      const m = new Collector(name);
      members.push(m);
      n.engine.subscribe(filter, m, { qos: 0, group: 'g', rule });
      return m;
    };
    const a1 = join(a, 'a1', 'jobs/#', 'mqtt');
    const a2 = join(a, 'a2', 'jobs/#', 'mqtt');
    const b1 = join(b, 'b1', 'jobs/#', 'mqtt');
    const b2 = join(b, 'b2', 'jobs/#', 'mqtt');
    const c1 = join(c, 'c1', 'jobs/#', 'mqtt');
    // A plain subscriber beside the group gets every message, and a NATS queue group of the same name is another group.
    const all = new Collector('all');
    b.engine.subscribe('jobs/#', all, qos0);
    const q1 = new Collector('q1');
    const q2 = new Collector('q2');
    a.engine.subscribe('jobs.>', q1, { qos: 0, group: 'g', rule: 'nats' });
    c.engine.subscribe('jobs.>', q2, { qos: 0, group: 'g', rule: 'nats' });
    await until(
      () => tableOf(a, b) === 2 && tableOf(a, c) === 2 && tableOf(b, a) === 2 && tableOf(c, a) === 2 && tableOf(b, c) === 2 && tableOf(c, b) === 2,
      'tables',
    );
    const N = 300;
    for (let i = 0; i < N; i++) [a, b, c][i % 3].engine.publish(msg(`jobs/${i}`, String(i)));
    await until(() => all.got.length === N, 'the plain subscriber got everything');
    const mqttMembers = [a1, a2, b1, b2, c1];
    await until(() => mqttMembers.reduce((s, m) => s + m.got.length, 0) >= N && q1.got.length + q2.got.length >= N, 'every message reached a member');
    // Markers through every broker pair (ordered channels): nothing is still on its way.
    const mark = new Collector('mark');
    for (const n of nodes) n.engine.subscribe('mark/#', mark, qos0);
    await until(() => nodes.every((n) => nodes.every((o) => o === n || tableOf(n, o) === 3)), 'mark tables');
    for (const n of nodes) n.engine.publish(msg(`mark/${n.id}`));
    await until(() => mark.got.length === 9, 'markers');
    const seen = new Map<string, number>();
    for (const m of mqttMembers) for (const x of m.got) seen.set(x.topic, (seen.get(x.topic) ?? 0) + 1);
    assert.equal(seen.size, N);
    assert.ok(
      [...seen.values()].every((v) => v === 1),
      'each message once among the MQTT group',
    );
    const qs = new Set([...q1.got, ...q2.got].map((x) => x.topic));
    assert.equal(q1.got.length + q2.got.length, N);
    assert.equal(qs.size, N, 'each message once among the NATS queue group');
    for (const m of [...mqttMembers, q1, q2]) assert.ok(m.got.length > 0, `${m.id} got a share`);
    // Brokers are picked round robin: each broker's members together got about a third.
    const perBroker = [a1.got.length + a2.got.length, b1.got.length + b2.got.length, c1.got.length];
    for (const n of perBroker) assert.ok(n > N / 6, `a broker's share ${perBroker}`);
  });

  it('a shared group skips a broker the channel cannot reach (killed, lease not expired yet): nothing is lost', async () => {
    const { hub, nodes } = await cluster(3);
    const [a, b, c] = nodes;
    const ma = new Collector('ma');
    const mb = new Collector('mb');
    const mc = new Collector('mc');
    a.engine.subscribe('work/#', ma, { qos: 0, group: 'w' });
    b.engine.subscribe('work/#', mb, { qos: 0, group: 'w' });
    c.engine.subscribe('work/#', mc, { qos: 0, group: 'w' });
    await until(() => tableOf(a, b) === 1 && tableOf(a, c) === 1, 'tables');
    // c cannot be reached any more (its lease still runs): a notices at its next beat.
    hub.disconnect(c.id);
    await until(() => (a.live as unknown as { unreachable: Set<number> | null }).unreachable?.has(c.id) === true, "a's beat saw c unreachable");
    const N = 60;
    for (let i = 0; i < N; i++) a.engine.publish(msg(`work/${i}`));
    const mark = new Collector('mark');
    b.engine.subscribe('mark/#', mark, qos0);
    await until(() => tableOf(a, b) === 2, 'mark table');
    a.engine.publish(msg('mark/1'));
    await until(() => mark.got.length === 1, 'marker');
    assert.equal(ma.got.length + mb.got.length, N, `every message reached a reachable member (${ma.got.length} + ${mb.got.length}, ${mc.got.length} on c)`);
    assert.ok(ma.got.length > 0 && mb.got.length > 0);
    hub.reconnect(c.id);
  });

  it('costs nothing while no other broker has interest', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    let calls = 0;
    const hook: LiveHook = {
      subscribed() {},
      unsubscribed() {},
      remote: 0,
      skip: null,
      forward() {
        calls++;
        return 0;
      },
      wants() {
        calls++;
        return false;
      },
      retainedChanged() {},
      divert() {
        calls++;
        return false;
      },
      takeAcked() {
        return null;
      },
    };
    engine.live = hook;
    const got = new Collector('x');
    engine.subscribe('a/#', got, qos0);
    const info = newPublishInfo();
    engine.publish(msg('a/1'), info);
    assert.equal(engine.hasLiveSubscribers('b/1'), false);
    assert.equal(calls, 0, 'neither forward nor wants is called while remote is 0');
    assert.equal(info.delivered, 1);
    (hook as { remote: number }).remote = 1;
    engine.publish(msg('a/2'));
    assert.equal(calls, 1);
  });
});

describe('request/reply and no-responders across brokers', () => {
  it('a NATS-style request on a reaches a responder on b and its reply comes back', async () => {
    const { nodes } = await cluster(2);
    const [a, b] = nodes;
    const replies = new Collector('requester');
    // The responder answers on the reply subject it finds in a header (as the NATS adapter carries reply-to).
    const responder: Subscriber = {
      id: 'responder',
      deliver(m) {
        const to = m.headers.find((h) => h.key === 'reply')!.value!.toString();
        b.engine.publish(msg(to, `re:${m.payload.toString()}`));
      },
    };
    b.engine.subscribe('svc.echo', responder, { qos: 0, rule: 'nats', group: 'workers' });
    await until(() => tableOf(a, b) === 1, 'a knows the responder');
    assert.equal(a.engine.hasLiveSubscribers('svc/echo'), true, 'a sees the remote responder');
    // The requester subscribes its inbox and publishes at once: its interest reaches b before the request does.
    a.engine.subscribe('_INBOX.r1.*', replies, { qos: 0, rule: 'nats' });
    const info = newPublishInfo();
    a.engine.publish(msg('svc/echo', 'ping', { headers: [{ key: 'reply', value: Buffer.from('_INBOX/r1/1') }] }), info);
    assert.equal(info.delivered, 1, 'counted as delivered (no no-responders answer)');
    await until(() => replies.got.length === 1, 'the reply came back');
    assert.equal(replies.got[0].payload.toString(), 're:ping');
  });
});

describe('retained messages across brokers', () => {
  it('a retained message set on one broker is seen on the others, and cleared', async () => {
    const { nodes } = await cluster(3);
    const [a, b, c] = nodes;
    await a.engine.publish(msg('state/door', 'open', { retain: true }));
    await until(
      () => b.engine.retained.get('state/door')?.payload.toString() === 'open' && c.engine.retained.get('state/door') !== undefined,
      'retained everywhere',
    );
    // Too big for a notification: fetched from the broker that has it.
    const big = Buffer.alloc(20_000, 7);
    await b.engine.publish({ ...msg('state/big'), payload: big, retain: true });
    await until(
      () => a.engine.retained.get('state/big')?.payload.equals(big) === true && c.engine.retained.get('state/big') !== undefined,
      'big retained everywhere',
    );
    // Cleared through the admin API's path on one broker: gone everywhere.
    assert.equal(await a.engine.clearRetained('state/big'), true);
    await until(
      () => b.engine.retained.get('state/big') === undefined && c.engine.retained.get('state/big') === undefined,
      'cleared by the admin path everywhere',
    );
    // Cleared on a broker that may not have had it in memory.
    c.engine.applyRetained('state/door', null);
    await c.engine.publish(msg('state/door', '', { retain: true }));
    await until(() => a.engine.retained.get('state/door') === undefined && b.engine.retained.get('state/door') === undefined, 'cleared everywhere');
  });
});

describe('users and policies across brokers', () => {
  it('a change made through one broker applies on another at once (control notify)', async () => {
    const { nodes } = await cluster(2);
    const [a, b] = nodes;
    const store = new MemoryControlStore();
    const hasher = async () => {
      throw new Error('no passwords here');
    };
    const da = await Directory.open({ store, hasher });
    const db = await Directory.open({ store, hasher });
    try {
      await followControl(a.cluster, da, 60_000, logger);
      await followControl(b.cluster, db, 60_000, logger);
      await da.putNamespace({ name: 'tenant-x' });
      await until(() => db.namespace('tenant-x') !== undefined, 'b refreshed on the notify');
    } finally {
      da.close();
      db.close();
    }
  });
});

/**
 * A broker's persistent sessions as the live side sees them (Engine.durable): owned while the session row names this
 * broker, "stored" when the write promise of the tick settles (held back by `gate` to prove the publisher waits).
 */
class FakeSessions {
  readonly owned = new Set<string>();
  gate: Promise<void> | null = null;
  constructor(private readonly node: Node) {
    node.engine.durable = this;
  }
  holds(key: string): { state: 'owned'; token: unknown } | { state: 'elsewhere' | 'nothing' } {
    return this.owned.has(key) && this.node.cluster.owns('session', key) !== null ? { state: 'owned', token: key } : { state: 'elsewhere' };
  }
  written(): Promise<void> | null {
    return this.gate;
  }
  stored(key: string): boolean {
    return this.owned.has(key);
  }
}

describe('QoS 1/2 publishes to persistent sessions of other brokers (issue 30)', () => {
  const sessionKind = (n: Node) => n.cluster.register('session', { sticky: true, acquire: () => Promise.resolve(), release: () => Promise.resolve() });
  const durable = (key: string): SubscribeOptions => ({ qos: 1, durable: key });
  const qos1 = (topic: string, payload = topic) => msg(topic, payload, { qos: 1 });

  it('are acknowledged once the owner stored them, and held while it cannot be reached until the next owner takes the session, in order', async () => {
    const { hub, nodes } = await cluster(3);
    const [a, b, c] = nodes;
    for (const n of nodes) sessionKind(n);
    const sb = new FakeSessions(b);
    const sc = new FakeSessions(c);
    await b.cluster.claim('session', 'S');
    sb.owned.add('S');
    const onB = new Collector('S@b');
    const subB = b.engine.subscribe('dev/#', onB, durable('S'));
    const plain = new Collector('plain@b');
    b.engine.subscribe('dev/#', plain, { qos: 1 });
    await until(() => a.live.remoteInterest.durable.size === 1 && tableOf(a, b) === 1, "a knows b's durable entry");

    // Stored by b: the publish waits for b's write.
    let release!: () => void;
    sb.gate = new Promise((r) => (release = r));
    let acked = false;
    const p1 = a.engine.publish(qos1('dev/1', 'm1'), undefined, true);
    assert.ok(p1 !== null, 'an acked publish reaching a persistent session of b waits');
    void p1.then(() => (acked = true));
    await until(() => onB.got.length === 1 && plain.got.length === 1, 'b delivered it');
    await new Promise((r) => setTimeout(r, 30));
    assert.equal(acked, false, 'not acknowledged before b stored it');
    release();
    sb.gate = null;
    await p1;
    // QoS 0 and publishes nobody waits for stay one-way.
    assert.equal(a.engine.publish(msg('dev/q0'), undefined, true), null);
    assert.equal(a.engine.publish(qos1('dev/noack')), null);
    await until(() => onB.got.length === 3, 'one-way deliveries');

    // b cannot be reached: held at a; the session moves to c (b released it, c claimed it and subscribed).
    hub.disconnect(b.id);
    const waits: Array<Promise<void>> = [];
    for (let i = 2; i <= 6; i++) waits.push(a.engine.publish(qos1(`dev/${i}`, `m${i}`), undefined, true)!);
    await until(() => a.live.durable.heldSessions === 1, 'held for S');
    let done = 0;
    for (const w of waits) void w.then(() => done++);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(done, 0, 'nothing acknowledged while the owner cannot be reached');
    b.engine.unsubscribe(subB);
    sb.owned.delete('S');
    await b.cluster.release('session', 'S');
    // Published while the session has no owner: held behind the others.
    waits.push(a.engine.publish(qos1('dev/7', 'm7'), undefined, true)!);
    await c.cluster.claim('session', 'S');
    sc.owned.add('S');
    const onC = new Collector('S@c');
    c.engine.subscribe('dev/#', onC, durable('S'));
    await Promise.all(waits);
    assert.deepEqual(
      onC.got.map((m) => m.payload.toString()),
      ['m2', 'm3', 'm4', 'm5', 'm6', 'm7'],
      'every held message stored at the next owner, in order',
    );
    assert.equal(a.live.durable.heldSessions, 0);
    // Then straight to c.
    await until(() => a.live.remoteInterest.brokersOf('S')?.has(c.id) === true, "a knows c's durable entry");
    await a.engine.publish(qos1('dev/8', 'm8'), undefined, true);
    assert.equal(onC.got.at(-1)?.payload.toString(), 'm8');
    assert.deepEqual(onC.got.map((m) => m.payload.toString()).slice(6), ['m8']);
    hub.reconnect(b.id);
  });

  it('a session that ended (no owner row) is not waited for', async () => {
    const { hub, nodes } = await cluster(2);
    const [a, b] = nodes;
    for (const n of nodes) sessionKind(n);
    const sb = new FakeSessions(b);
    await b.cluster.claim('session', 'E');
    sb.owned.add('E');
    b.engine.subscribe('end/#', new Collector('E@b'), durable('E'));
    await until(() => a.live.remoteInterest.durable.size === 1, "a knows b's durable entry");
    hub.disconnect(b.id);
    const w = a.engine.publish(qos1('end/1'), undefined, true)!;
    await until(() => a.live.durable.heldSessions === 1, 'held');
    await b.cluster.forget('session', 'E');
    await w;
    assert.equal(a.live.durable.stats.gone, 1);
    hub.reconnect(b.id);
  });

  it('a session on a broker of channel version 3 (a rolling upgrade) is not waited for: one-way as before', async () => {
    const { hub, nodes } = await cluster(2);
    const [a, b] = nodes;
    for (const n of nodes) sessionKind(n);
    const sb = new FakeSessions(b);
    await b.cluster.claim('session', 'V');
    sb.owned.add('V');
    const onB = new Collector('V@b');
    b.engine.subscribe('old/#', onB, durable('V'));
    await until(() => a.live.remoteInterest.durable.size === 1, "a knows b's durable entry");
    hub.versions.set(b.id, 3);
    assert.equal(a.engine.publish(qos1('old/1'), undefined, true), null, 'nothing to wait for');
    await until(() => onB.got.length === 1, 'delivered one-way');
    hub.versions.delete(b.id);
  });

  it('announces durable entries to version 4 peers in fields older brokers ignore', () => {
    const l = new LocalInterest('inc');
    l.add(liveKey('mqtt', undefined, 'a/#'), 'a/#', 'mqtt', undefined);
    l.addDurable('S', 'a/#');
    const d = l.takeDelta()!;
    assert.deepEqual(d.o, [[1, 'm', 'a/#', null]]);
    assert.deepEqual(d.d, [[1, 'S', 'a/#']]);
    const r = new RemoteInterest();
    r.replace(2, { i: 'inc', s: 0, e: [] });
    assert.equal(r.apply(2, d), true);
    assert.equal(r.durable.size, 1);
    // The broker dies: the entry stays as an orphan until the session is announced elsewhere.
    r.drop(2, true);
    assert.equal(r.durable.size, 1);
    assert.equal(r.orphans.size, 1);
    r.replace(3, { i: 'inc3', s: 0, e: [], ds: [['S', 'a/#']] });
    assert.equal(r.orphans.size, 0);
    assert.equal(r.durable.size, 1);
    assert.deepEqual([...r.brokersOf('S')!.keys()], [3]);
  });

  it('a session that moves off a live broker (op 2) stays as an orphan for its next owner; a plain remove (op 0) does not', () => {
    const l = new LocalInterest('inc');
    l.addDurable('S', 'a/#');
    l.addDurable('T', 'b/#');
    const r = new RemoteInterest();
    r.replace(2, { i: 'inc', s: 0, e: [] });
    assert.equal(r.apply(2, l.takeDelta()!), true);
    // S is lost with the lease (or handed over), T unsubscribed: one delta.
    assert.equal(l.removeDurable('S', 'a/#', true), true);
    assert.equal(l.removeDurable('T', 'b/#'), true);
    const d = l.takeDelta()!;
    assert.deepEqual(d.d, [
      [2, 'S', 'a/#'],
      [0, 'T', 'b/#'],
    ]);
    assert.equal(r.apply(2, d), true);
    assert.deepEqual([...r.orphans.keys()], ['S']);
    assert.equal(r.durable.size, 1, "S's entry, as an orphan: a QoS 1 publish to a/x is held for S's next owner");
    assert.equal(r.brokersOf('S'), undefined);
    // The next owner announces S: the orphan goes.
    r.replace(3, { i: 'inc3', s: 0, e: [], ds: [['S', 'a/#']] });
    assert.equal(r.orphans.size, 0);
    assert.deepEqual([...r.brokersOf('S')!.keys()], [3]);
    // Announced by the next owner before the old one's `moved` arrives: no orphan.
    r.addOrphan(2, 'S', 'a/#');
    assert.equal(r.orphans.size, 0);
  });
});
