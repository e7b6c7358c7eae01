/**
 * MQTT QoS 2 is exactly once across a broker crash (issue 30; MQTT 3.1.1 and 5.0 section 4.3.3): a real bin/flowmq
 * is killed with SIGKILL once a QoS 2 message is in every store it was routed to (the stream capturing its topic,
 * the store queue of a persistent subscriber) and before its PUBREC went out. The unmodified MQTT.js publisher
 * (persistent session) reconnects to the restarted broker and sends the PUBLISH again (DUP, same packet id,
 * [MQTT-4.4.0-1]); the stream read by KafkaJS and the persistent MQTT.js subscriber must hold it exactly once,
 * proved with a marker message published after it.
 *
 * The kill point is reached with a test fault in the broker (FLOWMQ_TEST_KILL_AFTER_QOS2_STORED=<topic>,
 * src/protocols/mqtt/publish-in.ts): the window is the time between two writes, which no outside signal can hit
 * reliably. On main before the fix, with the same fault point (after the message's writes, before the packet
 * id's), the re-sent PUBLISH was stored a second time: the stream held x1 twice on both storage configurations.
 * Runs on the embedded storage and on PostgreSQL + S3 (storage-configs.ts).
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { Kafka, logLevel } from 'kafkajs';
import mqtt, { type MqttClient } from 'mqtt';
import { FlowmqProcess, eventually, run } from './harness.js';
import { freePort } from '../helpers/ports.js';
import { storageConfigs } from './storage-configs.js';

const TOPIC = 'eo/crash';

/** Every payload the stream holds, read from the beginning with KafkaJS until `until` is among them. */
async function readStream(brokers: string, until: string): Promise<string[]> {
  const kafka = new Kafka({ clientId: 'qos2-crash', brokers: [brokers], logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: `qos2-crash-${Date.now()}` });
  const got: string[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic: 'eo.crash', fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        got.push(message.value?.toString() ?? '');
      },
    });
    await eventually(() => got.includes(until), 30_000, `the stream up to ${until}`);
  } finally {
    await consumer.disconnect();
  }
  return got;
}

function count(list: string[], what: string): number {
  return list.filter((x) => x === what).length;
}

for (const cfg of storageConfigs())
  describe(`mqtt e2e: QoS 2 exactly once across kill -9 [${cfg.name}]`, () => {
    let b: FlowmqProcess | null = null;
    const clients: MqttClient[] = [];
    after(async () => {
      for (const c of clients) c.end(true);
      if (b !== null) {
        await b.stop('SIGKILL');
        b.cleanup();
      }
    });

    test('a PUBLISH re-sent after the broker died between storing it and PUBREC is stored once (stream, persistent subscriber)', async () => {
      // A fixed MQTT port, so that MQTT.js reconnects to the restarted broker by itself, as it would in production.
      const port = await freePort();
      const args = [...(await cfg.brokerArgs()), '--mqtt-port', String(port)];
      b = await FlowmqProcess.start({ args, env: { FLOWMQ_TEST_KILL_AFTER_QOS2_STORED: TOPIC } });
      const url = `mqtt://127.0.0.1:${port}`;

      // The stream that captures the topic (a Kafka topic binds its own name: eo.crash <- eo/crash).
      const admin = new Kafka({ clientId: 'qos2-crash-admin', brokers: [b.kafka], logLevel: logLevel.NOTHING }).admin();
      await admin.connect();
      await admin.createTopics({ topics: [{ topic: 'eo.crash', numPartitions: 1 }] });
      await admin.disconnect();

      // The persistent subscriber (MQTT.js 5.0), connected throughout: it reconnects and resumes its session.
      const sub = await mqtt.connectAsync(url, {
        protocolVersion: 5,
        clientId: 'eo-sub',
        clean: false,
        properties: { sessionExpiryInterval: 3600 },
        reconnectPeriod: 200,
        connectTimeout: 5000,
      });
      clients.push(sub);
      const atSub: string[] = [];
      // With packet id and DUP, for the failure message: a copy re-sent with DUP is the outbound side's.
      const seen: string[] = [];
      sub.on('message', (_t, payload, packet) => {
        atSub.push(payload.toString());
        seen.push(`${payload.toString()}#${packet.messageId}${packet.dup ? ' dup' : ''}`);
      });
      await sub.subscribeAsync('eo/#', { qos: 2 });

      // The publisher (MQTT.js 3.1.1, persistent session): a message before, then the one the broker dies on.
      const pub = await mqtt.connectAsync(url, { protocolVersion: 4, clientId: 'eo-pub', clean: false, reconnectPeriod: 200, connectTimeout: 5000 });
      clients.push(pub);
      await pub.publishAsync('eo/before', 'before', { qos: 2 });
      await eventually(() => atSub.includes('before'), 10_000, 'the subscriber got the first message');
      const dying = b;
      const x1 = pub.publishAsync(TOPIC, 'x1', { qos: 2 });
      x1.catch(() => undefined);
      // The broker kills itself once x1 is stored, before the PUBREC.
      const died = await Promise.race([
        dying.stop('SIGCONT'), // no-op signal: waits for the exit
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the broker did not die at the fault point')), 20_000).unref()),
      ]);
      assert.equal(died.signal, 'SIGKILL', `the broker died of the test fault: ${JSON.stringify(died)}`);

      // The same storage and MQTT port, without the fault. MQTT.js reconnects and re-sends x1 (DUP, same packet id).
      b = await FlowmqProcess.start({ dataDir: dying.dataDir, args });
      await x1;
      await pub.publishAsync(TOPIC, 'marker', { qos: 2 });

      // Packet id reuse after PUBCOMP: mosquitto_pub with a persistent session (-c) numbers every run's message 1.
      for (const m of ['r1', 'r2']) {
        const r = await run('mosquitto_pub', ['-h', '127.0.0.1', '-p', String(port), '-i', 'eo-mos', '-c', '-q', '2', '-t', TOPIC, '-m', m], {
          timeoutMs: 10_000,
        });
        assert.equal(r.code, 0, r.stderr);
      }
      await pub.publishAsync(TOPIC, 'marker2', { qos: 2 });

      const stream = await readStream(b.kafka, 'marker2');
      assert.deepEqual(
        ['x1', 'marker', 'r1', 'r2', 'marker2'].map((m) => [m, count(stream, m)]),
        ['x1', 'marker', 'r1', 'r2', 'marker2'].map((m) => [m, 1]),
        `the stream: ${stream.join(', ')}`,
      );
      await eventually(() => atSub.includes('marker2'), 20_000, 'the subscriber got the last marker');
      assert.deepEqual(
        ['before', 'x1', 'marker', 'r1', 'r2', 'marker2'].map((m) => [m, count(atSub, m)]),
        ['before', 'x1', 'marker', 'r1', 'r2', 'marker2'].map((m) => [m, 1]),
        `the subscriber: ${seen.join(', ')}`,
      );
    });
  });
