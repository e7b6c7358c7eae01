/**
 * Appends to a partition (the log's hot path): the refusals (fenced, handed over, the free-space reserve, a failure
 * being backed off), idempotent-producer duplicates, the offset assigned synchronously, the batch copied into the
 * log's memory and its tail, the segment cut, the WAL append; then, once the WAL says it is durable, the high
 * watermark, readers woken, a seal when a segment is complete, and the throttle while the tails are over
 * `maxUnsealedBytes`. A failed WAL append refuses the partition's appends until those in flight have settled, rewinds
 * its tail to the high watermark, and backs off.
 */
import { FlowError, readBatchInfo, setBaseOffset, OFF_ATTRIBUTES, OFF_CRC, type AppendResult } from '../../core/index.js';
import { ProducerState } from './producer-state.js';
import { Partition, segmentReady } from './partition.js';
import { backoffMs, LogState } from './log-state.js';
import { relieve, seal } from './seal.js';

/**
 * `forwarded`: the batch was stamped with a producer id by the broker that forwarded it (cluster mode), and is
 * checked as such (ProducerState.checkForwarded): a retry is a duplicate, gaps are allowed.
 */
export function append(lm: LogState, stream: string, partition: number, batch: Buffer, forwarded = false): AppendResult {
  if (lm.closed) throw new FlowError('CLOSED', 'log is closed');
  const p = lm.part(stream, partition);
  if (p.fenced !== null) {
    lm.stats.refusedAppends++;
    throw new FlowError('FENCED', `partition ${p.key} is owned by another writer now (a later epoch than ${p.epoch})`, { cause: p.fenced });
  }
  if (p.releasing) throw new FlowError('NOT_OWNER', `partition ${p.key} is being handed over to another broker`);
  const refused = refusal(lm, p);
  if (refused !== null) {
    lm.stats.refusedAppends++;
    throw refused;
  }
  const info = readBatchInfo(batch);
  const idempotent = ProducerState.isIdempotent(info);
  if (idempotent) {
    const dup = forwarded ? p.producers.checkForwarded(info) : p.producers.check(info);
    if (dup) {
      // A retry of a batch already appended: answer with its offset once it is durable, append nothing. If the
      // first append fails meanwhile (the waiter is woken then), so does this one.
      lm.stats.duplicateAppends++;
      if (p.highWatermark >= dup.endOffset) return { baseOffset: dup.baseOffset, durable: Promise.resolve(), duplicate: true };
      const rewinds = p.rewinds;
      const durable = lm.waitFor(stream, partition, dup.endOffset - 1, 60_000).then(() => {
        if (p.highWatermark < dup.endOffset || p.rewinds !== rewinds || p.draining) {
          throw new FlowError(p.failure?.code ?? 'STORAGE_ERROR', `the first append of lm batch to ${p.key} did not become durable`);
        }
      });
      return { baseOffset: dup.baseOffset, durable, duplicate: true };
    }
  }
  const baseOffset = p.nextOffset;
  const endOffset = baseOffset + info.lastOffsetDelta + 1;
  setBaseOffset(batch, baseOffset);
  // The caller's buffer is only borrowed (StreamStorage.append): the tail and the WAL get the log's own copy
  // (made before any state changes, so a failure leaves the partition as it was).
  const { data, chunk } = lm.memory.copy(p, batch);
  if (p.openBytes > 0 && p.openBytes + batch.length > lm.segmentBytes(p)) lm.cut(p);
  const startsFile = p.cutPending;
  p.cutPending = false;
  p.openBytes += batch.length;
  if (idempotent) p.producers.record(info, baseOffset);
  lm.pushTail(p, { baseOffset, endOffset, maxTimestamp: info.maxTimestamp, data, chunk });
  // The batch's own CRC (checked by the Kafka adapter, computed by the core's encoder) covers all but its first
  // 21 bytes: the WAL combines it into its frame checksum instead of reading the batch once more.
  const dataCrc = { from: OFF_ATTRIBUTES, crc: data.readUInt32BE(OFF_CRC) };
  p.inflight++;
  lm.space?.written(data.length);
  const written = lm.wal.append({ key: p.key, baseOffset, endOffset, epoch: p.epoch, data, dataCrc, startsFile });
  if (lm.defs !== null) p.lastWrite = written;
  const durable = written.then(
    () => {
      p.inflight--;
      // Group commits resolve in append order, so the watermark only moves forward.
      if (endOffset > p.highWatermark) p.highWatermark = endOffset;
      if (p.draining) {
        if (p.inflight === 0) rewind(lm, p);
      } else if (p.failure !== null) {
        lm.logger.info({ partition: p.key }, 'partition writes again after a storage failure');
        p.failure = null;
        p.walFailures = 0;
      }
      lm.wake(p);
      if (segmentReady(p)) void seal(lm, p);
      if (lm.unsealed > lm.options.maxUnsealedBytes && !lm.closed) {
        lm.stats.throttledAppends++;
        relieve(lm);
        return new Promise<void>((resolve) => lm.throttled.push(resolve));
      }
      return undefined;
    },
    (err: unknown) => {
      p.inflight--;
      if (err instanceof FlowError && err.code === 'FENCED') {
        lm.fence(p, err);
        throw err;
      }
      const e =
        err instanceof FlowError && (err.code === 'STORAGE_FULL' || err.code === 'CLOSED')
          ? err
          : new FlowError('STORAGE_ERROR', 'write-ahead log append failed', { cause: err });
      walFailed(lm, p, e);
      throw e;
    },
  );
  return { baseOffset, durable };
}

