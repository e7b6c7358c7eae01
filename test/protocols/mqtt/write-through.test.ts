/**
 * Write-through of outbound QoS 1/2 deliveries of persistent sessions: each is in the session store from the
 * tick it is sent until it is acknowledged, with its packet id and QoS 2 state, so a broker killed mid-flight
 * re-sends it on resume (the SIGKILL itself is in test/e2e/mqtt-durability.test.ts). In-process broker over the
 * in-memory session store, raw v5 client that acknowledges only when told to.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import mqtt from 'mqtt';
import { MemorySessionStore } from '../../../src/core/index.js';
import type { MqttPacket } from '../../../src/protocols/mqtt/codec/index.js';
import { decodeDelivery } from '../../../src/protocols/mqtt/session.js';
import { RawClient, connectPacket, sleep, startBroker, type TestBroker } from './helpers.js';

type Publish = Extract<MqttPacket, { type: 'publish' }>;

async function raw5(b: TestBroker, clientId: string, expiry: number): Promise<RawClient> {
  const c = await RawClient.open(b.port);
  c.level = 5;
  c.send(connectPacket(clientId, { protocolLevel: 5, cleanSession: true, properties: { sessionExpiryInterval: expiry } }));
  assert.equal((await c.next('connack')).returnCode, 0);
  c.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'wt/#', qos: 2 }], properties: {} });
  assert.deepEqual((await c.next('suback')).returnCodes, [2]);
  return c;
}

describe('mqtt: in-flight deliveries of persistent sessions are written through to the store', () => {
  let b: TestBroker;
  const sessions = new MemorySessionStore();
  before(async () => {
    b = await startBroker({ sysIntervalMs: 0 }, undefined, { sessions });
  });
  after(() => b.close());

  const stored = async (clientId: string) => (await sessions.readQueue(clientId, 100)).map((e) => decodeDelivery(e.data));
  /** Polls the store: the client's acknowledgement and the store write are asynchronous to the test. */
  async function storeShows(clientId: string, what: (q: Awaited<ReturnType<typeof stored>>) => unknown, expected: unknown): Promise<void> {
    const t0 = Date.now();
    for (;;) {
      const got = what(await stored(clientId));
      try {
        assert.deepEqual(got, expected);
        return;
      } catch (err) {
        if (Date.now() - t0 > 3000) throw err;
      }
      await sleep(5);
    }
  }

  test('stored when sent, rewritten on PUBREC, removed on PUBACK / PUBCOMP; not for a session that ends with its connection', async () => {
    const durable = await raw5(b, 'wt-keep', 600);
    const transient = await raw5(b, 'wt-drop', 0);
    const pub = await mqtt.connectAsync(b.url, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await pub.publishAsync('wt/one', 'q1', { qos: 1 });
      await pub.publishAsync('wt/two', 'q2', { qos: 2 });
      const got: Publish[] = [await durable.next('publish'), await durable.next('publish')];
      await transient.next('publish');
      await transient.next('publish');
      await storeShows('wt-keep', (q) => q.map((d) => [d.msg.payload.toString(), d.qos, d.packetId, d.released]), [
        ['q1', 1, got[0].packetId, false],
        ['q2', 2, got[1].packetId, false],
      ]);
      assert.equal((await sessions.readQueue('wt-drop', 10)).length, 0, 'a session with expiry 0 is not written');

      // QoS 2: after PUBREC only PUBREL may be re-sent (section 4.3.3), and the stored entry says so.
      durable.send({ type: 'pubrec', packetId: got[1].packetId });
      assert.equal((await durable.next('pubrel')).packetId, got[1].packetId);
      await storeShows('wt-keep', (q) => q.map((d) => [d.msg.payload.toString(), d.released]), [
        ['q1', false],
        ['q2', true],
      ]);

      durable.send({ type: 'puback', packetId: got[0].packetId });
      await storeShows('wt-keep', (q) => q.map((d) => d.msg.payload.toString()), ['q2']);
      durable.send({ type: 'pubcomp', packetId: got[1].packetId });
      await storeShows('wt-keep', (q) => q.length, 0);
    } finally {
      durable.destroy();
      transient.destroy();
      await pub.endAsync();
    }
  });

  test('a resumed session re-sends the released QoS 2 message as PUBREL, and the unreleased one with DUP', async () => {
    const c = await raw5(b, 'wt-resume', 600);
    const pub = await mqtt.connectAsync(b.url, { protocolVersion: 5, reconnectPeriod: 0 });
    await pub.publishAsync('wt/a', 'a', { qos: 2 });
    await pub.publishAsync('wt/b', 'b', { qos: 2 });
    await pub.endAsync();
    const a = await c.next('publish');
    const bb = await c.next('publish');
    c.send({ type: 'pubrec', packetId: a.packetId });
    await c.next('pubrel');
    await storeShows('wt-resume', (q) => q.map((d) => d.released), [true, false]);
    // The connection drops without acknowledging more; the store already holds both states.
    c.destroy();
    await c.closed;
    const r = await RawClient.open(b.port);
    r.level = 5;
    r.send(connectPacket('wt-resume', { protocolLevel: 5, cleanSession: false, properties: { sessionExpiryInterval: 600 } }));
    assert.equal((await r.next('connack')).sessionPresent, true);
    // [MQTT-4.4.0-1] PUBREL for the released one, PUBLISH with DUP and the same id for the other.
    assert.equal((await r.next('pubrel')).packetId, a.packetId);
    const again = await r.next('publish');
    assert.deepEqual([again.payload.toString(), again.dup, again.packetId], ['b', true, bb.packetId]);
    r.send({ type: 'pubcomp', packetId: a.packetId });
    r.send({ type: 'pubrec', packetId: bb.packetId });
    await r.next('pubrel');
    r.send({ type: 'pubcomp', packetId: bb.packetId });
    await storeShows('wt-resume', (q) => q.length, 0);
    r.destroy();
  });
});

