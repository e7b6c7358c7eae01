/**
 * Idempotent-producer state of one partition (KIP-98), as Kafka's ProducerStateManager keeps it: per producer
 * id, its epoch and the sequence ranges of its last five batches (a producer has at most five in flight, so a
 * retry always finds its original among them).
 *
 * Rules, as in Kafka: a producer never seen accepts any sequence (its state may have been lost with retention);
 * a newer epoch must start at sequence 0; an older epoch is fenced; within an epoch a batch repeating a recent
 * range is a duplicate (answered with its original offset, not appended), and any other batch must start right
 * after the last sequence (wrapping at INT32_MAX), else it is out of order.
 *
 * Forwarded batches (cluster mode, cluster/stream-appends.ts): a broker that forwards a batch without a producer id
 * to a partition's owner stamps it with a producer id of its own (allocated like a Kafka producer's, one per broker
 * life), epoch 0 and a sequence per partition, so that a retry of it (the owner died or the reply was lost after the
 * write) is recognised here, by this same state, rebuilt by the next owner from the WAL and the segment snapshots.
 * They are checked by checkForwarded: the forwarder keeps the partition's order (its own chain check) but may leave
 * gaps (an append failed for good in between), so any sequence after the last is new; one at or before it is a
 * duplicate, answered with its offset when a kept range holds it, else with -1 (stored, offset no longer known).
 *
 * Consecutive batches of a producer with contiguous sequences and offsets are kept as one range (the batches of one
 * forwarded request are), so the five ranges reach further back; a retried batch inside one gets its own offset.
 *
 * Durability: the state as of a segment's end is stored in the metastore when the segment is committed; on
 * recovery it is loaded and the batches after it (the WAL tail) are replayed on top of it.
 */
import { FlowError, type BatchInfo } from '../../core/index.js';

export interface SeqRange {
  first: number;
  last: number;
  baseOffset: number;
  endOffset: number;
  /** The batch's largest timestamp (ms); absent in states stored before it was kept. */
  ts?: number;
}

export interface ProducerEntry {
  epoch: number;
  batches: SeqRange[];
}

const MAX_BATCHES = 5;
const MAX_SEQ = 0x7fffffff;
const SEQ_SPACE = MAX_SEQ + 1;

const lastSeqOf = (info: BatchInfo): number => (info.baseSequence + info.lastOffsetDelta) % (MAX_SEQ + 1);
const nextSeq = (seq: number): number => (seq === MAX_SEQ ? 0 : seq + 1);

/** The kept range holding the sequences first..last (a batch, or part of merged ones), with their own offsets. */
function find(e: ProducerEntry, first: number, last: number): SeqRange | null {
  for (const b of e.batches) {
    if (b.first === first && b.last === last) return b;
    if (b.first <= first && first <= last && last <= b.last) {
      const baseOffset = b.baseOffset + (first - b.first);
      return { first, last, baseOffset, endOffset: baseOffset + (last - first) + 1, ts: b.ts };
    }
  }
  return null;
}

export class ProducerState {
  readonly producers = new Map<number, ProducerEntry>();

  /** Whether the batch carries a producer id (is idempotent). */
  static isIdempotent(info: BatchInfo): boolean {
    return info.producerId >= 0n && info.baseSequence >= 0;
  }

