/**
 * `--advertised-listeners kafka=host:port,kafka-tls=host:port` on a single broker (a real `flowmq start`): what
 * Metadata, FindCoordinator and DescribeCluster tell each listener's clients, for a broker behind NAT or a proxy.
 * A TCP proxy stands for the NAT: clients bootstrap on the broker's own port, are told the proxy's address, and
 * produce and consume through it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { rmSync } from 'node:fs';
import kafkajsPkg from 'kafkajs';
import { FlowmqProcess, makeTestCert, run, type TestCert } from './harness.js';
import { DescribeClusterApi, FindCoordinatorApi, MetadataApi } from '../../src/protocols/kafka/codec/index.js';
import { RawClient, metadataRequest } from '../protocols/kafka/helpers.js';

const { Kafka, logLevel } = kafkajsPkg;

/** A TCP proxy to the broker's Kafka port (set once the broker is up); counts the connections it carried. */
class Proxy {
  target = 0;
  connections = 0;
  private readonly sockets = new Set<Socket>();
  private constructor(readonly server: Server) {}

  static async start(): Promise<Proxy> {
    let self: Proxy | null = null;
    const server = createServer((down) => {
      const p = self!;
      p.connections++;
      const up = connect(p.target, '127.0.0.1');
      for (const s of [down, up]) {
        p.sockets.add(s);
        s.on('error', () => undefined);
        s.on('close', () => p.sockets.delete(s));
      }
      down.pipe(up).pipe(down);
    });
    self = new Proxy(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return self;
  }

  get port(): number {
    const a = this.server.address();
    return typeof a === 'object' && a !== null ? a.port : 0;
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

describe('kafka --advertised-listeners on a single broker', () => {
  let broker: FlowmqProcess;
  let proxy: Proxy;
  let tls: TestCert;

  before(async () => {
    proxy = await Proxy.start();
    tls = makeTestCert('flowmq-adv-');
    broker = await FlowmqProcess.start({
      args: [
        '--advertised-listeners',
        `kafka=127.0.0.1:${proxy.port},kafka-tls=localhost:19093`,
        '--kafka-group-initial-rebalance-delay',
        '0',
        '--kafka-tls-port',
        '0',
        '--kafka-tls-cert',
        tls.certPath,
        '--kafka-tls-key',
        tls.keyPath,
      ],
    });
    proxy.target = broker.ports.kafka;
  });
  after(async () => {
    await proxy?.close();
    await broker?.stop();
    broker?.cleanup();
    if (tls) rmSync(tls.dir, { recursive: true, force: true });
  });

  it('tells plaintext clients the advertised address in Metadata, FindCoordinator and DescribeCluster', async () => {
    const c = await RawClient.connect(broker.ports.kafka);
    try {
      const md = await c.call(MetadataApi, 12, metadataRequest(null));
      assert.deepEqual(
        md.brokers.map((b) => [b.nodeId, b.host, b.port]),
        [[0, '127.0.0.1', proxy.port]],
      );
      const fc = await c.call(FindCoordinatorApi, 4, { key: '', keyType: 0, coordinatorKeys: ['g'] });
      assert.deepEqual(
        fc.coordinators.map((x) => [x.host, x.port]),
        [['127.0.0.1', proxy.port]],
      );
      const dc = await c.call(DescribeClusterApi, 1, { includeClusterAuthorizedOperations: false, endpointType: 1 });
      assert.deepEqual(
        dc.brokers.map((b) => [b.host, b.port]),
        [['127.0.0.1', proxy.port]],
      );
    } finally {
      c.close();
    }
  });

  it('tells TLS clients the kafka-tls address (kcat over SSL)', async () => {
    const ssl = ['-X', 'security.protocol=SSL', '-X', `ssl.ca.location=${tls.certPath}`];
    const md = await run('kcat', ['-b', `127.0.0.1:${broker.ports['kafka-tls']}`, '-L', '-J', ...ssl], { timeoutMs: 15_000 });
    assert.equal(md.code, 0, md.stderr);
    assert.deepEqual(
      (JSON.parse(md.stdout) as { brokers: Array<{ name: string }> }).brokers.map((b) => b.name),
      ['localhost:19093'],
    );
  });

  it('KafkaJS bootstraps on the broker, then produces and consumes through the advertised proxy', async () => {
    const kafka = new Kafka({ clientId: 'adv', brokers: [broker.kafka], logLevel: logLevel.NOTHING, retry: { retries: 2 } });
    const before = proxy.connections;
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic: 'adv.t', messages: [{ value: 'through the proxy' }] });
    await producer.disconnect();
    const consumer = kafka.consumer({ groupId: 'adv-g' });
    await consumer.connect();
    await consumer.subscribe({ topic: 'adv.t', fromBeginning: true });
    const got = await new Promise<string>((resolve) => {
      void consumer.run({ eachMessage: async ({ message }) => resolve(message.value?.toString() ?? '') });
    });
    await consumer.disconnect();
    assert.equal(got, 'through the proxy');
    assert.ok(proxy.connections > before, 'the clients connected to the advertised address');
  });
});
