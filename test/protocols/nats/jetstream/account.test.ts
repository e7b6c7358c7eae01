/**
 * The JetStream account (src/protocols/nats/jetstream/account.ts) and byte counting (stream-view.ts storedSize,
 * subject-tally.ts): message sizes as nats-server 2.9's file and memory stores count them, `state.bytes` of streams
 * without a view (the tally) and with one, messages other protocols stored, account usage and limits per
 * namespace, and subjects overlapping only among streams made through the JetStream API.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { makeMessage } from '../../../../src/core/index.js';
import { checkAccounts } from '../../../../src/protocols/nats/jetstream/account.js';
import { headerBlockLength, storedSize } from '../../../../src/protocols/nats/jetstream/stream-view.js';
import { setup } from './harness.js';

const h = (key: string, value: string) => ({ key, value: Buffer.from(value) });
const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of closers) await c();
});
async function env() {
  const e = await setup();
  closers.push(() => e.js.close());
  return e;
}

/** A namespace's quotas as the directory gives them (what account.ts reads). */
function withQuotas(js: { authorizer: unknown }, quotas: Record<string, Record<string, number>>): void {
  js.authorizer = {
    control: { directory: { namespace: (n: string) => (quotas[n] !== undefined ? { name: n, quotas: quotas[n], createdAt: 0 } : undefined) } },
    accessOf: () => null,
  };
}

describe('JetStream byte counting', () => {
  it('sizes a message as nats-server’s file store (22 + subject [+ 4 + headers] + data + 8) and memory store (+ 16)', () => {
    assert.equal(storedSize(4, 0, 5), 39);
    assert.equal(storedSize(4, 20, 5), 22 + 4 + 4 + 20 + 5 + 8);
    assert.equal(storedSize(4, 0, 5, true), 4 + 5 + 16);
    assert.equal(storedSize(4, 20, 5, true), 4 + 20 + 5 + 16);
  });

  it('takes a NATS header block as published, and sizes other protocols’ headers as the block a NATS reader gets', () => {
    const block = Buffer.from('NATS/1.0\r\nA: 1\r\n\r\n');
    assert.equal(headerBlockLength(makeMessage('a', Buffer.alloc(0), { natsHeaders: block, headers: [h('A', '1')] })), block.length);
    // NATS/1.0\r\n + "k: vv\r\n" + "x: \r\n" + \r\n
    assert.equal(headerBlockLength(makeMessage('a', Buffer.alloc(0), { headers: [h('k', 'vv'), { key: 'x', value: null }] })), 10 + 7 + 5 + 2);
    assert.equal(headerBlockLength(makeMessage('a', Buffer.alloc(0))), 0);
  });

  it('reports state.bytes of streams without a view, with one, and of memory streams; the account sums them', async () => {
    const { c, engine } = await env();
    await c.api('$JS.API.STREAM.CREATE.F', { name: 'F', subjects: ['f.>'] });
    await c.api('$JS.API.STREAM.CREATE.M', { name: 'M', subjects: ['m.>'], storage: 'memory' });
    await c.api('$JS.API.STREAM.CREATE.V', { name: 'V', subjects: ['v.>'], max_msgs: 1 });
    for (const p of ['f', 'm', 'v']) {
      await c.publish(`${p}.a`, 'hello');
      await c.publish(`${p}.b`, 'xy');
    }
    // Another protocol's message (an MQTT or Kafka publish) with a plain header: sized as its NATS block.
    engine.publish(makeMessage('f/k', Buffer.from('abc'), { headers: [h('key', 'value')] }));
    const kafka = storedSize(3, 10 + 'key: value\r\n'.length + 2, 3);
    const bytes = async (s: string) => (await c.api(`$JS.API.STREAM.INFO.${s}`)).state.bytes as number;
    assert.equal(await bytes('F'), storedSize(3, 0, 5) + storedSize(3, 0, 2) + kafka);
    assert.equal(await bytes('M'), storedSize(3, 0, 5, true) + storedSize(3, 0, 2, true));
    assert.equal(await bytes('V'), storedSize(3, 0, 2));
    const info = await c.api('$JS.API.INFO');
    assert.deepEqual([info.memory, info.storage, info.streams], [await bytes('M'), (await bytes('F')) + (await bytes('V')), 3]);
    // A purge starts the tally over.
    await c.api('$JS.API.STREAM.PURGE.F');
    await c.publish('f.z', '1');
    assert.equal(await bytes('F'), storedSize(3, 0, 1));
  });
});

