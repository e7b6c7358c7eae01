/**
 * Policy-bypass suite (issue 24, DESIGN.md "Authorization follows the data"): bob is denied every action on
 * `topic:secret/#` while everyone is allowed `*:*`; alice and carol are not denied anything. For each path a secret
 * message can take (live, stream, queue, retained, request/reply) and each protocol bob can read with (MQTT 3.1.1
 * and 5 including `$share` and `$queue`, Kafka, AMQP, NATS including JetStream pull and push, the admin API's
 * browser), bob receives none of the secret payloads while alice (and carol) receive all of them.
 *
 * One real `bin/flowmq` with a users file serves every case; real clients (MQTT.js, KafkaJS, amqplib, nats).
 * Absence is proved with a marker sent after the secrets on a topic bob may read: once bob's subscription has the
 * marker, everything published before it has been routed to him or not at all.
 *
 * The cluster forwarding path (the same inbox leak with alice and bob on different brokers) is in
 * policy-bypass-cluster.test.ts.
 *
 * Written against main at f853741, where these failed (the leaks of issue 24): every bob case of the
 * request/reply scenarios (JetStream pull, STREAM.MSG.GET and push replies re-published as ordinary messages on
 * the inbox or deliver subject), every bob case of streams and queues (read through Kafka, JetStream, the admin
 * API, AMQP and MQTT `$queue`, since `stream:`/`queue:` are checked apart from `topic:`), and binding secret/
 * filters to streams (admin API, JetStream, Kafka CreateTopics). Already held on main, kept as regressions: live
 * wildcard filtering, the offline MQTT session, retained messages, AMQP topic bindings, publishes of bob through
 * MQTT, NATS and AMQP. Also failed on main, found by this suite: a Kafka produce of bob to a topic under secret/ was
 * accepted and reached alice's MQTT and NATS subscribers of secret/#.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AckPolicy, DeliverPolicy, createInbox, type NatsConnection } from 'nats';
import type { Channel, ChannelModel } from 'amqplib';
import mqtt, { type MqttClient } from 'mqtt';
import { FlowmqProcess, eventually } from './harness.js';
import {
  USERS_YAML,
  amqpChannel,
  amqpConnect,
  amqpTap,
  apiAs,
  browse,
  browseValues,
  kafkaAs,
  kafkaErrorType,
  kafkaRead,
  noLeak,
  mqttConnect,
  mqttTap,
  natsConnect,
  natsTap,
  sc,
  secretOf,
  streamTap,
  subackCode,
  uniq,
  type Tap,
  type User,
} from './policy-bypass-helpers.js';

/** The JetStream API's refusal as the nats client reports it (a 403 API error naming the permission). */
const JS_REFUSED = /permission|403|not authorized|authorization/i;

