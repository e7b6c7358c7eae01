/**
 * Inbound publishes that storage could not take (a full disk, the free-space reserve, a failed write): v5 gets a
 * negative PUBACK / PUBREC and keeps its connection, 3.1.1 is disconnected, and neither is logged as a protocol error.
 * Storage is in memory here, failing on demand; the real thing is in test/e2e/full-disk.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FlowError, type AppendResult } from '../../../src/core/index.js';
import { encodePacket, encodePublishFrame, type MqttPacket } from '../../../src/protocols/mqtt/codec/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, connectPacket, startBroker, until, type TestBroker } from './helpers.js';

/** Appends that are refused at once ('refuse'), or taken and then fail to become durable ('fail'), or work. */
class FullDisk extends MemoryStreams {
  mode: 'ok' | 'refuse' | 'fail' | 'hold' = 'ok';
  code: 'STORAGE_FULL' | 'STORAGE_ERROR' | 'FENCED' = 'STORAGE_FULL';
  /** Fails the writes held ('hold'). */
  failHeld: Array<() => void> = [];
  override append(stream: string, partition: number, batch: Buffer): AppendResult {
    if (this.mode === 'refuse') throw new FlowError(this.code, 'below the free-space reserve');
    if (this.mode === 'hold') {
      const durable = new Promise<void>((_, reject) => this.failHeld.push(() => reject(new FlowError(this.code, 'WAL write failed: ENOSPC'))));
      durable.catch(() => undefined);
      return { baseOffset: 0, durable };
    }
    if (this.mode === 'fail') {
      const durable = Promise.reject(new FlowError(this.code, 'WAL write failed: ENOSPC'));
      durable.catch(() => undefined);
      return { baseOffset: 0, durable };
    }
    return super.append(stream, partition, batch);
  }
}

async function raw5(b: TestBroker, clientId: string): Promise<RawClient> {
  const c = await RawClient.open(b.port);
  c.level = 5;
  c.send(encodePacket({ ...connectPacket(clientId), protocolLevel: 5, properties: {} }, 5));
  await c.next('connack');
  return c;
}

const publish5 = (c: RawClient, qos: 1 | 2, id: number, dup = false) => c.send(encodePublishFrame('disk/x', Buffer.from(`m${id}`), qos, false, dup, id, {}));

function noProtocolError(b: TestBroker): void {
  assert.ok(!b.logs.some((l) => /protocol error/.test(l.msg)), 'not logged as a protocol error');
}

