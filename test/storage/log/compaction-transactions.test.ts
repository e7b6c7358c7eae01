/**
 * The log cleaner and Kafka transactions (src/storage/log/compaction.ts), as Kafka's LogCleaner: the records of an
 * aborted transaction go in the first pass and never count as a key's last record; a transaction's marker stays
 * while a batch of it is in the log and goes in a later pass past delete.retention.ms, the aborted transaction
 * leaving the partition's aborted list (stored) at the same time; nothing at or past the last stable offset (an open
 * transaction) is cleaned, nor anything before the transaction state is loaded; kept records keep their offsets.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import {
  ATTR_CONTROL,
  ATTR_TRANSACTIONAL,
  crc32c,
  decodeBatch,
  encodeBatch,
  encodeControlBatch,
  readBatchInfo,
  type AbortedTxn,
  type Engine,
} from '../../../src/core/index.js';
import type { LogManager } from '../../../src/storage/log/index.js';
import { openFsLogEngine } from '../../helpers/log-engine.js';

const logger = pino({ level: 'silent' });

/** A transactional batch of the producer (epoch 0) at sequence `seq`, as a Kafka client writes it. */
function txnBatch(producerId: number, seq: number, records: Array<[string, string]>): Buffer {
  const b = encodeBatch(records.map(([k, v]) => ({ key: Buffer.from(k), value: Buffer.from(v), headers: [], timestamp: 1000 })));
  b.writeInt16BE(b.readInt16BE(21) | ATTR_TRANSACTIONAL, 21);
  b.writeBigInt64BE(BigInt(producerId), 43);
  b.writeInt16BE(0, 51);
  b.writeInt32BE(seq, 53);
  b.writeUInt32BE(crc32c(b, 21, b.length), 17);
  return b;
}

interface Seen {
  records: Array<{ offset: number; key: string; value: string }>;
  markers: number[];
}

/** Every batch from offset 0: the records (as a read_uncommitted consumer sees them) and the markers' offsets. */
async function readAll(log: LogManager, stream: string): Promise<Seen> {
  const out: Seen = { records: [], markers: [] };
  const hw = log.offsets(stream, 0).highWatermark;
  let offset = 0;
  while (offset < hw) {
    const batches = await log.read(stream, 0, offset, 64 * 1024);
    if (batches.length === 0) break;
    for (const b of batches) {
      const info = readBatchInfo(b);
      if ((info.attributes & ATTR_CONTROL) !== 0) {
        if (info.baseOffset >= offset) out.markers.push(info.baseOffset);
      } else {
        for (const r of decodeBatch(b)) {
          if (r.offset >= offset) out.records.push({ offset: r.offset, key: r.key!.toString(), value: r.value!.toString() });
        }
      }
      offset = Math.max(offset, info.baseOffset + info.lastOffsetDelta + 1);
    }
  }
  return out;
}

