/**
 * A JetStream consumer's place in each partition of its stream (consumer.ts), and the reads that fill it.
 *
 * A consumer of a P-partition stream reads every partition on its own (one cursor, one read-ahead buffer, one wait for
 * new records each) and hands out the lowest stream sequence among the partitions' next messages (partition-seq.ts):
 * what is stored is delivered interleaved by offset, in ascending stream sequence, each partition in its order.
 */
import { decodeBatch, readBatchInfo, recordToMessage, streamOwnTopic, type Engine, type Message } from '../../../core/index.js';
import { seqOf } from './partition-seq.js';
import type { StreamView } from './stream-view.js';

/** A record read ahead: its stream sequence, its place in its partition (offset + 1) and its message. */
export interface Entry {
  seq: number;
  local: number;
  msg: Message;
}

export interface Part {
  readonly index: number;
  /** Next local sequence (offset + 1) to look at; every one below was delivered, skipped or acked before a restart. */
  cursor: number;
  /** Local sequences up to this one were handed out by a previous run (before a restart). */
  replayUpTo: number;
  /** Records read ahead, from `bufAt` on (an index rather than shift(): a read holds a thousand records or more). */
  buffer: Entry[];
  bufAt: number;
  /** A wait for new records of this partition is outstanding (one at a time). */
  waiting: boolean;
}

export function newPart(index: number, floor: number, replayUpTo: number): Part {
  return { index, cursor: floor + 1, replayUpTo, buffer: [], bufAt: 0, waiting: false };
}

interface Reader {
  readonly engine: Engine;
  viewOf(stream: string): StreamView | null;
}

/**
 * Reads the next records of `pt` into its buffer (after the cursor). Returns true when there is something to look at
 * again (records read, or the cursor moved over a gap or by a concurrent change), false when the partition has nothing
 * more now (or `closed()` turned true).
 *
 * Kafka transactions (KIP-98): delivered as a read_committed Kafka consumer reads them, up to the last stable offset
 * (nothing of an open transaction) and without the records of aborted ones.
 */
export async function fillPart(host: Reader, stream: string, partitions: number, pt: Part, bytes: number, closed: () => boolean): Promise<boolean> {
  pt.buffer = [];
  pt.bufAt = 0;
  const p = pt.index;
  const { logStartOffset, highWatermark } = host.engine.offsets(stream, p);
  if (pt.cursor - 1 < logStartOffset) pt.cursor = logStartOffset + 1;
  const txns = host.engine.transactions;
  const stable = txns.lso(stream, p, highWatermark);
  if (pt.cursor - 1 >= stable) return false;
  const from = pt.cursor;
  // What the view removes is known once it has seen the log past what is read.
  await host.viewOf(stream)?.catchUp();
  if (closed()) return false;
  if (pt.cursor !== from) return true;
  const batches = await host.engine.read(stream, p, from - 1, bytes);
  if (closed()) return false;
  if (pt.cursor !== from) return true;
  const topic = ownTopic(stream);
  /** One past the last offset of the batches looked at (markers and aborted batches included). */
  let scanned = from - 1;
  for (const b of batches) {
    const info = readBatchInfo(b);
    if (info.baseOffset >= stable) break;
    scanned = Math.max(scanned, info.baseOffset + info.lastOffsetDelta + 1);
    if (txns.isAborted(stream, p, info)) continue;
    for (const rec of decodeBatch(b)) {
      if (rec.offset + 1 >= from) pt.buffer.push({ seq: seqOf(partitions, p, rec.offset), local: rec.offset + 1, msg: recordToMessage(rec, topic) });
    }
  }
  if (pt.buffer.length > 0) return true;
  // A gap (compacted or deleted records, transaction markers, aborted records): move on to what the log has.
  if (scanned > from - 1) pt.cursor = scanned + 1;
  else if (pt.cursor - 1 < txns.lso(stream, p, host.engine.offsets(stream, p).highWatermark)) pt.cursor++;
  else return false;
  return true;
}

/** The message at `offset` of partition `p`, or null when the log does not hold it (any more). */
export async function readAt(engine: Engine, stream: string, p: number, offset: number): Promise<Message | null> {
  const { logStartOffset, highWatermark } = engine.offsets(stream, p);
  if (offset < logStartOffset || offset >= highWatermark) return null;
  const batches = await engine.read(stream, p, offset, 1);
  for (const b of batches) for (const rec of decodeBatch(b)) if (rec.offset === offset) return recordToMessage(rec, ownTopic(stream));
  return null;
}

export function ownTopic(stream: string): string {
  return streamOwnTopic(stream);
}
