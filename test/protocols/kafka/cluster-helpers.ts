/**
 * Brokers of the Kafka cluster tests in one process (cluster.test.ts, cluster-txn-fencing.test.ts): a Cluster per
 * broker over one ClusterStore, each with its own Engine and Kafka listener, and a 'partition' ownership handler
 * standing in for the streams part.
 */
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { Cluster, type ClusterStore } from '../../../src/cluster/index.js';
import { Engine, type CoreStore, type StreamStorage } from '../../../src/core/index.js';
import { startKafkaListener, type KafkaOptions } from '../../../src/protocols/kafka/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { captureLogger } from './helpers.js';

export const logger = pino({ level: 'silent' });

export interface Broker {
  id: number;
  cluster: Cluster;
  engine: Engine;
  listener: ProtocolListener;
  port: number;
  /** Partitions this broker owns, with their epochs (what the streams part would serve). */
  held: Map<string, number>;
}

/** Starts broker `id`: its Cluster (lease 60 s: nothing expires by itself), engine and Kafka listener. */
export async function startBroker(
  store: ClusterStore,
  id: number,
  streams: StreamStorage,
  catalog: CoreStore,
  topics: Array<[string, number]>,
  kafka: KafkaOptions = {},
): Promise<Broker> {
  const engine = new Engine(streams, catalog);
  await engine.load();
  for (const [name, partitions] of topics) if (!engine.getStream(name)) await engine.createStream({ name, partitions });
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
  const listener = await startKafkaListener(
    { engine, logger: captureLogger('warn').logger, brokerId: id },
    { host: '127.0.0.1', port: 0 },
    { cluster, groupInitialRebalanceDelayMs: 0, groupMinSessionTimeoutMs: 100, ...kafka },
  );
  const port = listener.address().port;
  await cluster.advertise({ kafka: { host: '127.0.0.1', port } });
  cluster.begin();
  return { id, cluster, engine, listener, port, held };
}

/**
 * Reconciles every broker until every partition of `topics` has one owner and every broker places over exactly
 * `brokers` (a broker that has not yet read the others' membership places every group on itself: a test that picks
 * a group's coordinator by asking the brokers would pick the wrong one; 20 ms after the last kick was not always
 * enough for that read on a loaded machine).
 */
export async function settle(brokers: Broker[], partitions: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  const ids = brokers
    .map((b) => b.id)
    .sort((x, y) => x - y)
    .join(',');
  const viewsComplete = () => brokers.every((b) => [...b.cluster.placementBrokers()].sort((x, y) => x - y).join(',') === ids);
  for (;;) {
    for (const b of brokers) b.cluster.kick();
    await new Promise((r) => setTimeout(r, 20));
    const owned = brokers.reduce((n, b) => n + b.held.size, 0);
    if (owned === partitions && viewsComplete()) {
      // And every broker's view of the owners is fresh (rows read at its last reconcile).
      for (const b of brokers) b.cluster.kick();
      await new Promise((r) => setTimeout(r, 20));
      // That reconcile may have started a handover (a broker that placed on itself alone lets a partition go to
      // its placement broker, which has not claimed it yet): settled only if every partition still has its owner.
      if (viewsComplete() && brokers.reduce((n, b) => n + b.held.size, 0) === partitions) return;
    }
    if (Date.now() > deadline)
      throw new Error(
        `ownership did not settle (${owned}/${partitions}; views ${brokers.map((b) => `${b.id}: ${b.cluster.placementBrokers().join(',')}`).join('; ')})`,
      );
  }
}

export async function stopAll(brokers: Broker[]): Promise<void> {
  for (const b of brokers) {
    await b.cluster.close();
    await b.listener.close();
  }
}

export const ownerOf = (brokers: Broker[], key: string): Broker => {
  const b = brokers.find((x) => x.held.has(key));
  assert.ok(b, `${key} has an owner`);
  return b;
};
