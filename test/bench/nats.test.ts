import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startFlowmq } from '../../bench/brokers.js';
import { NatsReader, runNatsPubSub, runNatsRequest } from '../../bench/nats.js';
import { startNatsServer, waitNatsInfo } from '../../bench/nats-server.js';
import { freePort, sleep } from '../../bench/util.js';

// ------------------------------------------------------------------ the reader

/** A socket stand-in that records what the reader writes (its PONGs). */
function fakeSocket(): { socket: Socket; written: string[] } {
  const written: string[] = [];
  return { socket: { write: (b: Buffer | string) => written.push(b.toString()) } as unknown as Socket, written };
}

type Seen = [subject: string, reply: string | null, payload: string];

function readAll(chunks: Buffer[], fast: boolean): { count: number; seen: Seen[]; pongs: number; errors: string[] } {
  const { socket, written } = fakeSocket();
  const r = new NatsReader(socket, fast);
  const seen: Seen[] = [];
  r.onMsg = (subject, reply, buf, start, end) => seen.push([subject, reply, buf.toString('latin1', start, end)]);
  for (const c of chunks) r.push(c);
  return { count: r.count, seen, pongs: written.filter((w) => w === 'PONG\r\n').length, errors: r.errors };
}

describe('bench: NatsReader (what the load generator reads)', () => {
  // The fast path keys on the first MSG's control line: the frames after it differ from it in one byte of the
  // size, the sid, or carry a reply subject, headers, or a payload holding CRLF, and must all be read as such.
  const p16 = 'a'.repeat(14) + '\r\n';
  const frames = [
    'INFO {"server_id":"x","max_payload":1048576}\r\n',
    '+OK\r\n',
    `MSG bench.s 1 16\r\n${p16}\r\n`,
    `MSG bench.s 1 16\r\n${'b'.repeat(16)}\r\n`,
    'PING\r\n',
    `MSG bench.s 1 17\r\n${'c'.repeat(17)}\r\n`,
    `MSG bench.s 2 16\r\n${'d'.repeat(16)}\r\n`,
    `MSG bench.s 1 16\r\n${'e'.repeat(16)}\r\n`,
    `MSG _INBOX.bench.3 1 _INBOX.r 2\r\nhi\r\n`,
    'HMSG bench.h 1 12 14\r\nNATS/1.0\r\n\r\nok\r\n',
    'PONG\r\n',
    `MSG bench.s 1 0\r\n\r\n`,
    "-ERR 'Unknown Protocol Operation'\r\n",
    `MSG bench.s 1 16\r\n${'f'.repeat(16)}\r\n`,
  ];
  const stream = Buffer.from(frames.join(''), 'latin1');
  const expected: Seen[] = [
    ['bench.s', null, p16],
    ['bench.s', null, 'b'.repeat(16)],
    ['bench.s', null, 'c'.repeat(17)],
    ['bench.s', null, 'd'.repeat(16)],
    ['bench.s', null, 'e'.repeat(16)],
    ['_INBOX.bench.3', '_INBOX.r', 'hi'],
    ['bench.h', null, 'ok'],
    ['bench.s', null, ''],
    ['bench.s', null, 'f'.repeat(16)],
  ];

  it('whole, at every split point and byte at a time: every frame counted once, PING answered, -ERR kept', () => {
    for (const fast of [false, true]) {
      const splits: Buffer[][] = [[stream], Array.from(stream, (b) => Buffer.from([b]))];
      for (let i = 1; i < stream.length; i++) splits.push([stream.subarray(0, i), stream.subarray(i)]);
      for (const chunks of splits) {
        const r = readAll(chunks, fast);
        // Without onMsg being needed, the fast path skips it for frames it recognises: compare the count always,
        // the payloads where the slow path ran.
        assert.equal(r.count, expected.length, `fast=${fast}, ${chunks.length} chunks`);
        assert.equal(r.pongs, 1);
        assert.deepEqual(r.errors, ["-ERR 'Unknown Protocol Operation'"]);
        if (!fast) assert.deepEqual(r.seen, expected);
        else
          for (const s of r.seen)
            assert.ok(
              expected.some((e) => e[0] === s[0] && e[1] === s[1] && e[2] === s[2]),
              `fast path saw ${JSON.stringify(s)}`,
            );
      }
    }
  });

  it('the fast path recognises only frames identical in their control line and CRLF-terminated', () => {
    // Same line length as the first frame, payload one byte longer: read by the slow path, not skipped by length.
    const a = `MSG bench.s 1 16\r\n${'x'.repeat(16)}\r\n`;
    const b = `MSG bench.s 1 17\r\n${'y'.repeat(17)}\r\n`;
    const r = readAll([Buffer.from(a + a + b + a + b + b, 'latin1')], true);
    assert.equal(r.count, 6);
    assert.deepEqual(
      r.seen.map((s) => s[2].length),
      [16, 17, 17, 17],
      'the first frame and every 17-byte one went through the parser',
    );
  });

  it('refuses a MSG whose payload is not followed by CRLF and an unknown operation', () => {
    assert.throws(() => readAll([Buffer.from('MSG a 1 2\r\nabcd\r\n')], true), /not followed by CRLF/);
    assert.throws(() => readAll([Buffer.from('HELLO\r\n')], true), /unknown operation/);
  });
});

