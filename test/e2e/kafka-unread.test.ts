/**
 * Kafka clients that pipeline requests and never read a response, against the real bin/flowmq: each of four sends
 * 256 KiB of Metadata (200 topics: ~12 KB answered per 20-byte request), ApiVersions and Fetch requests. The
 * broker must stop taking their requests once their unsent responses pass its limit (it answers at most
 * `maxInFlightRequests` of them beyond what the socket took), keep serving a normal client (a marker message
 * produced and consumed with KafkaJS), and close them once their responses have made no progress for
 * --kafka-request-receive-timeout (5 s here). Figures: the bytes the broker queued for each (its socket's bytesWritten, in
 * GET /api/v1/clients) against the bytes they sent, and the broker's RSS.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import kafkajsPkg from 'kafkajs';
import { ApiVersionsApi, FetchApi, MetadataApi, encodeRequest } from '../../src/protocols/kafka/codec/index.js';
import { RawClient, metadataRequest } from '../protocols/kafka/helpers.js';
import { FlowmqProcess, eventually } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const MiB = 1024 * 1024;
const TOPICS = 200;
const STRANGERS = 4;
const SENT_EACH = 256 * 1024;
/**
 * Per connection: at most 256 answers (~3 MiB of Metadata here) beyond what loopback's kernel buffers take (~4 MiB).
 * Before: every request of a 64 KiB read was answered (13.4 MiB each here).
 */
const QUEUED_MAX = 10 * MiB;
/** RSS also holds the garbage of encoding the answers, collected later: a loose bound (before: +217 MiB). */
const RSS_GROWTH_MAX = 128 * MiB;

function rss(pid: number): number {
  return Number(/VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
}

interface ClientView {
  protocol: string;
  remotePort: number | null;
  bytesIn: number;
  bytesOut: number;
}

/** Metadata (every topic), ApiVersions and Fetch requests, repeated to `bytes`. */
function pipeline(bytes: number): Buffer {
  const h = (apiVersion: number, correlationId: number) => ({ apiVersion, correlationId, clientId: 'unread' });
  const parts: Buffer[] = [];
  let n = 0;
  let at = 0;
  while (at < bytes) {
    const one = [
      encodeRequest(MetadataApi, h(1, ++n), metadataRequest(null, false), { sizePrefix: true }),
      encodeRequest(MetadataApi, h(1, ++n), metadataRequest(null, false), { sizePrefix: true }),
      encodeRequest(ApiVersionsApi, h(3, ++n), { clientSoftwareName: 'unread', clientSoftwareVersion: '1' }, { sizePrefix: true }),
      encodeRequest(
        FetchApi,
        h(4, ++n),
        {
          replicaId: -1,
          maxWaitMs: 0,
          minBytes: 0,
          maxBytes: MiB,
          isolationLevel: 0,
          sessionId: 0,
          sessionEpoch: -1,
          topics: [
            {
              topic: 'unread.data',
              partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: MiB }],
            },
          ],
          forgottenTopics: [],
          rackId: '',
          clusterId: null,
        },
        { sizePrefix: true },
      ),
    ];
    for (const b of one) {
      parts.push(b);
      at += b.length;
    }
  }
  return Buffer.concat(parts);
}