/** Why an append to `p` is refused right now (the free-space reserve, or a failure being backed off), or null. */
export function refusal(lm: LogState, p: Partition): FlowError | null {
  if (p.failure !== null && (p.draining || Date.now() < p.retryAt)) {
    return new FlowError(p.failure.code, `partition ${p.key} takes no writes for now after a storage failure: ${p.failure.message}`);
  }
  return lm.space?.refusal() ?? null;
}

/**
 * A WAL append of `p` failed: appends are refused from now on; once every append made before has settled, the
 * tail is rewound (see rewind) and the backoff starts.
 */
export function walFailed(lm: LogState, p: Partition, err: FlowError): void {
  lm.stats.failedAppends++;
  if (lm.byKey.get(p.key) !== p || err.code === 'CLOSED' || p.fenced !== null) return;
  if (!p.draining) {
    p.draining = true;
    p.walFailures++;
    // One line when a partition starts failing; while it keeps failing, each retry that fails is a debug line.
    const level = p.failure === null ? 'warn' : 'debug';
    lm.logger[level]({ err, partition: p.key, retryInMs: backoffMs(p.walFailures) }, 'WAL append failed; partition refuses writes until a retry succeeds');
    p.failure = err;
    // Readers and seals waiting for offsets that will not come now stop waiting.
    for (const w of p.waiters.splice(0)) {
      clearTimeout(w.timer);
      w.resolve();
    }
  }
  if (p.inflight === 0) rewind(lm, p);
}

/**
 * After a failure, once no append of `p` is in flight: the batches past the high watermark (they all failed) leave
 * the tail, their offsets will be given out again, and the next append starts a new segment and WAL file at the
 * high watermark (the WAL takes the key again from there). Appends are refused for the backoff.
 */
export function rewind(lm: LogState, p: Partition): void {
  p.draining = false;
  p.retryAt = Date.now() + backoffMs(p.walFailures);
  p.rewinds++;
  lm.stats.rewinds++;
  const hw = p.highWatermark;
  while (p.tail.length > 0 && p.tail[p.tail.length - 1].endOffset > hw) {
    const b = p.tail.pop()!;
    p.tailBytes -= b.data.length;
    if (p.fenced === null) lm.unsealed -= b.data.length; // a fenced tail is out of the count (see fence)
    b.chunk?.unpin();
  }
  p.nextOffset = hw;
  p.cuts = p.cuts.filter((c) => c <= hw);
  const lastCut = p.cuts.length > 0 ? p.cuts[p.cuts.length - 1] : -1;
  p.openBytes = 0;
  for (const b of p.tail) if (b.baseOffset >= lastCut) p.openBytes += b.data.length;
  lm.cut(p);
  // The idempotent-producer state forgets the failed batches: their retries are new appends, not duplicates.
  const producers = p.flushedProducers.clone();
  for (const b of p.tail) {
    const info = readBatchInfo(b.data);
    if (ProducerState.isIdempotent(info)) producers.record(info, b.baseOffset);
  }
  p.producers = producers;
  lm.releaseThrottled();
}
