/**
 * The brokers' channel catalogue (src/cluster/rpc.ts): every message named once, bodies checked against their
 * types before a handler sees them, and a message newer than the peer's channel version refused before it is sent.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { ALL_MESSAGES, call, CHANNEL_VERSION, Cluster, LocalHub, MemoryClusterStore, RPC, serve, startChannel, type Rpc } from '../../src/cluster/index.js';
import { json } from '../../src/cluster/rpc.js';
import { FlowError } from '../../src/core/index.js';

const logger = pino({ level: 'silent' });
const ROOT = join(fileURLToPath(new URL('.', import.meta.url)), '../../..');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return sources(p);
    return p.endsWith('.ts') ? [p] : [];
  });
}

async function rejectsWith(p: Promise<unknown>, code: string, re: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof FlowError, `a FlowError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    assert.match(e.message, re);
    return true;
  });
}

/** A message of the next channel version, for the version checks (no such message exists yet). */
const FUTURE: Rpc<{ n: number }, { n: number }> = {
  kind: 'request',
  name: 'test.future',
  since: CHANNEL_VERSION + 1,
  request: json<{ n: number }>({ type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] }),
  reply: json<{ n: number }>({ type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] }),
};

describe('cluster channel catalogue', () => {
  it('names every message once, each of a version this broker speaks', () => {
    const names = ALL_MESSAGES.map((m) => m.name);
    assert.equal(new Set(names).size, names.length, `duplicate names: ${names.join(', ')}`);
    assert.ok(names.length >= 30, `${names.length} messages`);
    for (const m of ALL_MESSAGES) assert.ok(m.since >= 1 && m.since <= CHANNEL_VERSION, `${m.name} since ${m.since}`);
  });

  it('is the only place a channel method is named: no string method names in src/', () => {
    const offenders: string[] = [];
    const literal = /\.(?:request|send)\([^,()]+,\s*'[a-z]+\.[a-z]+'|\.(?:handle|on)\('[a-z]+\.[a-z]+'|\b(?:encodeBody|decodeBody)\b/;
    for (const file of sources(join(ROOT, 'src'))) {
      const rel = relative(ROOT, file);
      if (rel === join('src', 'cluster', 'rpc.ts') || rel === join('src', 'cluster', 'wire.ts')) continue;
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (literal.test(line)) offenders.push(`${rel}:${i + 1}: ${line.trim()}`);
        });
    }
    assert.deepEqual(offenders, []);
  });

  it('refuses a malformed head with PROTOCOL_ERROR naming the message and the field', () => {
    const body = RPC.queueCredit.request.encode({ q: 'orders', k: 'k1', i: 'inc', n: 5 });
    assert.deepEqual(RPC.queueCredit.request.decode(body, 'queue.credit').head, { q: 'orders', k: 'k1', i: 'inc', n: 5 });
    const bad = (RPC.queueCredit.request as unknown as { encode(h: unknown): Buffer }).encode({ q: 'orders', k: 'k1', i: 'inc', n: 'many' });
    assert.throws(
      () => RPC.queueCredit.request.decode(bad, 'queue.credit request from broker 2'),
      (e: unknown) =>
        e instanceof FlowError && e.code === 'PROTOCOL_ERROR' && /queue\.credit request from broker 2/.test(e.message) && /n must be integer/.test(e.message),
    );
    const missing = (RPC.streamRead.request as unknown as { encode(h: unknown): Buffer }).encode({ s: 'x', p: 0, o: 0 });
    assert.throws(() => RPC.streamRead.request.decode(missing, 'stream.read'), /must have required property 'm'/);
    // A newer broker may add a property: it is let through, not refused.
    const newer = (RPC.streamOffsets.request as unknown as { encode(h: unknown): Buffer }).encode({ s: 'x', p: 1, future: true });
    assert.equal(RPC.streamOffsets.request.decode(newer, 'stream.offsets').head.p, 1);
  });

  it('serves typed calls over a channel, tails included, and answers a bad body with PROTOCOL_ERROR', async () => {
    const hub = new LocalHub();
    const a = hub.channel(1);
    const b = hub.channel(2);
    let served = 0;
    serve(b, RPC.streamOffsets, (_from, head) => {
      served++;
      return { logStartOffset: head.p, highWatermark: head.p + 10 };
    });
    assert.deepEqual((await call(a, 2, RPC.streamOffsets, { s: 'x', p: 3 })).head, { logStartOffset: 3, highWatermark: 13 });
    await rejectsWith(a.request(2, RPC.streamOffsets.name, Buffer.from('garbage')), 'PROTOCOL_ERROR', /stream\.offsets request from broker 1/);
    assert.equal(served, 1, 'the handler never saw the bad body');
    await Promise.all([a.close(), b.close()]);
  });

  it('refuses a message newer than the peer speaks before sending it (a rolling upgrade)', async () => {
    const hub = new LocalHub();
    const a = hub.channel(1);
    const b = hub.channel(2);
    let served = 0;
    serve(b, FUTURE, (_from, head) => {
      served++;
      return { n: head.n + 1 };
    });
    assert.deepEqual((await call(a, 2, FUTURE, { n: 1 })).head, { n: 2 }, 'both speak the newer version');
    hub.versions.set(2, CHANNEL_VERSION);
    await rejectsWith(
      call(a, 2, FUTURE, { n: 1 }),
      'UNAVAILABLE',
      new RegExp(`broker 2 speaks channel version ${CHANNEL_VERSION}; test\\.future needs version ${CHANNEL_VERSION + 1}`),
    );
    assert.equal(served, 1);
    await Promise.all([a.close(), b.close()]);
  });

  it('two TCP channels agree on the version at the handshake', async () => {
    const store = new MemoryClusterStore();
    const nodes = [];
    for (const id of [1, 2]) {
      const cluster = await Cluster.start({ store, info: { id, version: 'test', endpoints: {} }, leaseMs: 60_000, logger });
      const channel = await startChannel({ cluster, host: '127.0.0.1', port: 0, secret: 'test-secret-0123456789', logger });
      cluster.channel = channel;
      await cluster.advertise({ cluster: { host: '127.0.0.1', port: channel.address().port } });
      nodes.push({ cluster, channel });
    }
    try {
      const [one, two] = nodes;
      assert.equal(one.channel.peerVersion(2), undefined, 'unknown before a connection');
      const pong = (await call(one.channel, 2, RPC.ping, null)).head;
      assert.equal(pong.id, 2);
      assert.equal(one.channel.peerVersion(2), CHANNEL_VERSION);
      assert.equal(two.channel.peerVersion(1), CHANNEL_VERSION);
      assert.equal(one.channel.peerVersion(1), CHANNEL_VERSION, 'itself');
    } finally {
      for (const n of nodes) {
        await n.cluster.close();
        await n.channel.close();
      }
    }
  });
});
