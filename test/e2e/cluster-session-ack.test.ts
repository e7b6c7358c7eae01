// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Issue 30: a QoS 1/2 publish forwarded to a persistent MQTT session owned by another broker is acknowledged to its
 * publisher only once the session's owner stored it, and what is addressed to an owner that cannot be reached (killed,
 * paused past its lease, the session changing hands) waits for the session's next owner. Three `bin/flowmq --cluster`
 * processes (test/helpers/cluster.ts), MQTT.js clients: persistent sessions subscribed on one broker, publishers on
 * another sending numbered series one publish after the other (each awaits its PUBACK / PUBCOMP); the session's broker
 * is killed with SIGKILL (then, in a second case, frozen with SIGSTOP past its lease and thawed afterwards) mid-series;
 * the subscribers resume their sessions on a third broker. Every acknowledged message must reach its subscriber
 * (duplicates are allowed at QoS 1 and counted; a marker published after the series proves the end).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { Store, type MqttClient } from 'mqtt';
import { TestCluster } from '../helpers/cluster.js';
import { eventually, sleep } from './harness.js';

const N = 150;
/** The publish at which the session's broker is killed or paused. */
const AT = 30;
/** Pause between publishes: the series spans the dead owner's lease and the takeover. */
const GAP_MS = 25;

interface Series {
  acked: number[];
  got: Map<string, number>;
  done: Promise<void>;
  pub: MqttClient;
  /** The longest wait for an acknowledgement, ms. */
  maxAckMs: number;
}