describe('log cleaner and transactions', () => {
  let dir = '';
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-compaction-txn-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const open = (sub: string) => openFsLogEngine(join(dir, sub), logger, { segmentBytes: 4096, compactionDeleteDelayMs: 0 });

  const plain = async (engine: Engine, stream: string, key: string, value: string): Promise<number> => {
    const res = engine.produce(stream, 0, encodeBatch([{ key: Buffer.from(key), value: Buffer.from(value), headers: [], timestamp: 1000 }]));
    await res.durable;
    return res.baseOffset;
  };
  /** Appends a transaction's batch, tracked as Kafka's produce does (its first offset holds the LSO). */
  const produceTxn = async (engine: Engine, stream: string, pid: number, seq: number, records: Array<[string, string]>): Promise<number> => {
    const res = engine.produce(stream, 0, txnBatch(pid, seq, records));
    await res.durable;
    engine.transactions.onAppend(stream, 0, pid, res.baseOffset);
    return res.baseOffset;
  };
  /** Ends a transaction as the coordinator does: its marker, and for an abort the aborted list. */
  const endTxn = async (engine: Engine, stream: string, pid: number, commit: boolean): Promise<number> => {
    const first = engine.transactions.firstOffset(stream, 0, pid)!;
    const res = engine.appendControl(stream, 0, encodeControlBatch(pid, 0, commit, 0, Date.now()));
    await res.durable;
    if (!commit) engine.transactions.addAborted(stream, 0, { producerId: pid, firstOffset: first, lastOffset: res.baseOffset }, 0);
    engine.transactions.close(stream, 0, pid);
    return res.baseOffset;
  };

  it('removes aborted records at once, then emptied markers past delete.retention.ms; committed records keep their offsets', async () => {
    const s = await open('a');
    const stored: AbortedTxn[][] = [];
    s.engine.transactions.persistAborted = async (_stream, _partition, list) => {
      stored.push(list);
    };
    await s.engine.createStream({ name: 't', partitions: 1 });
    // Offsets: 0-1 plain k0 k1; 2-3 txn A (committed, marker 4); 5-6 txn B (aborted, marker 7) writes k0 last;
    // 8 txn C (committed, marker 9).
    await plain(s.engine, 't', 'k0', 'plain');
    await plain(s.engine, 't', 'k1', 'plain');
    assert.equal(
      await produceTxn(s.engine, 't', 1000, 0, [
        ['k0', 'a'],
        ['k1', 'a'],
      ]),
      2,
    );
    assert.equal(await endTxn(s.engine, 't', 1000, true), 4);
    assert.equal(
      await produceTxn(s.engine, 't', 1001, 0, [
        ['k0', 'aborted'],
        ['k2', 'aborted'],
      ]),
      5,
    );
    assert.equal(await endTxn(s.engine, 't', 1001, false), 7);
    assert.equal(await produceTxn(s.engine, 't', 1000, 2, [['k2', 'c']]), 8);
    assert.equal(await endTxn(s.engine, 't', 1000, true), 9);
    await s.log.flushAll();
    const before = await readAll(s.log, 't');
    assert.equal(before.records.length, 7);
    assert.deepEqual(before.markers, [4, 7, 9]);

    await s.engine.setSettings('t', { configs: { 'cleanup.policy': 'compact', 'delete.retention.ms': '0' } });
    // Until the transaction state is loaded (the Kafka coordinator started), the partition is left alone.
    await s.log.compact('t');
    assert.deepEqual(await readAll(s.log, 't'), before, 'nothing cleaned before the transaction state is loaded');
    s.engine.transactions.loaded = true;
    await s.log.compact('t');
    const pass1 = await readAll(s.log, 't');
    assert.deepEqual(
      pass1.records,
      [
        { offset: 2, key: 'k0', value: 'a' },
        { offset: 3, key: 'k1', value: 'a' },
        { offset: 8, key: 'k2', value: 'c' },
      ],
      'the aborted records are gone and did not replace k0; the committed ones keep their offsets',
    );
    assert.deepEqual(pass1.markers, [4, 7, 9], 'every marker stays while its transaction had a batch in the cleaned log');
    assert.equal(s.engine.transactions.abortedIn('t', 0, 0, 100).length, 1);
    assert.equal(stored.length, 0);

    // The next pass (new records made the log dirty) finds no batch of B: its marker goes (delete.retention.ms 0),
    // and B leaves the aborted list, stored. A and C still have records: their markers stay.
    assert.equal(await plain(s.engine, 't', 'k3', 'later'), 10);
    await s.log.flushAll();
    await s.log.compact('t');
    const pass2 = await readAll(s.log, 't');
    assert.deepEqual(pass2.records, [...pass1.records, { offset: 10, key: 'k3', value: 'later' }]);
    assert.deepEqual(pass2.markers, [4, 9]);
    assert.deepEqual(s.engine.transactions.abortedIn('t', 0, 0, 100), []);
    assert.deepEqual(stored, [[]]);
    await s.close();
  });

  it('keeps markers of emptied transactions until delete.retention.ms, and cleans nothing past an open transaction', async () => {
    const s = await open('b');
    s.engine.transactions.loaded = true;
    await s.engine.createStream({ name: 'u', partitions: 1 });
    assert.equal(await produceTxn(s.engine, 'u', 2000, 0, [['k0', 'x']]), 0);
    assert.equal(await endTxn(s.engine, 'u', 2000, false), 1);
    // An open transaction from offset 2 on: the last stable offset.
    await plain(s.engine, 'u', 'k1', 'old');
    await plain(s.engine, 'u', 'k1', 'new');
    assert.equal(await produceTxn(s.engine, 'u', 2001, 0, [['k1', 'open']]), 4);
    await s.log.flushAll();
    await s.engine.setSettings('u', { configs: { 'cleanup.policy': 'compact', 'delete.retention.ms': '3600000' } });
    await s.log.compact('u');
    const held = await readAll(s.log, 'u');
    assert.deepEqual(
      held.records.map((r) => r.offset),
      [0, 2, 3, 4],
      'nothing cleaned while a transaction is open in the segment (not even the aborted record)',
    );
    // The open transaction commits: its records now count, and the aborted one goes.
    await endTxn(s.engine, 'u', 2001, true);
    await s.log.flushAll();
    await s.log.compact('u');
    assert.equal(await plain(s.engine, 'u', 'k2', 'later'), 6);
    await s.log.flushAll();
    await s.log.compact('u');
    const done = await readAll(s.log, 'u');
    assert.deepEqual(
      done.records.map((r) => `${r.offset}:${r.value}`),
      ['4:open', '6:later'],
      'the aborted record and the older k1 records are gone',
    );
    assert.deepEqual(done.markers, [1, 5], 'the emptied abort marker stays within delete.retention.ms');
    assert.deepEqual(s.engine.transactions.abortedIn('u', 0, 0, 100), [], 'but its transaction left the aborted list');
    await s.close();
  });

  it('an abort whose marker was written twice keeps its records aborted until they are gone, then leaves the list', async () => {
    const s = await open('c');
    s.engine.transactions.loaded = true;
    await s.engine.createStream({ name: 'v', partitions: 1 });
    assert.equal(await produceTxn(s.engine, 'v', 3000, 0, [['k0', 'aborted']]), 0);
    // A coordinator that crashed after writing its first marker (1) writes the markers again (2) at its restart and
    // only then stores the aborted transaction, which names the second.
    const again = s.engine.appendControl('v', 0, encodeControlBatch(3000, 0, false, 0, Date.now()));
    await again.durable;
    assert.equal(again.baseOffset, 1);
    assert.equal(await endTxn(s.engine, 'v', 3000, false), 2);
    assert.deepEqual(s.engine.transactions.abortedIn('v', 0, 0, 100), [{ producerId: 3000, firstOffset: 0, lastOffset: 2 }]);
    assert.equal(await plain(s.engine, 'v', 'k1', 'one'), 3);
    await s.log.flushAll();
    await s.engine.setSettings('v', { configs: { 'cleanup.policy': 'compact', 'delete.retention.ms': '0' } });
    await s.log.compact('v');
    const pass1 = await readAll(s.log, 'v');
    assert.deepEqual(
      pass1.records.map((r) => r.offset),
      [3],
      'the aborted record is gone',
    );
    assert.deepEqual(pass1.markers, [1], 'the first marker stays (its batch was there), the second went');
    assert.equal(s.engine.transactions.abortedIn('v', 0, 0, 100).length, 1, 'the aborted transaction is still listed');
    assert.equal(await plain(s.engine, 'v', 'k2', 'two'), 4);
    await s.log.flushAll();
    await s.log.compact('v');
    const pass2 = await readAll(s.log, 'v');
    assert.deepEqual(pass2.markers, [], 'no marker left');
    assert.deepEqual(s.engine.transactions.abortedIn('v', 0, 0, 100), [], 'and no aborted transaction naming it');
    await s.close();
  });
});
