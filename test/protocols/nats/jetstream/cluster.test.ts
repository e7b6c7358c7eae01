/**
 * JetStream in cluster mode, in one process: two brokers (Engine + JetStream + Cluster) over one shared stream
 * storage and metastore (MemoryStreams), one MemoryClusterStore and a LocalHub channel. The consumer store checks
 * epochs against the cluster store the way PostgreSQL's flowmq_owner_check does (tested against a real PostgreSQL
 * in test/storage/metastore/postgres-consumers.test.ts).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, Live, LocalHub, MemoryClusterStore, rendezvous } from '../../../../src/cluster/index.js';
import { dotsToUnified, Engine, makeMessage } from '../../../../src/core/index.js';
import { JetStream } from '../../../../src/protocols/nats/jetstream/index.js';
import { MemoryStreams } from '../../../helpers/memory-storage.js';
import { ackSubject, Client, Inbox, json, natsSubject, silent } from './harness.js';

const LEASE = 60_000;

interface Node {
  id: number;
  cluster: Cluster;
  live: Live;
  engine: Engine;
  js: JetStream;
  c: Client;
}

async function settle(...nodes: Node[]): Promise<void> {
  for (let i = 0; i < 3; i++) {
    for (const n of nodes) n.cluster.kick();
    await new Promise((r) => setTimeout(r, 30));
  }
}

async function until(what: string, fn: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function world(ids: number[], flushDelayMs = 5) {
  const store = new MemoryClusterStore();
  const hub = new LocalHub();
  const m = new MemoryStreams();
  // What PostgreSQL does in SQL for every fenced consumer write.
  m.consumerStore.fence = (name, epoch) => store.check('consumer', name, epoch);
  const nodes: Node[] = [];
  for (const id of ids) {
    const cluster = await Cluster.start({ store, info: { id, version: 't', endpoints: {} }, leaseMs: LEASE, logger: silent });
    cluster.channel = hub.channel(id);
    const engine = new Engine(m, m);
    // Live forwarding between the brokers, as in a broker (src/broker.ts starts it before any subscription).
    const live = await Live.start({ cluster, channel: cluster.channel, engine, logger: silent, syncMs: 50 });
    await engine.load();
    const js = new JetStream(engine, silent, { tickMs: 20, flushDelayMs, cluster });
    await js.start();
    cluster.begin();
    nodes.push({ id, cluster, live, engine, js, c: new Client(engine, js) });
  }
  await settle(...nodes);
  return {
    store,
    hub,
    m,
    nodes,
    /** A stream created through the first broker, then known to every broker (the streams part notifies). */
    async stream(name: string, subjects: string[]) {
      const r = await nodes[0].c.api(`$JS.API.STREAM.CREATE.${name}`, { name, subjects });
      assert.equal(r.error, undefined, JSON.stringify(r.error));
      for (const n of nodes.slice(1)) await n.engine.load();
    },
    /** The broker owning consumer "<stream>/<name>" and another one. */
    async roles(key: string): Promise<{ owner: Node; other: Node }> {
      const row = await store.owner('consumer', key);
      assert.ok(row && row.owner !== null, `${key} has an owner`);
      const owner = nodes.find((n) => n.id === row.owner)!;
      return { owner, other: nodes.find((n) => n !== owner)! };
    },
    async close() {
      for (const n of nodes) {
        await n.js.close();
        n.live.close();
        await n.cluster.close().catch(() => undefined);
        n.engine.close();
      }
    },
  };
}