describe('cluster: QoS 1/2 publishes to a persistent session of another broker are acknowledged once stored (issue 30)', () => {
  let c: TestCluster;
  const clients: MqttClient[] = [];

  before(async () => {
    c = await TestCluster.start({ brokers: 3, haproxy: false, args: ['--allow-anonymous', 'true', '--default-policy', 'allow'] });
  });
  after(async () => {
    for (const m of clients) await m.endAsync(true).catch(() => undefined);
    await c?.close();
  });

  const durableFigures = async (broker: number) =>
    (await c.api<{ live: { durable: { heldTotal: number; storedAfterHold: number; heldNow: number } } }>('/api/v1/broker', broker)).live.durable;
  const live = async (broker: number) => (await c.api<{ live: { peers: Record<string, number> } }>('/api/v1/broker', broker)).live;
  const knows = (at: number, of: number, n: number) =>
    eventually(async () => ((await live(at)).peers[String(of)] ?? 0) >= n, 15_000, `broker ${at} knows broker ${of}'s filters`);

  /**
   * The client side of each session's state (incoming QoS 2 messages awaiting PUBREL), kept across its connections as
   * MQTT requires of a client resuming a session: a QoS 2 message PUBREC'd on the first connection is released on the
   * next one.
   */
  const incoming = new Map<string, Store>();
  /** A session's options: MQTT 3.1.1 clean=false, or MQTT 5 with a session expiry. */
  const sessionOpts = (clientId: string, v5: boolean): mqtt.IClientOptions => {
    let store = incoming.get(clientId);
    if (store === undefined) incoming.set(clientId, (store = new Store()));
    return v5
      ? { clientId, protocolVersion: 5, clean: false, properties: { sessionExpiryInterval: 3600 }, incomingStore: store }
      : { clientId, protocolVersion: 4, clean: false, incomingStore: store };
  };

  /** Subscribes a persistent session on `broker` at `qos`; every message of either connection is counted in `got`. */
  const subscribe = async (broker: number, clientId: string, filter: string, qos: 1 | 2, v5: boolean, got: Map<string, number>) => {
    const client = mqtt.connect(c.broker(broker).mqttUrl, { reconnectPeriod: 0, connectTimeout: 10_000, keepalive: 5, ...sessionOpts(clientId, v5) });
    clients.push(client);
    client.on('message', (_t, payload) => got.set(payload.toString(), (got.get(payload.toString()) ?? 0) + 1));
    client.on('error', () => undefined);
    await new Promise<void>((resolve, reject) => {
      client.once('connect', () => resolve());
      client.once('error', reject);
    });
    await client.subscribeAsync(filter, { qos });
    return client;
  };

  /** The same session resumed on `broker`, retrying while it is still held elsewhere (CONNACK 0x88 / 0x03). */
  const resume = (broker: number, clientId: string, v5: boolean, got: Map<string, number>) => {
    const client = mqtt.connect(c.broker(broker).mqttUrl, {
      reconnectPeriod: 250,
      reconnectOnConnackError: true,
      connectTimeout: 10_000,
      ...sessionOpts(clientId, v5),
    });
    clients.push(client);
    client.on('message', (_t, payload) => got.set(payload.toString(), (got.get(payload.toString()) ?? 0) + 1));
    client.on('error', () => undefined);
    return client;
  };

  /** A numbered series on `topic` published one after the other on `broker`, then `end`. */
  const series = async (
    broker: number,
    topic: string,
    qos: 1 | 2,
    tag: string,
    got: Map<string, number>,
    onIndex: (i: number) => Promise<void> | void,
  ): Promise<Series> => {
    const pub = await mqtt.connectAsync(c.broker(broker).mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 10_000 });
    clients.push(pub);
    const acked: number[] = [];
    const s: Series = { acked, got, done: Promise.resolve(), pub, maxAckMs: 0 };
    s.done = (async () => {
      for (let i = 0; i < N; i++) {
        await onIndex(i);
        const t0 = Date.now();
        await pub.publishAsync(topic, `${tag}-${i}`, { qos });
        s.maxAckMs = Math.max(s.maxAckMs, Date.now() - t0);
        acked.push(i);
        await sleep(GAP_MS);
      }
    })();
    return s;
  };

  const check = async (s: Series, tag: string, topic: string, qos: 1 | 2, dupsAllowed: boolean): Promise<void> => {
    await s.done;
    await s.pub.publishAsync(topic, `${tag}-end`, { qos });
    const marker = await eventually(() => s.got.has(`${tag}-end`), 60_000, `${tag}: the marker after the series`).then(
      () => true,
      () => false,
    );
    const missing = s.acked.filter((i) => !s.got.has(`${tag}-${i}`));
    const dups = [...s.got.values()].filter((n) => n > 1).length;
    console.log(
      `${tag}: ${s.acked.length} acknowledged, ${missing.length} missing, ${dups} received more than once, marker ${marker ? 'received' : 'missing'}, longest acknowledgement ${s.maxAckMs} ms`,
    );
    assert.equal(s.acked.length, N);
    assert.deepEqual(missing, [], `${tag}: acknowledged messages that never reached the session`);
    assert.ok(marker, `${tag}: the marker published after the series never arrived`);
    if (!dupsAllowed) assert.equal(dups, 0, `${tag}: duplicates`);
  };

  it('kill -9 of the session owner mid-series: every acknowledged QoS 1 and QoS 2 message reaches the session resumed on a third broker', async () => {
    const got1 = new Map<string, number>();
    const got2 = new Map<string, number>();
    await subscribe(1, 'sack-k1', 'sack/k1/#', 1, false, got1);
    await subscribe(1, 'sack-k2', 'sack/k2/#', 2, true, got2);
    assert.equal(await c.ownerOf('session', 'sack-k1'), 1);
    assert.equal(await c.ownerOf('session', 'sack-k2'), 1);
    await knows(2, 1, 2);

    let killed: Promise<void> | null = null;
    const onIndex = (i: number) => {
      if (i !== AT || killed !== null) return;
      killed = c.kill(1).then(() => {
        // The subscribers come back at once on broker 3 (refused while broker 1's lease runs).
        resume(3, 'sack-k1', false, got1);
        resume(3, 'sack-k2', true, got2);
      });
    };
    const s1 = await series(2, 'sack/k1/x', 1, 'k1', got1, onIndex);
    const s2 = await series(2, 'sack/k2/x', 2, 'k2', got2, () => undefined);
    await check(s1, 'k1', 'sack/k1/end', 1, true);
    await check(s2, 'k2', 'sack/k2/end', 2, true);
    await killed;
    // The path taken: broker 2 held messages for the sessions while broker 1 was unreachable or dead.
    const held = await durableFigures(2);
    console.log(`broker 2: ${JSON.stringify(held)}`);
    assert.ok(held.heldTotal > 0 && held.storedAfterHold > 0 && held.heldNow === 0);
  });

  it('SIGSTOP of the session owner past its lease, SIGCONT after the series: every acknowledged message reaches the session resumed elsewhere', async () => {
    // Broker 1 back (a new incarnation), the sessions on broker 3, the publishers on broker 2, the resume on broker 1.
    await c.startBroker({ id: 1, proxy: false });
    await c.waitBrokerAlive(1, 30_000);
    const got1 = new Map<string, number>();
    const got2 = new Map<string, number>();
    const sub1 = await subscribe(3, 'sack-p1', 'sack/p1/#', 1, true, got1);
    const sub2 = await subscribe(3, 'sack-p2', 'sack/p2/#', 2, false, got2);
    assert.equal(await c.ownerOf('session', 'sack-p1'), 3);
    await knows(2, 3, 2);

    let pausedAt = 0;
    const onIndex = async (i: number) => {
      if (i === AT) {
        pausedAt = Date.now();
        c.pause(3);
        // The frozen broker's clients are gone for them: they come back on broker 1.
        // Cut as a dead connection is (end() would close the session's client-side store, which the resume keeps).
        sub1.stream.destroy();
        sub2.stream.destroy();
        resume(1, 'sack-p1', true, got1);
        resume(1, 'sack-p2', false, got2);
      }
      if (i === AT + 60) {
        // Thawed well past its lease (2 s), mid-series: what it still had queued is fenced, it registers again.
        const wait = pausedAt + 3 * c.opts.leaseMs - Date.now();
        if (wait > 0) await sleep(wait);
        c.resume(3);
      }
    };
    const s1 = await series(2, 'sack/p1/x', 1, 'p1', got1, onIndex);
    const s2 = await series(2, 'sack/p2/x', 2, 'p2', got2, () => undefined);
    try {
      await check(s1, 'p1', 'sack/p1/end', 1, true);
      await check(s2, 'p2', 'sack/p2/end', 2, true);
      console.log(`broker 2: ${JSON.stringify(await durableFigures(2))}`);
    } finally {
      if (c.broker(3).state === 'paused') c.resume(3);
    }
  });
});