describe('e2e: Kafka clients that never read their responses', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({
      args: ['--protocols', 'kafka', '--kafka-request-receive-timeout', '5s', '--kafka-group-initial-rebalance-delay', '0s'],
    });
    // 200 topics (auto-created by a Metadata request that reads its answer), and 4 KiB in the one Fetch reads.
    const c = await RawClient.connect(broker.ports.kafka);
    const names = Array.from({ length: TOPICS }, (_, i) => `unread.topic-with-a-longish-name-${i}`);
    await c.call(MetadataApi, 4, metadataRequest([...names, 'unread.data'], true));
    c.close();
    const p = new Kafka({ clientId: 'unread-setup', brokers: [broker.kafka], logLevel: logLevel.NOTHING }).producer();
    await p.connect();
    await p.send({ topic: 'unread.data', messages: [{ value: Buffer.alloc(4096, 7) }] });
    await p.disconnect();
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  test('they pin a bounded number of responses, a normal client goes on, and they are closed', async () => {
    const pid = broker.proc.pid!;
    const start = rss(pid);
    const requests = pipeline(SENT_EACH);
    const strangers: Socket[] = [];
    for (let i = 0; i < STRANGERS; i++) {
      const s = await new Promise<Socket>((resolve, reject) => {
        const sock = connect(broker.ports.kafka, '127.0.0.1', () => resolve(sock));
        sock.once('error', reject);
      });
      s.on('error', () => undefined);
      // Never read: no 'data' listener, and reading stopped, so the kernel's receive window fills and stays full.
      s.pause();
      s.write(requests);
      strangers.push(s);
    }
    const ports = new Set(strangers.map((s) => s.localPort));

    // A normal client meanwhile: a marker produced (the figures are taken once it is acknowledged) and consumed.
    const k = new Kafka({ clientId: 'unread-normal', brokers: [broker.kafka], logLevel: logLevel.NOTHING, retry: { retries: 2 }, requestTimeout: 10_000 });
    const began = Date.now();
    const producer = k.producer();
    await producer.connect();
    await producer.send({ topic: 'unread.marker', messages: [{ value: 'marker' }] });
    const producedMs = Date.now() - began;
    await producer.disconnect();

    // What the broker took from them and queued for them while they were stuck.
    const clients = (await broker.api<{ items: ClientView[] }>('GET', '/api/v1/clients?protocol=kafka&limit=1000')).items.filter((c) =>
      ports.has(c.remotePort ?? -1),
    );
    const grown = rss(pid) - start;

    const consumer = k.consumer({ groupId: 'unread-normal', maxWaitTimeInMs: 100 });
    await consumer.connect();
    await consumer.subscribe({ topic: 'unread.marker', fromBeginning: true });
    const marker = await new Promise<string>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('marker not consumed within 30 s')), 30_000);
      void consumer.run({
        eachMessage: async ({ message }) => {
          clearTimeout(t);
          resolve(String(message.value));
        },
      });
    });
    await consumer.disconnect();
    const normalMs = Date.now() - began;
    assert.equal(marker, 'marker');

    const mib = (n: number) => `${(n / MiB).toFixed(1)} MiB`;
    const figures = `${STRANGERS} clients sent ${mib(SENT_EACH)} each; broker read ${clients.map((c) => mib(c.bytesIn)).join(', ')}, queued ${clients.map((c) => mib(c.bytesOut)).join(', ')}; RSS +${mib(grown)}; normal client's marker produced in ${producedMs} ms, consumed after ${normalMs} ms`;
    console.log(figures);
    assert.equal(clients.length, STRANGERS, `all still connected at this point: ${figures}`);
    for (const c of clients) assert.ok(c.bytesOut <= QUEUED_MAX, `at most ${mib(QUEUED_MAX)} queued per client: ${figures}`);
    assert.ok(grown <= RSS_GROWTH_MAX, `RSS grew at most ${mib(RSS_GROWTH_MAX)}: ${figures}`);

    // No progress for 5 s: closed (the sweep runs every second).
    const closing = Date.now();
    await eventually(
      async () =>
        (await broker.api<{ items: ClientView[] }>('GET', '/api/v1/clients?protocol=kafka&limit=1000')).items.every((c) => !ports.has(c.remotePort ?? -1)),
      15_000,
      'the stuck connections to be closed',
    );
    console.log(`closed ${Date.now() - closing} ms after the figures were taken`);
    assert.ok(broker.logs.some((l) => l.msg === 'client does not read its responses: closing connection'));
    for (const s of strangers) s.destroy();
  });
});
