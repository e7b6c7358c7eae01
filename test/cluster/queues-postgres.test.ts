/**
 * Cluster queues over a real PostgreSQL: queue writes fenced by the queue's owner epoch
 * (`flowmq_owner_check('queue', name, epoch)` in the queue store's transaction), so that a paused former owner can
 * never write a queue another broker took over.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { Cluster, LocalHub, rendezvous } from '../../src/cluster/index.js';
import { PostgresClusterStore } from '../../src/cluster/pg-store.js';
import { ClusterQueues } from '../../src/cluster/queues.js';
import { Engine, isFlowError, makeMessage, MemoryStore, type QueueConsumer, type QueueDelivery } from '../../src/core/index.js';
import { PostgresQueueStore } from '../../src/storage/queues/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';

const logger = pino({ level: 'silent' });

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const fenced = (e: unknown) => isFlowError(e) && e.code === 'FENCED';

/** Brokers on one database and one in-process channel hub (500 ms lease), started by id, closed together. */
async function brokers(url: string) {
  const hub = new LocalHub();
  const catalog = new MemoryStore();
  const made: Array<{ cluster: Cluster; engine: Engine; qs: PostgresQueueStore; cs: PostgresClusterStore; close(): void }> = [];
  const start = async (id: number) => {
    const cs = await PostgresClusterStore.open({ url });
    const qs = await PostgresQueueStore.open({ url });
    const cluster = await Cluster.start({ store: cs, info: { id, version: 'test', endpoints: {} }, leaseMs: 500, logger });
    cluster.channel = hub.channel(id);
    const engine = new Engine(new MemoryStreams(), catalog, qs);
    const close = await ClusterQueues.open(engine, cluster, logger);
    await engine.load();
    cluster.begin();
    const b = { cluster, engine, qs, cs, close };
    made.push(b);
    return b;
  };
  const closeAll = async () => {
    for (const m of made) {
      m.close();
      m.engine.close();
      await m.cluster.close().catch(() => undefined);
      await m.qs.close();
      await m.cs.close();
    }
  };
  return { hub, start, closeAll };
}

/** The payloads a no-ack consumer of `name` on `engine` receives, as they come. */
function collect(engine: Engine, name: string): string[] {
  const got: string[] = [];
  const sink: QueueConsumer = {
    tag: 't',
    owner: 'o',
    noAck: true,
    hasCredit: () => true,
    deliver: (d: QueueDelivery) => void got.push(d.msg.payload.toString()),
  };
  engine.getQueue(name)!.consume(sink);
  return got;
}