  /**
   * Checks an idempotent batch before it is appended: returns the original range when it is a duplicate, null
   * when it may be appended; throws OUT_OF_ORDER_SEQUENCE or PRODUCER_FENCED otherwise.
   */
  check(info: BatchInfo): SeqRange | null {
    const e = this.producers.get(Number(info.producerId));
    if (!e) return null;
    if (info.producerEpoch < e.epoch) {
      throw new FlowError('PRODUCER_FENCED', `producer ${info.producerId} epoch ${info.producerEpoch} is older than ${e.epoch}`);
    }
    if (info.producerEpoch > e.epoch) {
      if (info.baseSequence !== 0) {
        throw new FlowError(
          'OUT_OF_ORDER_SEQUENCE',
          `producer ${info.producerId}: new epoch ${info.producerEpoch} must start at sequence 0, not ${info.baseSequence}`,
        );
      }
      return null;
    }
    const dup = find(e, info.baseSequence, lastSeqOf(info));
    if (dup) return dup;
    const expected = nextSeq(e.batches[e.batches.length - 1].last);
    if (info.baseSequence !== expected) {
      throw new FlowError('OUT_OF_ORDER_SEQUENCE', `producer ${info.producerId}: expected sequence ${expected}, got ${info.baseSequence}`);
    }
    return null;
  }

  /**
   * Checks a batch a forwarding broker stamped (see the file's comment): the original range when it was appended
   * already (baseOffset -1 when it is older than every kept range), null when it is new. Never throws.
   */
  checkForwarded(info: BatchInfo): SeqRange | null {
    const e = this.producers.get(Number(info.producerId));
    if (!e || info.producerEpoch !== e.epoch || e.batches.length === 0) return null;
    const last = lastSeqOf(info);
    const dup = find(e, info.baseSequence, last);
    if (dup) return dup;
    const top = e.batches[e.batches.length - 1].last;
    // After the last one (modulo the sequence space, within half of it): new, whatever the gap.
    if ((info.baseSequence - top - 1 + SEQ_SPACE) % SEQ_SPACE < SEQ_SPACE / 2) return null;
    return { first: info.baseSequence, last, baseOffset: -1, endOffset: -1 };
  }

  /** Records an appended idempotent batch. */
  record(info: BatchInfo, baseOffset: number): void {
    const id = Number(info.producerId);
    let e = this.producers.get(id);
    if (!e || info.producerEpoch !== e.epoch) {
      e = { epoch: info.producerEpoch, batches: [] };
      this.producers.set(id, e);
    }
    const last = lastSeqOf(info);
    const endOffset = baseOffset + info.lastOffsetDelta + 1;
    const prev = e.batches[e.batches.length - 1];
    if (prev !== undefined && prev.last < MAX_SEQ && prev.last + 1 === info.baseSequence && info.baseSequence <= last && prev.endOffset === baseOffset) {
      // Contiguous in sequences and offsets: the same range, longer (a sequence maps to prev.baseOffset + (seq - first)).
      prev.last = last;
      prev.endOffset = endOffset;
      if (prev.ts !== undefined) prev.ts = Math.max(prev.ts, info.maxTimestamp);
      return;
    }
    e.batches.push({ first: info.baseSequence, last, baseOffset, endOffset, ts: info.maxTimestamp });
    if (e.batches.length > MAX_BATCHES) e.batches.shift();
  }

  /** Every producer's id, epoch, last sequence and last batch's timestamp (-1 unknown), by id (DescribeProducers). */
  snapshot(): Array<{ producerId: number; producerEpoch: number; lastSequence: number; lastTimestamp: number }> {
    const out = [];
    for (const [id, e] of this.producers) {
      const last = e.batches[e.batches.length - 1];
      out.push({ producerId: id, producerEpoch: e.epoch, lastSequence: last?.last ?? -1, lastTimestamp: last?.ts ?? -1 });
    }
    return out.sort((a, b) => a.producerId - b.producerId);
  }

  clone(): ProducerState {
    const c = new ProducerState();
    for (const [id, e] of this.producers) c.producers.set(id, { epoch: e.epoch, batches: e.batches.map((b) => ({ ...b })) });
    return c;
  }

  toJSON(): string {
    return JSON.stringify([...this.producers]);
  }

  static fromJSON(json: string): ProducerState {
    const s = new ProducerState();
    const rows = JSON.parse(json) as Array<[number, ProducerEntry]>;
    for (const [id, e] of rows) s.producers.set(id, e);
    return s;
  }
}
