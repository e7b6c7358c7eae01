import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isValidStreamName, kafkaToUnified, matches, unifiedToKafka, validateFilter, validateTopic } from '../../src/core/index.js';

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
});
