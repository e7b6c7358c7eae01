/**
 * `x-queue-type: stream`: a FlowMQ stream (one partition) seen as a RabbitMQ stream queue. Publishes through the
 * default exchange (routing key = the stream's name) or through bindings append to it; a consumer reads it from
 * the offset its `x-stream-offset` argument names (`first`, `last`, `next` (default), an offset, a timestamp, or an
 * interval such as `1h`: what was published in the last hour),
 * and every delivery carries its offset in the `x-stream-offset` header, as RabbitMQ's do. Reading a stream does not
 * consume it: acks only open the consumer's prefetch window again (RabbitMQ requires one; without basic.qos the
 * window is 1000 messages here), and a channel may read the same stream from any offset again. The stream is also
 * a Kafka topic of the same name and captures MQTT publishes on its name as a topic. A consumer of a super stream's
 * partition queue reads that one partition (super-stream.ts).
 */
import { decodeBatch, readBatchInfo, recordToMessage, type Engine, type Message } from '../../core/index.js';
import { AmqpError } from './errors.js';
import { intervalStart } from './stream-args.js';
import { Typed, fieldInteger, fieldString, type FieldValue } from './codec/index.js';

/** Prefetch of a stream consumer whose channel set none. */
const DEFAULT_WINDOW = 1000;
/** Bytes read from the stream per step. */
const READ_BYTES = 1024 * 1024;
/** Longest wait for new records before looking again (the consumer may have been cancelled meanwhile). */
const WAIT_MS = 1000;

/** What a stream consumer needs from its channel. */
export interface StreamSink {
  /** Sends one delivery. */
  deliverStream(c: StreamConsumer, msg: Message, offset: number): void;
  /** The read failed (the stream was deleted...): the consumer is cancelled. */
  streamFailed(c: StreamConsumer, err: unknown): void;
  /** Whether the channel may deliver to it now (the bytes-out quota, the policies); false stops the read loop. */
  allows(c: StreamConsumer): boolean;
}

export class StreamConsumer {
  /** Deliveries not acked yet (the window). */
  unacked = 0;
  /** Directory version its `subscribe stream:` was last allowed at (see AmqpChannel.stillAllowed). */
  authVersion = -1;
  private next = -1;
  private running = false;
  closed = false;

  constructor(
    private readonly engine: Engine,
    private readonly sink: StreamSink,
    readonly tag: string,
    readonly stream: string,
    readonly noAck: boolean,
    private readonly window: number,
    private readonly start: FieldValue | undefined,
    /** The partition read: 0, or a super stream's partition (its partition queue `<stream>-<key>`, super-stream.ts). */
    readonly partition = 0,
  ) {
    this.ownTopic = engine.getAnyStream(stream)?.ownTopic ?? stream;
  }

  private readonly ownTopic: string;

  /** Resolves the start offset, then delivers as long as the window allows and records arrive. */
  async begin(): Promise<void> {
    const o = this.engine.offsets(this.stream, this.partition);
    const s = this.start;
    /** An interval (`1h`): the instant it starts from, parsed once. */
    const since = typeof s === 'string' ? intervalStart(s) : undefined;
    if (s === undefined || s === 'next') this.next = o.highWatermark;
    else if (s === 'first') this.next = o.logStartOffset;
    else if (s === 'last') this.next = Math.max(o.logStartOffset, o.highWatermark - 1);
    else if (s instanceof Typed && s.type === 'T')
      this.next = await this.engine.offsetForTimestamp(this.stream, this.partition, Number(s.value as bigint) * 1000);
    else if (s instanceof Date) this.next = await this.engine.offsetForTimestamp(this.stream, this.partition, s.getTime());
    else if (since !== undefined) this.next = await this.engine.offsetForTimestamp(this.stream, this.partition, since);
    else {
      const n = fieldInteger(s);
      if (n === undefined || n < 0) throw new AmqpError(406, `invalid x-stream-offset ${JSON.stringify(fieldString(s) ?? String(s))}`, 60, 20);
      this.next = n;
    }
  }

  get hasCredit(): boolean {
    return !this.closed && (this.noAck || this.unacked < (this.window === 0 ? DEFAULT_WINDOW : this.window)) && this.sink.allows(this);
  }

  /** Runs the read loop unless it runs already; it stops when the window is full and is called again on acks. */
  pump(): void {
    if (this.running || this.closed || this.next < 0) return;
    this.running = true;
    this.loop().then(
      () => {
        this.running = false;
      },
      (err: unknown) => {
        this.running = false;
        if (!this.closed) this.sink.streamFailed(this, err);
      },
    );
  }

  private async loop(): Promise<void> {
    while (!this.closed && this.hasCredit) {
      const o = this.engine.offsets(this.stream, this.partition);
      if (this.next < o.logStartOffset) this.next = o.logStartOffset;
      // Kafka transactions (KIP-98): read as a read_committed Kafka consumer does, up to the last stable offset
      // (nothing of an open transaction), skipping what was aborted.
      const txns = this.engine.transactions;
      const stable = txns.lso(this.stream, this.partition, o.highWatermark);
      if (this.next >= stable) {
        // Caught up, or held at an open transaction until its marker moves the high watermark.
        await this.engine.waitFor(this.stream, this.partition, this.next >= o.highWatermark ? this.next : o.highWatermark, WAIT_MS);
        continue;
      }
      const batches = await this.engine.read(this.stream, this.partition, this.next, READ_BYTES);
      if (this.closed) return;
      let progressed = false;
      for (const batch of batches) {
        const info = readBatchInfo(batch);
        if (info.baseOffset >= stable) break;
        const end = info.baseOffset + info.lastOffsetDelta + 1;
        const aborted = txns.isAborted(this.stream, this.partition, info);
        // A transaction marker (a control batch) decodes to no message; an aborted transaction's batch is skipped.
        const records = aborted ? [] : decodeBatch(batch);
        if (records.length === 0) {
          if (end > this.next) {
            this.next = end;
            progressed = true;
          }
          continue;
        }
        for (const rec of records) {
          if (rec.offset < this.next) continue;
          if (!this.hasCredit) return;
          this.next = rec.offset + 1;
          progressed = true;
          this.sink.deliverStream(this, recordToMessage(rec, this.ownTopic), rec.offset);
        }
      }
      if (!progressed) await this.engine.waitFor(this.stream, this.partition, this.next + 1, WAIT_MS);
    }
  }

  close(): void {
    this.closed = true;
  }
}
