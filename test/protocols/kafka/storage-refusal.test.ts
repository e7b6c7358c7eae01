/**
 * What Kafka clients are told when storage cannot take their data (a full disk, the free-space reserve, a failed
 * write): Produce gets KAFKA_STORAGE_ERROR (retriable), an OffsetCommit the metastore refused a coordinator error,
 * and the lines are logged as a storage condition. Storage is in memory here, failing on demand; the real thing is in
 * test/e2e/full-disk.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { encodeBatch, Engine, FlowError, MemoryOffsetStore, type AppendResult, type OffsetCommit } from '../../../src/core/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { startKafkaListener } from '../../../src/protocols/kafka/index.js';
import { KafkaErrorCode as E, OffsetCommitApi, ProduceApi } from '../../../src/protocols/kafka/codec/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger, type CapturedLog } from './helpers.js';

class FullDisk extends MemoryStreams {
  mode: 'ok' | 'refuse' | 'fail' | 'fenced' | 'fencedLater' = 'ok';
  override append(stream: string, partition: number, batch: Buffer): AppendResult {
    if (this.mode === 'refuse') throw new FlowError('STORAGE_FULL', 'below the free-space reserve');
    if (this.mode === 'fenced') throw new FlowError('FENCED', 'partition owned by a later epoch');
    if (this.mode === 'fencedLater') {
      const durable = Promise.reject(new FlowError('FENCED', 'WAL: an append of an older epoch is refused'));
      durable.catch(() => undefined);
      return { baseOffset: 0, durable };
    }
    if (this.mode === 'fail') {
      const durable = Promise.reject(new FlowError('STORAGE_ERROR', 'WAL write failed: EIO'));
      durable.catch(() => undefined);
      return { baseOffset: 0, durable };
    }
    return super.append(stream, partition, batch);
  }
}

class FullOffsets extends MemoryOffsetStore {
  full = false;
  override async commitOffsets(group: string, offsets: OffsetCommit[]): Promise<void> {
    if (this.full) throw new FlowError('STORAGE_FULL', 'commitOffsets: database or disk is full');
    return super.commitOffsets(group, offsets);
  }
}

describe('kafka: storage that cannot take the data', () => {
  const offsets = new FullOffsets();
  const disk = new FullDisk({ offsets });
  let listener: ProtocolListener;
  let log: CapturedLog;
  let c: RawClient;
  before(async () => {
    const engine = new Engine(disk, disk);
    await engine.createStream({ name: 'full', partitions: 1 });
    log = captureLogger();
    listener = await startKafkaListener({ engine, logger: log.logger, brokerId: 1 }, { host: '127.0.0.1', port: 0 });
    c = await RawClient.connect(listener.address().port);
  });
  after(async () => {
    c.close();
    await listener.close();
  });

  const produce = async () => {
    const res = await c.call(ProduceApi, 7, {
      transactionalId: null,
      acks: -1,
      timeoutMs: 5000,
      topics: [
        { name: 'full', partitions: [{ index: 0, records: encodeBatch([{ key: null, value: Buffer.from('v'), headers: [], timestamp: Date.now() }]) }] },
      ],
    });
    return res.topics[0].partitions[0].errorCode;
  };

  it('answers Produce with KAFKA_STORAGE_ERROR, refused at once or after a failed write, and takes it once storage does', async () => {
    disk.mode = 'refuse';
    assert.equal(await produce(), E.KAFKA_STORAGE_ERROR);
    disk.mode = 'fail';
    assert.equal(await produce(), E.KAFKA_STORAGE_ERROR);
    disk.mode = 'ok';
    assert.equal(await produce(), E.NONE);
    assert.ok(log.entries('produce refused: storage cannot take it now').length > 0);
    assert.ok(log.entries('produce failed: storage write failed').length > 0);
  });

  it('answers Produce to a partition another broker took (FENCED) with NOT_LEADER_OR_FOLLOWER, so the client refreshes metadata', async () => {
    disk.mode = 'fenced';
    assert.equal(await produce(), E.NOT_LEADER_OR_FOLLOWER);
    disk.mode = 'fencedLater';
    assert.equal(await produce(), E.NOT_LEADER_OR_FOLLOWER);
    disk.mode = 'ok';
    assert.equal(await produce(), E.NONE);
  });

  it('answers an OffsetCommit the metastore could not store with COORDINATOR_NOT_AVAILABLE (retriable)', async () => {
    const commit = () =>
      c.call(OffsetCommitApi, 8, {
        groupId: 'simple',
        generationId: -1,
        memberId: '',
        groupInstanceId: null,
        retentionTimeMs: -1,
        topics: [
          { name: 'full', partitions: [{ partitionIndex: 0, committedOffset: 1, committedLeaderEpoch: -1, commitTimestamp: -1, committedMetadata: null }] },
        ],
      });
    offsets.full = true;
    assert.equal((await commit()).topics[0].partitions[0].errorCode, E.COORDINATOR_NOT_AVAILABLE);
    offsets.full = false;
    assert.equal((await commit()).topics[0].partitions[0].errorCode, E.NONE);
    assert.ok(log.entries('offset commit refused: storage cannot take it now').length > 0);
  });
});
