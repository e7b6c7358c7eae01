// test-runner: alone (scripts/test.mjs): a CPU-bound password flood against a producer's progress
/**
 * Password checks must never starve storage (issue 12): against a real `flowmq start` with a users file, 150
 * sockets from 30 loopback addresses send wrong-password MQTT CONNECTs continuously, and Kafka SASL PLAIN logins
 * with wrong passwords come from 20 more, while an authenticated KafkaJS producer (acks=-1) sends produces one
 * after another and a legitimate MQTT.js client connects with the right password.
 *
 * Judged by ordering, not time: the flood stops by itself once REFUSED_BUDGET of its attempts have been checked
 * and refused, and every produce must be acknowledged, and the legitimate client connected, before that. On the old
 * code (scrypt on libuv's thread pool, which the WAL's writes share) the first produce's WAL write queued behind
 * the flood's ~170 outstanding scrypt jobs, so the budget was used up before the first acknowledgement.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import { AuthFlood } from '../../bench/auth-flood.js';
import { FlowmqProcess } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const REFUSED_BUDGET = 120;
const PRODUCES = 20;
const addresses = (from: number, n: number) => Array.from({ length: n }, (_, i) => `127.0.${Math.floor((from + i) / 250)}.${2 + ((from + i) % 250)}`);

async function until(cond: () => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('a wrong-password flood does not starve storage', () => {
  let dir = '';
  let broker: FlowmqProcess;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-flood-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: right-one\n- username: bob\n  password: builder\n');
    broker = await FlowmqProcess.start({ args: ['--users-file', join(dir, 'users.yaml')] });
    broker.credentials = { username: 'alice', password: 'right-one' };
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('acknowledges every acks=all produce and lets a right password in while the flood is still going', async () => {
    const kafka = new Kafka({
      clientId: 'flood-e2e',
      brokers: [broker.kafka],
      sasl: { mechanism: 'plain', username: 'alice', password: 'right-one' },
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
    });
    const producer = kafka.producer({ allowAutoTopicCreation: true });
    await producer.connect();
    await producer.send({ topic: 'flood.t', acks: -1, messages: [{ value: 'before the flood' }] });

    // The flood targets the real user (alice) from addresses the legitimate clients do not use.
    const mqttFlood = new AuthFlood({
      port: broker.ports.mqtt,
      protocol: 'mqtt',
      sockets: 150,
      localAddresses: addresses(0, 30),
      username: 'alice',
      password: 'wrong',
      ratePerSec: 0,
      refusedBudget: REFUSED_BUDGET,
    });
    const kafkaFlood = new AuthFlood({
      port: broker.ports.kafka,
      protocol: 'kafka',
      sockets: 20,
      localAddresses: addresses(30, 20),
      username: 'bob',
      password: 'wrong',
      ratePerSec: 0,
    });
    mqttFlood.start();
    kafkaFlood.start();
    try {
      await until(() => mqttFlood.stats.sent >= 150 && kafkaFlood.stats.sent >= 20, 'every flood socket to send a login');

      // MQTT.js does not reconnect after a refused CONNACK: the application tries again on 0x89 Server busy.
      const legit = new Promise<{ busyAnswers: number; floodDone: boolean }>((resolve, reject) => {
        let busyAnswers = 0;
        const attempt = () => {
          const c = mqtt.connect(broker.mqttUrl, {
            protocolVersion: 5,
            username: 'alice',
            password: 'right-one',
            reconnectPeriod: 0,
            connectTimeout: 30_000,
            clientId: 'legit',
          });
          c.once('connect', () => {
            const floodDone = mqttFlood.done;
            c.end(true);
            resolve({ busyAnswers, floodDone });
          });
          c.once('error', (err: Error & { code?: number }) => {
            c.end(true);
            if (err.code !== 0x89) return reject(err);
            busyAnswers++;
            setTimeout(attempt, 200);
          });
        };
        attempt();
      });

      let acked = 0;
      for (let i = 0; i < PRODUCES; i++) {
        await producer.send({ topic: 'flood.t', acks: -1, messages: [{ value: `during the flood ${i}` }] });
        acked++;
      }
      const floodDoneAtLastAck = mqttFlood.done;
      const refusedAtLastAck = mqttFlood.stats.refused;
      const { busyAnswers, floodDone } = await legit;

      assert.equal(acked, PRODUCES);
      assert.equal(
        floodDoneAtLastAck,
        false,
        `all ${PRODUCES} produces acknowledged while the flood went on (it had ${refusedAtLastAck} of ${REFUSED_BUDGET} refusals)`,
      );
      assert.equal(floodDone, false, `the right password got in while the flood went on (after ${busyAnswers} busy answers)`);
      assert.ok(mqttFlood.stats.refused + mqttFlood.stats.busy > 0, 'the MQTT flood was answered');
      assert.ok(kafkaFlood.stats.answered > 0, 'the Kafka flood was answered');
      assert.equal(mqttFlood.stats.accepted + kafkaFlood.stats.accepted, 0);
    } finally {
      await mqttFlood.stop();
      await kafkaFlood.stop();
      await producer.disconnect();
    }

    // The refusals were logged at a bounded rate (LogLimiter), with the address and the reason.
    const lines = broker.logs.filter((l) => l.msg === 'login refused');
    assert.ok(lines.length > 0, 'refused logins are logged');
    assert.ok(lines.length < mqttFlood.stats.answered, `${lines.length} log lines for ${mqttFlood.stats.answered} refusals`);
    const stats = await broker.api<{ auth: { bad: number; busy: number; throttled: number } }>('GET', '/api/v1/broker');
    assert.ok(stats.auth.bad > 0 && stats.auth.busy + stats.auth.throttled > 0, JSON.stringify(stats.auth));
  });
});
