/** NATS subject and queue-name rules (nats-server 2.9's sublist check). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isValidLiteralSubject, isValidQueueName, isValidSubject } from '../../../../src/protocols/nats/codec/index.js';

const W = { wildcards: true };
const L = { wildcards: false };

describe('isValidSubject', () => {
  const valid: Array<[string, boolean]> = [
    // [subject, valid as a publish (literal) subject too]
    ['foo', true],
    ['foo.bar.baz', true],
    ['$JS.API.INFO', true],
    ['_INBOX.abc.1', true],
    ['a*.b>', true], // wildcard characters inside a longer token are literal
    ['a/b.c', true],
    ['é.日', true],
    ['*', false],
    ['>', false],
    ['foo.*', false],
    ['foo.>', false],
    ['*.*.>', false],
  ];
  for (const [s, literal] of valid) {
    test(`valid: ${s}`, () => {
      assert.equal(isValidSubject(s, W), true);
      assert.equal(isValidSubject(s, L), literal);
      assert.equal(isValidLiteralSubject(s), literal);
    });
  }
  for (const s of ['', '.', 'foo.', '.foo', 'foo..bar', 'foo bar', 'foo\tbar', 'a.\r', 'a\n', 'a\fb', 'foo.>.bar', '>.a', '>.>']) {
    test(`invalid: ${JSON.stringify(s)}`, () => {
      assert.equal(isValidSubject(s, W), false);
      assert.equal(isValidSubject(s, L), false);
    });
  }
});

describe('isValidQueueName', () => {
  test('rules', () => {
    assert.equal(isValidQueueName('workers'), true);
    assert.equal(isValidQueueName('q.1.*'), true);
    assert.equal(isValidQueueName(''), false);
    assert.equal(isValidQueueName('a b'), false);
    assert.equal(isValidQueueName('a\tb'), false);
  });
});
