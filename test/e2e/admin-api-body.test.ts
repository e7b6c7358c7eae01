/**
 * A stranger's request body against every HTTP listener of the real bin/flowmq (admin API with a users file,
 * /metrics, the dashboard, the MQTT-over-WebSocket listener's HTTP side): refused before it is read, and the
 * connection closed rather than read to its end. The client here ignores the broker's FIN (allowHalfOpen) and
 * writes 200 MiB as fast as the socket takes it, as an attacker would; what the socket accepted before it was
 * closed is what the broker read plus what the kernel's buffers held (a few MiB on loopback), and the broker's
 * RSS must not follow what was sent. Also: idle and slow-header connections end with 408 within the headers
 * timeout (Node's own default is 60 s, checked every 30 s). The broker runs with a 2 s headers timeout and a 500 ms
 * lingering close (--http-headers-timeout, --http-linger; defaults 10 s and 2 s, which the unit test of
 * http-guard.ts proves on a plain server): each refusal below ends when the linger does, and the times show the
 * options reach the admin API's and the WebSocket listener's servers.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { FlowmqProcess } from './harness.js';

const MiB = 1024 * 1024;
const BODY = 200 * MiB;
/** Bytes a socket may have accepted before the close: what the broker read plus loopback's kernel buffers. */
const ACCEPTED_MAX = 16 * MiB;
const RSS_GROWTH_MAX = 24 * MiB;
const HEADERS_TIMEOUT_MS = 2000;
const LINGER_MS = 500;

function rss(pid: number): number {
  const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m![1]) * 1024;
}

interface Outcome {
  status: number | null;
  /** Bytes of the request the socket accepted (written out of the client's own buffer) before it closed. */
  accepted: number;
  closed: boolean;
  ms: number;
  connectionClose: boolean;
}

/**
 * Sends `head`, then body bytes (raw, or as 64 KiB chunks when `chunked`) as fast as the socket takes them, until
 * the socket closes, `limit` bytes went out or `deadlineMs` passed. The socket ignores the server's FIN.
 */
async function sendBody(port: number, head: string, opts: { chunked?: boolean; limit?: number; deadlineMs?: number } = {}): Promise<Outcome> {
  const s: Socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  await new Promise<void>((resolve, reject) => {
    s.once('connect', resolve);
    s.once('error', reject);
  });
  let response = '';
  let closed = false;
  s.on('data', (d: Buffer) => (response += d.toString('latin1')));
  s.on('error', () => undefined);
  s.on('close', () => (closed = true));
  const started = Date.now();
  s.write(head);
  const piece = Buffer.alloc(64 * 1024, 0x20);
  const chunk = opts.chunked ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]) : piece;
  const limit = opts.limit ?? BODY;
  const deadline = started + (opts.deadlineMs ?? 20_000);
  let written = 0;
  while (!closed && written < limit && Date.now() < deadline) {
    written += piece.length;
    if (!s.write(chunk)) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, 250);
        function done() {
          clearTimeout(t);
          s.off('drain', done);
          s.off('close', done);
          resolve();
        }
        s.once('drain', done);
        s.once('close', done);
      });
    }
  }
  // Whatever the socket still holds never left this process.
  const accepted = s.bytesWritten - s.writableLength;
  const end = Date.now() + 5000;
  while (!closed && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  const ms = Date.now() - started;
  s.destroy();
  const m = /^HTTP\/1\.1 (\d{3})/.exec(response);
  const headers = response.split('\r\n\r\n')[0].toLowerCase();
  return { status: m ? Number(m[1]) : null, accepted, closed, ms, connectionClose: /\r\nconnection: close/.test(headers) };
}

