/**
 * Live pub/sub across brokers (src/cluster/live.ts) with real clients against three `bin/flowmq --cluster` processes
 * over PostgreSQL and s3rver (test/helpers/cluster.ts): MQTT.js and nats publishing on one broker and subscribing on
 * others, an MQTT shared subscription and a NATS queue group spread over brokers (each message once), request/reply
 * across brokers, retained messages, and users and policies changed on one broker applying on another.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type IPublishPacket, type MqttClient } from 'mqtt';
import { connect, StringCodec, type NatsConnection } from 'nats';
import type { TestCluster } from '../helpers/cluster.js';
import { eventually, sleep } from './harness.js';

const sc = StringCodec();

interface LiveFigures {
  forwardedMessages: number;
  receivedMessages: number;
  peers: Record<string, number>;
}

/** The scenario, on the started cluster `cluster()` (cluster-shared.test.ts starts it). */
export function liveScenario(cluster: () => TestCluster): void {
  describe('live pub/sub across three brokers', () => {
    let c: TestCluster;
    const mqttClients: MqttClient[] = [];
    const natsClients: NatsConnection[] = [];

    const mq = async (broker: number, opts: mqtt.IClientOptions = {}) => {
      const client = await mqtt.connectAsync(c.broker(broker).mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, ...opts });
      mqttClients.push(client);
      return client;
    };
    const nc = async (broker: number, opts: Record<string, unknown> = {}) => {
      const n = await connect({ servers: c.broker(broker).natsServer, reconnect: false, ...opts });
      natsClients.push(n);
      return n;
    };
    const live = async (broker: number) => (await c.api<{ live: LiveFigures }>('/api/v1/broker', broker)).live;
    /** Until broker `at` knows that `of` has at least `n` interest entries. */
    const knows = (at: number, of: number, n: number) =>
      eventually(async () => ((await live(at)).peers[String(of)] ?? 0) >= n, 15_000, `broker ${at} knows broker ${of}'s ${n} filters`);
    /** How many of `of`'s filters broker `at` knows now: earlier tests' clients stay connected, so new ones count above it. */
    const known = async (at: number, of: number) => (await live(at)).peers[String(of)] ?? 0;

    before(async () => {
      c = cluster();
      await c.waitNoLiveInterest();
    });

    after(async () => {
      for (const m of mqttClients) await m.endAsync(true).catch(() => undefined);
      await Promise.allSettled(natsClients.map((n) => n.close()));
    });

    it('an MQTT publish on broker 1 reaches MQTT on broker 2 and NATS on broker 3, and only brokers that want it', async () => {
      const sub2 = await mq(2);
      const got2: IPublishPacket[] = [];
      sub2.on('message', (_t, _p, packet) => got2.push(packet));
      await sub2.subscribeAsync('live/#', { qos: 1 });
      const n3 = await nc(3);
      const got3: string[] = [];
      const s3 = n3.subscribe('live.>');
      void (async () => {
        for await (const m of s3) got3.push(`${m.subject}=${sc.decode(m.data)}`);
      })();
      await n3.flush();
      await knows(1, 2, 1);
      await knows(1, 3, 1);
      const pub = await mq(1);
      const before1 = await live(1);
      const [b2, b3] = [await live(2), await live(3)];
      for (let i = 0; i < 20; i++) {
        await pub.publishAsync(`live/${i}`, `m${i}`, { qos: 1 });
        // Wanted by nobody: never leaves broker 1.
        await pub.publishAsync(`nowhere/${i}`, `x${i}`, { qos: 1 });
      }
      await pub.publishAsync('live/end', 'end', { qos: 1 });
      await eventually(() => got2.some((p) => p.topic === 'live/end') && got3.includes('live.end=end'), 15_000, 'markers');
      assert.deepEqual(
        got2.map((p) => p.payload.toString()),
        [...Array.from({ length: 20 }, (_, i) => `m${i}`), 'end'],
      );
      assert.deepEqual(got3, [...Array.from({ length: 20 }, (_, i) => `live.${i}=m${i}`), 'live.end=end']);
      const after1 = await live(1);
      const [a2, a3] = [await live(2), await live(3)];
      assert.equal(after1.forwardedMessages - before1.forwardedMessages, 42, 'each live/ message forwarded once to each of the two brokers, nowhere/ to none');
      assert.equal(a2.receivedMessages - b2.receivedMessages, 21);
      assert.equal(a3.receivedMessages - b3.receivedMessages, 21);
    });

    it('an MQTT shared subscription spread over the three brokers gets each message once', async () => {
      // Broker 3 must know the three new filters of brokers 1 and 2 (counted above what it knew before: earlier tests'
      // clients stay connected) before the run, or it could leave a member's broker out of the round robin.
      const before1 = await known(3, 1);
      const before2 = await known(3, 2);
      const members: Array<{ broker: number; c: MqttClient; got: string[] }> = [];
      for (const b of [1, 2, 3]) {
        const client = await mq(b, { clientId: `member-${b}` });
        const got: string[] = [];
        client.on('message', (t, p) => {
          if (t.startsWith('jobs/')) got.push(p.toString());
        });
        await client.subscribeAsync('$share/workers/jobs/#', { qos: 1 });
        // Each member's own probe topic: once its probe is back, everything sent to it before has arrived.
        await client.subscribeAsync(`probe/${b}`, { qos: 1 });
        members.push({ broker: b, c: client, got });
      }
      // Witnesses of the channels' order: a plain subscriber on broker 1 and on broker 2.
      const witnesses: string[][] = [];
      for (const b of [1, 2]) {
        const w = await mq(b);
        const got: string[] = [];
        w.on('message', (_t, p) => got.push(p.toString()));
        await w.subscribeAsync('jobs/#', { qos: 1 });
        witnesses.push(got);
      }
      await knows(3, 1, before1 + 3);
      await knows(3, 2, before2 + 3);
      const pub = await mq(3);
      const N = 60;
      for (let i = 0; i < N; i++) await pub.publishAsync(`jobs/${i}`, `j${i}`, { qos: 1 });
      await pub.publishAsync('jobs/end', 'end', { qos: 1 });
      await eventually(() => witnesses.every((w) => w.includes('end')), 15_000, 'the witnesses got the marker');
      for (const m of members) {
        const probe = new Promise<void>((resolve) => m.c.on('message', (t) => t === `probe/${m.broker}` && resolve()));
        await m.c.publishAsync(`probe/${m.broker}`, 'p', { qos: 1 });
        await probe;
      }
      const all = members.flatMap((m) => m.got);
      assert.equal(all.length, N + 1, `each message once among the members (${members.map((m) => m.got.length)})`);
      assert.equal(new Set(all).size, N + 1);
      for (const m of members) assert.ok(m.got.length > 0, `the member on broker ${m.broker} got a share`);
    });

    it('a NATS queue group over two brokers answers requests from a third, each request once', async () => {
      const before1 = await known(3, 1);
      const before2 = await known(3, 2);
      const handled: Record<number, string[]> = { 1: [], 2: [] };
      const marks: Record<number, number> = { 1: 0, 2: 0 };
      for (const b of [1, 2]) {
        const n = await nc(b);
        const q = n.subscribe('svc.echo', { queue: 'workers' });
        void (async () => {
          for await (const m of q) {
            handled[b].push(sc.decode(m.data));
            m.respond(sc.encode(`b${b}:${sc.decode(m.data)}`));
          }
        })();
        const mark = n.subscribe('svc.mark');
        void (async () => {
          for await (const _m of mark) marks[b]++;
        })();
        await n.flush();
      }
      await knows(3, 1, before1 + 2);
      await knows(3, 2, before2 + 2);
      const requester = await nc(3);
      const replies: string[] = [];
      for (let i = 0; i < 30; i++) {
        const r = await requester.request('svc.echo', sc.encode(`r${i}`), { timeout: 10_000 });
        replies.push(sc.decode(r.data));
      }
      requester.publish('svc.mark', sc.encode('m'));
      await requester.flush();
      await eventually(() => marks[1] === 1 && marks[2] === 1, 15_000, 'the marks');
      assert.equal(replies.length, 30);
      assert.ok(replies.every((r, i) => r.endsWith(`:r${i}`)));
      assert.equal(handled[1].length + handled[2].length, 30, `each request handled once (${handled[1].length} + ${handled[2].length})`);
      assert.ok(handled[1].length > 0 && handled[2].length > 0, "both brokers' members served");
    });

    it('MQTT v5 request/response across brokers (response topic and correlation data)', async () => {
      const before12 = await known(1, 2);
      const before21 = await known(2, 1);
      const responder = await mq(2);
      responder.on('message', (_t, p, packet) => {
        const to = packet.properties?.responseTopic;
        if (to) void responder.publishAsync(to, `re:${p.toString()}`, { qos: 1, properties: { correlationData: packet.properties?.correlationData } });
      });
      await responder.subscribeAsync('req/echo', { qos: 1 });
      const requester = await mq(1);
      const answers: IPublishPacket[] = [];
      requester.on('message', (_t, _p, packet) => answers.push(packet));
      await requester.subscribeAsync('resp/me', { qos: 1 });
      await knows(1, 2, before12 + 1);
      await knows(2, 1, before21 + 1);
      await requester.publishAsync('req/echo', 'ping', { qos: 1, properties: { responseTopic: 'resp/me', correlationData: Buffer.from('c-1') } });
      await eventually(() => answers.length === 1, 15_000, 'the response');
      assert.equal(answers[0].payload.toString(), 're:ping');
      assert.equal(Buffer.from(answers[0].properties!.correlationData!).toString(), 'c-1');
    });

    /** The retained messages of `state/#` on a broker, as its admin API lists them. */
    const retainedOn = async (broker: number) =>
      (await c.api<{ items: Array<{ topic: string; payload: string }> }>(`/api/v1/mqtt/retained?filter=${encodeURIComponent('state/#')}`, broker)).items.map(
        (r) => `${r.topic}=${r.payload}`,
      );

    it('a retained message set on broker 1 is delivered to a new subscriber on broker 3, and cleared everywhere', async () => {
      const pub = await mq(1);
      await pub.publishAsync('state/door', 'open', { qos: 1, retain: true });
      await eventually(async () => (await retainedOn(3)).includes('state/door=open'), 10_000, 'broker 3 has the retained message');
      const sub = await mq(3);
      const got: IPublishPacket[] = [];
      sub.on('message', (_t, _p, packet) => got.push(packet));
      await sub.subscribeAsync('state/#', { qos: 1 });
      await eventually(() => got.length === 1, 10_000, 'the retained message');
      assert.equal(got[0].payload.toString(), 'open');
      assert.equal(got[0].retain, true);
      await pub.publishAsync('state/door', '', { qos: 1, retain: true });
      await eventually(async () => (await retainedOn(2)).length === 0 && (await retainedOn(3)).length === 0, 10_000, 'cleared on brokers 2 and 3');
    });

    it('a user and a policy created through broker 1 apply on broker 2 at once (control notify)', async () => {
      // The poll behind the notify runs every 30 s in cluster mode: these waits end well before it.
      const b1 = c.broker(1).proc;
      await b1.api('POST', '/api/v1/users', { username: 'admin', password: 'admin-pw', groups: ['admins'] });
      // Every broker's admin API wants them from now on (the scenarios after this one on the same cluster ask any).
      for (const b of c.brokers) b.proc.credentials = { username: 'admin', password: 'admin-pw' };
      await b1.api('POST', '/api/v1/users', { username: 'alice', password: 'alice-pw' });
      let alice: MqttClient | null = null;
      await eventually(
        async () => {
          alice = await mq(2, { username: 'alice', password: 'alice-pw' }).catch(() => null);
          return alice !== null;
        },
        10_000,
        'alice can log in on broker 2',
      );
      const a = alice as unknown as MqttClient;
      await a.publishAsync('secret/1', 'allowed', { qos: 1 });
      await b1.api('POST', '/api/v1/policies', {
        name: 'alice-no-secret',
        effect: 'deny',
        actions: ['publish'],
        resources: ['topic:secret/#'],
        principals: ['user:alice'],
      });
      await eventually(
        async () => {
          try {
            await a.publishAsync('secret/2', 'denied?', { qos: 1 });
            await sleep(50);
            return false;
          } catch {
            return true;
          }
        },
        10_000,
        'the policy applies on broker 2',
      );
    });
  });
}