// ------------------------------------------------------------------ against a small stand-in broker

/**
 * Just enough of a NATS server for the generator's runs (CI has no nats-server, and the bench must be testable
 * before FlowMQ's NATS lands): INFO, CONNECT, PING/PONG, SUB (exact subjects and a last-token `*`, queue groups
 * served round robin), PUB with and without a reply subject. `dropEvery`: every n-th publish goes nowhere.
 */
class StandIn {
  private server: Server;
  private subs: Array<{ socket: Socket; subject: string; sid: string; queue: string | null }> = [];
  private rr = new Map<string, number>();
  private sockets = new Set<Socket>();
  private n = 0;
  dropped = 0;
  port = 0;

  constructor(readonly dropEvery = 0) {
    this.server = createServer((s) => this.serve(s));
  }

  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as { port: number }).port;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private matches(filter: string, subject: string): boolean {
    if (filter.endsWith('.*')) {
      const prefix = filter.slice(0, -1);
      return subject.startsWith(prefix) && !subject.slice(prefix.length).includes('.');
    }
    return filter === subject;
  }

  private route(subject: string, reply: string | null, payload: Buffer): void {
    if (this.dropEvery > 0 && ++this.n % this.dropEvery === 0) {
      this.dropped++;
      return;
    }
    const groups = new Map<string, typeof this.subs>();
    for (const sub of this.subs) {
      if (sub.socket.destroyed || !this.matches(sub.subject, subject)) continue;
      if (sub.queue === null) this.deliver(sub, subject, reply, payload);
      else groups.set(sub.queue, [...(groups.get(sub.queue) ?? []), sub]);
    }
    for (const [q, members] of groups) {
      const i = this.rr.get(q) ?? 0;
      this.rr.set(q, i + 1);
      this.deliver(members[i % members.length], subject, reply, payload);
    }
  }

  private deliver(sub: { socket: Socket; sid: string }, subject: string, reply: string | null, payload: Buffer): void {
    sub.socket.write(Buffer.concat([Buffer.from(`MSG ${subject} ${sub.sid}${reply ? ` ${reply}` : ''} ${payload.length}\r\n`), payload, Buffer.from('\r\n')]));
  }

  private serve(socket: Socket): void {
    socket.on('error', () => undefined);
    this.sockets.add(socket);
    socket.write('INFO {"server_id":"standin","version":"2.9.10","proto":1,"headers":true,"max_payload":1048576}\r\n');
    let buf: Buffer = Buffer.alloc(0);
    socket.on('data', (d: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, d]) : d;
      let pos = 0;
      socket.cork();
      for (;;) {
        const nl = buf.indexOf(10, pos);
        if (nl < 0) break;
        const line = buf.toString('latin1', pos, nl).replace(/\r$/, '');
        const [op, ...args] = line.split(' ');
        if (op === 'PUB') {
          const len = Number(args[args.length - 1]);
          if (buf.length < nl + 1 + len + 2) break;
          this.route(args[0], args.length === 3 ? args[1] : null, buf.subarray(nl + 1, nl + 1 + len));
          pos = nl + 1 + len + 2;
          continue;
        }
        if (op === 'PING') socket.write('PONG\r\n');
        else if (op === 'SUB') this.subs.push({ socket, subject: args[0], sid: args[args.length - 1], queue: args.length === 3 ? args[1] : null });
        pos = nl + 1;
      }
      socket.uncork();
      buf = buf.subarray(pos);
    });
    socket.on('close', () => {
      this.sockets.delete(socket);
      this.subs = this.subs.filter((s) => s.socket !== socket);
    });
  }
}

