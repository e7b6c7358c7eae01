// test-runner: alone (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another file
/**
 * A namespace's rate quota is the cluster's, not each broker's (issue 29, issue 30 "Per-broker quotas multiply with
 * the cluster"): on three brokers, three MQTT.js publishers of namespace t1, one per broker, publish QoS 1 as fast
 * as the brokers let them; the payload bytes PUBACKed in a window stay within t1's bytesInRate for the whole cluster
 * (with generous tolerance: the test checks behaviour, not speed), where per-broker quotas let through three times
 * as much. Then one broker stops: the two left take half each, and the three-broker figure holds again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import mqtt, { type MqttClient } from 'mqtt';
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
});
