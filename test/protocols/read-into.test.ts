import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { readInto } from '../../src/protocols/read-into.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A server whose accepted sockets are read with readInto; resolves with the first accepted socket and what it got. */
async function serve(): Promise<{
  server: Server;
  port: number;
  accepted: Promise<{ socket: Socket; got: Buffer[]; views: Set<ArrayBufferLike>; ok: boolean }>;
}> {
  let resolveAccepted!: (v: { socket: Socket; got: Buffer[]; views: Set<ArrayBufferLike>; ok: boolean }) => void;
  const accepted = new Promise<{ socket: Socket; got: Buffer[]; views: Set<ArrayBufferLike>; ok: boolean }>((r) => (resolveAccepted = r));
  const server = createServer({ pauseOnConnect: true, allowHalfOpen: true }, (socket) => {
    const got: Buffer[] = [];
    const views = new Set<ArrayBufferLike>();
    const ok = readInto(socket, (bytes) => {
      views.add(bytes.buffer);
      got.push(Buffer.from(bytes)); // valid only during the call: copied
    });
    resolveAccepted({ socket, got, views, ok });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as AddressInfo).port, accepted };
}

describe('readInto', () => {
  it('delivers every byte in order from one reused buffer, and the socket still ends, writes and closes normally', async () => {
    const { server, port, accepted } = await serve();
    const client = connect(port, '127.0.0.1');
    const payload = Buffer.alloc(3 * 1024 * 1024);
    for (let i = 0; i < payload.length; i += 4) payload.writeUInt32BE(i, i);
    const replies: Buffer[] = [];
    client.on('data', (d: Buffer) => replies.push(d));
    for (let off = 0; off < payload.length; off += 100_000) client.write(payload.subarray(off, off + 100_000));
    client.end();
    const { socket, got, views, ok } = await accepted;
    assert.equal(ok, true, 'this Node allows it');
    await new Promise<void>((r) => socket.once('end', r));
    const all = Buffer.concat(got);
    assert.equal(all.length, payload.length);
    assert.equal(createHash('sha256').update(all).digest('hex'), createHash('sha256').update(payload).digest('hex'));
    assert.equal(views.size, 1, 'every read landed in the same memory');
    assert.ok(got.length > 10, 'in many reads');
    socket.end('bye');
    await new Promise<void>((r) => client.once('close', r));
    assert.equal(Buffer.concat(replies).toString(), 'bye');
    server.close();
  });

  it('stops reading while paused and goes on after resume', async () => {
    const { server, port, accepted } = await serve();
    const client = connect(port, '127.0.0.1');
    client.write('a');
    const { socket, got } = await accepted;
    while (got.length === 0) await sleep(5);
    socket.pause();
    client.write('b');
    await sleep(100);
    assert.equal(Buffer.concat(got).toString(), 'a', 'nothing read while paused');
    socket.resume();
    const deadline = Date.now() + 2000;
    while (Buffer.concat(got).toString() !== 'ab' && Date.now() < deadline) await sleep(5);
    assert.equal(Buffer.concat(got).toString(), 'ab');
    client.destroy();
    socket.destroy();
    server.close();
  });

  it('serves many sockets from the one buffer, each getting its own bytes', async () => {
    const { server, port } = await serve();
    server.removeAllListeners('connection');
    const received = new Map<number, Buffer[]>();
    const views = new Set<ArrayBufferLike>();
    const ends: Promise<void>[] = [];
    server.on('connection', (socket: Socket) => {
      const got: Buffer[] = [];
      let id = -1;
      readInto(socket, (bytes) => {
        views.add(bytes.buffer);
        got.push(Buffer.from(bytes));
        if (id < 0) {
          id = Buffer.concat(got).readUInt8(0);
          received.set(id, got);
        }
      });
      ends.push(new Promise((r) => socket.once('end', () => r())));
    });
    const clients = Array.from({ length: 8 }, (_, i) => {
      const c = connect(port, '127.0.0.1');
      c.end(Buffer.alloc(200_000, i));
      return c;
    });
    while (ends.length < clients.length) await sleep(5);
    await Promise.all(ends);
    assert.equal(views.size, 1);
    for (let i = 0; i < clients.length; i++) {
      const all = Buffer.concat(received.get(i) ?? []);
      assert.ok(all.equals(Buffer.alloc(200_000, i)), `socket ${i} got exactly its bytes`);
    }
    for (const c of clients) c.destroy();
    server.close();
  });
});
