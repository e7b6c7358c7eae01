/**
 * NATS parsers: every operation as golden bytes, nats-server 2.9.10's leniencies and its error texts (each case
 * marked "ns" was checked against Debian's nats-server 2.9.10 with a raw socket: what it answered is in the
 * comment), payload ownership, stop().
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { NatsErrText, NatsProtocolError, NatsServerParser } from '../../../../src/protocols/nats/codec/index.js';
import { CLIENT_CASES, SERVER_CASES } from './fixtures.js';
import { ServerRecorder, clientParse, serverParse } from './recorder.js';

const b = (s: string): Buffer => Buffer.from(s, 'latin1');

describe('NatsServerParser fixtures', () => {
  for (const c of SERVER_CASES) {
    test(c.name, () => {
      const out = serverParse([b(c.input)]);
      assert.deepEqual(out.ops, c.ops);
      assert.equal(out.error, c.error);
    });
  }
});

describe('NatsServerParser limits', () => {
  const limits = { maxControlLine: 64, maxPayload: 100 };

  test('max payload is refused at the control line (ns: -ERR Maximum Payload Violation)', () => {
    assert.equal(serverParse([b('PUB foo 101\r\n')], limits).error, NatsErrText.MAX_PAYLOAD);
    assert.equal(serverParse([b('HPUB foo 10 101\r\n')], limits).error, NatsErrText.MAX_PAYLOAD);
    const ok = serverParse([b('PUB foo 100\r\n' + 'x'.repeat(100) + '\r\n')], limits);
    assert.equal(ok.error, undefined);
    assert.equal(ok.ops.length, 1);
  });

  test('a control line of exactly maxControlLine bytes passes, one more fails (ns wording)', () => {
    const line = (len: number): string => 'SUB ' + 'a'.repeat(len - 6) + ' 1';
    assert.equal(line(64).length, 64);
    assert.deepEqual(serverParse([b(line(64) + '\r\n')], limits).ops.length, 1);
    assert.equal(serverParse([b(line(64) + '\n')], limits).ops.length, 1);
    assert.equal(serverParse([b(line(65) + '\r\n')], limits).error, NatsErrText.MAX_CONTROL_LINE);
    assert.equal(serverParse([b(line(65) + '\n')], limits).error, NatsErrText.MAX_CONTROL_LINE);
  });

  test('the PUB/HPUB fast path keeps the same limit', () => {
    const pub = (len: number): string => 'PUB ' + 'a'.repeat(len - 6) + ' 1';
    assert.equal(pub(64).length, 64);
    assert.deepEqual(serverParse([b(pub(64) + '\r\nx\r\n')], limits).ops, [['PUB', 'a'.repeat(58), null, 'x']]);
    assert.equal(serverParse([b(pub(65) + '\r\nx\r\n')], limits).error, NatsErrText.MAX_CONTROL_LINE);
    assert.equal(serverParse([b(pub(65) + '\nx\r\n')], limits).error, NatsErrText.MAX_CONTROL_LINE);
    const hpub = (len: number): string => 'HPUB ' + 'a'.repeat(len - 9) + ' 0 1';
    assert.equal(serverParse([b(hpub(64) + '\r\nx\r\n')], limits).ops.length, 1);
    assert.equal(serverParse([b(hpub(65) + '\r\nx\r\n')], limits).error, NatsErrText.MAX_CONTROL_LINE);
  });

  test('a long line with no end fails as soon as it is too long, whole or split', () => {
    assert.equal(serverParse([b('PUB ' + 'a'.repeat(100))], limits).error, NatsErrText.MAX_CONTROL_LINE);
    const chunks = Array.from({ length: 20 }, () => b('aaaaaaaa'));
    chunks.unshift(b('PUB '));
    assert.equal(serverParse(chunks, limits).error, NatsErrText.MAX_CONTROL_LINE);
    // Under the limit and split: still waiting, no error.
    assert.equal(serverParse([b('PUB '), b('a'.repeat(50))], limits).error, undefined);
  });

  test('a line split exactly at the limit, then its CRLF', () => {
    const line = 'SUB ' + 'a'.repeat(58) + ' 1';
    assert.equal(line.length, 64);
    assert.equal(serverParse([b(line), b('\r'), b('\n')], limits).ops.length, 1);
    assert.equal(serverParse([b(line + 'x'), b('\n')], limits).error, NatsErrText.MAX_CONTROL_LINE);
    assert.equal(serverParse([b(line), b('xx')], limits).error, NatsErrText.MAX_CONTROL_LINE);
  });

  test('a CONNECT longer than max control line is refused (ns)', () => {
    const out = serverParse([b(`CONNECT {"user":"${'a'.repeat(5000)}"}\r\n`)]);
    assert.equal(out.error, NatsErrText.MAX_CONTROL_LINE);
  });
});

describe('NatsServerParser state', () => {
  test('the parser is dead after an error', () => {
    const p = new NatsServerParser({ maxControlLine: 64, maxPayload: 100 });
    const r = new ServerRecorder(p);
    assert.throws(() => p.push(b('XYZ\r\n'), r), NatsProtocolError);
    assert.throws(() => p.push(b('PING\r\n'), r), NatsProtocolError);
    assert.deepEqual(r.ops, []);
  });

  test('stop() from a handler ends the push and later pushes', () => {
    const p = new NatsServerParser({ maxControlLine: 64, maxPayload: 100 });
    const r = new (class extends ServerRecorder {
      override onConnect(): void {
        super.onConnect({});
        p.stop();
      }
    })(p);
    p.push(b('PING\r\nCONNECT {}\r\nPING\r\n'), r);
    p.push(b('PING\r\n'), r);
    assert.deepEqual(r.ops, [['PING'], ['CONNECT', {}]]);
  });

  test('payload is a view when whole in the chunk, an owned copy when it spans chunks', () => {
    const chunk = b('PUB a 3\r\nabc\r\n');
    const p = new NatsServerParser({ maxControlLine: 64, maxPayload: 100 });
    let seen: Buffer | null = null;
    let owned: boolean | null = null;
    const h = new (class extends ServerRecorder {
      override onPub(_s: string, _r: string | null, payload: Buffer): void {
        seen = payload;
        owned = p.ownedPayload;
      }
    })();
    p.push(chunk, h);
    assert.equal(owned, false);
    assert.equal(seen!.buffer, chunk.buffer);
    assert.equal(seen!.byteOffset, chunk.byteOffset + 9);
    const c1 = b('PUB a 3\r\nab');
    const c2 = b('c\r\n');
    p.push(c1, h);
    p.push(c2, h);
    assert.equal(owned, true);
    c1.fill(0);
    c2.fill(0);
    assert.equal(seen!.toString(), 'abc');
  });

  test('midOperation tells whether bytes are buffered', () => {
    const p = new NatsServerParser({ maxControlLine: 64, maxPayload: 100 });
    const r = new ServerRecorder();
    assert.equal(p.midOperation, false);
    p.push(b('PU'), r);
    assert.equal(p.midOperation, true);
    p.push(b('B a 1\r\n'), r);
    assert.equal(p.midOperation, true);
    p.push(b('x\r\n'), r);
    assert.equal(p.midOperation, false);
  });

  test('limits are validated', () => {
    assert.throws(() => new NatsServerParser({ maxControlLine: 0, maxPayload: 1 }), RangeError);
  });
});

describe('NatsClientParser fixtures', () => {
  for (const c of CLIENT_CASES) {
    test(c.name, () => {
      const out = clientParse([b(c.input)]);
      assert.deepEqual(out.ops, c.ops);
      assert.equal(out.error, c.error);
    });
  }
  test('max payload', () => {
    assert.equal(clientParse([b('MSG a 1 11\r\n')], { maxControlLine: 64, maxPayload: 10 }).error, NatsErrText.MAX_PAYLOAD);
  });
});
