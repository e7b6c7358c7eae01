// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Policy-bypass suite, cluster forwarding (issue 24): the same rule as policy-bypass.test.ts with alice and bob on
 * different brokers of a three-broker cluster (PostgreSQL, s3rver; test/helpers/cluster.ts). bob is denied every
 * action on `topic:secret/#`; alice pulls her JetStream consumer and reads STREAM.MSG.GET through broker 1, whose
 * replies must not be forwarded to bob's wildcard subscriptions on brokers 2 and 3; a live secret published on
 * broker 1 reaches carol on broker 2 and not bob on broker 3.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AckPolicy, DeliverPolicy, type NatsConnection } from 'nats';
import { TestCluster } from '../helpers/cluster.js';
import { eventually } from './harness.js';
import {
  POLICIES,
  USERS,
  apiAs,
  mqttConnect,
  mqttTap,
  natsConnect,
  natsTap,
  noLeak,
  password,
  sc,
  secretOf,
  uniq,
  type Tap,
  type User,
} from './policy-bypass-helpers.js';

describe('policy bypass across a cluster: replies and live messages forwarded between brokers (issue 24)', { timeout: 180_000 }, () => {
  let c: TestCluster;
  const conns: NatsConnection[] = [];
  const nats = async (broker: number, u: User) => {
    const nc = await natsConnect(c.broker(broker).natsServer, u);
    conns.push(nc);
    return nc;
  };
  const SECRETS = [secretOf('cluster-1'), secretOf('cluster-2'), secretOf('cluster-3')];

  /** carol publishes `payload` on `subject` through broker `via` (flushed: routed once the PONG is back). */
  const carol = new Map<number, NatsConnection>();
  const publish = async (via: number, subject: string, payload: string) => {
    let nc = carol.get(via);
    if (nc === undefined) carol.set(via, (nc = await nats(via, 'carol')));
    nc.publish(subject, sc.encode(payload));
    await nc.flush();
  };

  /**
   * Waits until every tap hears what carol publishes on `subject` through broker 1: the brokers of the taps have
   * announced their interest to broker 1 (a probe sent again until it arrives; readiness, not absence).
   */
  const interestReady = async (taps: Tap[], subject: string) => {
    const probe = `PROBE:${uniq()}`;
    await eventually(
      async () => {
        await publish(1, subject, probe);
        return taps.every((t) => t.payloads.includes(probe));
      },
      20_000,
      `interest of ${taps.map((t) => t.name).join(', ')} known to broker 1`,
    );
  };

  before(async () => {
    // No users at start, so that the cluster helper's admin API calls get in (loopback bootstrap) until it has
    // seen three live brokers; then the users and policies, made through broker 1, and every broker waited for.
    c = await TestCluster.start({ brokers: 3, haproxy: false, args: ['--kafka-group-initial-rebalance-delay', '0'] });
    for (const u of USERS) {
      await c.broker(1).proc.api('POST', '/api/v1/users', { username: u, password: password(u) });
      // From the first user on, the admin API wants credentials; alice may do everything until the deny exists.
      for (const b of c.brokers) b.proc.credentials = { username: 'alice', password: password('alice') };
    }
    for (const p of POLICIES) await c.broker(1).proc.api('POST', '/api/v1/policies', p);
    for (const b of c.brokers) {
      await eventually(
        async () => {
          const r = await apiAs<{ items?: Array<{ name: string }> }>(b.http, 'bob', 'GET', '/api/v1/policies');
          return r.status === 200 && POLICIES.every((p) => r.body.items?.some((i) => i.name === p.name));
        },
        20_000,
        `broker ${b.id} knows the users and policies`,
      );
    }
    const r = await apiAs(c.broker(1).http, 'alice', 'POST', '/api/v1/streams', { name: 'cvault', partitions: 1, bindings: ['secret/#'] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    await c.waitSettled({ min: { partition: 1 } });
    const js = (await nats(1, 'alice')).jetstream();
    for (const [i, s] of SECRETS.entries()) await js.publish(`secret.c.${i}`, sc.encode(s));
  });

  after(async () => {
    await Promise.allSettled(conns.map((n) => n.close()));
    await c?.close();
  });

  describe('JetStream replies to alice on broker 1', () => {
    let taps: Tap[] = [];
    let pulled: string[] = [];
    let got: string[] = [];
    let mark = '';
    before(async () => {
      taps = [
        await natsTap(c.broker(2).natsServer, 'bob', '>'),
        await natsTap(c.broker(2).natsServer, 'bob', '_INBOX.>'),
        await mqttTap(c.broker(3).mqttUrl, 'bob', '#', 4),
        await mqttTap(c.broker(3).mqttUrl, 'bob', '$share/bobc/#', 5),
      ];
      await interestReady(taps, `_INBOX.probe.${uniq()}`);
      const nc = await nats(1, 'alice');
      const name = uniq('alice-c-');
      await (await nc.jetstreamManager()).consumers.add('cvault', { durable_name: name, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.All });
      const consumer = await nc.jetstream().consumers.get('cvault', name);
      for await (const m of await consumer.fetch({ max_messages: SECRETS.length, expires: 10_000 })) {
        pulled.push(sc.decode(m.data));
        m.ack();
      }
      const jsm = await nc.jetstreamManager();
      got = [sc.decode((await jsm.streams.getMessage('cvault', { seq: 1 })).data)];
      mark = `MARK:${uniq()}`;
      await publish(1, `_INBOX.mark.${uniq()}`, mark);
    });
    after(async () => {
      for (const t of taps) await t.close();
    });

    it('alice pulls every secret through broker 1 and reads one with STREAM.MSG.GET', () => {
      assert.deepEqual(pulled, SECRETS);
      assert.deepEqual(got, [SECRETS[0]]);
    });
    for (const [i, n] of ['NATS > on broker 2', 'NATS _INBOX.> on broker 2', 'MQTT 3.1.1 # on broker 3', 'MQTT 5 $share/g/# on broker 3'].entries()) {
      it(`bob's ${n} receives none of them`, async () => {
        await taps[i]!.until(mark);
        noLeak(taps[i]!.payloads, taps[i]!.name);
      });
    }
  });

  describe('live: a secret published on broker 1', () => {
    it("reaches carol's # on broker 2, not bob's # on broker 3", async () => {
      const bob = await mqttTap(c.broker(3).mqttUrl, 'bob', '#', 5);
      const carol = await mqttTap(c.broker(2).mqttUrl, 'carol', '#', 5);
      try {
        await interestReady([bob, carol], `open.probe.${uniq()}`);
        const s = secretOf('cluster-live');
        const alice = await mqttConnect(c.broker(1).mqttUrl, 'alice', 5);
        await alice.publishAsync('secret/live', s, { qos: 1 });
        const mark = `MARK:${uniq()}`;
        await alice.publishAsync('open/mark', mark, { qos: 1 });
        await alice.endAsync();
        await bob.until(mark);
        noLeak(bob.payloads, bob.name);
        assert.ok((await carol.until(mark)).includes(s), 'carol on broker 2 gets the live secret');
      } finally {
        await bob.close();
        await carol.close();
      }
    });
  });
});