describe('policy bypass: a deny on topic:secret/# holds on every path (issue 24)', { timeout: 180_000 }, () => {
  let dir = '';
  let broker: FlowmqProcess;
  /** Open client connections of the whole file, closed at the end. */
  const natsConns: NatsConnection[] = [];
  const mqttClients: MqttClient[] = [];
  const amqpConns: ChannelModel[] = [];
  const nats = async (u: User) => {
    const nc = await natsConnect(broker.natsServer, u);
    natsConns.push(nc);
    return nc;
  };
  const mq = async (u: User, v: 4 | 5, opts = {}) => {
    const c = await mqttConnect(broker.mqttUrl, u, v, opts);
    mqttClients.push(c);
    return c;
  };
  const amqpAs = async (u: User) => {
    const c = await amqpConnect(broker.ports.amqp, u);
    amqpConns.push(c);
    return c;
  };

  /** Runs `fn` on a channel of a fresh connection of bob's, closed afterwards (what he held goes back). */
  const asBobChannel = async (fn: (ch: Channel & { closedWith: Promise<Error> }) => Promise<void>) => {
    const conn = await amqpConnect(broker.ports.amqp, 'bob');
    try {
      await fn(await amqpChannel(conn));
    } finally {
      await conn.close().catch(() => undefined);
    }
  };

  /**
   * The secrets published before any case runs, in this order, each on a topic under secret/: they are the first
   * messages of the streams `vault` (bound to secret/#) and, for those on secret/x, `wide` (bound to +/x).
   */
  const SEEDS: Array<{ via: string; topic: string; payload: string }> = [
    { via: 'mqtt', topic: 'secret/x', payload: secretOf('seed-mqtt-1') },
    { via: 'mqtt', topic: 'secret/x', payload: secretOf('seed-mqtt-2') },
    { via: 'mqtt', topic: 'secret/a/b', payload: secretOf('seed-mqtt-deep') },
    { via: 'nats', topic: 'secret/x', payload: secretOf('seed-nats-1') },
    { via: 'amqp', topic: 'secret/x', payload: secretOf('seed-amqp-1') },
    { via: 'jetstream', topic: 'secret/js/1', payload: secretOf('seed-js-1') },
  ];
  const seedPayloads = SEEDS.map((s) => s.payload);
  const wideSeeds = SEEDS.filter((s) => s.topic === 'secret/x').map((s) => s.payload);

  /** Publishes as alice through MQTT (QoS 1, after the PUBACK the message has been routed). */
  const aliceMqttPublish = async (topic: string, payload: string, retain = false) => {
    const c = await mq('alice', 5);
    await c.publishAsync(topic, payload, { qos: 1, retain });
    await c.endAsync();
  };

  /** Publishes a marker as carol through NATS (flushed: routed once the PONG is back). */
  const marker = async (subject: string): Promise<string> => {
    const m = `MARK:${uniq()}`;
    const nc = await nats('carol');
    nc.publish(subject, sc.encode(m));
    await nc.flush();
    return m;
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-bypass-'));
    writeFileSync(join(dir, 'users.yaml'), USERS_YAML);
    broker = await FlowmqProcess.start({
      args: ['--users-file', join(dir, 'users.yaml'), '--amqp-heartbeat', '0', '--kafka-group-initial-rebalance-delay', '0'],
    });

    // alice's durable destinations on the denied topics: streams through the admin API and JetStream, a queue.
    for (const s of [
      { name: 'vault', bindings: ['secret/#'] },
      { name: 'wide', bindings: ['+/x'] },
    ]) {
      const r = await apiAs(broker.http, 'alice', 'POST', '/api/v1/streams', { ...s, partitions: 1 });
      assert.equal(r.status, 201, JSON.stringify(r.body));
    }
    const anc = await nats('alice');
    await (await anc.jetstreamManager()).streams.add({ name: 'JSVAULT', subjects: ['secret.js.>'] });
    const ac = await amqpAs('alice');
    const ach = await ac.createConfirmChannel();
    await ach.assertQueue('vq', { durable: true });
    await ach.bindQueue('vq', 'amq.topic', 'secret.#');

    // The seeds, each acknowledged before the next.
    const kp = kafkaAs(broker.kafka, 'alice').producer();
    for (const s of SEEDS) {
      if (s.via === 'mqtt') await aliceMqttPublish(s.topic, s.payload);
      else if (s.via === 'nats') {
        anc.publish(s.topic.replaceAll('/', '.'), sc.encode(s.payload));
        await anc.flush();
      } else if (s.via === 'amqp') {
        ach.publish('amq.topic', s.topic.replaceAll('/', '.'), Buffer.from(s.payload));
        await ach.waitForConfirms();
      } else if (s.via === 'jetstream') {
        await anc.jetstream().publish(s.topic.replaceAll('/', '.'), sc.encode(s.payload));
      }
    }
    // A Kafka topic under secret/ (a Kafka topic binds its own name), produced by alice.
    await kp.connect();
    await kp.send({ topic: 'secret.k', messages: [{ value: secretOf('kafka-1') }, { value: secretOf('kafka-2') }] });
    await kp.disconnect();
    await ach.close();
    const vault = await browse(broker.http, 'alice', 'vault');
    assert.deepEqual(browseValues(vault.items).slice(0, SEEDS.length), seedPayloads, 'the seeds are the first messages of vault');
  });

  after(async () => {
    for (const c of mqttClients) await c.endAsync(true).catch(() => undefined);
    await Promise.allSettled(natsConns.map((n) => n.close()));
    for (const c of amqpConns) await c.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Asserts that a tap of bob's got the marker and nothing secret before it. */
  const noneFor = async (tap: Tap, mark: string) => {
    await tap.until(mark);
    noLeak(tap.payloads, tap.name);
  };

  // ------------------------------------------------------------------------------------------------ live
  describe('live: wildcard subscriptions', () => {
    const bob: Tap[] = [];
    const allowed: Tap[] = [];
    const live = [secretOf('live-mqtt'), secretOf('live-nats'), secretOf('live-amqp'), secretOf('live-kafka')];
    let mark = '';
    before(async () => {
      const url = broker.mqttUrl;
      bob.push(await mqttTap(url, 'bob', '#', 4), await mqttTap(url, 'bob', '#', 5), await mqttTap(url, 'bob', '$share/bob-live/#', 5));
      bob.push(await natsTap(broker.natsServer, 'bob', '>'), await natsTap(broker.natsServer, 'bob', '>', 'bob-live-q'));
      allowed.push(await mqttTap(url, 'alice', '#', 5), await mqttTap(url, 'carol', '#', 4), await mqttTap(url, 'carol', '$share/carol-live/#', 5));
      allowed.push(await natsTap(broker.natsServer, 'carol', '>'), await amqpTap(broker.ports.amqp, 'carol', ['#']));
      // The same secrets through each protocol, each routed before the next.
      await aliceMqttPublish('secret/live', live[0]!);
      const nc = await nats('alice');
      nc.publish('secret.live', sc.encode(live[1]!));
      await nc.flush();
      const ch = await (await amqpAs('alice')).createConfirmChannel();
      ch.publish('amq.topic', 'secret.live', Buffer.from(live[2]!));
      await ch.waitForConfirms();
      const kp = kafkaAs(broker.kafka, 'alice').producer();
      await kp.connect();
      await kp.send({ topic: 'secret.k', messages: [{ value: live[3] }] });
      await kp.disconnect();
      mark = await marker('open.x');
    });
    after(async () => {
      for (const t of [...bob, ...allowed]) await t.close();
    });

    it('bob: MQTT 3.1.1 #, MQTT 5 # and $share/g/#, NATS > (also in a queue group): none of the live secrets', async () => {
      for (const t of bob) await noneFor(t, mark);
    });
    it('alice and carol (MQTT #, $share, NATS >, AMQP #) receive every live secret from MQTT, NATS, AMQP and Kafka', async () => {
      for (const t of allowed) {
        const got = await t.until(mark);
        for (const s of live) assert.ok(got.includes(s), `${t.name} lacks ${s}: ${JSON.stringify(got)}`);
      }
    });
    it('bob binding his queue to amq.topic with # (reaches secret/#) is refused with 403', async () => {
      const ch = await amqpChannel(await amqpAs('bob'));
      const q = await ch.assertQueue('', { exclusive: true });
      await assert.rejects(ch.bindQueue(q.queue, 'amq.topic', '#'), /403|ACCESS_REFUSED/);
    });
  });

  describe('live: an offline MQTT session of bob (stored session queue)', () => {
    it("bob's persistent # subscription gets none of the secrets published while he was away; carol's gets them", async () => {
      const clientId = uniq('bob-session-');
      const opts = { clientId, clean: false, properties: { sessionExpiryInterval: 600 } };
      const first = await mqttConnect(broker.mqttUrl, 'bob', 5, opts);
      await first.subscribeAsync('#', { qos: 1 });
      await first.endAsync();
      const carolId = uniq('carol-session-');
      const copts = { clientId: carolId, clean: false, properties: { sessionExpiryInterval: 600 } };
      const c1 = await mqttConnect(broker.mqttUrl, 'carol', 5, copts);
      await c1.subscribeAsync('#', { qos: 1 });
      await c1.endAsync();
      const s = secretOf('offline');
      await aliceMqttPublish('secret/offline', s);
      const mark = `MARK:${uniq()}`;
      await aliceMqttPublish('open/offline', mark);
      // Listening before the CONNACK: the session's queue follows it at once.
      const resume = (u: User, o: typeof opts, into: string[]) => {
        const c = mqtt.connect(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: u, password: `${u}-pw`, ...o });
        c.on('message', (_t, p) => into.push(p.toString()));
        mqttClients.push(c);
        return c;
      };
      const got: string[] = [];
      const again = resume('bob', opts, got);
      const cgot: string[] = [];
      const cagain = resume('carol', copts, cgot);
      await eventually(() => got.includes(mark) && cgot.includes(mark), 15_000, 'the marker from both sessions');
      noLeak(got, 'bob');
      assert.ok(cgot.includes(s), `carol's session lacks the secret: ${JSON.stringify(cgot)}`);
      await again.endAsync();
      await cagain.endAsync();
    });
  });

  // ------------------------------------------------------------------------------------------ request/reply
  /**
   * bob's subscriptions that reach the reply subjects of other clients (`prefix` is `_INBOX` or `deliver`), taken
   * before alice's request and checked after a marker on `<prefix>.mark…`, which each of them matches.
   */
  const bobReplyTaps = async (prefix: string): Promise<Tap[]> => {
    const url = broker.mqttUrl;
    return [
      await mqttTap(url, 'bob', '#', 4),
      await mqttTap(url, 'bob', '#', 5),
      await mqttTap(url, 'bob', `$share/${uniq('g')}/#`, 5),
      await natsTap(broker.natsServer, 'bob', '>'),
      await natsTap(broker.natsServer, 'bob', `${prefix}.>`),
      await amqpTap(broker.ports.amqp, 'bob', [`${prefix}.#`]),
      await streamTap(broker.http, 'bob', [`${prefix}/#`]),
    ];
  };

  /**
   * One request/reply scenario: bob's taps, then alice's `action` (which returns what she received), then the
   * marker; a case for alice and one per tap of bob's.
   */
  const replyScenario = (title: string, prefix: '_INBOX' | 'deliver', action: () => Promise<string[]>, expected: () => string[]) => {
    describe(title, () => {
      let taps: Tap[] = [];
      let aliceGot: string[] = [];
      let mark = '';
      before(async () => {
        taps = await bobReplyTaps(prefix);
        aliceGot = await action();
        mark = await marker(`${prefix}.mark.${uniq()}`);
      });
      after(async () => {
        for (const t of taps) await t.close();
      });
      it('alice receives all of her secrets', () => {
        assert.deepEqual([...aliceGot].sort(), [...expected()].sort());
      });
      const names = [
        'MQTT 3.1.1 #',
        'MQTT 5 #',
        'MQTT 5 $share/g/#',
        'NATS >',
        `NATS ${prefix}.>`,
        `AMQP queue bound to amq.topic with ${prefix}.#`,
        `stream bound to ${prefix}/# (read through the admin API)`,
      ];
      names.forEach((n, i) => {
        it(`bob's ${n} receives none of them`, async () => {
          await noneFor(taps[i]!, mark);
        });
      });
    });
  };

  describe('request/reply: stored messages re-delivered to a reply inbox or deliver subject', () => {
    replyScenario(
      "JetStream pull (CONSUMER.MSG.NEXT) of alice's durable consumer on vault (bound to secret/#)",
      '_INBOX',
      async () => {
        const nc = await nats('alice');
        const jsm = await nc.jetstreamManager();
        const name = uniq('alice-pull-');
        await jsm.consumers.add('vault', { durable_name: name, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.All });
        const c = await nc.jetstream().consumers.get('vault', name);
        const got: string[] = [];
        const iter = await c.fetch({ max_messages: SEEDS.length, expires: 5000 });
        for await (const m of iter) {
          got.push(sc.decode(m.data));
          m.ack();
        }
        return got;
      },
      () => seedPayloads,
    );

    replyScenario(
      'JetStream STREAM.MSG.GET (by sequence and last_by_subj) on vault',
      '_INBOX',
      async () => {
        const jsm = await (await nats('alice')).jetstreamManager();
        const got: string[] = [];
        for (let seq = 1; seq <= 3; seq++) got.push(sc.decode((await jsm.streams.getMessage('vault', { seq })).data));
        got.push(sc.decode((await jsm.streams.getMessage('vault', { last_by_subj: 'secret.a.b' })).data));
        return got;
      },
      () => [...seedPayloads.slice(0, 3), secretOf('seed-mqtt-deep')],
    );

    const pushScenario = (deliverTo: () => string) => async () => {
      const nc = await nats('alice');
      const subject = deliverTo();
      const got: string[] = [];
      const sub = nc.subscribe(subject);
      const done = (async () => {
        for await (const m of sub) {
          // Idle heartbeats and flow control carry a status, not data.
          if (m.headers?.code !== undefined && m.headers.code >= 100 && m.data.length === 0) continue;
          got.push(sc.decode(m.data));
          if (got.length >= SEEDS.length) break;
        }
      })();
      await nc.flush();
      const jsm = await nc.jetstreamManager();
      const name = uniq('alice-push-');
      await jsm.consumers.add('vault', { durable_name: name, deliver_subject: subject, ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.All });
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        done,
        new Promise((_r, reject) => (timer = setTimeout(() => reject(new Error(`push: ${got.length} of ${SEEDS.length}`)), 15_000))),
      ]).finally(() => clearTimeout(timer));
      sub.unsubscribe();
      await jsm.consumers.delete('vault', name);
      return got;
    };
    replyScenario(
      'JetStream push consumer of alice on vault, deliver subject an inbox (_INBOX.…)',
      '_INBOX',
      pushScenario(() => createInbox()),
      () => seedPayloads,
    );
    replyScenario(
      'JetStream push consumer of alice on vault, deliver subject deliver.alice.…',
      'deliver',
      pushScenario(() => `deliver.alice.${uniq()}`),
      () => seedPayloads,
    );
  });

  // ------------------------------------------------------------------------------------ streams and queues
  describe('streams do not launder topic:secret/#', () => {
    it('Kafka: bob fetching vault (bound to secret/#) is refused with TOPIC_AUTHORIZATION_FAILED', async () => {
      const r = await kafkaRead(broker.kafka, 'bob', 'vault', SEEDS.length);
      noLeak(r.values, 'bob read secrets from vault');
      assert.match(String(r.error), /TOPIC_AUTHORIZATION_FAILED/);
    });
    it('Kafka: bob fetching wide (bound to +/x, which reaches secret/x) is refused with TOPIC_AUTHORIZATION_FAILED', async () => {
      const r = await kafkaRead(broker.kafka, 'bob', 'wide', wideSeeds.length);
      noLeak(r.values, 'bob read secrets from wide');
      assert.match(String(r.error), /TOPIC_AUTHORIZATION_FAILED/);
    });
    it('Kafka: bob fetching the Kafka topic secret.k (binds secret/k) is refused with TOPIC_AUTHORIZATION_FAILED', async () => {
      const r = await kafkaRead(broker.kafka, 'bob', 'secret.k', 2);
      noLeak(r.values, 'bob read secrets from secret.k');
      assert.match(String(r.error), /TOPIC_AUTHORIZATION_FAILED/);
    });
    it('Kafka: alice and carol read every seed from vault, the secret/x ones from wide, and secret.k', async () => {
      for (const u of ['alice', 'carol'] as const) {
        const v = await kafkaRead(broker.kafka, u, 'vault', SEEDS.length);
        assert.equal(v.error, null, `${u} vault`);
        assert.deepEqual(v.values, seedPayloads, `${u} vault`);
        const w = await kafkaRead(broker.kafka, u, 'wide', wideSeeds.length);
        assert.equal(w.error, null, `${u} wide`);
        assert.deepEqual(w.values, wideSeeds, `${u} wide`);
        const k = await kafkaRead(broker.kafka, u, 'secret.k', 2);
        assert.equal(k.error, null, `${u} secret.k`);
        assert.deepEqual(k.values, [secretOf('kafka-1'), secretOf('kafka-2')], `${u} secret.k`);
      }
    });

    it('JetStream: bob creating a consumer on vault and on JSVAULT (subjects secret.js.>) is refused (403)', async () => {
      const jsm = await (await nats('bob')).jetstreamManager();
      for (const stream of ['vault', 'JSVAULT']) {
        await assert.rejects(
          jsm.consumers.add(stream, { durable_name: uniq('bob-c-'), ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.All }),
          JS_REFUSED,
          stream,
        );
        await assert.rejects(jsm.consumers.add(stream, { ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.All }), JS_REFUSED, `${stream} (ephemeral)`);
      }
    });
    it("JetStream: bob pulling from alice's existing durable consumer on vault gets no message, only a refusal", async () => {
      const anc = await nats('alice');
      const name = uniq('alice-shared-');
      await (await anc.jetstreamManager()).consumers.add('vault', { durable_name: name, ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.All });
      const nc = await nats('bob');
      const got: string[] = [];
      let error: Error | null = null;
      try {
        const c = await nc.jetstream().consumers.get('vault', name);
        const iter = await c.fetch({ max_messages: SEEDS.length, expires: 3000 });
        for await (const m of iter) got.push(sc.decode(m.data));
      } catch (err) {
        error = err as Error;
      }
      noLeak(got, 'bob pulled secrets');
      assert.match(String(error?.message), JS_REFUSED);
    });
    it("JetStream: bob's STREAM.MSG.GET on vault is refused (403)", async () => {
      const jsm = await (await nats('bob')).jetstreamManager();
      await assert.rejects(jsm.streams.getMessage('vault', { seq: 1 }), JS_REFUSED);
      await assert.rejects(jsm.streams.getMessage('JSVAULT', { seq: 1 }), JS_REFUSED);
    });
    it('JetStream: carol creates a consumer on vault and pulls every seed', async () => {
      const nc = await nats('carol');
      const name = uniq('carol-pull-');
      await (await nc.jetstreamManager()).consumers.add('vault', { durable_name: name, ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.All });
      const c = await nc.jetstream().consumers.get('vault', name);
      const got: string[] = [];
      for await (const m of await c.fetch({ max_messages: SEEDS.length, expires: 5000 })) got.push(sc.decode(m.data));
      assert.deepEqual(got, seedPayloads);
    });

    it('admin API: bob browsing vault, wide and secret.k (GET /api/v1/streams/{name}/messages) gets 403', async () => {
      for (const s of ['vault', 'wide', 'secret.k']) {
        const r = await browse(broker.http, 'bob', s);
        noLeak(browseValues(r.items), `bob browsed secrets of ${s}`);
        assert.equal(r.status, 403, s);
      }
    });
    it('admin API: alice and carol browse vault and see every seed', async () => {
      for (const u of ['alice', 'carol'] as const) {
        const r = await browse(broker.http, u, 'vault');
        assert.equal(r.status, 200);
        assert.deepEqual(browseValues(r.items).slice(0, SEEDS.length), seedPayloads);
      }
    });

    it('AMQP: bob consuming the stream vault (x-stream-offset first) is refused with 403', async () => {
      const conn = await amqpConnect(broker.ports.amqp, 'bob');
      try {
        const ch = await amqpChannel(conn);
        await ch.prefetch(100);
        const got: string[] = [];
        const answer = await ch
          .consume('vault', (m) => m !== null && got.push(m.content.toString()), { arguments: { 'x-stream-offset': 'first' } })
          .then(
            () => 'consume-ok',
            (e: Error) => e.message,
          );
        if (answer === 'consume-ok') await eventually(() => got.length >= SEEDS.length, 10_000, 'the seeds').catch(() => undefined);
        noLeak(got, 'bob (stream consume)');
        assert.match(answer, /403|ACCESS_REFUSED/);
      } finally {
        await conn.close().catch(() => undefined);
      }
    });
    it('AMQP: alice consumes the stream vault from the first offset and gets every seed', async () => {
      const ch = await (await amqpAs('alice')).createChannel();
      await ch.prefetch(100);
      const got: string[] = [];
      let tag = '';
      await new Promise<void>((resolve, reject) => {
        ch.consume(
          'vault',
          (m) => {
            if (m === null) return;
            got.push(m.content.toString());
            ch.ack(m);
            if (got.length === SEEDS.length) resolve();
          },
          { arguments: { 'x-stream-offset': 'first' } },
        ).then((ok) => (tag = ok.consumerTag), reject);
      });
      await ch.cancel(tag);
      assert.deepEqual(got.slice(0, SEEDS.length), seedPayloads);
    });
  });

  describe('queues do not launder topic:secret/#', () => {
    /** alice puts a fresh batch into vq (bound to amq.topic with secret.#) and a closing marker, also secret-topic. */
    const fill = async (tag: string, n = 3): Promise<{ secrets: string[]; mark: string }> => {
      const ch = await (await amqpAs('alice')).createConfirmChannel();
      const secrets = Array.from({ length: n }, (_, i) => secretOf(`q-${tag}-${i}`));
      for (const s of secrets) ch.publish('amq.topic', 'secret.q', Buffer.from(s));
      const mark = `MARK:${uniq()}`;
      ch.publish('amq.topic', 'secret.q.mark', Buffer.from(mark));
      await ch.waitForConfirms();
      await ch.close();
      return { secrets, mark };
    };

    it("MQTT: bob's $queue/vq is refused (3.1.1 SUBACK 0x80, 5.0 0x87) and delivers nothing", async () => {
      await fill('mqtt-bob');
      for (const v of [4, 5] as const) {
        const c = await mq('bob', v);
        const got: string[] = [];
        c.on('message', (_t, p) => got.push(p.toString()));
        const code = await subackCode(c, '$queue/vq');
        await c.endAsync(true);
        noLeak(got, `MQTT ${v}: bob got queue messages`);
        assert.equal(code, v === 4 ? 0x80 : 0x87, `MQTT ${v === 4 ? '3.1.1' : '5'} SUBACK`);
      }
    });
    it("AMQP: bob's basic.get on vq is refused with 403", async () => {
      await fill('get-bob');
      await asBobChannel(async (ch) => {
        const got: string[] = [];
        const answer = await ch.get('vq', { noAck: false }).then(
          (m) => {
            if (m !== false) got.push(m.content.toString());
            return 'get-ok';
          },
          (e: unknown) => (e instanceof Error && typeof e.message === 'string' ? e.message : 'rejected'),
        );
        noLeak(got, 'bob (basic.get)');
        // amqplib rejects a get whose channel the broker closed without the close's text: that is in closedWith.
        const closed = answer === 'get-ok' ? '' : (await ch.closedWith).message;
        assert.match(`${answer} ${closed}`, /403|ACCESS_REFUSED/);
      });
    });
    it("AMQP: bob's basic.consume on vq is refused with 403", async () => {
      const { mark } = await fill('consume-bob');
      await asBobChannel(async (ch) => {
        const got: string[] = [];
        const answer = await ch
          .consume('vq', (m) => m !== null && got.push(m.content.toString()), { noAck: false })
          .then(
            () => 'consume-ok',
            (e: Error) => e.message,
          );
        // Granted (today): what the consumer gets up to the batch's marker.
        if (answer === 'consume-ok') await eventually(() => got.includes(mark), 10_000, 'the batch marker').catch(() => undefined);
        noLeak(got, 'bob (basic.consume)');
        assert.match(answer, /403|ACCESS_REFUSED/);
      });
    });
    it("MQTT: carol's $queue/vq delivers her the whole batch", async () => {
      const { secrets, mark } = await fill('mqtt-carol');
      const c = await mq('carol', 5);
      const got: string[] = [];
      c.on('message', (_t, p) => got.push(p.toString()));
      assert.equal(await subackCode(c, '$queue/vq'), 1);
      await eventually(() => got.includes(mark), 15_000, 'the queue marker');
      await c.endAsync();
      for (const s of secrets) assert.ok(got.includes(s), `carol lacks ${s}`);
    });
    it('AMQP: alice basic.gets the whole batch from vq', async () => {
      const { secrets, mark } = await fill('get-alice');
      const ch = await (await amqpAs('alice')).createChannel();
      const got: string[] = [];
      while (!got.includes(mark)) {
        const m = await ch.get('vq', { noAck: true });
        assert.ok(m !== false, `vq ran dry before the marker: ${JSON.stringify(got)}`);
        got.push(m.content.toString());
      }
      for (const s of secrets) assert.ok(got.includes(s), `alice lacks ${s}`);
      await ch.close();
    });
  });

  // ------------------------------------------------------------------------------------ binding a filter
  describe('binding a filter to a stream or queue needs subscribe on it', () => {
    /** Deletes a stream bob managed to create (on main), so it captures nothing for later cases. */
    const cleanup = async (name: string) => {
      await apiAs(broker.http, 'alice', 'DELETE', `/api/v1/streams/${encodeURIComponent(name)}`);
    };
    for (const bindings of [['secret/#'], ['#'], ['+/x'], ['open/#', 'secret/y']]) {
      it(`admin API: bob creating a stream bound to ${bindings.join(', ')} gets 403`, async () => {
        const name = uniq('bob-bind-');
        const r = await apiAs(broker.http, 'bob', 'POST', '/api/v1/streams', { name, partitions: 1, bindings });
        if (r.status < 300) await cleanup(name);
        assert.equal(r.status, 403, JSON.stringify(r.body));
      });
    }
    it("admin API: bob changing his own stream's bindings to secret/# (PATCH) gets 403 and the stream keeps its bindings", async () => {
      const name = uniq('bob-own-');
      assert.equal(
        (await apiAs(broker.http, 'bob', 'POST', '/api/v1/streams', { name, partitions: 1, bindings: ['open/#'] })).status,
        201,
        'bob may bind open/#',
      );
      const r = await apiAs(broker.http, 'bob', 'PATCH', `/api/v1/streams/${encodeURIComponent(name)}`, { bindings: ['open/#', 'secret/#'] });
      const now = await apiAs<{ bindings: string[] }>(broker.http, 'alice', 'GET', `/api/v1/streams/${encodeURIComponent(name)}`);
      await cleanup(name);
      assert.equal(r.status, 403, JSON.stringify(r.body));
      assert.deepEqual(now.body.bindings, ['open/#']);
    });
    it('JetStream: bob creating a stream with subjects secret.> is refused (403)', async () => {
      const jsm = await (await nats('bob')).jetstreamManager();
      const name = uniq('BOBJS').toUpperCase();
      let created = false;
      await assert.rejects(
        jsm.streams.add({ name, subjects: ['secret.>'] }).then(() => {
          created = true;
        }),
        JS_REFUSED,
      );
      if (created) await cleanup(name);
    });
    it('JetStream: bob updating his own stream to add subjects > (reaches secret) is refused (403)', async () => {
      const jsm = await (await nats('bob')).jetstreamManager();
      const name = uniq('BOBUP').toUpperCase();
      await jsm.streams.add({ name, subjects: ['open.bob.>'] });
      try {
        await assert.rejects(jsm.streams.update(name, { subjects: ['open.bob.>', '>'] }), JS_REFUSED);
      } finally {
        await cleanup(name);
      }
    });
    it('Kafka: bob creating the topic secret.bob (a Kafka topic binds its own name) is refused with TOPIC_AUTHORIZATION_FAILED', async () => {
      const admin = kafkaAs(broker.kafka, 'bob').admin();
      await admin.connect();
      try {
        await assert.rejects(admin.createTopics({ topics: [{ topic: 'secret.bob', numPartitions: 1 }], waitForLeaders: false }), (e: unknown) =>
          /TOPIC_AUTHORIZATION_FAILED/.test(kafkaErrorType(e)),
        );
      } finally {
        await admin.disconnect();
        await cleanup('secret.bob');
      }
    });
    it('AMQP: bob binding his queue to amq.topic with secret.# or # is refused with 403', async () => {
      const conn = await amqpAs('bob');
      for (const key of ['secret.#', '#', 'secret.x']) {
        const ch = await amqpChannel(conn);
        const q = await ch.assertQueue('', { exclusive: true });
        await assert.rejects(ch.bindQueue(q.queue, 'amq.topic', key), /403|ACCESS_REFUSED/, key);
      }
    });
    it('bob may still bind what he may read: a stream on open/# (admin API), a JetStream stream on open.>, a queue on open.#', async () => {
      const name = uniq('bob-open-');
      assert.equal((await apiAs(broker.http, 'bob', 'POST', '/api/v1/streams', { name, partitions: 1, bindings: ['open/#'] })).status, 201);
      await cleanup(name);
      const jsm = await (await nats('bob')).jetstreamManager();
      const js = uniq('BOBOPEN').toUpperCase();
      await jsm.streams.add({ name: js, subjects: ['open.>'] });
      await cleanup(js);
      const ch = await amqpChannel(await amqpAs('bob'));
      const q = await ch.assertQueue('', { exclusive: true });
      await ch.bindQueue(q.queue, 'amq.topic', 'open.#');
    });
  });

  // ------------------------------------------------------------------------------------------ write side
  describe('write side: bob cannot publish into secret/# either (deny * includes publish)', () => {
    /** alice's taps on secret/#, then `attempt` by bob, then a marker on secret/… by alice. */
    const watchSecret = async (attempt: () => Promise<void>) => {
      const taps = [await mqttTap(broker.mqttUrl, 'alice', 'secret/#', 5), await natsTap(broker.natsServer, 'alice', 'secret.>')];
      try {
        await attempt();
        const mark = `MARK:${uniq()}`;
        await aliceMqttPublish('secret/w/mark', mark);
        for (const t of taps) {
          const got = await t.until(mark);
          assert.deepEqual(
            got.filter((p) => p.startsWith('FROM-BOB')),
            [],
            `${t.name} got bob's publish`,
          );
        }
      } finally {
        for (const t of taps) await t.close();
      }
    };
    it('MQTT 5 (PUBACK 0x87), NATS (Permissions Violation) and AMQP (403) publishes of bob on secret/w reach nobody', async () => {
      await watchSecret(async () => {
        const c = await mq('bob', 5);
        await assert.rejects(c.publishAsync('secret/w', 'FROM-BOB-mqtt', { qos: 1 }), (e: { code?: number }) => e.code === 0x87);
        await c.endAsync();
        const nc = await nats('bob');
        nc.publish('secret.w', sc.encode('FROM-BOB-nats'));
        await nc.flush();
        await asBobChannel(async (ch) => {
          ch.publish('amq.topic', 'secret.w', Buffer.from('FROM-BOB-amqp'));
          assert.match((await ch.closedWith).message, /403|ACCESS_REFUSED/);
        });
      });
    });
    it('Kafka: bob producing to the topic secret.k (binds secret/k) is refused with TOPIC_AUTHORIZATION_FAILED and reaches nobody', async () => {
      let answer = '';
      await watchSecret(async () => {
        const p = kafkaAs(broker.kafka, 'bob').producer();
        await p.connect();
        answer = await p.send({ topic: 'secret.k', messages: [{ value: 'FROM-BOB-kafka' }] }).then(
          () => 'produced',
          (e: unknown) => kafkaErrorType(e),
        );
        await p.disconnect();
      });
      assert.match(answer, /TOPIC_AUTHORIZATION_FAILED/);
      const k = await kafkaRead(broker.kafka, 'alice', 'secret.k', 3);
      assert.deepEqual(
        k.values.filter((v) => v.startsWith('FROM-BOB')),
        [],
        "bob's record is in secret.k",
      );
    });
  });

  // ------------------------------------------------------------------------------------------ retained
  describe('retained messages', () => {
    after(async () => {
      const c = await mq('alice', 5);
      await c.publishAsync('secret/ret', '', { qos: 1, retain: true });
      await c.publishAsync('open/ret', '', { qos: 1, retain: true });
      await c.endAsync();
    });
    it("a retained message on secret/ret never reaches bob's new # subscription (3.1.1, 5) nor his admin API listing; carol gets it", async () => {
      const s = secretOf('retained');
      await aliceMqttPublish('secret/ret', s, true);
      await aliceMqttPublish('open/ret', 'open-retained', true);
      const bob = [await mqttTap(broker.mqttUrl, 'bob', '#', 4), await mqttTap(broker.mqttUrl, 'bob', '#', 5)];
      const carol = await mqttTap(broker.mqttUrl, 'carol', '#', 5);
      const mark = await marker('open.ret.mark');
      try {
        for (const t of bob) {
          const got = await t.until(mark);
          assert.ok(got.includes('open-retained'), `${t.name} got the open retained message`);
          noLeak(got, `${t.name} got the secret retained message`);
        }
        assert.ok((await carol.until(mark)).includes(s), 'carol gets the secret retained message');
        const listed = await apiAs<{ items: Array<{ payload: string }> }>(broker.http, 'bob', 'GET', '/api/v1/mqtt/retained?filter=%23');
        assert.equal(listed.status, 200);
        noLeak(
          listed.body.items.map((i) => i.payload),
          'bob',
        );
        assert.ok(listed.body.items.some((i) => i.payload === 'open-retained'));
      } finally {
        for (const t of [...bob, carol]) await t.close();
      }
    });
  });
});
