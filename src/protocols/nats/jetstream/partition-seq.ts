/**
 * JetStream stream sequences over a FlowMQ stream of P partitions (docs/jetstream.md, "Multi-partition streams").
 *
 * JetStream clients see one stream sequence per message (in the ack reply subject, opt_start_seq, ordered consumers'
 * resets, STREAM.MSG.GET); a FlowMQ stream has one offset sequence per partition. The two are tied by a pure function
 * of the record's place, interleaved by offset:
 *
 *     seq = offset * P + partition + 1        partition = (seq - 1) mod P,  offset = floor((seq - 1) / P)
 *
 * so a single-partition stream keeps seq = offset + 1, every record has one sequence for every consumer and broker and
 * across restarts (no index to keep), and a partition's records ascend in sequence as in offset. Sequences of a
 * multi-partition stream have gaps (a partition shorter than the others leaves its numbers unused), as a JetStream
 * stream with deleted messages has. The function depends on P: a stream grown by Kafka CreatePartitions is numbered
 * anew, which is why consumers store their positions per partition as offsets (consumer.ts).
 *
 * Pure functions, no I/O.
 */

/** Records per partition this numbering holds before leaving the integers a JSON number carries exactly. */
export function maxOffset(partitions: number): number {
  return Math.floor((Number.MAX_SAFE_INTEGER - partitions) / partitions);
}

/** The stream sequence of the record at `offset` of `partition`, among `partitions`. */
export function seqOf(partitions: number, partition: number, offset: number): number {
  return offset * partitions + partition + 1;
}

/** The partition and offset of stream sequence `seq` (>= 1). */
export function placeOf(partitions: number, seq: number): { partition: number; offset: number } {
  const i = seq - 1;
  return { partition: i % partitions, offset: Math.floor(i / partitions) };
}

/**
 * The first offset of `partition` whose sequence is `seq` or above (deliver_policy by_start_sequence, an ordered
 * consumer's reset at its last stream sequence + 1): every partition starts at the first of its records numbered from
 * `seq` on.
 */
export function firstOffsetFrom(partitions: number, partition: number, seq: number): number {
  return Math.max(0, Math.ceil((seq - 1 - partition) / partitions));
}

/**
 * The highest sequence below which every record is done, given each partition's done offsets: `floors[p]` records of
 * partition p (offsets 0..floors[p]-1) are done. The next record of partition p would be numbered
 * seqOf(P, p, floors[p]); the floor is one below the lowest of those.
 */
export function floorSeq(floors: readonly number[]): number {
  const n = floors.length;
  let low = Infinity;
  for (let p = 0; p < n; p++) low = Math.min(low, seqOf(n, p, floors[p]));
  return n === 0 ? 0 : low - 1;
}
