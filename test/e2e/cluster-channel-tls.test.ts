/**
 * The brokers' channel encrypted, end to end (issue 30): two `bin/flowmq start --cluster` brokers, broker 2's
 * channel advertised at a TCP relay that records every byte. An MQTT subscriber on broker 2 receives what an MQTT
 * client publishes on broker 1 (live forwarding: broker 1 dials broker 2, through the relay), with a distinctive
 * payload. With `--cluster-tls off` the payload and the topic are in the relay's bytes; with psk (the default) and
 * cert they are not, while the message still arrives.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import mqtt from 'mqtt';
import { TestCluster } from '../helpers/cluster.js';
import { eventually, freePort } from './harness.js';

/** A relay to 127.0.0.1:`to` recording the bytes of both directions. */
async function relay(to: number): Promise<{ port: number; bytes(): Buffer; close(): Promise<void> }> {
  const seen: Buffer[] = [];
  const sockets: Socket[] = [];
  const server: Server = createServer((a) => {
    const b = createConnection({ host: '127.0.0.1', port: to });
    sockets.push(a, b);
    for (const [from, into] of [
      [a, b],
      [b, a],
    ] as const) {
      from.on('data', (d: Buffer) => {
        seen.push(Buffer.from(d));
        into.write(d);
      });
      from.on('end', () => into.end());
      from.on('error', () => into.destroy());
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    bytes: () => Buffer.concat(seen),
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

describe('cluster channel TLS on the wire', () => {
  for (const mode of ['off', 'psk', 'cert'] as const) {
    it(
      `--cluster-tls ${mode}: a message forwarded between brokers is ${mode === 'off' ? 'readable' : 'not readable'} on the wire`,
      { timeout: 180_000 },
      async () => {
        const c = await TestCluster.start({ brokers: 1, haproxy: false, channelTls: mode, args: ['--allow-anonymous', 'true', '--default-policy', 'allow'] });
        const own = await freePort();
        const r = await relay(own);
        const clients: mqtt.MqttClient[] = [];
        try {
          await c.startBroker({ id: 2, proxy: false, args: ['--cluster-port', String(own), '--advertised-listeners', `cluster=127.0.0.1:${r.port}`] });
          await c.waitFor((s) => s.brokers.filter((b) => b.alive).length === 2, 30_000, 'two live brokers');
          const sub = await mqtt.connectAsync(c.broker(2).mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
          const pub = await mqtt.connectAsync(c.broker(1).mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
          clients.push(sub, pub);
          const got: string[] = [];
          sub.on('message', (_t, p) => got.push(p.toString()));
          await sub.subscribeAsync('tlsproof/#', { qos: 0 });
          // Broker 1 learns broker 2's interest asynchronously: warm-up messages until one arrives.
          let i = 0;
          await eventually(
            async () => {
              await pub.publishAsync('tlsproof/warm', `warm-${i++}`, { qos: 1 });
              return got.length > 0;
            },
            30_000,
            'a warm-up message across brokers',
          );
          const marker = `SECRET-PAYLOAD-${mode}-6c0ffee7b1d2`;
          await pub.publishAsync('tlsproof/marker', marker, { qos: 1 });
          await eventually(() => got.includes(marker), 15_000, 'the marker on broker 2');
          const wire = r.bytes();
          assert.ok(wire.length > 200, `the relay carried the channel (${wire.length} bytes)`);
          if (mode === 'off') {
            assert.ok(wire.includes(marker), 'plaintext: the payload is on the wire');
            assert.ok(wire.includes('tlsproof/marker'), 'plaintext: the topic is on the wire');
          } else {
            assert.ok(!wire.includes(marker), 'TLS: the payload is not on the wire');
            assert.ok(!wire.includes('tlsproof'), 'TLS: no topic on the wire');
            assert.ok(!wire.includes('live.'), 'TLS: no channel method name on the wire');
            assert.equal(wire[0], 0x16, 'TLS: the connection starts with a TLS handshake record');
          }
        } finally {
          await Promise.all(clients.map((m) => m.endAsync().catch(() => undefined)));
          await c.close();
          await r.close();
        }
      },
    );
  }
});