describe('JetStream consumers in cluster mode', () => {
  it("a workqueue stream's consumers are placed with its partition; an overlapping one is refused, a stored one not served yet counting too", async () => {
    const w = await world([1, 2]);
    try {
      const [a, b] = w.nodes;
      const created = await a.c.api('$JS.API.STREAM.CREATE.WQ', { name: 'WQ', subjects: ['wq.>'], retention: 'workqueue' });
      assert.equal(created.error, undefined, JSON.stringify(created.error));
      await b.engine.load();
      const home = rendezvous('partition', 'WQ/0', [1, 2]);
      const cfg = (name: string, filter: string) => ({ stream_name: 'WQ', config: { durable_name: name, ack_policy: 'explicit', filter_subject: filter } });
      assert.equal((await b.c.api('$JS.API.CONSUMER.CREATE.WQ.x', cfg('x', 'wq.x.>'))).name, 'x');
      assert.equal((await w.store.owner('consumer', 'WQ/x'))?.owner, home, "placed with the stream's partition");
      // Overlapping with x through either broker: refused as nats-server refuses it.
      for (const n of [a, b]) {
        const r = await n.c.api('$JS.API.CONSUMER.CREATE.WQ.y', cfg('y', 'wq.>'));
        assert.deepEqual([r.error?.err_code, r.error?.description], [10100, 'filtered consumer not unique on workqueue stream']);
      }
      // A consumer stored but served by no broker yet (as after a failover, before it is taken) counts too.
      await w.m.consumerStore.putConsumer({
        stream: 'WQ',
        name: 'z',
        config: JSON.stringify({ durable_name: 'z', ack_policy: 'explicit', filter_subject: 'wq.z' }),
        createdAt: Date.now(),
        deliveredSeq: 0,
        deliveredConsumerSeq: 0,
        ackFloor: 0,
        acked: [],
      });
      const r = await a.c.api('$JS.API.CONSUMER.CREATE.WQ.y', cfg('y', 'wq.*'));
      assert.equal(r.error?.err_code, 10100, JSON.stringify(r));
      assert.equal((await b.c.api('$JS.API.CONSUMER.CREATE.WQ.y', cfg('y', 'wq.y'))).name, 'y', 'a disjoint filter is taken');
    } finally {
      await w.close();
    }
  });

  it('a durable consumer is created, fetched from and acked through a broker that does not own it', async () => {
    const w = await world([1, 2]);
    try {
      await w.stream('S', ['s.>']);
      const [a, b] = w.nodes;
      for (let i = 1; i <= 5; i++) assert.deepEqual(await a.c.publish(`s.${i}`, `m${i}`), { stream: 'S', seq: i });
      // Created through each broker in turn: one of the two requests is forwarded to the owner.
      const created = await b.c.api('$JS.API.CONSUMER.CREATE.S.d', { stream_name: 'S', config: { durable_name: 'd', ack_policy: 'explicit' } });
      assert.equal(created.name, 'd', JSON.stringify(created));
      const { owner, other } = await w.roles('S/d');
      assert.equal(owner.id, owner.cluster.placement('consumer', 'S/d'), 'the consumer lives at its placement broker');
      assert.equal((await other.c.api('$JS.API.CONSUMER.CREATE.S.d', { stream_name: 'S', config: { durable_name: 'd', ack_policy: 'explicit' } })).name, 'd');
      // Fetch through the broker that does not own it: deliveries come back through it.
      const got = await other.c.fetch('S', 'd', { batch: 3, no_wait: true }, 3);
      assert.deepEqual(got.map(natsSubject), ['s.1', 's.2', 's.3']);
      assert.equal(ackSubject(got[0]).split('.')[2], 'S');
      other.c.ack(got[0]);
      other.c.ack(got[1]);
      // An ack with a reply (ackAck) is confirmed through the non-owner too.
      const confirm = await other.c.ackSync(got[2]);
      assert.equal(confirm.payload.length, 0);
      const info = await other.c.api('$JS.API.CONSUMER.INFO.S.d');
      assert.equal(info.ack_floor.stream_seq, 3);
      assert.equal(info.delivered.stream_seq, 3);
      assert.equal(owner.js.figures().consumers, 1);
      assert.equal(other.js.figures().consumers, 0, 'the non-owner holds nothing');
      const fig = other.js.figures().cluster as Record<string, number>;
      assert.ok(fig.forwarded >= 3 && fig.acksForwarded >= 3 && fig.deliveriesReceived >= 4, JSON.stringify(fig));
      // NAMES through either broker lists it once.
      assert.deepEqual((await other.c.api('$JS.API.CONSUMER.NAMES.S')).consumers, ['d']);
      assert.deepEqual(
        (await owner.c.api('$JS.API.CONSUMER.LIST.S')).consumers.map((x: { name: string }) => x.name),
        ['d'],
      );
      // Deleted through the non-owner: the owner row goes with it.
      assert.equal((await other.c.api('$JS.API.CONSUMER.DELETE.S.d')).success, true);
      assert.equal(await w.store.owner('consumer', 'S/d'), null);
      assert.equal((await owner.c.api('$JS.API.CONSUMER.INFO.S.d')).error?.err_code, 10014);
    } finally {
      await w.close();
    }
  });

  it('an ephemeral consumer created through any broker gets its name where the request arrives and works from both', async () => {
    const w = await world([1, 2]);
    try {
      await w.stream('E', ['e.>']);
      const [a, b] = w.nodes;
      for (let i = 1; i <= 3; i++) await a.c.publish(`e.${i}`, `m${i}`);
      const names = new Set<string>();
      for (const n of [a, b, a, b]) {
        const r = await n.c.api('$JS.API.CONSUMER.CREATE.E', { stream_name: 'E', config: { ack_policy: 'explicit', filter_subject: 'e.2' } });
        assert.equal(r.error, undefined, JSON.stringify(r));
        names.add(r.name as string);
        const { other } = await w.roles(`E/${r.name as string}`);
        const got = await other.c.fetch('E', r.name as string, { batch: 5, no_wait: true }, 2);
        assert.deepEqual([natsSubject(got[0]), got[1].status], ['e.2', '408 Request Timeout']);
      }
      assert.equal(names.size, 4);
      // Listing through one broker shows all four, wherever they live.
      assert.equal((await b.c.api('$JS.API.CONSUMER.NAMES.E')).total, 4);
    } finally {
      await w.close();
    }
  });

  it('the owner dies: the consumer continues on the other broker from its acked position; the old owner is fenced', async () => {
    const w = await world([1, 2]);
    try {
      await w.stream('F', ['f.>']);
      const [a] = w.nodes;
      for (let i = 1; i <= 6; i++) await a.c.publish(`f.${i}`, `m${i}`);
      await a.c.api('$JS.API.CONSUMER.CREATE.F.d', { stream_name: 'F', config: { durable_name: 'd', ack_policy: 'explicit', ack_wait: 60e9 } });
      const { owner, other } = await w.roles('F/d');
      const got = await other.c.fetch('F', 'd', { batch: 3, no_wait: true }, 3);
      for (const m of got.slice(0, 2)) await other.c.ackSync(m);
      // The third is delivered, not acked: it comes again from the next owner.
      await until('the ack floor is stored', async () => (await w.m.getConsumer('F', 'd'))?.ackFloor === 2);

      // The owner stops (paused: no heartbeat, unreachable): past its lease the other broker takes the consumer.
      w.hub.disconnect(owner.id);
      assert.equal(await w.store.heartbeat(other.id, other.cluster.incarnation, 10 * LEASE), true);
      const base = Date.now();
      w.store.now = () => base + LEASE + 1000;
      await settle(other);
      await until('the other broker owns the consumer', () => other.cluster.owns('consumer', 'F/d') !== null);
      const row = await w.store.owner('consumer', 'F/d');
      assert.deepEqual([row?.owner, row?.epoch], [other.id, 2]);

      const next = await other.c.fetch('F', 'd', { batch: 4, no_wait: true }, 4);
      assert.deepEqual(next.map(natsSubject), ['f.3', 'f.4', 'f.5', 'f.6'], 'from the acked position: the unacked f.3 again, then the rest');
      assert.equal(ackSubject(next[0]).split('.')[4], '2', 'f.3 is a redelivery');
      for (const m of next) await other.c.ackSync(m);
      await until('the new owner stored its floor', async () => (await w.m.getConsumer('F', 'd'))?.ackFloor === 6);

      // The paused owner wakes up and serves its own client: its state write is refused (fenced) and it stops
      // serving the consumer; what the new owner stored stands.
      owner.c.pull('F', 'd', { batch: 1, no_wait: true });
      await until('the old owner was fenced', () => (owner.js.figures().cluster as Record<string, number>).fenced >= 1);
      await until('the old owner let the consumer go', () => owner.js.figures().consumers === 0);
      assert.equal((await w.m.getConsumer('F', 'd'))?.ackFloor, 6);
      assert.equal((await other.c.api('$JS.API.CONSUMER.INFO.F.d')).ack_floor.stream_seq, 6);
    } finally {
      await w.close();
    }
  });

  it('a broker leaving hands its consumers over with their state', async () => {
    // State writes are held back (a minute): only the handover's own write can carry the acks over.
    const w = await world([1, 2], 60_000);
    try {
      await w.stream('H', ['h.>']);
      const [a] = w.nodes;
      for (let i = 1; i <= 4; i++) await a.c.publish(`h.${i}`, `m${i}`);
      await a.c.api('$JS.API.CONSUMER.CREATE.H.d', { stream_name: 'H', config: { durable_name: 'd', ack_policy: 'explicit' } });
      const { owner, other } = await w.roles('H/d');
      const got = await owner.c.fetch('H', 'd', { batch: 2, no_wait: true }, 2);
      // Acked without waiting for the write: the handover writes the state before it lets go.
      owner.c.ack(got[0]);
      owner.c.ack(got[1]);
      await until('acked', async () => (await owner.c.api('$JS.API.CONSUMER.INFO.H.d')).ack_floor.stream_seq === 2);
      await owner.cluster.leave();
      await settle(other);
      const next = await other.c.fetch('H', 'd', { batch: 2, no_wait: true }, 2);
      assert.deepEqual(next.map(natsSubject), ['h.3', 'h.4']);
      assert.equal(other.cluster.owns('consumer', 'H/d'), 2);
    } finally {
      await w.close();
    }
  });
});

