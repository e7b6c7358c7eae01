// test-runner: alone (scripts/test.mjs): kill -9 cycles under four loads at once use both cores; a second file beside them slows the broker's restarts
/**
 * The short version of `npm run crash-test`: 3 kill -9 cycles of a real bin/flowmq under idempotent KafkaJS
 * acks=all, MQTT.js QoS 1/2, amqplib confirms and JetStream PubAck load (bench/reliability/crash.ts). Nothing
 * acknowledged may be lost: not a Kafka record, not an MQTT message in the stream that captures it, not at the
 * persistent subscriber, not a confirmed AMQP message in its durable queue, not a JetStream message (a QoS 2
 * message PUBCOMPed while its session was stored before the message was durable went missing before).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatSummary, runCrashTest } from '../../bench/reliability/crash.js';

test('kill -9 three times under Kafka, MQTT, AMQP and JetStream load: every acknowledged message is found', async (t) => {
  const s = await runCrashTest({ cycles: 3, seed: 7, upMs: [800, 2000] });
  for (const line of formatSummary(s).split('\n')) t.diagnostic(line);
  for (const [name, tally] of Object.entries({
    kafka: s.kafka,
    q1stream: s.mqttStreamQos1,
    q2stream: s.mqttStreamQos2,
    q1sub: s.subscriberQos1,
    q2sub: s.subscriberQos2,
    amqp: s.amqpQueue,
    jetstream: s.jetstream,
  })) {
    assert.ok(tally.acked > 0, `${name}: nothing was acknowledged, the load did not run`);
    assert.equal(tally.lost, 0, `${name}: acknowledged but lost, e.g. ${tally.lostSample.join(', ')}`);
  }
  assert.equal(s.kafka.duplicates, 0, 'the idempotent producer wrote a record twice');
  assert.equal(s.kafka.orderViolations, 0, 'a Kafka partition is out of order');
  assert.ok(s.ok);
});