describe('JetStream account limits and overlapping subjects', () => {
  it('counts streams and applies limits per namespace (a stream belongs to the namespace that made it)', async () => {
    const { c, js } = await env();
    withQuotas(js, { default: { maxStreams: 1, maxStorageBytes: 100 } });
    assert.equal((await c.api('$JS.API.STREAM.CREATE.A', { name: 'A', subjects: ['a'], max_bytes: 60 })).error, undefined);
    const info = await c.api('$JS.API.INFO');
    assert.deepEqual([info.streams, info.limits.max_streams, info.limits.max_storage, info.limits.max_memory], [1, 1, 100, -1]);
    assert.equal((await c.api('$JS.API.STREAM.CREATE.B', { name: 'B', subjects: ['b'] })).error.err_code, 10027);
    // The same stream again is no new stream; an update is checked against the other streams' reservations only.
    assert.equal((await c.api('$JS.API.STREAM.CREATE.A', { name: 'A', subjects: ['a'], max_bytes: 60 })).error, undefined);
    assert.equal((await c.api('$JS.API.STREAM.UPDATE.A', { name: 'A', subjects: ['a'], max_bytes: 100 })).error, undefined);
    assert.equal((await c.api('$JS.API.STREAM.UPDATE.A', { name: 'A', subjects: ['a'], max_bytes: 101 })).error.err_code, 10047);
    // Limits lifted: anything goes again.
    withQuotas(js, {});
    assert.equal((await c.api('$JS.API.STREAM.CREATE.B', { name: 'B', subjects: ['b'] })).error, undefined);
    assert.deepEqual((await c.api('$JS.API.INFO')).limits.max_streams, -1);
  });

  it('refuses a JetStream publish that would take the account over max_storage (10002), not storing it', async () => {
    const { c, js } = await env();
    withQuotas(js, { default: { maxStorageBytes: 200 } });
    await c.api('$JS.API.STREAM.CREATE.S', { name: 'S', subjects: ['s.*'] });
    const big = 'x'.repeat(40);
    assert.equal((await c.publish('s.a', big)).seq, 1);
    assert.equal((await c.publish('s.a', big)).seq, 2);
    await checkAccounts(js);
    // 2 × 73 bytes stored: one more 73 would be 219 > 200; a 34-byte one fits (180), the next does not (214).
    const over = { code: 400, err_code: 10002, description: 'resource limits exceeded for account' };
    assert.deepEqual(await c.publish('s.a', big), { error: over, stream: 'S', seq: 0 });
    assert.equal((await c.publish('s.b', 'y')).seq, 3);
    assert.deepEqual((await c.publish('s.b', 'y')).error, over);
    const st = (await c.api('$JS.API.STREAM.INFO.S')).state;
    assert.deepEqual([st.messages, st.bytes], [3, 2 * 73 + 34]);
    // The limit lifted: publishes go through again at the next count.
    withQuotas(js, {});
    await checkAccounts(js);
    assert.equal((await c.publish('s.b', big)).seq, 4);
  });

  it('refuses subjects overlapping another JetStream stream’s, not those of streams other protocols made', async () => {
    const { c, engine } = await env();
    // A Kafka topic's stream binding k/x (made without the JetStream API).
    await engine.createStream({ name: 'kx', partitions: 1, bindings: ['k/x'], retentionMs: null });
    assert.equal((await c.api('$JS.API.STREAM.CREATE.K', { name: 'K', subjects: ['k.*'] })).error, undefined);
    const overlap = { code: 400, err_code: 10065, description: 'subjects overlap with an existing stream' };
    assert.deepEqual((await c.api('$JS.API.STREAM.CREATE.K2', { name: 'K2', subjects: ['k.x'] })).error, overlap);
    assert.deepEqual((await c.api('$JS.API.STREAM.CREATE.K2', { name: 'K2', subjects: ['>'] })).error, overlap);
    assert.equal((await c.api('$JS.API.STREAM.CREATE.K2', { name: 'K2', subjects: ['k.x.y'] })).error, undefined);
    assert.deepEqual((await c.api('$JS.API.STREAM.UPDATE.K2', { name: 'K2', subjects: ['k.x.y', 'k.q'] })).error, overlap);
    // A mirror has no subjects of its own: never an overlap.
    assert.equal((await c.api('$JS.API.STREAM.CREATE.KM', { name: 'KM', mirror: { name: 'K' } })).error, undefined);
  });
});
