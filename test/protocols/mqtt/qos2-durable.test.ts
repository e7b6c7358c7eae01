/**
 * An inbound QoS 2 packet id of a persistent session is never stored as a plain duplicate (`rel`) before its message
 * is durable. Stored so, a broker killed in between came back knowing the id but not the message: the client's
 * re-sent PUBLISH was taken for a duplicate and the message, PUBCOMPed later, was lost (found by
 * `npm run crash-test`). Since issue 30 the id is stored *before* the message is routed, with its publish key (`rs`,
 * src/protocols/mqtt/qos2.ts): a re-sent PUBLISH after a restart is routed again with that key, and the stores that
 * have it already recognise it (test/e2e/mqtt-qos2-crash.test.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MemorySessionStore } from '../../../src/core/index.js';
import { encodePublishFrame } from '../../../src/protocols/mqtt/codec/index.js';
import { GatedStreams, RawClient, startBroker, until } from './helpers.js';

test('mqtt QoS 2: the packet id is stored with its publish key before the message is routed, never as a plain duplicate', async () => {
  const sessions = new MemorySessionStore();
  const gated = new GatedStreams({ sessions });
  const b = await startBroker({}, gated);
  const stored = async (): Promise<{ rel: number[]; rs?: Array<[number, number]>; pk?: number; subs: Array<{ f: string }> } | null> => {
    const rec = await sessions.getSession('q2-durable');
    return rec ? (JSON.parse(rec.state) as { rel: number[]; rs?: Array<[number, number]>; pk?: number; subs: Array<{ f: string }> }) : null;
  };
  try {
    await b.engine.createStream({ name: 'slow', partitions: 1, bindings: ['slow/#'] });
    const c = await RawClient.connect(b.port, 'q2-durable', { cleanSession: false });
    gated.hold = true;
    c.send(encodePublishFrame('slow/1', Buffer.from('a'), 2, false, false, 7));
    await until(() => gated.held === 1, 'the held append');
    // A marker that stores the session again while the message is not durable: a SUBSCRIBE.
    c.send({ type: 'subscribe', packetId: 8, subscriptions: [{ filter: 'marker/#', qos: 1 }] });
    await c.next('suback');
    let s = await stored();
    for (let i = 0; i < 200 && !s?.subs.some((x) => x.f === 'marker/#'); i++) {
      await new Promise((r) => setTimeout(r, 10));
      s = await stored();
    }
    assert.ok(
      s?.subs.some((x) => x.f === 'marker/#'),
      'the session was stored after the SUBSCRIBE',
    );
    assert.deepEqual(s?.rel, [], 'the id of a message that is not durable yet is not stored as a duplicate');
    assert.equal(typeof s?.pk, 'number', 'the session has a producer id');
    assert.deepEqual(
      s?.rs?.map(([id]) => id),
      [7],
      'the id is stored with its publish key (the message was routed after that)',
    );
    assert.deepEqual(
      c.packets.filter((p) => p.type === 'pubrec'),
      [],
      'no PUBREC before the message is durable',
    );
    gated.release();
    assert.equal((await c.next('pubrec')).packetId, 7);
    // PUBREL releases the id and its key.
    c.send({ type: 'pubrel', packetId: 7 });
    assert.equal((await c.next('pubcomp')).packetId, 7);
    for (let i = 0; i < 200 && (s?.rs ?? []).length > 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
      s = await stored();
    }
    assert.deepEqual([s?.rel, s?.rs ?? []], [[], []], 'released by PUBREL');
    c.destroy();
  } finally {
    await b.close();
  }
});
