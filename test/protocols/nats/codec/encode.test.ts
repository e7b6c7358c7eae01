/** NATS encoders: golden bytes for every operation, the writer's batching and growth, and parse-back. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  NatsWriter,
  OK,
  PING,
  PONG,
  encodeConnect,
  encodeErr,
  encodeHmsg,
  encodeHpub,
  encodeInfo,
  encodeMsg,
  encodePub,
  encodeSub,
  encodeUnsub,
  writeHmsg,
  writeMsg,
} from '../../../../src/protocols/nats/codec/index.js';
import { clientParse, serverParse } from './recorder.js';

const b = (s: string): Buffer => Buffer.from(s, 'utf8');
const s = (x: Buffer | null): string => (x === null ? '<null>' : x.toString('latin1'));

describe('server-side encoders', () => {
  test('constants, INFO, -ERR', () => {
    assert.equal(s(OK), '+OK\r\n');
    assert.equal(s(PING), 'PING\r\n');
    assert.equal(s(PONG), 'PONG\r\n');
    assert.equal(s(encodeInfo({ server_id: 'X', proto: 1, headers: true })), 'INFO {"server_id":"X","proto":1,"headers":true}\r\n');
    assert.equal(s(encodeErr('Unknown Protocol Operation')), "-ERR 'Unknown Protocol Operation'\r\n");
    assert.equal(s(encodeErr('a\r\nb')), "-ERR 'a  b'\r\n");
  });
  test('MSG and HMSG golden bytes', () => {
    assert.equal(s(encodeMsg('foo.bar', '7', null, b('hello'))), 'MSG foo.bar 7 5\r\nhello\r\n');
    assert.equal(s(encodeMsg('foo', '12', '_INBOX.a', b(''))), 'MSG foo 12 _INBOX.a 0\r\n\r\n');
    assert.equal(s(encodeHmsg('foo', '1', null, b('NATS/1.0 503\r\n\r\n'), b(''))), 'HMSG foo 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n');
    assert.equal(s(encodeHmsg('foo', '1', 'r', b('NATS/1.0\r\n\r\n'), b('ab'))), 'HMSG foo 1 r 12 14\r\nNATS/1.0\r\n\r\nab\r\n');
  });
  test('UTF-8 subjects and large sizes', () => {
    const payload = Buffer.alloc(123456, 0x61);
    const out = encodeMsg('café.日.😀', 'é', null, payload);
    assert.equal(out.subarray(0, 40).toString('utf8').split('\r\n')[0], 'MSG café.日.😀 é 123456');
    const parsed = clientParse([out]);
    assert.equal(parsed.error, undefined);
    assert.deepEqual(parsed.ops[0]!.slice(0, 4), ['MSG', 'café.日.😀', 'é', null]);
    assert.equal((parsed.ops[0]![4] as string).length, 123456);
  });
  test('the writer batches, takes, grows, and never rewrites a taken view', () => {
    const w = new NatsWriter(32);
    assert.equal(w.take(), null);
    writeMsg(w, 'a', '1', null, b('x'));
    writeHmsg(w, 'a', '1', null, b('NATS/1.0\r\n\r\n'), b('y'));
    const first = w.take()!;
    const firstCopy = Buffer.from(first);
    assert.equal(s(first), 'MSG a 1 1\r\nx\r\nHMSG a 1 12 13\r\nNATS/1.0\r\n\r\ny\r\n');
    for (let i = 0; i < 100; i++) w.writeMsg('subject.' + i, String(i), null, Buffer.alloc(i, 0x62));
    assert.ok(w.length > 5000);
    const second = w.take()!;
    assert.deepEqual(first, firstCopy);
    const ops = clientParse([second]).ops;
    assert.equal(ops.length, 100);
    assert.deepEqual(ops[99], ['MSG', 'subject.99', '99', null, 'b'.repeat(99)]);
    w.writeBytes(PONG);
    w.clear();
    assert.equal(w.take(), null);
  });
});

describe('client-side encoders', () => {
  test('golden bytes', () => {
    assert.equal(s(encodeConnect({ verbose: false, headers: true })), 'CONNECT {"verbose":false,"headers":true}\r\n');
    assert.equal(s(encodePub('foo', null, b('hi'))), 'PUB foo 2\r\nhi\r\n');
    assert.equal(s(encodePub('foo', 'r.1', b(''))), 'PUB foo r.1 0\r\n\r\n');
    assert.equal(s(encodeHpub('foo', null, b('NATS/1.0\r\n\r\n'), b('ab'))), 'HPUB foo 12 14\r\nNATS/1.0\r\n\r\nab\r\n');
    assert.equal(s(encodeHpub('foo', 'r', b('NATS/1.0\r\n\r\n'), b(''))), 'HPUB foo r 12 12\r\nNATS/1.0\r\n\r\n\r\n');
    assert.equal(s(encodeSub('foo.*', '1')), 'SUB foo.* 1\r\n');
    assert.equal(s(encodeSub('foo', '2', 'q')), 'SUB foo q 2\r\n');
    assert.equal(s(encodeUnsub('1')), 'UNSUB 1\r\n');
    assert.equal(s(encodeUnsub('1', 5)), 'UNSUB 1 5\r\n');
  });
  test('what the client encoders write, the server parser reads', () => {
    const w = new NatsWriter(16);
    w.writeBytes(encodeConnect({ verbose: false, name: 'x' }));
    w.writePub('a.b', null, b('1'));
    w.writeHpub('a.b', 'r', b('NATS/1.0\r\nk: v\r\n\r\n'), b('2'));
    w.writeBytes(encodeSub('a.>', 's', 'q'));
    w.writeBytes(encodeUnsub('s', 3));
    const out = serverParse([w.take()!]);
    assert.equal(out.error, undefined);
    assert.deepEqual(out.ops, [
      ['CONNECT', { verbose: false, name: 'x' }],
      ['PUB', 'a.b', null, '1'],
      ['HPUB', 'a.b', 'r', 'NATS/1.0\r\nk: v\r\n\r\n', '2'],
      ['SUB', 'a.>', 'q', 's'],
      ['UNSUB', 's', 3],
    ]);
  });
});
