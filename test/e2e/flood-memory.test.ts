// test-runner: alone (scripts/test.mjs): measures the broker process's memory while clients load it, without a second file competing for the two cores
/**
 * A real `flowmq start` gives back what a flood of connections leaves behind: bin/flowmq runs Node.js with
 * `--expose-gc`, and once more than a thousand MQTT connections have been opened and closed (with no more still
 * open) the broker runs one full collection (src/control/memory.ts), visible under `process.floodCollector` in
 * GET /api/v1/broker with the heap it found and left. Without the launcher's flag or the collector, the old
 * generation (started at 128 MiB) would keep the flood's garbage and this waits in vain.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { connect, type Socket } from 'node:net';
import { FlowmqProcess, eventually } from './harness.js';

interface BrokerInfo {
  process: {
    heapUsed: number;
    floodCollector: { enabled: boolean; collections: number; last: { closed: number; heapUsedBefore: number; heapUsedAfter: number } | null };
  };
  listeners: Record<string, { connections: number }>;
}

/** CONNECT (3.1.1, clean session, keep-alive 0), waits for CONNACK, returns the open socket. */
function mqttConnect(port: number, clientId: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const id = Buffer.from(clientId);
    const body = Buffer.concat([Buffer.from([0, 4]), Buffer.from('MQTT'), Buffer.from([4, 0x02, 0, 0, 0, id.length]), id]);
    const s = connect(port, '127.0.0.1', () => s.write(Buffer.concat([Buffer.from([0x10, body.length]), body])));
    s.once('error', reject);
    s.once('data', (d: Buffer) => {
      s.off('error', reject);
      s.on('error', () => undefined);
      if (d[0] === 0x20 && d[3] === 0) resolve(s);
      else reject(new Error(`CONNACK ${d.toString('hex')}`));
    });
  });
}

function destroy(s: Socket): Promise<void> {
  return new Promise((resolve) => {
    if (s.closed) return resolve();
    s.once('close', () => resolve());
    s.destroy();
  });
}

describe('memory after a flood of connections (bin/flowmq)', () => {
  let b: FlowmqProcess;
  before(async () => {
    b = await FlowmqProcess.start();
  });
  after(async () => {
    await b?.stop();
  });

  it('runs one full collection once the flood has gone, and the heap shrinks', async () => {
    const start = await b.api<BrokerInfo>('GET', '/api/v1/broker');
    assert.equal(start.process.floodCollector.enabled, true, 'bin/flowmq starts Node.js with --expose-gc');
    assert.equal(start.process.floodCollector.collections, 0);
    // 1,100 connections in waves of 275, so that the test needs no more than a default descriptor limit.
    for (let wave = 0; wave < 4; wave++) {
      const sockets: Socket[] = [];
      for (let i = 0; i < 275; i++) sockets.push(await mqttConnect(b.ports.mqtt, `flood-${wave}-${i}`));
      await Promise.all(sockets.map(destroy));
    }
    let info = start;
    await eventually(
      async () => {
        info = await b.api<BrokerInfo>('GET', '/api/v1/broker');
        return info.process.floodCollector.collections >= 1;
      },
      40_000,
      'a collection after the flood (the broker looks every 10 s)',
    );
    const last = info.process.floodCollector.last!;
    assert.equal(info.listeners.mqtt.connections, 0);
    assert.ok(last.closed >= 1000, `collected after ${last.closed} closed connections`);
    assert.ok(last.heapUsedAfter < last.heapUsedBefore, `heap ${last.heapUsedBefore} → ${last.heapUsedAfter} bytes`);
  });
});
