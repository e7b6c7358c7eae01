/**
 * What a connection leaves behind once it is closed: nothing. A few hundred MQTT and Kafka connections, ended in the
 * ways a flood ends them (client close after the handshake, after subscribing, in the middle of a request; the
 * broker closing silent or malformed ones), and then every structure that held them is back to its starting size
 * and every connection object can be garbage collected (a WeakRef to it is cleared by a full collection): a map,
 * timer, listener or closure that still referred to a closed connection would keep it, and fail this test.
 */
import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, it } from 'node:test';
import { CloseSignal, ConnectionSet, connectionTotals, listenOn } from '../../src/protocols/listener.js';
import { KafkaConnection, createKafkaAdapter } from '../../src/protocols/kafka/index.js';
import { readInto } from '../../src/protocols/read-into.js';
import { Engine } from '../../src/core/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';
import { captureLogger } from './kafka/helpers.js';
import { startBroker, until } from './mqtt/helpers.js';
import { createMqttHub, startMqttWsListener, type MqttHub } from '../../src/protocols/mqtt/index.js';
import WebSocket from 'ws';

// A full collection on demand, for this test process only (the broker itself gets `gc` from bin/flowmq's flags).
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const N = 300;

function socketsOpen(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;
}

/** Collects until every WeakRef is cleared (objects freed by a finalizer can take a second round); returns those left. */
async function collected(refs: WeakRef<object>[]): Promise<number> {
  let left = refs.length;
  for (let round = 0; round < 5 && left > 0; round++) {
    // WeakRefs made in this job stay alive until it ends.
    await new Promise((r) => setImmediate(r));
    gc();
    left = refs.filter((r) => r.deref() !== undefined).length;
  }
  return left;
}

/**
 * WeakRefs to the hub's connections and sessions. Taken in a function of its own: a loop variable of the test's own
 * (suspended and resumed) frame can keep the last object it held reachable from the stack.
 */
function weakRefsOf(hub: MqttHub): WeakRef<object>[] {
  const refs: WeakRef<object>[] = [];
  for (const c of hub.connections) refs.push(new WeakRef(c));
  for (const s of hub.sessions.values()) refs.push(new WeakRef(s));
  return refs;
}

function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => {
      s.off('error', reject);
      s.on('error', () => undefined);
      resolve(s);
    });
    s.once('error', reject);
  });
}

/** Resolves once `n` bytes have arrived (the answer to a handshake), keeping the socket open. */
function receive(s: Socket, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let got = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      got = Buffer.concat([got, d]);
      if (got.length >= n) {
        s.off('data', onData);
        s.off('close', onClose);
        resolve(got);
      }
    };
    const onClose = () => reject(new Error('closed before the answer'));
    s.on('data', onData);
    s.once('close', onClose);
  });
}

function closeAndWait(s: Socket): Promise<void> {
  return new Promise((resolve) => {
    if (s.closed) return resolve();
    s.once('close', () => resolve());
    s.destroy();
  });
}

function mqttString(s: string): Buffer {
  const b = Buffer.from(s);
  return Buffer.concat([Buffer.from([b.length >> 8, b.length & 0xff]), b]);
}

function mqttPacket(first: number, body: Buffer): Buffer {
  assert.ok(body.length < 128);
  return Buffer.concat([Buffer.from([first, body.length]), body]);
}

/** CONNECT: MQTT 3.1.1, clean session, keep-alive 0 (the broker has no reason to close it). */
function mqttConnect(clientId: string): Buffer {
  return mqttPacket(0x10, Buffer.concat([mqttString('MQTT'), Buffer.from([4, 0x02, 0, 0]), mqttString(clientId)]));
}

