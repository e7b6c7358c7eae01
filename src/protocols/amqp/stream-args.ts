/**
 * The arguments of a stream queue (`x-queue-type: stream`) as RabbitMQ takes them: retention by age
 * (`x-max-age`, a duration such as `7D`) and by size (`x-max-length-bytes`), the segment size
 * (`x-stream-max-segment-size-bytes`), and the interval form of `x-stream-offset` (`1h`: from what was published in
 * the last hour). They map onto the FlowMQ stream's own settings (Kafka's retention.ms, retention.bytes and
 * segment.bytes of the same stream), so a Kafka client and the admin API see the same limits.
 *
 * RabbitMQ applies size retention to the whole stream; a FlowMQ stream queue has one partition, so the stream's
 * per-partition bound is the same thing. Retention removes whole segments, oldest first, as RabbitMQ's does.
 */
import type { StreamDef } from '../../core/index.js';
import { AmqpError } from './errors.js';
import { Typed, fieldInteger, fieldString, type FieldTable, type FieldValue } from './codec/index.js';

/** RabbitMQ's duration units for x-max-age and x-stream-offset intervals (a month is 30 days, a year 365). */
const UNIT_MS: Readonly<Record<string, number>> = {
  Y: 365 * 86_400_000,
  M: 30 * 86_400_000,
  D: 86_400_000,
  h: 3_600_000,
  m: 60_000,
  s: 1000,
};

/** A RabbitMQ duration (`<digits><Y|M|D|h|m|s>`) in ms; undefined when the text is not one. */
export function parseDuration(text: string): number | undefined {
  const m = /^(\d{1,12})([YMDhms])$/.exec(text);
  if (m === null) return undefined;
  const ms = Number(m[1]) * UNIT_MS[m[2]];
  return Number.isSafeInteger(ms) ? ms : undefined;
}

/** What a stream queue's declare arguments set; a key is absent when its argument was not given. */
export interface StreamQueueSettings {
  retentionMs?: number;
  retentionBytes?: number;
  segmentBytes?: number;
}

/** Arguments that mean something only to classic and quorum queues: RabbitMQ refuses them on a stream. */
const NOT_FOR_STREAMS = [
  'x-max-length',
  'x-message-ttl',
  'x-expires',
  'x-overflow',
  'x-dead-letter-exchange',
  'x-dead-letter-routing-key',
  'x-max-priority',
  'x-queue-mode',
  'x-delivery-limit',
];

/** RabbitMQ's name of a field's type in its "inequivalent arg" errors. */
function typeName(v: FieldValue): string {
  if (typeof v === 'string' || Buffer.isBuffer(v)) return 'longstr';
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'number') return Number.isInteger(v) ? 'long' : 'double';
  if (v instanceof Typed) return v.type === 'l' ? 'long' : v.type === 'I' ? 'signedint' : v.type;
  return 'table';
}

/** Reads and checks a stream queue's arguments (406 PRECONDITION_FAILED on a bad one, as RabbitMQ answers). */
export function streamQueueSettings(args: FieldTable, queue: string, vhost: string): StreamQueueSettings {
  for (const key of NOT_FOR_STREAMS) {
    if (args[key] !== undefined)
      throw new AmqpError(406, `invalid arg '${key}' for queue '${queue}' in vhost '${vhost}' of queue type rabbit_stream_queue`, 50, 10);
  }
  const out: StreamQueueSettings = {};
  const age = args['x-max-age'];
  if (age !== undefined) {
    const s = fieldString(age);
    const ms = s === undefined ? undefined : parseDuration(s);
    if (ms === undefined || ms === 0)
      throw new AmqpError(
        406,
        `invalid arg 'x-max-age' for queue '${queue}' in vhost '${vhost}': ${JSON.stringify(s ?? String(age))} is not a duration such as 7D, 12h or 30m`,
        50,
        10,
      );
    out.retentionMs = ms;
  }
  const whole = (key: string, min: number): number | undefined => {
    const v = args[key];
    if (v === undefined) return undefined;
    const n = fieldInteger(v);
    if (n === undefined || !Number.isSafeInteger(n) || n < min)
      throw new AmqpError(406, `invalid arg '${key}' for queue '${queue}' in vhost '${vhost}': expected an integer >= ${min}`, 50, 10);
    return n;
  };
  const bytes = whole('x-max-length-bytes', 0);
  if (bytes !== undefined) out.retentionBytes = bytes;
  const segment = whole('x-stream-max-segment-size-bytes', 1);
  if (segment !== undefined) out.segmentBytes = segment;
  return out;
}

/**
 * A declare of an existing stream queue must name the settings it has (RabbitMQ's equivalence check): an argument
 * that differs from the stream's setting is 406 "inequivalent arg". Arguments left out are not compared.
 */
export function checkEquivalent(def: StreamDef, args: FieldTable, wanted: StreamQueueSettings, vhost: string): void {
  const pairs: Array<[string, number | undefined, number | null | undefined]> = [
    ['x-max-age', wanted.retentionMs, def.retentionMs],
    ['x-max-length-bytes', wanted.retentionBytes, def.retentionBytes],
    ['x-stream-max-segment-size-bytes', wanted.segmentBytes, def.segmentBytes],
  ];
  for (const [key, want, have] of pairs) {
    if (want === undefined || want === (have ?? undefined)) continue;
    const v = args[key];
    const shown = fieldString(v) ?? String(fieldInteger(v));
    const current = have === null || have === undefined ? 'none' : `'${have}'`;
    throw new AmqpError(
      406,
      `inequivalent arg '${key}' for queue '${def.name}' in vhost '${vhost}': received the value '${shown}' of type '${typeName(v)}' but current is ${current}`,
      50,
      10,
    );
  }
}

/** The timestamp (ms) an interval `x-stream-offset` (`1h`...) starts from; undefined when `s` is not one. */
export function intervalStart(s: string, now = Date.now()): number | undefined {
  const ms = parseDuration(s);
  return ms === undefined ? undefined : now - ms;
}
