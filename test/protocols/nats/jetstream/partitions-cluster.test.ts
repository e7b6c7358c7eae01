/**
 * A JetStream consumer of a multi-partition stream in cluster mode, in one process (as cluster.test.ts): two brokers
 * over one shared stream storage and metastore. The consumer is used through the broker that does not own it; its
 * owner dies and the other broker continues from the per-partition state the owner stored (consumer.ts PARTS_KEY),
 * under the next epoch.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, Live, LocalHub, MemoryClusterStore } from '../../../../src/cluster/index.js';
import { encodeBatch, Engine, makeMessage, messageToRecord, type Message } from '../../../../src/core/index.js';
import { JetStream } from '../../../../src/protocols/nats/jetstream/index.js';
import { MemoryStreams } from '../../../helpers/memory-storage.js';
import { ackSubject, Client, silent } from './harness.js';

const LEASE = 60_000;

async function until(what: string, fn: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const label = (m: Message) => `${m.payload.toString()}@${ackSubject(m).split('.')[5]}x${ackSubject(m).split('.')[4]}`;

describe('JetStream consumers of a multi-partition stream in cluster mode', () => {
  it('fetched and acked through a broker that does not own it; the owner dies, the other continues per partition', async () => {
    const store = new MemoryClusterStore();
    const hub = new LocalHub();
    const m = new MemoryStreams();
    m.consumerStore.fence = (name, epoch) => store.check('consumer', name, epoch);
    const nodes: Array<{ id: number; cluster: Cluster; live: Live; engine: Engine; js: JetStream; c: Client }> = [];
    const settle = async () => {
      for (let i = 0; i < 3; i++) {
        for (const n of nodes) n.cluster.kick();
        await new Promise((r) => setTimeout(r, 30));
      }
    };
    try {
      for (const id of [1, 2]) {
        const cluster = await Cluster.start({ store, info: { id, version: 't', endpoints: {} }, leaseMs: LEASE, logger: silent });
        cluster.channel = hub.channel(id);
        const engine = new Engine(m, m);
        const live = await Live.start({ cluster, channel: cluster.channel, engine, logger: silent, syncMs: 50 });
        await engine.load();
        const js = new JetStream(engine, silent, { tickMs: 20, flushDelayMs: 5, cluster });
        await js.start();
        cluster.begin();
        nodes.push({ id, cluster, live, engine, js, c: new Client(engine, js) });
      }
      await settle();
      await nodes[0].engine.createStream({ name: 'Q', partitions: 3, bindings: ['Q'] });
      await nodes[1].engine.load();
      const put = async (p: number, v: string) => {
        const msg = makeMessage('Q', Buffer.from(v));
        await m.append('Q', p, encodeBatch([messageToRecord(msg, 'Q')])).durable;
      };
      for (const [p, v] of [
        [0, 'a0'],
        [1, 'b0'],
        [0, 'a1'],
        [2, 'c0'],
        [0, 'a2'],
      ] as Array<[number, string]>) {
        await put(p, v);
      }
      const created = await nodes[1].c.api('$JS.API.CONSUMER.CREATE.Q.d', {
        stream_name: 'Q',
        config: { durable_name: 'd', ack_policy: 'explicit', ack_wait: 60e9 },
      });
      assert.equal(created.error, undefined, JSON.stringify(created.error));
      assert.equal(created.num_pending, 5);
      const row = await store.owner('consumer', 'Q/d');
      const owner = nodes.find((n) => n.id === row?.owner)!;
      const other = nodes.find((n) => n !== owner)!;
      const got = await other.c.fetch('Q', 'd', { batch: 4, no_wait: true }, 4);
      assert.deepEqual(got.map(label), ['a0@1x1', 'b0@2x1', 'c0@3x1', 'a1@4x1']);
      // Acked: a0, c0, a1; b0 delivered and not acked.
      for (const i of [0, 2, 3]) await other.c.ackSync(got[i]);
      await until('the per-partition state is stored', async () => {
        const r = await m.getConsumer('Q', 'd');
        return r !== null && (JSON.parse(r.config) as Record<string, { floors: number[] }>).flowmq_partitions?.floors.join() === '2,0,1';
      });

      hub.disconnect(owner.id);
      assert.equal(await store.heartbeat(other.id, other.cluster.incarnation, 10 * LEASE), true);
      const base = Date.now();
      store.now = () => base + LEASE + 1000;
      for (let i = 0; i < 3; i++) {
        other.cluster.kick();
        await new Promise((r) => setTimeout(r, 30));
      }
      await until('the other broker owns the consumer', () => other.cluster.owns('consumer', 'Q/d') !== null);
      await put(1, 'b1');
      const next = await other.c.fetch('Q', 'd', { batch: 3, expires: 3e9 }, 3);
      // b0 again (second delivery), then a2 (7) and b1 (5) in sequence order; a0, c0, a1 stay acked.
      assert.deepEqual(next.map(label), ['b0@2x2', 'b1@5x1', 'a2@7x1']);
      assert.deepEqual(
        next.map((x) => ackSubject(x).split('.')[6]),
        ['5', '6', '7'],
        'the consumer sequence goes on',
      );
    } finally {
      for (const n of nodes) {
        await n.js.close();
        n.live.close();
        await n.cluster.close().catch(() => undefined);
        n.engine.close();
      }
    }
  });
});
