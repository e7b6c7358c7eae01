// test-runner: alone (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another file
/**
 * A namespace's rate quota is the cluster's, not each broker's (issue 29, issue 30 "Per-broker quotas multiply with
 * the cluster"): on three brokers, three MQTT.js publishers of namespace t1, one per broker, publish QoS 1 as fast
 * as the brokers let them; the payload bytes PUBACKed in a window stay within t1's bytesInRate for the whole cluster
 * (with generous tolerance: the test checks behaviour, not speed), where per-broker quotas let through three times
 * as much. Then one broker stops: the two left take half each, and the three-broker figure holds again. Last, the
 * namespace's stored bytes are the cluster's on every broker, and its storage quota refuses publishes through either
 * broker once the whole cluster's figure is over it (where each broker's own partitions are not).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import mqtt, { type MqttClient } from 'mqtt';
import { connect as connectNats } from 'nats';
import { rendezvous } from '../../src/cluster/index.js';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { eventually } from './harness.js';

const RATE = 20_000; // bytes a second, the namespace's, across the cluster
const WINDOW_MS = 5_000;
const PAYLOAD = Buffer.alloc(1000, 0x61);
const IN_FLIGHT = 8;

describe('cluster: a namespace quota is cluster-wide', { timeout: 120_000 }, () => {
  let c: TestCluster;
  const clients: MqttClient[] = [];

  const connect = async (broker: number): Promise<MqttClient> => {
    const m = await mqtt.connectAsync(c.broker(broker).mqttUrl, { username: 'ann', password: 'ann-pw', reconnectPeriod: 0, protocolVersion: 5 });
    clients.push(m);
    return m;
  };

  /** Publishes QoS 1 on every given broker at once, as fast as allowed, for the window: payload bytes PUBACKed per broker. */
  async function measure(brokers: number[]): Promise<number[]> {
    const conns = await Promise.all(brokers.map((b) => connect(b)));
    const end = Date.now() + WINDOW_MS;
    const acked = await Promise.all(
      conns.map(async (m, i) => {
        let bytes = 0;
        const lane = async () => {
          while (Date.now() < end) {
            await m.publishAsync(`load/${brokers[i]}`, PAYLOAD, { qos: 1 });
            if (Date.now() <= end) bytes += PAYLOAD.length;
          }
        };
        await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
        return bytes;
      }),
    );
    for (const m of conns) await m.endAsync();
    return acked;
  }

  before(async () => {
    c = await startCluster({ brokers: 3, haproxy: false });
    const b1 = c.broker(1).proc;
    await b1.api('POST', '/api/v1/users', { username: 'root', password: 'root-pw', groups: ['admins'] });
    for (const b of c.brokers) b.proc.credentials = { username: 'root', password: 'root-pw' };
    await b1.api('POST', '/api/v1/namespaces', { name: 't1', quotas: { bytesInRate: RATE } });
    await b1.api('POST', '/api/v1/users', { username: 'ann', password: 'ann-pw', namespace: 't1' });
    // The directory reaches the other brokers by notify: ann logs in everywhere (with t1's quota) before measuring.
    for (const b of [1, 2, 3]) {
      await eventually(
        async () => {
          const m = await connect(b).catch(() => null);
          await m?.endAsync();
          return m !== null;
        },
        15_000,
        `ann logs in on broker ${b}`,
      );
    }
  });
  after(async () => {
    for (const m of clients) m.end(true);
    await c?.close();
  });

  test("three publishers on three brokers share t1's bytesInRate", async (t) => {
    const acked = await measure([1, 2, 3]);
    const total = acked.reduce((a, b) => a + b, 0);
    t.diagnostic(`three brokers: ${total} bytes acknowledged in ${WINDOW_MS} ms (${acked.join(' + ')}), quota ${RATE} B/s`);
    // Allowed across the cluster: the window at the rate plus one second of burst (the brokers' buckets together).
    const allowed = (RATE * (WINDOW_MS + 1000)) / 1000;
    assert.ok(total <= allowed * 1.5, `${total} bytes acknowledged in ${WINDOW_MS} ms (${JSON.stringify(acked)}), quota ${RATE} B/s`);
    // Per-broker quotas would let each through the whole rate: three times as much.
    assert.ok(total < (3 * RATE * WINDOW_MS) / 1000, `not three brokers' worth: ${total}`);
    // The flow goes on at about the quota, on every broker.
    assert.ok(total >= (RATE * WINDOW_MS) / 1000 / 2, `the namespace still publishes: ${total}`);
    for (const [i, n] of acked.entries()) assert.ok(n > 0, `broker ${i + 1} let some through`);
  });

  test('when a broker stops, the two left take half each', async (t) => {
    await c.stop(3);
    for (const via of [1, 2]) {
      await eventually(
        async () => (await c.status({ via })).brokers.filter((b) => b.alive && !b.leaving).length === 2,
        20_000,
        `broker ${via} sees broker 3 gone`,
      );
    }
    const acked = await measure([1, 2]);
    const total = acked[0] + acked[1];
    t.diagnostic(`two brokers: ${total} bytes acknowledged in ${WINDOW_MS} ms (${acked.join(' + ')}), quota ${RATE} B/s`);
    const allowed = (RATE * (WINDOW_MS + 1000)) / 1000;
    assert.ok(total <= allowed * 1.5, `${total} bytes acknowledged by two brokers (${JSON.stringify(acked)}), quota ${RATE} B/s`);
    // Each of the two now has half the quota, more than the third it had: together about the whole rate.
    assert.ok(total >= (RATE * WINDOW_MS) / 1000 / 1.5, `two brokers together reach about the rate: ${total}`);
  });

  test("stored bytes and the storage quota are the cluster's: partitions held by the other broker count too", async (t) => {
    // Two JetStream streams of t1 (made by ann, t1's user), one held by each of the two brokers left.
    const named = (owner: number) => {
      for (let i = 0; ; i++) if (rendezvous('partition', `t1~st${i}/0`, [1, 2]) === owner) return `st${i}`;
    };
    const names = [named(1), named(2)];
    const nc = await connectNats({ servers: c.broker(1).natsServer, user: 'ann', pass: 'ann-pw', reconnect: false });
    try {
      const jsm = await nc.jetstreamManager();
      for (const n of names) await jsm.streams.add({ name: n, subjects: [`${n}.>`] });
    } finally {
      await nc.close();
    }
    for (const [i, n] of names.entries())
      await eventually(async () => (await c.ownerOf('partition', `t1~${n}/0`)) === i + 1, 20_000, `${n} held by broker ${i + 1}`);
    t.diagnostic(`streams ${names.join(', ')} held by brokers 1 and 2`);
    const m = await connect(1);
    for (let i = 0; i < 64; i++) await m.publishAsync(`${names[i % 2]}/k`, PAYLOAD, { qos: 1 });
    await m.endAsync();
    // Each broker's usage figure is the cluster's: everything stored, whoever holds it.
    const stored = async (via: number) => (await c.broker(via).proc.api<{ storedBytes: number }>('GET', '/api/v1/namespaces/t1/usage')).storedBytes;
    const seen = new Map<number, number>();
    for (const via of [1, 2]) {
      await eventually(
        async () => {
          seen.set(via, await stored(via));
          return seen.get(via)! >= 64 * PAYLOAD.length;
        },
        20_000,
        `broker ${via} counts every partition`,
      ).catch((err: Error) => {
        throw new Error(`${err.message}: stored ${JSON.stringify([...seen])}`);
      });
    }
    const total = await stored(1);
    // A quota of three quarters of it: over it cluster-wide, while one of the two brokers holds at most half.
    await c.broker(1).proc.api('PATCH', '/api/v1/namespaces/t1', { quotas: { bytesInRate: RATE, maxStorageBytes: Math.floor((total * 3) / 4) } });
    for (const via of [1, 2]) {
      await eventually(
        async () => {
          const p = await connect(via);
          try {
            await p.publishAsync('store/x', PAYLOAD, { qos: 1 });
            return false;
          } catch (err) {
            return /quota/i.test(String(err));
          } finally {
            await p.endAsync();
          }
        },
        20_000,
        `a publish through broker ${via} refused by the storage quota`,
      );
    }
  });
});
