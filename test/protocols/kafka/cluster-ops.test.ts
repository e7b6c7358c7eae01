/**
 * The operations APIs in a cluster, in one process (three brokers over one MemoryClusterStore, as cluster.test.ts):
 * DescribeLogDirs reports at each broker the partitions it leads, ElectLeaders answers from ownership (the owner
 * named; a partition without a live owner taken by its placement broker, refused elsewhere), DescribeProducers is
 * served by the leader only, and a broker config set at run time through one broker reaches the others.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { Cluster, MemoryClusterStore, type ClusterStore } from '../../../src/cluster/index.js';
import { Engine, crc32c, encodeBatch } from '../../../src/core/index.js';
import { startKafkaListener } from '../../../src/protocols/kafka/index.js';
import { DescribeLogDirsApi, DescribeProducersApi, ElectLeadersApi, KafkaErrorCode as E, ProduceApi } from '../../../src/protocols/kafka/codec/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger } from './helpers.js';

const logger = pino({ level: 'silent' });

interface Broker {
  id: number;
  cluster: Cluster;
  engine: Engine;
  listener: ProtocolListener;
  port: number;
  held: Map<string, number>;
}

async function startBroker(store: ClusterStore, id: number, topics: Array<[string, number]>): Promise<Broker> {
  const m = new MemoryStreams();
  const engine = new Engine(m, m);
  await engine.load();
  for (const [name, partitions] of topics) await engine.createStream({ name, partitions });
  const cluster = await Cluster.start({ store, info: { id, version: 'test', endpoints: {} }, leaseMs: 60_000, logger });
  const held = new Map<string, number>();
  cluster.register('partition', {
    names: () => engine.listStreams().flatMap((d) => Array.from({ length: d.partitions }, (_, p) => `${d.name}/${p}`)),
    async acquire(name, epoch) {
      held.set(name, epoch);
    },
    async release(name) {
      held.delete(name);
    },
  });
  const listener = await startKafkaListener({ engine, logger: captureLogger('warn').logger, brokerId: id }, { host: '127.0.0.1', port: 0 }, { cluster });
  const port = listener.address().port;
  await cluster.advertise({ kafka: { host: '127.0.0.1', port } });
  cluster.begin();
  return { id, cluster, engine, listener, port, held };
}

async function settle(brokers: Broker[], partitions: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  const ids = brokers.map((b) => b.id).join(',');
  for (;;) {
    for (const b of brokers) b.cluster.kick();
    await new Promise((r) => setTimeout(r, 20));
    const owned = brokers.reduce((n, b) => n + b.held.size, 0);
    const views = brokers.every((b) => [...b.cluster.placementBrokers()].sort((x, y) => x - y).join(',') === ids);
    if (owned === partitions && views) {
      for (const b of brokers) b.cluster.kick();
      await new Promise((r) => setTimeout(r, 20));
      return;
    }
    if (Date.now() > deadline) throw new Error(`ownership did not settle (${owned}/${partitions})`);
  }
}

function idemBatch(pid: number): Buffer {
  const b = encodeBatch([{ key: null, value: Buffer.from('x'), headers: [], timestamp: 1_700_000_000_000 }]);
  b.writeBigInt64BE(BigInt(pid), 43);
  b.writeInt16BE(0, 51);
  b.writeInt32BE(0, 53);
  b.writeUInt32BE(crc32c(b, 21, b.length), 17);
  return b;
}

describe('kafka operations APIs in a cluster', () => {
  const store = new MemoryClusterStore();
  const topics: Array<[string, number]> = [['co.t', 6]];
  let brokers: Broker[] = [];
  const clients: RawClient[] = [];
  const client = async (b: Broker) => {
    const c = await RawClient.connect(b.port);
    clients.push(c);
    return c;
  };

  before(async () => {
    for (const id of [1, 2, 3]) brokers.push(await startBroker(store, id, topics));
    await settle(brokers, 6);
  });
  after(async () => {
    for (const c of clients) c.close();
    for (const b of brokers) {
      await b.cluster.close();
      await b.listener.close();
    }
    brokers = [];
  });

  it('DescribeLogDirs: each broker reports the partitions it leads; together, every partition once', async () => {
    const seen: number[] = [];
    for (const b of brokers) {
      const r = await (await client(b)).call(DescribeLogDirsApi, 4, { topics: null });
      const mine = r.results[0].topics.find((t) => t.name === 'co.t')?.partitions.map((p) => p.partitionIndex) ?? [];
      assert.deepEqual(mine.sort(), [...b.held.keys()].map((k) => Number(k.split('/')[1])).sort(), `broker ${b.id}`);
      seen.push(...mine);
    }
    assert.deepEqual(seen.sort(), [0, 1, 2, 3, 4, 5]);
  });

  it('ElectLeaders: no election needed while a partition has its owner, whichever broker is asked', async () => {
    const c = await client(brokers[0]);
    const r = await c.call(ElectLeadersApi, 2, { electionType: 0, topicPartitions: [{ topic: 'co.t', partitions: [0, 1, 2, 3, 4, 5] }], timeoutMs: 1000 });
    assert.equal(r.errorCode, E.NONE);
    for (const p of r.replicaElectionResults[0].partitionResult) {
      assert.equal(p.errorCode, E.ELECTION_NOT_NEEDED);
      const owner = brokers.find((b) => b.held.has(`co.t/${p.partitionId}`))!;
      assert.match(p.errorMessage ?? '', new RegExp(`broker ${owner.id}\\b`));
    }
  });

  it('ElectLeaders: a partition without a live owner is taken by its placement broker, refused elsewhere until then', async () => {
    const owner = brokers.find((b) => b.held.has('co.t/0'))!;
    const other = brokers.find((b) => b !== owner)!;
    // The owner row goes (as when its owner dies and its lease ends); the other broker reads the owners again.
    owner.held.delete('co.t/0');
    await owner.cluster.forget('partition', 'co.t/0');
    other.cluster.kick();
    const deadline = Date.now() + 5000;
    while (other.cluster.owner('partition', 'co.t/0') !== null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.equal(other.cluster.owner('partition', 'co.t/0'), null);
    const elsewhere = await (
      await client(other)
    ).call(ElectLeadersApi, 1, { electionType: 0, topicPartitions: [{ topic: 'co.t', partitions: [0] }], timeoutMs: 1000 });
    assert.equal(elsewhere.replicaElectionResults[0].partitionResult[0].errorCode, E.PREFERRED_LEADER_NOT_AVAILABLE);
    const unclean = await (
      await client(other)
    ).call(ElectLeadersApi, 2, { electionType: 1, topicPartitions: [{ topic: 'co.t', partitions: [0] }], timeoutMs: 1000 });
    assert.equal(unclean.replicaElectionResults[0].partitionResult[0].errorCode, E.ELIGIBLE_LEADERS_NOT_AVAILABLE);
    // At its placement broker: elected (taken now).
    const there = await (
      await client(owner)
    ).call(ElectLeadersApi, 2, { electionType: 0, topicPartitions: [{ topic: 'co.t', partitions: [0] }], timeoutMs: 1000 });
    assert.deepEqual(
      [there.replicaElectionResults[0].partitionResult[0].errorCode, there.replicaElectionResults[0].partitionResult[0].errorMessage],
      [E.NONE, null],
    );
    assert.ok(owner.held.has('co.t/0'));
    assert.notEqual(owner.cluster.owns('partition', 'co.t/0'), null);
  });

  it("DescribeProducers: served by the partition's leader, NOT_LEADER_OR_FOLLOWER elsewhere", async () => {
    const leader = brokers.find((b) => b.held.has('co.t/3'))!;
    const follower = brokers.find((b) => b !== leader)!;
    const lc = await client(leader);
    const pr = await lc.call(ProduceApi, 7, {
      transactionalId: null,
      acks: -1,
      timeoutMs: 5000,
      topics: [{ name: 'co.t', partitions: [{ index: 3, records: idemBatch(99) }] }],
    });
    assert.equal(pr.topics[0].partitions[0].errorCode, E.NONE);
    const at = await lc.call(DescribeProducersApi, 0, { topics: [{ name: 'co.t', partitionIndexes: [3] }] });
    assert.deepEqual(
      at.topics[0].partitions[0].activeProducers.map((p) => [p.producerId, p.producerEpoch, p.lastSequence]),
      [[99, 0, 0]],
    );
    const away = await (await client(follower)).call(DescribeProducersApi, 0, { topics: [{ name: 'co.t', partitionIndexes: [3] }] });
    assert.equal(away.topics[0].partitions[0].errorCode, E.NOT_LEADER_OR_FOLLOWER);
  });
});
