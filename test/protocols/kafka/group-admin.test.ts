/**
 * KafkaGroupAdmin (RunningProtocol.groups of Kafka): a real KafkaJS consumer group listed and described with its
 * member, assignment, committed offsets and lag; reset refused while it has members, then to earliest, an offset
 * and latest; deletion.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import kafkajsPkg from 'kafkajs';
import { Engine, encodeBatch, isFlowError } from '../../../src/core/index.js';
import { KafkaGroupAdmin, createKafkaAdapter, decodeAssignment, startKafkaListener, type KafkaAdapter } from '../../../src/protocols/kafka/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { captureLogger } from './helpers.js';

const { Kafka, logLevel } = kafkajsPkg;

const until = async (cond: () => boolean | Promise<boolean>, what: string) => {
  const deadline = Date.now() + 20_000;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

describe('kafka consumer groups for the admin API', () => {
  let engine: Engine;
  let adapter: KafkaAdapter;
  let listener: ProtocolListener;
  let admin: KafkaGroupAdmin;

  before(async () => {
    const m = new MemoryStreams();
    engine = new Engine(m, m);
    await engine.load();
    const ctx = { engine, logger: captureLogger().logger, brokerId: 0 };
    adapter = createKafkaAdapter(ctx, { groupInitialRebalanceDelayMs: 0 });
    listener = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0 }, {}, adapter);
    admin = new KafkaGroupAdmin(engine, adapter.groups);
    await engine.createStream({ name: 'ga', partitions: 2 });
    for (let i = 0; i < 5; i++)
      await engine.produce('ga', i % 2, encodeBatch([{ key: null, value: Buffer.from(`m${i}`), headers: [], timestamp: 1000 + i }])).durable;
  });
  after(async () => {
    await listener.close();
  });

  it('lists and describes a live group, refuses to reset or delete it, then resets and deletes it once empty', async () => {
    const k = new Kafka({ clientId: 'ga-client', brokers: [`127.0.0.1:${listener.address().port}`], logLevel: logLevel.NOTHING });
    const c = k.consumer({ groupId: 'ga-group', heartbeatInterval: 500 });
    let seen = 0;
    await c.connect();
    await c.subscribe({ topics: ['ga'], fromBeginning: true });
    await c.run({ eachMessage: async () => void seen++ });
    await until(
      async () => seen === 5 && ((await admin.describe('ga-group'))?.offsets.reduce((n, o) => n + (o.committed ?? 0), 0) ?? 0) === 5,
      'consumed and committed',
    );

    const list = await admin.list();
    assert.deepEqual(
      list.find((g) => g.name === 'ga-group'),
      { name: 'ga-group', protocol: 'kafka', state: 'Stable', members: 1, lag: 0 },
    );
    const d = (await admin.describe('ga-group'))!;
    assert.equal(d.memberDetails.length, 1);
    assert.equal(d.memberDetails[0].clientId, 'ga-client');
    assert.deepEqual(
      [...d.memberDetails[0].assignments].sort((a, b) => a.partition - b.partition),
      [
        { stream: 'ga', partition: 0 },
        { stream: 'ga', partition: 1 },
      ],
    );
    assert.deepEqual(
      d.offsets.map((o) => [o.partition, o.committed, o.end, o.lag]),
      [
        [0, 3, 3, 0],
        [1, 2, 2, 0],
      ],
    );

    await assert.rejects(
      admin.resetOffsets('ga-group', 'ga', { to: 'earliest' }),
      (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT') && /active members/.test((e as Error).message),
    );
    await assert.rejects(admin.delete('ga-group'), (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'));
    await c.disconnect();
    await until(async () => (await admin.describe('ga-group'))?.members === 0, 'the member left');

    const steps: Array<[number, number]> = [];
    const reset = await admin.resetOffsets('ga-group', 'ga', { to: 'earliest' }, (done, total) => steps.push([done, total]));
    assert.deepEqual(steps, [
      [1, 2],
      [2, 2],
    ]);
    assert.deepEqual(
      reset.offsets.map((o) => [o.partition, o.committed, o.lag]),
      [
        [0, 0, 3],
        [1, 0, 2],
      ],
    );
    assert.equal(reset.lag, 5);
    assert.equal((await admin.list()).find((g) => g.name === 'ga-group')?.lag, 5);
    // An offset past the end is moved to the end, as kafka-consumer-groups does.
    const byOffset = await admin.resetOffsets('ga-group', 'ga', { to: 'offset', offset: 2 });
    assert.deepEqual(
      byOffset.offsets.map((o) => o.committed),
      [2, 2],
    );
    const byTime = await admin.resetOffsets('ga-group', 'ga', { to: 'timestamp', timestamp: 1002 });
    assert.deepEqual(
      byTime.offsets.map((o) => o.committed),
      [1, 1],
    );
    assert.deepEqual(
      (await admin.resetOffsets('ga-group', 'ga', { to: 'latest' })).offsets.map((o) => o.lag),
      [0, 0],
    );
    await assert.rejects(admin.resetOffsets('ga-group', 'nope', { to: 'latest' }), (e: unknown) => isFlowError(e, 'NOT_FOUND'));

    await admin.delete('ga-group');
    assert.equal(await admin.describe('ga-group'), null);
    await assert.rejects(admin.delete('ga-group'), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
  });

  it('decodes consumer-protocol assignments and ignores anything else', () => {
    const b = Buffer.alloc(2 + 4 + 2 + 1 + 4 + 8 + 4);
    let p = b.writeInt16BE(0, 0);
    p = b.writeInt32BE(1, p);
    p = b.writeInt16BE(1, p);
    p += b.write('t', p);
    p = b.writeInt32BE(2, p);
    p = b.writeInt32BE(0, p);
    p = b.writeInt32BE(3, p);
    b.writeInt32BE(-1, p);
    assert.deepEqual(decodeAssignment(b), [
      { stream: 't', partition: 0 },
      { stream: 't', partition: 3 },
    ]);
    assert.deepEqual(decodeAssignment(Buffer.from([1, 2, 3])), []);
    assert.deepEqual(decodeAssignment(Buffer.from([0, 0, 0, 0, 0, 9, 0, 1])), []);
  });
});
