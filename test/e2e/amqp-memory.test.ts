// test-runner: alone (scripts/test.mjs): measures the broker process's memory while clients load it, without a second file competing for the two cores
/**
 * Memory a stranger can pin through the AMQP listener (issue 24), against a real bin/flowmq:
 *
 * - content headers that announce 1 MiB bodies followed by one 1-byte body frame, on 2,000 channels of each of 40
 *   raw connections: the broker's memory must follow the bytes that arrived (it used to take the announced size at
 *   once: +82 GiB of virtual memory and +460 MiB of RSS for 5.4 MiB sent). Meanwhile an amqplib client publishes
 *   (bodies spanning several frames) and consumes as usual, and afterwards every stored message is intact, the
 *   bodies the raw connections finish in odd-sized pieces included.
 * - a client that sends requests and never reads its socket: the broker stops reading it once the replies it has
 *   not taken pass the connection's allowance (socketHighWater), so its memory stays bounded, and closes it when the
 *   socket makes no progress for amqp's send timeout.
 *
 * Memory is the broker process's VmRSS and VmSize (/proc/<pid>/status: bin/flowmq execs Node in its own process).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { ConsumeMessage } from 'amqplib';
import { amqpFixture, connectAmqp, defs, RawAmqp } from './amqp-helpers.js';
import { eventually } from './harness.js';
import { encodeFrame, FRAME_BODY } from '../../src/protocols/amqp/codec/index.js';

/** VmRSS and VmSize of a process, in bytes. */
function memoryOf(pid: number): { rss: number; vsize: number } {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)\\s+kB`, 'm').exec(s)![1]) * 1024;
  return { rss: kib('VmRSS'), vsize: kib('VmSize') };
}

const MiB = 1024 * 1024;
const mib = (n: number) => `${(n / MiB).toFixed(1)} MiB`;

const bodyFrame = (ch: number, body: Buffer): Buffer => encodeFrame(FRAME_BODY, ch, body);

/** The byte at position `i` of the body the raw connection `c` publishes on channel `ch`. */
const pattern = (c: number, ch: number, i: number) => (i * 31 + ch * 7 + c) & 0xff;

function patternBody(c: number, ch: number, size: number): Buffer {
  const b = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i++) b[i] = pattern(c, ch, i);
  return b;
}

/**
 * A raw connection, handshaken, whose frames are then only scanned for channel.open-ok on `marker` (or a close):
 * `done` resolves true once that open-ok arrived, false when the connection closed first.
 */
async function rawConnection(port: number, marker: number): Promise<{ raw: RawAmqp; done: Promise<boolean> }> {
  const raw = await RawAmqp.open(port);
  await raw.handshake();
  const s = raw.socket;
  s.removeAllListeners('data');
  let buf: Buffer = Buffer.alloc(0);
  const done = new Promise<boolean>((resolve) => {
    s.on('close', () => resolve(false));
    s.on('data', (d: Buffer) => {
      buf = buf.length === 0 ? d : Buffer.concat([buf, d]);
      let at = 0;
      while (buf.length - at >= 8) {
        const size = buf.readUInt32BE(at + 3);
        if (buf.length - at < size + 8) break;
        // channel.open-ok is class 20, method 11.
        if (buf[at] === 1 && buf.readUInt16BE(at + 1) === marker && buf.readUInt32BE(at + 7) === (20 << 16) + 11) resolve(true);
        at += size + 8;
      }
      buf = buf.subarray(at);
    });
  });
  return { raw, done };
}

const within = <T>(p: Promise<T>, ms: number, otherwise: T): Promise<T> => Promise.race([p, new Promise<T>((r) => setTimeout(() => r(otherwise), ms).unref())]);

describe('e2e: AMQP memory a stranger can pin', () => {
  const f = amqpFixture({ connect: true });

  it('content headers announcing 1 MiB with a 1-byte body on 2,000 channels x 40 connections cost what was sent; others publish and consume meanwhile; stored messages intact', async () => {
    const conns = 40;
    const channels = 2000;
    const announced = MiB;
    const pid = f.broker.proc.pid!;

    // The normal client: one queue the raw connections publish to, one it publishes to and consumes from.
    const ch = await f.conn.createConfirmChannel();
    await ch.assertQueue('pinned', { durable: true });
    await ch.assertQueue('live', { durable: true });
    const consumer = await connectAmqp(f.broker);
    const cch = await consumer.createChannel();
    await cch.prefetch(50);
    const got: ConsumeMessage[] = [];
    let sawMarker!: () => void;
    const markerSeen = new Promise<void>((r) => (sawMarker = r));
    await cch.consume('live', (m) => {
      if (m === null) return;
      cch.ack(m);
      if (m.content.toString() === 'marker') sawMarker();
      else got.push(m);
    });
    // Bodies of 300,000 bytes: three body frames at frame-max 128 KiB (the path partly received bodies take).
    const liveBody = (i: number) => {
      const b = Buffer.alloc(300_000, i & 0xff);
      b.writeUInt32BE(i, 0);
      return b;
    };
    let published = 0;
    let publishing = true;
    const publishLoop = (async () => {
      while (publishing || published < 20) {
        const i = published++;
        await new Promise<void>((resolve, reject) =>
          ch.sendToQueue('live', liveBody(i), { persistent: true }, (err: unknown) => (err ? reject(err) : resolve())),
        );
      }
    })();

    // Let the broker settle before the baseline.
    await new Promise((r) => setTimeout(r, 500));
    const before = memoryOf(pid);

    // The attack: per channel channel.open, basic.publish, a header announcing 1 MiB, one 1-byte body frame; then a
    // channel.open on one more channel, whose open-ok says the broker has read everything before it.
    const marker = 2 + channels;
    const raws = await Promise.all(Array.from({ length: conns }, () => rawConnection(f.broker.ports.amqp!, marker)));
    let sent = 0;
    const started = Date.now();
    raws.forEach(({ raw }, c) => {
      const parts: Buffer[] = [];
      for (let n = 2; n < marker; n++) {
        parts.push(defs.encodeMethod(defs.ChannelOpen as number, n, { outOfBand: '' }));
        parts.push(defs.encodeMethod(defs.BasicPublish as number, n, { exchange: '', routingKey: 'pinned', mandatory: false, immediate: false }));
        parts.push(defs.encodeProperties(60, n, announced, { deliveryMode: 2 }));
        parts.push(bodyFrame(n, patternBody(c, n, 1)));
      }
      parts.push(defs.encodeMethod(defs.ChannelOpen as number, marker, { outOfBand: '' }));
      const all = Buffer.concat(parts);
      sent += all.length;
      raw.write(all);
    });
    // Every connection's last channel.open answered: the broker has read all of it (or, on a broker that cannot
    // cope, a minute has passed).
    const answered = await within(Promise.all(raws.map((r) => r.done)), 60_000, [] as boolean[]);
    const attackMs = Date.now() - started;
    const during = memoryOf(pid);
    const grewRss = during.rss - before.rss;
    const grewVsize = during.vsize - before.vsize;
    console.log(
      `attack: ${mib(sent)} sent, read by the broker in ${attackMs} ms; broker RSS ${mib(before.rss)} -> ${mib(during.rss)} (+${mib(grewRss)}), VmSize +${mib(grewVsize)}`,
    );
    // Bodies may cost what arrived plus the channels' own bookkeeping, a few times the bytes sent; not what was announced.
    assert.ok(grewRss < 12 * sent + 48 * MiB, `RSS grew ${mib(grewRss)} for ${mib(sent)} sent`);
    assert.ok(
      grewVsize < 16 * sent + 512 * MiB,
      `virtual memory grew ${mib(grewVsize)} for ${mib(sent)} sent (announced: ${mib(conns * channels * announced)})`,
    );
    assert.equal(answered.filter((x) => x).length, conns, 'every raw connection was read to its end within a minute, none closed');

    // The normal client kept going: a marker published now arrives after everything it published before.
    publishing = false;
    await publishLoop;
    await new Promise<void>((resolve, reject) =>
      ch.sendToQueue('live', Buffer.from('marker'), { persistent: true }, (err: unknown) => (err ? reject(err) : resolve())),
    );
    await markerSeen;
    assert.equal(got.length, published);
    got.forEach((m, i) => assert.ok(m.content.equals(liveBody(i)), `live message ${i} intact`));

    // Ten of the pinned bodies are finished, in pieces of odd sizes (frame-max is 128 KiB), and stored whole.
    const finish = raws[0]!.raw;
    const sizes = [1, 100, 4095, 4096, 70_000, 131_064];
    for (let n = 2; n < 12; n++) {
      const body = patternBody(0, n, announced);
      let at = 1;
      let k = n;
      while (at < announced) {
        const len = Math.min(sizes[k++ % sizes.length]!, announced - at);
        finish.write(bodyFrame(n, body.subarray(at, at + len)));
        at += len;
      }
    }
    await eventually(async () => (await ch.checkQueue('pinned')).messageCount === 10, 20_000, 'ten finished bodies in the queue');
    for (let i = 0; i < 10; i++) {
      const m = await ch.get('pinned', { noAck: true });
      assert.ok(m, `pinned message ${i}`);
      assert.equal(m.content.length, announced);
      const n = Array.from({ length: 10 }, (_, j) => j + 2).find(
        (x) => m.content[0] === pattern(0, x, 0) && m.content[1] === pattern(0, x, 1) && m.content[2] === pattern(0, x, 2),
      )!;
      assert.ok(m.content.equals(patternBody(0, n, announced)), `pinned body of channel ${n} intact`);
    }
    for (const { raw } of raws) raw.close();
    await consumer.close();
    await ch.close();
  });

  it('a client that asks for more than it reads (basic.get of 200 KiB, 1,000 times) is not read on until it reads; every answer arrives once it does', async () => {
    const pid = f.broker.proc.pid!;
    const size = 200 * 1024;
    const n = 1000;
    const ch = await f.conn.createConfirmChannel();
    await ch.assertQueue('big-get', { durable: false });
    const body = patternBody(7, 7, size);
    await new Promise<void>((resolve, reject) => ch.sendToQueue('big-get', body, {}, (err: unknown) => (err ? reject(err) : resolve())));
    const figures = async () => (await f.broker.api<{ amqp: Record<string, number> }>('GET', '/api/v1/broker')).amqp;
    const pausesBefore = (await figures()).outputPauses ?? 0;

    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    await raw.handshake();
    // From here on the client does not read: each basic.get answers 200 KiB, each reject puts the message back.
    raw.socket.pause();
    await new Promise((r) => setTimeout(r, 500));
    const before = memoryOf(pid);
    const parts: Buffer[] = [];
    for (let tag = 1; tag <= n; tag++) {
      parts.push(defs.encodeMethod(defs.BasicGet as number, 1, { queue: 'big-get', noAck: false }));
      parts.push(defs.encodeMethod(defs.BasicReject as number, 1, { deliveryTag: tag, requeue: true }));
    }
    // The marker: methods of a channel are answered in order, so its qos-ok comes after the last get-ok.
    parts.push(defs.encodeMethod(defs.BasicQos as number, 1, { prefetchSize: 0, prefetchCount: 10, global: false }));
    raw.write(Buffer.concat(parts));
    // The broker stops reading the client once its unsent answers pass the allowance (socketHighWater, 1 MiB).
    let paused = false;
    let peak = before.rss;
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      peak = Math.max(peak, memoryOf(pid).rss);
      if (((await figures()).outputPauses ?? 0) > pausesBefore) {
        paused = true;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    // What the broker holds once it stopped: look a few more times (the read it was in the middle of finishes).
    for (let i = 0; i < 10; i++) {
      peak = Math.max(peak, memoryOf(pid).rss);
      await new Promise((r) => setTimeout(r, 100));
    }
    console.log(
      `never-reading client: ${mib(n * size)} asked for; broker RSS ${mib(before.rss)} -> peak ${mib(peak)} (+${mib(peak - before.rss)}); stopped reading it: ${paused}`,
    );
    assert.ok(peak - before.rss < 48 * MiB, `RSS grew ${mib(peak - before.rss)} while the client read nothing`);
    assert.ok(paused, 'the broker stopped reading the client');

    // Now it reads: every get-ok in order, each with the whole message, then the marker's qos-ok.
    raw.socket.resume();
    let gets = 0;
    for (;;) {
      const fr = await raw.frame();
      assert.ok(fr, 'connection open');
      if (fr.type === 1 && fr.method === 'BasicGetOk') {
        gets++;
        assert.equal(fr.fields!.deliveryTag, gets);
        const header = await raw.frame();
        assert.equal(header?.type, 2);
        let got = 0;
        const chunks: Buffer[] = [];
        while (got < size) {
          const b = await raw.frame();
          assert.equal(b?.type, 3);
          chunks.push(b!.payload);
          got += b!.payload.length;
        }
        if (gets === 1 || gets === n) assert.ok(Buffer.concat(chunks).equals(body), `get-ok ${gets} carries the message`);
      } else if (fr.type === 1 && fr.method === 'BasicQosOk') break;
      else if (fr.type === 1) assert.fail(`unexpected ${fr.method} ${JSON.stringify(fr.fields)}`);
    }
    assert.equal(gets, n);
    raw.close();
    await ch.close();
  });
});