describe('bench: the NATS load generator against a stand-in broker', () => {
  let standIn: StandIn;
  before(async () => {
    standIn = new StandIn();
    await standIn.start();
  });
  after(() => standIn.stop());

  const base = { payloadBytes: 16, aheadBytes: 256 * 1024, warmupS: 0.2, seconds: 0.5, brokerPid: process.pid };

  it('fan-out: every published message counted at each subscriber, none lost, rate from first publish to last delivery', async () => {
    const r = await runNatsPubSub({ ...base, port: standIn.port, subscribers: 2, queueGroup: false });
    assert.deepEqual(r.errors, []);
    assert.ok(r.published > 0);
    assert.equal(r.expected, r.published * 2);
    assert.equal(r.delivered, r.expected);
    assert.equal(r.lost, 0);
    assert.equal(r.perSubscriberMin, r.published);
    assert.equal(r.perSubscriberMax, r.published);
    assert.ok(r.seconds >= 0.5, `measured over ${r.seconds} s: at least the publishing`);
    assert.ok(Math.abs(r.deliveriesPerSec - r.delivered / r.seconds) < 1e-6 * r.deliveriesPerSec);
    assert.ok(r.cpu.broker !== null && r.cpu.generator > 0);
  });

  it('queue group: each message counted once across the members, shared among all of them', async () => {
    const r = await runNatsPubSub({ ...base, port: standIn.port, subscribers: 3, queueGroup: true, payloadBytes: 1024 });
    assert.deepEqual(r.errors, []);
    assert.equal(r.expected, r.published);
    assert.equal(r.delivered, r.published);
    assert.ok(r.perSubscriberMin > 0, 'every member got a share');
    assert.ok(Math.abs(r.payloadMBPerSec - (r.deliveriesPerSec * 1024) / 1e6) < 1e-6 * r.payloadMBPerSec);
  });

  it('messages a broker drops are reported as lost, not waited for forever', async () => {
    const dropping = new StandIn(1000);
    await dropping.start();
    try {
      const r = await runNatsPubSub({ ...base, port: dropping.port, subscribers: 1, queueGroup: false, warmupS: 0, lostAfterMs: 500 });
      assert.ok(dropping.dropped > 0);
      assert.equal(r.lost, dropping.dropped);
      assert.equal(r.delivered, r.published - dropping.dropped);
    } finally {
      await dropping.stop();
    }
  });

  it('request/reply: requests answered on their own reply subjects, round trips counted with their latency', async () => {
    const r = await runNatsRequest({ port: standIn.port, payloadBytes: 16, inflight: 4, warmupS: 0.2, seconds: 0.5, brokerPid: process.pid });
    assert.deepEqual(r.errors, []);
    assert.ok(r.completed > 0);
    assert.equal(r.unanswered, 0);
    assert.ok(r.rtt.count > 0 && r.rtt.p50 <= r.rtt.p99);
    assert.equal(r.roundTripsPerSec, r.completed / 0.5);
  });

  it('a broker that is not there: the run fails with the connection error', async () => {
    const s = createServer();
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const port = (s.address() as { port: number }).port;
    await new Promise<void>((r) => s.close(() => r()));
    await assert.rejects(runNatsPubSub({ ...base, port, subscribers: 1, queueGroup: false }), /ECONNREFUSED/);
  });
});

