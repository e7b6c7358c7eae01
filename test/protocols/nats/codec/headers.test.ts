/** NATS header blocks: parse golden blocks (status lines, multi-values, case), refuse malformed ones, round trip. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { NatsProtocolError, encodeHeaders, parseHeaders } from '../../../../src/protocols/nats/codec/index.js';

const b = (s: string): Buffer => Buffer.from(s, 'utf8');

describe('parseHeaders', () => {
  test('version line only', () => {
    assert.deepEqual(parseHeaders(b('NATS/1.0\r\n\r\n')), { status: null, description: '', entries: [] });
  });
  test('status without description (no responders)', () => {
    assert.deepEqual(parseHeaders(b('NATS/1.0 503\r\n\r\n')), { status: 503, description: '', entries: [] });
  });
  test('status with description and headers', () => {
    assert.deepEqual(parseHeaders(b('NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n\r\n')), {
      status: 408,
      description: 'Request Timeout',
      entries: [['Nats-Pending-Messages', '1']],
    });
  });
  test('keys keep their case, repeated keys keep every value in order, values trimmed, UTF-8', () => {
    assert.deepEqual(parseHeaders(b('NATS/1.0\r\nfoo: 1\r\nFoo:2\r\nfoo:  three  \r\nk: é日\r\nempty:\r\n\r\n')).entries, [
      ['foo', '1'],
      ['Foo', '2'],
      ['foo', 'three'],
      ['k', 'é日'],
      ['empty', ''],
    ]);
  });
  test('a value holding a colon', () => {
    assert.deepEqual(parseHeaders(b('NATS/1.0\r\nurl: http://x:1/\r\n\r\n')).entries, [['url', 'http://x:1/']]);
  });
  for (const [name, block] of [
    ['empty', ''],
    ['wrong version', 'HTTP/1.1\r\n\r\n'],
    ['no CRLF at all', 'NATS/1.0'],
    ['no closing empty line', 'NATS/1.0\r\nA: b\r\n'],
    ['bare LF lines', 'NATS/1.0\nA: b\n\n'],
    ['line without a colon', 'NATS/1.0\r\nAb\r\n\r\n'],
    ['empty key', 'NATS/1.0\r\n: v\r\n\r\n'],
    ['two-digit status', 'NATS/1.0 50\r\n\r\n'],
    ['non-digit status', 'NATS/1.0 5x3\r\n\r\n'],
    ['version glued to text', 'NATS/1.0x\r\n\r\n'],
    ['bytes after the end', 'NATS/1.0\r\n\r\nxx'],
  ] as const) {
    test(`malformed: ${name}`, () => {
      assert.throws(() => parseHeaders(b(block)), NatsProtocolError);
    });
  }
});

describe('encodeHeaders', () => {
  test('golden bytes', () => {
    assert.equal(encodeHeaders({ entries: [] }).toString(), 'NATS/1.0\r\n\r\n');
    assert.equal(encodeHeaders({ status: 503, entries: [] }).toString(), 'NATS/1.0 503\r\n\r\n');
    assert.equal(
      encodeHeaders({
        status: 404,
        description: 'No Messages',
        entries: [
          ['A', '1'],
          ['A', '2'],
        ],
      }).toString(),
      'NATS/1.0 404 No Messages\r\nA: 1\r\nA: 2\r\n\r\n',
    );
  });
  test('unsafe keys and values cannot inject lines; empty keys are dropped', () => {
    const block = encodeHeaders({
      entries: [
        ['a\r\nb: c', 'x\r\nEvil: 1'],
        ['', 'v'],
        ['k:y', 'ok'],
      ],
    });
    assert.equal(block.toString(), 'NATS/1.0\r\na__b__c: x  Evil: 1\r\nk_y: ok\r\n\r\n');
    assert.deepEqual(parseHeaders(block).entries, [
      ['a__b__c', 'x  Evil: 1'],
      ['k_y', 'ok'],
    ]);
  });
  test('bad status', () => {
    assert.throws(() => encodeHeaders({ status: 42, entries: [] }), RangeError);
  });
  test('round trip', () => {
    const h = {
      status: 408,
      description: 'Request Timeout',
      entries: [
        ['Nats-Msg-Id', 'abc'],
        ['ü', 'ö ä'],
      ] as Array<[string, string]>,
    };
    assert.deepEqual(parseHeaders(encodeHeaders(h)), h);
  });
});
