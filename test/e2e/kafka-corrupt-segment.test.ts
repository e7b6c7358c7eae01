/**
 * A bit flipped in a segment object on disk, read by a real Kafka consumer (KafkaJS) from a real `flowmq start`:
 * the broker answers the fetch with CORRUPT_MESSAGE (as a Kafka broker does for a batch failing its CRC), logs it,
 * counts it in /metrics, keeps running, and never hands out the corrupt records. Flipped back (as a restore from a
 * backup would), the same consumer goes on and reads everything, the marker at the end included.
 */
import { after, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import kafkajsPkg from 'kafkajs';
import { eventually, FlowmqProcess } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const value = (i: number): string => `corrupt-e2e-${String(i).padStart(4, '0')}`;

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(join(e.parentPath, e.name)) : [join(e.parentPath, e.name)]));
}

function flip(path: string, at: number): void {
  const b = readFileSync(path);
  b[at] ^= 0x04;
  writeFileSync(path, b);
}

async function metric(broker: FlowmqProcess, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${broker.ports.http}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.split(' ')[1]);
}

let broker: FlowmqProcess | undefined;
after(async () => {
  await broker?.stop('SIGKILL');
  broker?.cleanup();
});

it('a flipped bit in a segment object: the consumer gets CORRUPT_MESSAGE, never the records; repaired, it reads on', async () => {
  broker = await FlowmqProcess.start({ args: ['--segment-bytes', '4096', '--wal-layout', 'shared', '--kafka-group-initial-rebalance-delay', '0'] });
  const kafkaLogs: string[] = [];
  const client = (): InstanceType<typeof Kafka> =>
    new Kafka({
      brokers: [broker!.kafka],
      clientId: 'corrupt-e2e',
      logLevel: logLevel.ERROR,
      logCreator: () => (entry) => kafkaLogs.push(`${entry.log.message} ${String(entry.log.error ?? '')}`),
      retry: { retries: 3, initialRetryTime: 100 },
    });
  const admin = client().admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: 'crc', numPartitions: 1 }] });
  await admin.disconnect();
  const producer = client().producer();
  await producer.connect();
  for (let i = 0; i < 120; i++) await producer.send({ topic: 'crc', messages: [{ value: value(i) }] });
  await producer.disconnect();
  // A graceful stop seals the tails; the restarted broker reads them from the segment objects.
  broker = await broker.restart();

  const hits = filesUnder(join(broker.dataDir, 'objects')).filter((p) => readFileSync(p).includes(value(60)));
  assert.equal(hits.length, 1, 'one segment object holds record 60');
  const at = readFileSync(hits[0]).indexOf(value(60)) + value(60).length - 1;
  flip(hits[0], at);

  const seen: string[] = [];
  const consumer = client().consumer({ groupId: 'crc-readers', retry: { retries: 1000, initialRetryTime: 100, maxRetryTime: 500 } });
  await consumer.connect();
  await consumer.subscribe({ topic: 'crc', fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => {
      seen.push(message.value!.toString());
    },
  });
  await eventually(async () => (await metric(broker!, 'flowmq_log_corrupt_batches_total')) >= 2, 30_000, 'the broker counts the corrupt batch');
  await eventually(() => kafkaLogs.some((l) => /CRC/i.test(l)), 30_000, 'the consumer is told CORRUPT_MESSAGE');
  assert.ok(
    broker.logs.some((l) => /corrupt data detected/.test(l.msg) && l.level >= 50),
    'the broker logs it at error level',
  );
  assert.ok(!seen.includes(value(60)), 'the corrupt record is not served');
  assert.ok(
    seen.every((v, i) => v === value(i)),
    'what was served before it is intact and in order',
  );
  assert.ok(seen.length < 61, `nothing from the corrupt batch on (${seen.length})`);

  // Repaired: the consumer's retries now get it (no cached block of the corrupt object was kept), up to the end.
  flip(hits[0], at);
  await eventually(() => seen.length >= 120, 30_000, 'the consumer reads on once the object is repaired');
  assert.deepEqual(
    seen.slice(0, 120),
    Array.from({ length: 120 }, (_, i) => value(i)),
  );
  await consumer.disconnect();
  assert.equal(broker.proc.exitCode, null, 'the broker kept running');
});