describe('bench: the NATS load generator against FlowMQ', () => {
  it('counts what the broker counts: every publish taken, every delivery sent and received; request/reply answered', async () => {
    const port = await freePort();
    const b = await startFlowmq(['--protocols', 'mqtt,kafka,nats', '--nats-port', String(port)]);
    const figures = async () => {
      const res = await fetch(`http://127.0.0.1:${b.httpPort}/api/v1/broker`);
      return ((await res.json()) as { nats: Record<string, number> }).nats;
    };
    try {
      await waitNatsInfo(port, 20_000, () => true);
      // No warm-up: the broker's counters then cover exactly the measured phase.
      const r = await runNatsPubSub({
        port,
        payloadBytes: 16,
        subscribers: 2,
        queueGroup: false,
        aheadBytes: 1024 * 1024,
        warmupS: 0,
        seconds: 0.5,
        brokerPid: b.pid,
      });
      assert.deepEqual(r.errors, []);
      assert.equal(r.lost, 0);
      assert.equal(r.delivered, r.published * 2);
      const f = await figures();
      assert.equal(f.msgsIn, r.published, 'the broker took exactly the publishes the generator counted');
      assert.equal(f.msgsOut, r.delivered, 'and sent exactly the deliveries the subscribers counted');
      assert.equal(f.slowConsumers, 0);
      assert.ok(r.cpu.broker !== null && r.cpu.broker > 0, 'the broker process was found and used CPU');

      const q = await runNatsRequest({ port, payloadBytes: 16, inflight: 8, warmupS: 0.2, seconds: 0.5, brokerPid: b.pid });
      assert.deepEqual(q.errors, []);
      assert.ok(q.completed > 0);
      assert.equal(q.unanswered, 0);
    } finally {
      await b.stop();
    }
  });
});

describe('bench: startNatsServer when the server does not come up', () => {
  // Stand-ins for nats-server (CI has none): the failure paths must leave no process and no directory behind.
  const fake = (body: string) => {
    const dir = mkdtempSync(join(tmpdir(), 'fake-nats-server-'));
    const bin = join(dir, 'nats-server');
    writeFileSync(bin, `#!/bin/sh\n${body}\n`);
    chmodSync(bin, 0o755);
    return { dir, bin };
  };
  const ourTempDirs = () => readdirSync(tmpdir()).filter((d) => d.startsWith('nats-server-bench-'));

  it('a server that exits: rejects with its output, its temporary directory removed', async () => {
    // The config file it was given is the second argument: its listen line names the port.
    const f = fake('echo "cannot start: $(grep listen "$2")"; exit 1');
    const before = ourTempDirs();
    try {
      await assert.rejects(
        startNatsServer(f.bin, 10_000),
        /nats-server did not start: the process exited before port \d+ served INFO[\s\S]*cannot start: listen: "127\.0\.0\.1:\d+"/,
      );
      assert.deepEqual(ourTempDirs(), before);
    } finally {
      rmSync(f.dir, { recursive: true, force: true });
    }
  });

  it('a server that never serves INFO: rejects after the timeout and the process is stopped', async () => {
    const pidFile = join(tmpdir(), `fake-nats-server-pid-${process.pid}`);
    const f = fake(`echo $$ > ${pidFile}\nexec sleep 300`);
    const before = ourTempDirs();
    try {
      await assert.rejects(startNatsServer(f.bin, 1500), /nats-server did not start: no NATS INFO on port \d+ within 1500 ms/);
      const pid = Number(readFileSync(pidFile, 'utf8'));
      let gone = false;
      for (let i = 0; i < 100 && !gone; i++) {
        gone = !existsSync(`/proc/${pid}`) || /^\S+ \S+ Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
        if (!gone) await sleep(50);
      }
      assert.ok(gone, `the server process ${pid} is gone`);
      assert.deepEqual(ourTempDirs(), before);
    } finally {
      rmSync(f.dir, { recursive: true, force: true });
      rmSync(pidFile, { force: true });
    }
  });
});