describe('connection totals', () => {
  it('ConnectionSet counts every connection it adds and every one that closes, process-wide', async () => {
    type Conn = { closeSignal: CloseSignal; readonly closed: Promise<void> };
    const conn = (): Conn => {
      const closeSignal = new CloseSignal();
      return {
        closeSignal,
        get closed() {
          return closeSignal.closed;
        },
      };
    };
    const set = new ConnectionSet<Conn>();
    const before = { ...connectionTotals };
    const ending = conn();
    set.add(ending);
    set.add(conn());
    assert.deepEqual(connectionTotals, { opened: before.opened + 2, closed: before.closed });
    ending.closeSignal.fire(ending);
    ending.closeSignal.fire(ending);
    await until(() => set.size === 1, 'the closed connection leaving the set');
    assert.deepEqual(connectionTotals, { opened: before.opened + 2, closed: before.closed + 1 });
  });
});

describe('after a flood of connections', () => {
  it(`MQTT: ${N} connections ended every way leave no session, registry entry, socket or connection object behind`, async () => {
    const b = await startBroker({ connectTimeoutMs: 3000, tickMs: 50, sysIntervalMs: 0 });
    try {
      const hub = b.listener.hub;
      const sockets0 = socketsOpen();
      const sessions0 = hub.sessions.size;
      const totals0 = { ...connectionTotals };
      const sockets: Socket[] = [];
      for (let i = 0; i < N; i++) {
        const s = await open(b.port);
        sockets.push(s);
        const kind = i % 4;
        // kind 3 sends nothing: the broker closes it at the connect timeout.
        if (kind === 3) continue;
        s.write(mqttConnect(`flood-${i}`));
        await receive(s, 4);
        if (kind === 1) {
          // A subscription: the session is in the engine's subscription trie until the connection ends.
          s.write(mqttPacket(0x82, Buffer.concat([Buffer.from([0, 1]), mqttString(`flood/${i}/#`), Buffer.from([1])])));
          await receive(s, 5);
        } else if (kind === 2) {
          // Half of a PUBLISH that announces 64 KiB: its bytes wait in the connection.
          s.write(Buffer.concat([Buffer.from([0x30, 0x80, 0x80, 0x04]), mqttString('flood/half'), Buffer.alloc(500, 1)]));
        }
      }
      await until(() => hub.connected === N - N / 4, 'every CONNECT accepted');
      const refs = weakRefsOf(hub);
      assert.equal(refs.length, N + (N - N / 4));
      await Promise.all(sockets.filter((_, i) => i % 4 !== 3).map(closeAndWait));
      await until(() => b.listener.connections() === 0, 'the broker closing every connection', 15_000);
      await Promise.all(sockets.map((s) => new Promise((r) => (s.closed ? r(null) : s.once('close', r)))));
      sockets.length = 0;

      assert.equal(hub.connections.size, 0);
      assert.equal(hub.connected, 0);
      assert.equal(hub.sessions.size, sessions0);
      assert.equal(connectionTotals.closed - totals0.closed, N);
      // Nothing routes to the flood's subscriptions any more.
      const delivered = b.engine.stats.delivered;
      b.engine.publish({ topic: 'flood/1/x', payload: Buffer.from('x'), key: null, headers: [], timestamp: Date.now(), qos: 0, retain: false, origin: 'test' });
      assert.equal(b.engine.stats.delivered, delivered);
      await until(() => socketsOpen() === sockets0, 'the broker-side sockets to be released');
      assert.equal(await collected(refs), 0, 'connections or sessions still referenced after they closed');
    } finally {
      await b.close();
    }
  });

  it(`MQTT over WebSocket: ${N / 3} connections leave no session, registry entry or connection object behind`, async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    await engine.load();
    const ctx = { engine, logger: captureLogger().logger, brokerId: 1 };
    const hub = await createMqttHub(ctx, { sysIntervalMs: 0 });
    const l = await startMqttWsListener(ctx, { host: '127.0.0.1', port: 0 }, hub);
    try {
      const clients: WebSocket[] = [];
      for (let i = 0; i < N / 3; i++) {
        const ws = new WebSocket(`ws://127.0.0.1:${l.address().port}/mqtt`, 'mqtt');
        clients.push(ws);
        await new Promise<void>((resolve, reject) => {
          ws.once('error', reject);
          ws.once('message', () => resolve());
          ws.once('open', () => ws.send(mqttConnect(`ws-flood-${i}`)));
        });
        if (i % 2 === 1) ws.send(Buffer.concat([Buffer.from([0x30, 0x80, 0x80, 0x04]), mqttString('flood/half'), Buffer.alloc(500, 1)]));
      }
      await until(() => hub.connected === N / 3, 'every CONNECT accepted');
      const refs = weakRefsOf(hub);
      await Promise.all(
        clients.map(
          (ws) =>
            new Promise((r) => {
              ws.once('close', r);
              ws.terminate();
            }),
        ),
      );
      clients.length = 0;
      await until(() => l.connections() === 0 && hub.connections.size === 0, 'the broker closing every connection', 15_000);
      assert.equal(hub.sessions.size, 0);
      assert.equal(await collected(refs), 0, 'connections or sessions still referenced after they closed');
    } finally {
      await l.close();
      hub.close();
    }
  });

  it(`Kafka: ${N} connections ended every way leave no socket, frame or connection object behind`, async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const adapter = createKafkaAdapter({ engine, logger: captureLogger().logger, brokerId: 0 });
    const conns = new ConnectionSet<KafkaConnection>();
    const refs: WeakRef<object>[] = [];
    let seq = 0;
    // As the plaintext listener accepts (server.ts): paused sockets read into the shared buffer.
    const server: Server = createServer({ allowHalfOpen: true, pauseOnConnect: true }, (socket) => {
      const c = new KafkaConnection(socket, adapter, {
        id: `k${++seq}`,
        remoteAddress: socket.remoteAddress,
        remotePort: socket.remotePort,
        attachInput: (receive) => readInto(socket, receive),
      });
      refs.push(new WeakRef(c));
      conns.add(c);
    });
    await listenOn(server, { host: '127.0.0.1', port: 0 }, () => undefined);
    adapter.retain();
    const port = (server.address() as { port: number }).port;
    try {
      const sockets0 = socketsOpen();
      const allocated0 = adapter.frames.allocated;
      // ApiVersions v0: size, api key 18, version 0, correlation id 1, client id "flood".
      const apiVersions = Buffer.from('0000000f00120000000000010005666c6f6f64', 'hex');
      const sockets: Socket[] = [];
      for (let i = 0; i < N; i++) {
        const s = await open(port);
        sockets.push(s);
        const kind = i % 4;
        if (kind === 3) {
          // A negative size prefix: the broker closes the connection.
          s.write(Buffer.from([0xff, 0xff, 0xff, 0xf0]));
          continue;
        }
        s.write(apiVersions);
        const head = await receive(s, 4);
        const rest = 4 + head.readInt32BE(0) - head.length;
        if (rest > 0) await receive(s, rest);
        if (kind === 1) {
          // A size prefix announcing 1 MiB, and 12 bytes of it: a pooled frame waits for the rest.
          const half = Buffer.alloc(16);
          half.writeInt32BE(1024 * 1024, 0);
          half.writeInt16BE(0, 4);
          half.writeInt16BE(3, 6);
          s.write(half);
        } else if (kind === 2) {
          // The size prefix alone, in two writes.
          s.write(Buffer.from([0, 0]));
          s.write(Buffer.from([1, 0]));
        }
      }
      await until(() => refs.length === N, 'every connection accepted');
      await until(() => adapter.frames.allocated - allocated0 >= 1, 'the half frames to reach the broker');
      await Promise.all(sockets.filter((_, i) => i % 4 !== 3).map(closeAndWait));
      await until(() => conns.size === 0, 'the broker closing every connection', 15_000);
      await Promise.all(sockets.map((s) => new Promise((r) => (s.closed ? r(null) : s.once('close', r)))));
      sockets.length = 0;
      await until(() => socketsOpen() === sockets0, 'the broker-side sockets to be released');
      assert.equal(await collected(refs), 0, 'connections still referenced after they closed');
    } finally {
      await conns.closeAll(server, (c) => c.close());
      adapter.release();
    }
  });
});