describe('JetStream API across brokers with live forwarding', () => {
  it('a request is answered once, by the broker it was published on, even when other brokers subscribe to everything', async () => {
    const w = await world([1, 2]);
    try {
      await w.stream('L', ['l.>']);
      const [a, b] = w.nodes;
      // A NATS wildcard subscriber on broker 1: every subject published on broker 2 is forwarded to broker 1,
      // $JS.API requests included; broker 1's JetStream must not answer them as well.
      const spy = new Inbox(a.engine, 'x');
      a.engine.unsubscribe(spy.sub);
      const all = a.engine.subscribe('>', spy, { qos: 0, rule: 'nats' });
      // (Broker 2's own JetStream subscription is not announced: broker 1's wildcard is the only remote interest.)
      await until("broker 2 sees broker 1's interest", () => b.live.remote > 0 && b.live.wants(dotsToUnified('$JS.API.STREAM.INFO.L')));
      const inbox = new Inbox(b.engine, '_INBOX.once');
      b.engine.publish(makeMessage(dotsToUnified('$JS.API.STREAM.INFO.L'), Buffer.alloc(0), { responseTopic: dotsToUnified('_INBOX.once.1') }));
      await inbox.waitFor(1);
      // A marker through the same path: once it arrived, a second answer would have too.
      await until('the request reached broker 1 by live forwarding', () => spy.got.some((m) => m.topic === dotsToUnified('$JS.API.STREAM.INFO.L')));
      b.engine.publish(makeMessage(dotsToUnified('$JS.API.STREAM.INFO.L'), Buffer.alloc(0), { responseTopic: dotsToUnified('_INBOX.once.2') }));
      await inbox.waitFor(2);
      await until('the marker request reached broker 1', () => spy.got.filter((m) => m.topic === dotsToUnified('$JS.API.STREAM.INFO.L')).length === 2);
      assert.deepEqual(
        inbox.got.map((m) => m.topic),
        [dotsToUnified('_INBOX.once.1'), dotsToUnified('_INBOX.once.2')],
      );
      assert.equal(json(inbox.got[0]).config.name, 'L');
      assert.equal(a.js.figures().apiRequests, 1, 'broker 1 served only the stream create made through it');
      a.engine.unsubscribe(all);
    } finally {
      await w.close();
    }
  });
});
