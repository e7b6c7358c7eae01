import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { Cluster, MemoryClusterStore, startChannel, type ChannelOptions, type TcpChannel } from '../../src/cluster/index.js';
import { FlowError } from '../../src/core/index.js';

const logger = pino({ level: 'silent' });
const SECRET = 'test-secret-0123456789';

interface Node {
  cluster: Cluster;
  channel: TcpChannel;
  close(): Promise<void>;
}

/** A broker's cluster membership and real TCP channel on 127.0.0.1, its address advertised like the broker does. */
async function node(store: MemoryClusterStore, id: number, extra: Partial<ChannelOptions> = {}): Promise<Node> {
  const cluster = await Cluster.start({ store, info: { id, version: 'test', endpoints: {} }, leaseMs: 60_000, logger });
  const channel = await startChannel({ cluster, host: '127.0.0.1', port: 0, secret: SECRET, logger, ...extra });
  cluster.channel = channel;
  await cluster.advertise({ cluster: { host: '127.0.0.1', port: channel.address().port } });
  return {
    cluster,
    channel,
    async close() {
      await cluster.close();
      await channel.close();
    },
  };
}

async function rejects(p: Promise<unknown>, code: string, re?: RegExp): Promise<FlowError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof FlowError, `a FlowError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    if (re) assert.match(err.message, re);
    return err;
  }
  assert.fail(`expected a ${code} rejection`);
}

function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const start = Date.now();
  return new Promise((resolve, reject) => {
    const t = setInterval(() => {
      if (cond()) {
        clearInterval(t);
        resolve();
      } else if (Date.now() - start > ms) {
        clearInterval(t);
        reject(new Error(`timed out waiting for ${what}`));
      }
    }, 5);
  });
}

describe('cluster channel over TCP', () => {
  it('requests and replies both ways between three brokers, remote FlowErrors keep their code', async () => {
    const store = new MemoryClusterStore();
    const [a, b, c] = [await node(store, 1), await node(store, 2), await node(store, 3)];
    try {
      for (const n of [a, b, c]) {
        n.channel.handle('test.echo', (from, body) => Buffer.concat([Buffer.from(`${n.cluster.id}<-${from}:`), body]));
        n.channel.handle('test.fail', () => {
          throw new FlowError('NOT_OWNER', `broker ${n.cluster.id} does not own it`);
        });
        n.channel.handle('test.async', async (_from, body) => {
          await new Promise((r) => setTimeout(r, 5));
          return Buffer.from(body.toString().toUpperCase());
        });
      }
      // b and c learned each other's address from the store (their views predate the others' advertise).
      assert.equal((await a.channel.request(2, 'test.echo', Buffer.from('hi'))).toString(), '2<-1:hi');
      assert.equal((await b.channel.request(1, 'test.echo', Buffer.from('yo'))).toString(), '1<-2:yo');
      assert.equal((await c.channel.request(2, 'test.async', Buffer.from('abc'))).toString(), 'ABC');
      assert.equal((await a.channel.request(1, 'test.echo', Buffer.from('self'))).toString(), '1<-1:self', 'a request to itself is served locally');
      await rejects(b.channel.request(3, 'test.fail', Buffer.alloc(0)), 'NOT_OWNER', /broker 3 does not own it/);
      await rejects(a.channel.request(3, 'test.nothing', Buffer.alloc(0)), 'UNAVAILABLE', /no handler for test\.nothing/);
      // Many concurrent requests on one connection, replies matched by id; an empty body and a large one.
      const many = await Promise.all(Array.from({ length: 500 }, (_, i) => a.channel.request(3, 'test.echo', Buffer.from(String(i)))));
      many.forEach((r, i) => assert.equal(r.toString(), `3<-1:${i}`));
      assert.equal((await a.channel.request(2, 'test.echo', Buffer.alloc(0))).toString(), '2<-1:');
      const big = Buffer.alloc(3 * 1024 * 1024 + 7, 0x5a);
      const back = await b.channel.request(3, 'test.echo', big);
      assert.equal(back.length, big.length + '3<-2:'.length);
      assert.ok(back.subarray(5).equals(big));
      assert.deepEqual(a.channel.connected(), [2, 3]);
      const f = a.channel.figures() as { peers: Record<string, { sentFrames: number; receivedFrames: number; pending: number; state: string }> };
      assert.equal(f.peers['3'].state, 'connected');
      assert.ok(f.peers['3'].sentFrames >= 501 && f.peers['3'].receivedFrames >= 501, JSON.stringify(f.peers['3']));
      assert.equal(f.peers['3'].pending, 0);
    } finally {
      await Promise.all([a.close(), b.close(), c.close()]);
    }
  });

  it('one-way messages arrive in order, batched into few writes', async () => {
    const store = new MemoryClusterStore();
    const [a, b] = [await node(store, 1), await node(store, 2)];
    try {
      const got: string[] = [];
      const froms = new Set<number>();
      b.channel.on('test.note', (from, body) => {
        froms.add(from);
        got.push(body.toString());
      });
      const n = 5000;
      for (let i = 0; i < n; i++) a.channel.send(2, 'test.note', Buffer.from(`m${i}`));
      await until(() => got.length === n, 'every one-way message');
      assert.deepEqual(got, Array.from({ length: n }, (_, i) => `m${i}`), 'in order');
      assert.deepEqual([...froms], [1]);
      const f = a.channel.figures() as { peers: Record<string, { dropped: number; sentFrames: number }> };
      assert.equal(f.peers['2'].dropped, 0);
      // A one-way message to itself is delivered locally.
      const self: string[] = [];
      a.channel.on('test.self', (from, body) => self.push(`${from}:${body}`));
      a.channel.send(1, 'test.self', Buffer.from('x'));
      await until(() => self.length === 1, 'the local one-way message');
      assert.deepEqual(self, ['1:x']);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