/** A session store whose queue writes wait while `hold` is set (what the store has is what a kill -9 leaves). */
class HeldSessions extends MemorySessionStore {
  hold = false;
  private waiting: Array<() => void> = [];
  override async updateQueue(...args: Parameters<MemorySessionStore['updateQueue']>): ReturnType<MemorySessionStore['updateQueue']> {
    if (this.hold) await new Promise<void>((r) => this.waiting.push(r));
    return super.updateQueue(...args);
  }
  release(): void {
    this.hold = false;
    for (const r of this.waiting.splice(0)) r();
  }
}

describe('mqtt: outbound QoS 2 of a persistent session, PUBREL after the stored PUBREC', () => {
  test('PUBREL waits for the entry that records the PUBREC (a kill -9 before it re-sends the PUBLISH to a client that PUBCOMPed)', async () => {
    const sessions = new HeldSessions();
    const b = await startBroker({ sysIntervalMs: 0 }, undefined, { sessions });
    const c = await raw5(b, 'wt-pubrel', 600);
    const pub = await mqtt.connectAsync(b.url, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await pub.publishAsync('wt/rel', 'r', { qos: 2 });
      const p = await c.next('publish');
      const entry = async () => (await sessions.readQueue('wt-pubrel', 10)).map((e) => decodeDelivery(e.data).released);
      for (let i = 0; i < 300 && (await entry()).length === 0; i++) await sleep(5);
      assert.deepEqual(await entry(), [false], 'stored as sent');
      sessions.hold = true;
      c.send({ type: 'pubrec', packetId: p.packetId });
      // A marker behind the PUBREC: PINGRESP answers at once, PUBREL must not have come before it.
      c.send({ type: 'pingreq' });
      await c.next('pingresp');
      assert.deepEqual(
        c.packets.filter((x) => x.type === 'pubrel'),
        [],
        'no PUBREL while the entry still says "sent"',
      );
      assert.deepEqual(await entry(), [false]);
      sessions.release();
      assert.equal((await c.next('pubrel')).packetId, p.packetId);
      assert.deepEqual(await entry(), [true], 'the entry records the PUBREC before the PUBREL goes out');
      c.send({ type: 'pubcomp', packetId: p.packetId });
    } finally {
      c.destroy();
      await pub.endAsync();
      await b.close();
    }
  });
});