describe('cluster queues over PostgreSQL', () => {
  let server: PostgresServer;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server.stop();
  });

  it("fences a queue's writes by its owner epoch: the former owner's appends, removes and purges are refused", async () => {
    const url = await server.createDatabase();
    const cs = await PostgresClusterStore.open({ url });
    const old = await PostgresQueueStore.open({ url });
    const next = await PostgresQueueStore.open({ url });
    try {
      await cs.register({ id: 1, incarnation: 'a', version: 't', startedAt: 0, endpoints: {} }, 200);
      const r1 = await cs.claim('queue', 'q', 1, 'a');
      assert.equal(r1.owner, 1);
      await old.openQueue('q');
      old.fence('q', r1.epoch);
      await old.append('q', [{ id: 1, data: Buffer.from('one') }]);
      // Broker 1's lease runs out (paused); broker 2 takes the queue.
      await new Promise((r) => setTimeout(r, 300));
      await cs.register({ id: 2, incarnation: 'b', version: 't', startedAt: 0, endpoints: {} }, 60_000);
      const r2 = await cs.claim('queue', 'q', 2, 'b');
      assert.equal(r2.owner, 2);
      assert.ok(r2.epoch > r1.epoch);
      next.fence('q', r2.epoch);
      // The former owner wakes up and writes: every write is refused and changes nothing.
      await assert.rejects(old.append('q', [{ id: 2, data: Buffer.from('late') }]), fenced);
      await assert.rejects(old.remove('q', [1]), fenced);
      await assert.rejects(old.setDeliveries('q', 1, 3), fenced);
      await assert.rejects(old.purge('q'), fenced);
      assert.deepEqual(
        (await next.read('q', 0, 10)).map((m) => [m.id, m.data.toString(), m.deliveries]),
        [[1, 'one', 0]],
      );
      // Reads are not fenced; the new owner writes.
      await next.append('q', [{ id: 2, data: Buffer.from('two') }]);
      await next.remove('q', [1]);
      assert.deepEqual(
        (await old.read('q', 0, 10)).map((m) => m.id),
        [2],
      );
      // An unfenced queue (a single broker, or another queue) is not checked, even in the group of a fenced write.
      await old.append('other', [{ id: 1, data: Buffer.from('x') }]);
      const stale = old.append('q', [{ id: 3, data: Buffer.from('late') }]);
      const fine = old.append('other', [{ id: 2, data: Buffer.from('y') }]);
      await assert.rejects(stale, fenced);
      await fine;
      assert.deepEqual(
        (await old.read('other', 0, 10)).map((m) => m.id),
        [1, 2],
      );
      assert.deepEqual(
        (await old.read('q', 0, 10)).map((m) => m.id),
        [2],
      );
      assert.ok(Number(old.figures().fenced) >= 1);
    } finally {
      await old.close();
      await next.close();
      await cs.close();
    }
  });

  it('a paused owner is fenced: its late publish is refused and not stored, the new owner serves every confirmed message', async () => {
    const { hub, start, closeAll } = await brokers(await server.createDatabase());
    try {
      const a = await start(1);
      const b = await start(2);
      let name = '';
      for (let i = 0; !name; i++) if (rendezvous('queue', `fq${i}`, [1, 2]) === 1) name = `fq${i}`;
      await b.engine.declareQueue({ name, durable: true, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {} });
      await until('owned by 1', () => a.cluster.owns('queue', name) !== null);
      for (let i = 0; i < 5; i++) await b.engine.publishTo('', name, makeMessage('', Buffer.from(`m${i}`))).durable;
      // SIGSTOP of broker 1: no heartbeat, unreachable; its queue runtime is still there.
      hub.disconnect(1);
      const c = a.cluster as unknown as { heartbeatTimer: NodeJS.Timeout };
      clearInterval(c.heartbeatTimer);
      await until('owned by 2', async () => (await b.cs.owner('queue', name))?.owner === 2 && b.cluster.owns('queue', name) !== null);
      // Broker 1 wakes up and takes a publish: refused (fenced), never stored.
      const late = a.engine.publishTo('', name, makeMessage('', Buffer.from('late')));
      await assert.rejects(late.durable!, fenced);
      await until('broker 1 stopped serving it', () => a.cluster.owns('queue', name) === null);
      const got = collect(b.engine, name);
      await until('five delivered', () => got.length === 5);
      assert.deepEqual(got, ['m0', 'm1', 'm2', 'm3', 'm4']);
      const stored = await b.qs.read(name, 0, 100);
      assert.equal(
        stored.some((m) => m.data.includes(Buffer.from('late'))),
        false,
        'the late publish was not stored',
      );
    } finally {
      await closeAll();
    }
  });

  it('a forwarded publish stored by the owner whose reply was lost is stored once: retried at the same owner, and at the next one after it died', async () => {
    const { hub, start, closeAll } = await brokers(await server.createDatabase());
    try {
      const a = await start(1);
      const b = await start(2);
      let name = '';
      for (let i = 0; !name; i++) if (rendezvous('queue', `dq${i}`, [1, 2]) === 1) name = `dq${i}`;
      await b.engine.declareQueue({ name, durable: true, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {} });
      await until('owned by 1', () => a.cluster.owns('queue', name) !== null);
      await b.engine.publishTo('', name, makeMessage('', Buffer.from('m0'))).durable;
      // 1. Broker 1 stores a publish broker 2 forwarded, its reply is lost: broker 2 retries at broker 1.
      let lose = 1;
      hub.loseReply = (from, to, method) => method === 'queue.publish' && from === 2 && to === 1 && lose-- > 0;
      await b.engine.publishTo('', name, makeMessage('', Buffer.from('m1'))).durable;
      assert.equal(lose, -1, 'the reply was lost once');
      // 2. Broker 1 stores one, its reply is lost and it dies (no heartbeat, unreachable): broker 2 takes the queue,
      // reads the forwarders' numbers from the store, and its retry is not enqueued again.
      lose = 1;
      hub.loseReply = (from, to, method) => {
        if (method !== 'queue.publish' || from !== 2 || to !== 1 || lose-- <= 0) return false;
        hub.disconnect(1);
        clearInterval((a.cluster as unknown as { heartbeatTimer: NodeJS.Timeout }).heartbeatTimer);
        return true;
      };
      await b.engine.publishTo('', name, makeMessage('', Buffer.from('m2'))).durable;
      assert.equal(lose, 0, 'the owner died after storing m2');
      assert.ok(b.cluster.owns('queue', name) !== null, 'broker 2 took the queue');
      await b.engine.publishTo('', name, makeMessage('', Buffer.from('end'))).durable;
      const got = collect(b.engine, name);
      await until('the marker', () => got.includes('end'));
      assert.deepEqual(got, ['m0', 'm1', 'm2', 'end'], 'each publish stored once');
    } finally {
      hub.loseReply = null;
      await closeAll();
    }
  });

  it('a forwarded publish retried while its owner is still writing the first copy is stored once', async () => {
    const { hub, start, closeAll } = await brokers(await server.createDatabase());
    try {
      const a = await start(1);
      const b = await start(2);
      let name = '';
      for (let i = 0; !name; i++) if (rendezvous('queue', `wq${i}`, [1, 2]) === 1) name = `wq${i}`;
      await b.engine.declareQueue({ name, durable: true, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {} });
      await until('owned by 1', () => a.cluster.owns('queue', name) !== null);
      const got = collect(a.engine, name);
      // Broker 1's write of m1 is held; broker 2's request breaks off while it is in flight, and broker 2 retries.
      let release = (): void => undefined;
      const held = new Promise<void>((r) => (release = r));
      const append = a.qs.append.bind(a.qs);
      let hold = 1;
      a.qs.append = async (...args: Parameters<typeof append>) => {
        if (hold-- > 0) await held;
        return append(...args);
      };
      let requests = 0;
      hub.breakInFlight = (from, to, method) => method === 'queue.publish' && from === 2 && to === 1 && requests++ === 0;
      const m1 = b.engine.publishTo('', name, makeMessage('', Buffer.from('m1'))).durable;
      await until('the retry reached broker 1', () => requests >= 2);
      release();
      await m1;
      await b.engine.publishTo('', name, makeMessage('', Buffer.from('end'))).durable;
      await until('the marker', () => got.includes('end'));
      assert.deepEqual(got, ['m1', 'end'], 'm1 stored and delivered once');
    } finally {
      hub.breakInFlight = null;
      await closeAll();
    }
  });
});
