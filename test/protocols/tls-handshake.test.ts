/**
 * A stranger that opens a TLS listener's port and never finishes the handshake is closed after the handshake
 * timeout (Node's own default would keep it for 120 s), on the MQTT and the Kafka TLS listeners.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { readFileSync, rmSync } from 'node:fs';
import { pino } from 'pino';
import { Engine } from '../../src/core/index.js';
import { createMqttHub, startMqttTlsListener, type MqttHub } from '../../src/protocols/mqtt/index.js';
import { startKafkaListener } from '../../src/protocols/kafka/index.js';
import type { ProtocolListener } from '../../src/protocols/types.js';
import { MemoryStreams } from '../helpers/memory-storage.js';
import { makeTestCert, type TestCert } from '../e2e/harness.js';

/** Opens a TCP connection, sends a few bytes that start no TLS record, and resolves when the server closes it. */
function silentStranger(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.write(Buffer.from([0x16, 0x03])));
    s.on('error', () => undefined);
    s.on('close', () => resolve());
    setTimeout(() => reject(new Error('the half-started handshake was not closed')), 30_000).unref();
  });
}

describe('TLS listeners: unfinished handshakes time out', () => {
  let cert: TestCert;
  const listeners: ProtocolListener[] = [];
  let hub: MqttHub;
  before(async () => {
    cert = makeTestCert();
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const ctx = { engine, logger: pino({ level: 'silent' }), brokerId: 1 };
    hub = await createMqttHub(ctx);
    const tlsOpts = { cert: readFileSync(cert.certPath), key: readFileSync(cert.keyPath), handshakeTimeoutMs: 300 };
    listeners.push(await startMqttTlsListener(ctx, { host: '127.0.0.1', port: 0, ...tlsOpts }, hub));
    listeners.push(await startKafkaListener(ctx, { host: '127.0.0.1', port: 0, tls: tlsOpts }));
  });
  after(async () => {
    await Promise.all(listeners.map((l) => l.close()));
    hub.close();
    rmSync(cert.dir, { recursive: true, force: true });
  });

  it('closes a stranger that never finishes the handshake, on MQTT and Kafka', async () => {
    await Promise.all(listeners.map((l) => silentStranger(l.address().port)));
    assert.deepEqual(
      listeners.map((l) => l.connections()),
      [0, 0],
    );
  });
});