describe('mqtt: publishes storage cannot take', () => {
  test('v5: PUBACK 0x97 for a full disk, 0x80 for an I/O error, refused at once or after the write failed; the connection stays', async () => {
    const disk = new FullDisk();
    // A window of 2: failure PUBACKs must give the client's publishes back to it, or the third would exceed it.
    const b = await startBroker({ maxInflight: 2 }, disk);
    try {
      await b.engine.createStream({ name: 'disk', partitions: 1, bindings: ['disk/#'] });
      const c = await raw5(b, 'v5');
      const expect = async (mode: FullDisk['mode'], code: FullDisk['code'], id: number, reason: number) => {
        disk.mode = mode;
        disk.code = code;
        publish5(c, 1, id);
        const ack = (await c.next('puback')) as Extract<MqttPacket, { type: 'puback' }>;
        assert.deepEqual([ack.packetId, ack.reasonCode ?? 0], [id, reason], `${mode} ${code}`);
      };
      await expect('refuse', 'STORAGE_FULL', 1, 0x97);
      await expect('fail', 'STORAGE_FULL', 2, 0x97);
      await expect('fail', 'STORAGE_FULL', 3, 0x97);
      await expect('fail', 'STORAGE_ERROR', 4, 0x80);
      await expect('refuse', 'STORAGE_ERROR', 5, 0x80);
      // A stream partition another broker took (a later epoch): refused like an I/O error, 0x80.
      await expect('refuse', 'FENCED', 7, 0x80);
      await expect('fail', 'FENCED', 8, 0x80);
      await expect('ok', 'STORAGE_FULL', 6, 0);
      assert.equal(b.engine.offsets('disk', 0).highWatermark, 1, 'only the accepted one is stored');
      assert.equal(c.isClosed, false);
      noProtocolError(b);
      c.destroy();
    } finally {
      await b.close();
    }
  });

  test('v5 QoS 2: PUBREC 0x97 ends the exchange, and the same packet id sent again is stored, not taken for a duplicate', async () => {
    const disk = new FullDisk();
    const b = await startBroker({}, disk);
    try {
      await b.engine.createStream({ name: 'disk', partitions: 1, bindings: ['disk/#'] });
      const c = await raw5(b, 'v5q2');
      disk.mode = 'fail';
      publish5(c, 2, 7);
      const rec = (await c.next('pubrec')) as Extract<MqttPacket, { type: 'pubrec' }>;
      assert.equal(rec.reasonCode, 0x97);
      disk.mode = 'ok';
      publish5(c, 2, 7, true);
      const again = (await c.next('pubrec')) as Extract<MqttPacket, { type: 'pubrec' }>;
      assert.equal(again.reasonCode ?? 0, 0);
      assert.equal(b.engine.offsets('disk', 0).highWatermark, 1, 'stored once it could be');
      c.destroy();
    } finally {
      await b.close();
    }
  });

  test('3.1.1: the connection is closed (logged as storage, not as a protocol error); QoS 2 sent again after reconnecting is stored', async () => {
    const disk = new FullDisk();
    const b = await startBroker({}, disk);
    try {
      await b.engine.createStream({ name: 'disk', partitions: 1, bindings: ['disk/#'] });
      const c = await RawClient.connect(b.port, 'v4', { cleanSession: false });
      disk.mode = 'fail';
      c.send(encodePublishFrame('disk/x', Buffer.from('q2'), 2, false, false, 9));
      await c.waitClosed();
      assert.equal(c.packets.length, 0, 'no PUBREC for a message that was not stored');
      await until(() => b.logs.some((l) => l.msg.startsWith('mqtt publish could not be stored') && l.clientId === 'v4'), 'the storage log line');
      noProtocolError(b);
      // The client resends on its next connection [MQTT-4.4.0-1], with DUP.
      disk.mode = 'ok';
      const c2 = await RawClient.connect(b.port, 'v4', { cleanSession: false });
      c2.send(encodePublishFrame('disk/x', Buffer.from('q2'), 2, false, true, 9));
      await c2.next('pubrec');
      assert.equal(b.engine.offsets('disk', 0).highWatermark, 1, 'stored on the second try');
      // A QoS 2 write that fails after its connection went away: the session forgets the packet id all the same.
      disk.mode = 'hold';
      c2.send(encodePublishFrame('disk/x', Buffer.from('q2b'), 2, false, false, 11));
      await until(() => disk.failHeld.length === 1, 'the held write');
      c2.destroy();
      await c2.closed;
      for (const f of disk.failHeld.splice(0)) f();
      disk.mode = 'ok';
      const c3 = await RawClient.connect(b.port, 'v4', { cleanSession: false });
      c3.send(encodePublishFrame('disk/x', Buffer.from('q2b'), 2, false, true, 11));
      await c3.next('pubrec');
      assert.equal(b.engine.offsets('disk', 0).highWatermark, 2, 'stored when sent again');
      // 3.1.1 with a refusal at once (the reserve): closed as well.
      disk.mode = 'refuse';
      c3.send(encodePublishFrame('disk/x', Buffer.from('q1'), 1, false, false, 10));
      await c3.waitClosed();
      noProtocolError(b);
      // And for a stream partition another broker took (FENCED), refused at once or after the write.
      disk.code = 'FENCED';
      for (const mode of ['refuse', 'fail'] as const) {
        disk.mode = mode;
        const c4 = await RawClient.connect(b.port, 'v4', { cleanSession: false });
        c4.send(encodePublishFrame('disk/x', Buffer.from('q1'), 1, false, false, 12));
        await c4.waitClosed();
        assert.equal(c4.packets.length, 0, `no PUBACK for a message that was not stored (${mode})`);
      }
      noProtocolError(b);
    } finally {
      await b.close();
    }
  });
});
