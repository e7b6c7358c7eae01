import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  dotsToUnified,
  isValidTopic,
  swapSeparators,
  unifiedToDots,
  isValidStreamName,
  kafkaToUnified,
  matches,
  unifiedToKafka,
  validateFilter,
  validateTopic,
} from '../../src/core/index.js';

describe('topics and filters', () => {
  it('matches MQTT wildcards', () => {
    assert.ok(matches('factory/+/+/telemetry', 'factory/l1/d7/telemetry'));
    assert.ok(!matches('factory/+/+/telemetry', 'factory/l1/telemetry'));
    assert.ok(matches('factory/#', 'factory'));
    assert.ok(matches('factory/#', 'factory/a/b/c'));
    assert.ok(matches('#', 'a/b'));
    assert.ok(!matches('a/+', 'a'));
    assert.ok(matches('a/+', 'a/'));
    assert.ok(matches('+/+', '/x'));
  });
  it('keeps $-topics away from first-level wildcards [MQTT-4.7.2-1]', () => {
    assert.ok(!matches('#', '$SYS/broker/uptime'));
    assert.ok(!matches('+/broker/uptime', '$SYS/broker/uptime'));
    assert.ok(matches('$SYS/#', '$SYS/broker/uptime'));
  });
  it('validates filters and topics', () => {
    for (const f of ['a/#', '#', '+', 'a/+/b', '/']) validateFilter(f);
    for (const f of ['a/#/b', 'a#', 'a/b+', '', '#/a']) assert.throws(() => validateFilter(f), { code: 'INVALID_FILTER' });
    validateTopic('a/b');
    for (const t of ['a/+', 'a/#', '', 'a\u0000b']) assert.throws(() => validateTopic(t), { code: 'INVALID_TOPIC' });
  });
  it('maps Kafka names to unified topics and back', () => {
    assert.equal(kafkaToUnified('factory.line1.telemetry'), 'factory/line1/telemetry');
    assert.equal(unifiedToKafka('factory/line1/telemetry'), 'factory.line1.telemetry');
    assert.equal(unifiedToKafka('a.b/c'), null, 'a level holding a dot has no Kafka name');
    assert.equal(unifiedToKafka('a//c'), null);
    assert.equal(unifiedToKafka('a/b c'), null);
    assert.ok(isValidStreamName('telemetry'));
    assert.ok(!isValidStreamName('a/b'));
    assert.ok(!isValidStreamName('..'));
    assert.ok(!isValidStreamName('x'.repeat(250)));
  });
  it('maps dot-separated names and unified topics by swapping the separators, a bijection', () => {
    assert.equal(dotsToUnified('a.b.c'), 'a/b/c');
    assert.equal(unifiedToDots('a/b/c'), 'a.b.c');
    assert.equal(dotsToUnified('x/y.z'), 'x.y/z', 'a / inside an AMQP word is a . inside a level');
    assert.equal(unifiedToDots('x.y/z'), 'x/y.z');
    assert.equal(dotsToUnified('plain'), 'plain');
    assert.equal(dotsToUnified('a..b'), 'a//b');
    assert.equal(dotsToUnified('.a.'), '/a/');
    assert.equal(dotsToUnified('$SYS.broker'), '$SYS/broker');
    for (const s of ['', 'a', 'a.b/c', '/./', 'x//y..z', 'ü.ß/€', 'a.+.#', '*.>']) {
      assert.equal(swapSeparators(swapSeparators(s)), s, `round trip of "${s}"`);
    }
    // Kafka names cannot hold '/', so for them the swap is kafkaToUnified.
    assert.equal(dotsToUnified('factory.line1'), kafkaToUnified('factory.line1'));
  });
  it('tells which unified topics MQTT can carry', () => {
    assert.ok(isValidTopic('a/*/>'));
    for (const t of ['', 'a/+', 'a/#', 'a\u0000']) assert.ok(!isValidTopic(t), t);
  });
});
