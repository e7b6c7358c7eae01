/**
 * src/control/http-guard.ts on a plain Node HTTP server: the timeouts (short ones here) end idle, slow-header and
 * half-sent requests with 408; a response to a request whose body was not read closes the connection, discards
 * at most LINGER_BYTES of what follows, and resets it LINGER_MS later if the client goes on sending.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { LINGER_BYTES, LINGER_MS, closeUnreadBody, httpServerOptions } from '../../src/control/http-guard.js';

const SHORT = { headersTimeoutMs: 400, requestTimeoutMs: 800, keepAliveTimeoutMs: 300, checkIntervalMs: 100, lingerMs: LINGER_MS };

function open(port: number, allowHalfOpen = false): Promise<Socket> {
  return new Promise((resolve) => {
    const s = connect({ port, host: '127.0.0.1', allowHalfOpen }, () => resolve(s));
    s.on('error', () => undefined);
  });
}

function closedAfter(s: Socket): Promise<{ ms: number; text: string }> {
  const started = Date.now();
  let text = '';
  s.on('data', (d: Buffer) => (text += d.toString('latin1')));
  return new Promise((resolve) => s.once('close', () => resolve({ ms: Date.now() - started, text })));
}

describe('http-guard', () => {
  // A refusal that does not read the body, with the default timeouts (the request timeout, 30 s, stays out of the way).
  let server: http.Server;
  let port: number;
  /** When the server side of the last connection closed. */
  let serverClosed: Promise<number> = Promise.resolve(0);
  before(async () => {
    server = http.createServer(httpServerOptions(), (req, res) => {
      closeUnreadBody(req, res);
      res.writeHead(401, { 'content-type': 'text/plain' }).end('no\n');
    });
    server.on('connection', (s: Socket) => {
      serverClosed = new Promise((resolve) => s.once('close', () => resolve(Date.now())));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  test('idle, slow-header and half-sent requests get 408 within their timeouts', async () => {
    const short = http.createServer(httpServerOptions(SHORT), (_req, res) => res.end('ok'));
    await new Promise<void>((r) => short.listen(0, '127.0.0.1', r));
    const port = (short.address() as AddressInfo).port;
    const idle = await open(port);
    const slow = await open(port);
    slow.write('GET / HTTP/1.1\r\nHost: x\r\n');
    const drip = setInterval(() => slow.write('X-Drip: 1\r\n'), 100);
    const [a, b] = await Promise.all([closedAfter(idle), closedAfter(slow)]);
    clearInterval(drip);
    short.closeAllConnections();
    await new Promise((done) => short.close(done));
    for (const r of [a, b]) {
      assert.match(r.text, /^HTTP\/1\.1 408/);
      assert.ok(r.ms < SHORT.headersTimeoutMs + 500, `closed after ${r.ms} ms`);
    }
  });

  test('a request whose body is read by the handler but never completes gets 408 at the request timeout', async () => {
    const reading = http.createServer(httpServerOptions(SHORT), (req, res) => {
      req.resume();
      req.on('end', () => res.end('ok'));
    });
    await new Promise<void>((r) => reading.listen(0, '127.0.0.1', r));
    const s = await open((reading.address() as AddressInfo).port);
    s.write('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc');
    const r = await closedAfter(s);
    reading.closeAllConnections();
    await new Promise((done) => reading.close(done));
    assert.match(r.text, /^HTTP\/1\.1 408/);
    assert.ok(r.ms < SHORT.requestTimeoutMs + 500, `closed after ${r.ms} ms`);
  });

  test('an unread body: Connection: close, at most LINGER_BYTES more read, reset LINGER_MS after the response', async () => {
    const s = await open(port, true);
    const done = closedAfter(s);
    s.write('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n');
    const piece = Buffer.alloc(64 * 1024);
    let closed = false;
    s.once('close', () => (closed = true));
    const started = Date.now();
    // Keep the socket full, whatever the FIN says, as an attacker would.
    while (!closed && Date.now() - started < LINGER_MS + 3000) {
      if (!s.write(piece)) await new Promise((r) => setTimeout(r, 20));
    }
    const accepted = s.bytesWritten - s.writableLength;
    const r = await done;
    assert.match(r.text, /^HTTP\/1\.1 401/);
    assert.match(r.text, /\r\nConnection: close\r\n/i);
    assert.ok(closed, 'reset after the linger');
    assert.ok(r.ms >= LINGER_MS - 100 && r.ms < LINGER_MS + 1500, `closed after ${r.ms} ms`);
    // Kernel buffers on loopback hold a few MiB; the server itself took at most LINGER_BYTES plus a read or two.
    assert.ok(accepted < 16 * 1024 * 1024, `${accepted} bytes accepted (linger limit ${LINGER_BYTES})`);
  });

  test('an unread body the client finishes sending: the server closes as soon as the body is in', async () => {
    // The client does not close on the server's FIN: the close is the server's.
    const s = await open(port, true);
    // The server's side of the connection is registered by now.
    await new Promise((r) => setTimeout(r, 50));
    const closed = serverClosed;
    let text = '';
    s.on('data', (d: Buffer) => (text += d.toString('latin1')));
    s.write('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345');
    await new Promise((r) => setTimeout(r, 200));
    const sent = Date.now();
    s.write('67890');
    const at = await closed;
    s.destroy();
    assert.match(text, /^HTTP\/1\.1 401/);
    assert.ok(at - sent < LINGER_MS / 2, `closed ${at - sent} ms after the body's end, before the linger's`);
  });
});