describe('e2e: request bodies nobody reads, on every HTTP listener', () => {
  let broker: FlowmqProcess;
  let dir: string;
  let host: string;
  const basic = `Authorization: Basic ${Buffer.from('alice:wonderland').toString('base64')}\r\n`;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-body-e2e-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: wonderland\n');
    broker = await FlowmqProcess.start({
      args: ['--users-file', join(dir, 'users.yaml'), '--http-headers-timeout', `${HEADERS_TIMEOUT_MS}ms`, '--http-linger', `${LINGER_MS}ms`],
    });
    host = `127.0.0.1:${broker.ports.http}`;
    // A first password check, so that the password verifier's own memory (scrypt: 16 MiB) is not counted below.
    assert.equal((await fetch(`${broker.http}/api/v1/streams`, { headers: { authorization: basic.slice('Authorization: '.length).trim() } })).status, 200);
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  async function refused(label: string, port: number, head: string, status: number, chunked = false): Promise<Outcome> {
    const before = rss(broker.proc.pid!);
    const o = await sendBody(port, head, { chunked });
    const grown = rss(broker.proc.pid!) - before;
    const mib = (n: number) => `${(n / MiB).toFixed(1)} MiB`;
    const figures = `${label}: status ${o.status}, ${mib(o.accepted)} accepted of ${mib(BODY)}, closed ${o.closed} after ${o.ms} ms, RSS +${mib(grown)}`;
    console.log(figures);
    assert.equal(o.status, status, figures);
    assert.ok(o.closed, `the connection is closed, not drained: ${figures}`);
    assert.ok(o.accepted <= ACCEPTED_MAX, `at most ${mib(ACCEPTED_MAX)} taken: ${figures}`);
    // The client never stops sending: the broker resets the connection when its linger ends.
    assert.ok(o.ms >= LINGER_MS - 50 && o.ms < LINGER_MS + 1000, `closed at the end of the ${LINGER_MS} ms linger: ${figures}`);
    assert.ok(grown <= RSS_GROWTH_MAX, `RSS grew at most ${mib(RSS_GROWTH_MAX)}: ${figures}`);
    return o;
  }

  test('an anonymous 200 MiB body (Content-Length) gets its 401 and a closed connection after a few MiB', async () => {
    const o = await refused(
      'anonymous POST /api/v1/streams, Content-Length',
      broker.ports.http,
      `POST /api/v1/streams HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${BODY}\r\n\r\n`,
      401,
    );
    assert.ok(o.connectionClose, 'the 401 says Connection: close');
  });

  test('an anonymous chunked body: the same', async () => {
    await refused(
      'anonymous POST /api/v1/streams, chunked',
      broker.ports.http,
      `POST /api/v1/streams HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
      401,
      true,
    );
  });

  test('an authenticated caller over the 1 MiB limit gets 413 before its body is read, chunked or not', async () => {
    const head = `POST /api/v1/streams HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\n${basic}`;
    await refused('alice, Content-Length 200 MiB', broker.ports.http, `${head}Content-Length: ${BODY}\r\n\r\n`, 413);
    await refused('alice, chunked', broker.ports.http, `${head}Transfer-Encoding: chunked\r\n\r\n`, 413, true);
  });

  test('the login (no credentials needed) takes at most 16 KiB', async () => {
    await refused(
      'POST /api/v1/login, chunked',
      broker.ports.http,
      `POST /api/v1/login HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
      413,
      true,
    );
  });

  test('bodies sent to /metrics, the dashboard and a foreign Host are not read either', async () => {
    await refused('GET /metrics with a body', broker.ports.http, `GET /metrics HTTP/1.1\r\nHost: ${host}\r\nContent-Length: ${BODY}\r\n\r\n`, 200);
    await refused(
      'POST /dashboard/x',
      broker.ports.http,
      `POST /dashboard/x HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${BODY}\r\n\r\n`,
      413,
    );
    await refused(
      'Host: evil.example',
      broker.ports.http,
      `POST /api/v1/streams HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
      421,
      true,
    );
  });

  test('the MQTT WebSocket listener answers a plain POST 426 without reading its body', async () => {
    await refused('POST /mqtt (mqtt-ws)', broker.ports['mqtt-ws'], `POST /mqtt HTTP/1.1\r\nHost: x\r\nContent-Length: ${BODY}\r\n\r\n`, 426);
  });

  test('Expect: 100-continue: a stranger gets the 401 instead of 100 Continue; alice gets 100 Continue, then her answer', async () => {
    const ask = async (auth: string): Promise<string> => {
      const s = connect(broker.ports.http, '127.0.0.1');
      let text = '';
      s.on('data', (d: Buffer) => (text += d.toString('latin1')));
      s.on('error', () => undefined);
      s.write(`GET /api/v1/streams HTTP/1.1\r\nHost: ${host}\r\n${auth}Expect: 100-continue\r\nContent-Length: 2\r\n\r\n`);
      const until = Date.now() + 10_000;
      while (!/^HTTP\/1\.1 [1-5]\d\d/m.test(text) && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      const first = text.split('\r\n')[0];
      s.write('{}');
      while (!/HTTP\/1\.1 [2-5]\d\d/.test(text) && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      s.destroy();
      return `${first} | ${/HTTP\/1\.1 ([2-5]\d\d)/.exec(text)?.[1]}`;
    };
    assert.equal(await ask(''), 'HTTP/1.1 401 Unauthorized | 401');
    assert.equal(await ask(basic), 'HTTP/1.1 100 Continue | 200');
  });

  test('idle and slow-header connections get 408 and are closed at the headers timeout (2 s here)', async () => {
    const open = (port: number) =>
      new Promise<Socket>((resolve) => {
        const s = connect(port, '127.0.0.1', () => resolve(s));
        s.on('error', () => undefined);
      });
    const watch = (s: Socket) => {
      const started = Date.now();
      let text = '';
      s.on('data', (d: Buffer) => (text += d.toString('latin1')));
      return new Promise<{ ms: number; text: string }>((resolve) => s.once('close', () => resolve({ ms: Date.now() - started, text })));
    };
    const idle = await open(broker.ports.http);
    const idleWs = await open(broker.ports['mqtt-ws']);
    const slow = await open(broker.ports.http);
    slow.write(`GET /api/v1/streams HTTP/1.1\r\nHost: ${host}\r\n`);
    // One header line every 200 ms: the connection is never idle, the headers never end.
    const drip = setInterval(() => slow.write('X-Drip: 1\r\n'), 200);
    // The 20 s guard is cleared when the three closes come: left armed, it kept this file's process alive ~9 s after its
    // last test.
    let guard: NodeJS.Timeout | undefined;
    const results = await Promise.race([
      Promise.all([watch(idle), watch(idleWs), watch(slow)]),
      new Promise<null>((r) => (guard = setTimeout(() => r(null), 20_000))),
    ]);
    clearTimeout(guard);
    clearInterval(drip);
    for (const s of [idle, idleWs, slow]) s.destroy();
    assert.ok(results !== null, 'all three closed within 20 s');
    for (const r of results) {
      // Node checks the timeouts once a second (HTTP_TIMEOUTS.checkIntervalMs).
      assert.ok(r.ms >= HEADERS_TIMEOUT_MS - 50 && r.ms < HEADERS_TIMEOUT_MS + 2500, `closed after ${r.ms} ms`);
      assert.match(r.text, /^HTTP\/1\.1 408/);
    }
  });

  test('the admin API still answers alice over a kept-alive connection', async () => {
    const r = await fetch(`${broker.http}/api/v1/streams`, { headers: { authorization: basic.slice('Authorization: '.length).trim() } });
    assert.equal(r.status, 200);
    const made = await fetch(`${broker.http}/api/v1/streams`, {
      method: 'POST',
      headers: { authorization: basic.slice('Authorization: '.length).trim(), 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'after-the-flood', partitions: 1 }),
    });
    assert.equal(made.status, 201);
  });
});
