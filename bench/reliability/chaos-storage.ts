/**
 * What the chaos runner's storage faults (chaos-nemesis.ts: `torn-write`, `bit-flip`) do to the cluster's shared
 * storage, behind the brokers' backs, and how they check the outcome: the metastore read directly (PostgreSQL), the
 * segment objects in s3rver's directory (test/helpers/s3.ts keeps them as files: `<key>._S3rver_object`), a torn
 * object put through S3 itself, a partition read with kcat (librdkafka), `flowmq_log_corrupt_batches_total` from
 * every broker's /metrics.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { run } from '../../test/e2e/harness.js';
import type { TestCluster } from '../../test/helpers/cluster.js';

/** A committed segment of a stream partition, as the metastore lists it. */
export interface SegmentRow {
  stream: string;
  partition: number;
  baseOffset: number;
  endOffset: number;
  objectKey: string;
}

async function query<T>(c: TestCluster, sql: string, params: unknown[]): Promise<T[]> {
  const client = new pg.Client({ connectionString: await c.directDbUrl() });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows as T[];
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The committed segments of `stream`, ordered by partition and base offset (compacted copies left out). */
export async function committedSegments(c: TestCluster, stream: string): Promise<SegmentRow[]> {
  const rows = await query<{ partition: number; base_offset: string; end_offset: string; object_key: string }>(
    c,
    'SELECT partition, base_offset, end_offset, object_key FROM segments WHERE stream = $1 ORDER BY partition, base_offset',
    [stream],
  );
  return rows
    .filter((r) => !/-c\d+\.seg$/.test(r.object_key))
    .map((r) => ({ stream, partition: r.partition, baseOffset: Number(r.base_offset), endOffset: Number(r.end_offset), objectKey: r.object_key }));
}

/** A partition's flushed offset (where its next segment starts) and current ownership epoch. */
export async function partitionRow(c: TestCluster, stream: string, partition: number): Promise<{ flushed: number; epoch: number } | null> {
  const rows = await query<{ flushed_offset: string; epoch: string }>(c, 'SELECT flushed_offset, epoch FROM partitions WHERE stream = $1 AND partition = $2', [
    stream,
    partition,
  ]);
  return rows[0] ? { flushed: Number(rows[0].flushed_offset), epoch: Number(rows[0].epoch) } : null;
}

/** Where s3rver keeps an object of the cluster's store (its key relative to the cluster's prefix). */
export function objectFile(c: TestCluster, key: string): string {
  const parts = `${c.prefix}/${key}`.split('/');
  const name = parts.pop()!;
  return join(c.s3.directory, c.s3.bucket, ...parts, `${name}._S3rver_object`);
}

/** Puts `body` under `key` (relative to the cluster's prefix) through S3, as a broker's store would. */
export async function putObject(c: TestCluster, key: string, body: Buffer): Promise<void> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  const s3 = new S3Client({
    region: c.s3.region,
    endpoint: c.s3.endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: c.s3.accessKeyId, secretAccessKey: c.s3.secretAccessKey },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  try {
    await s3.send(new PutObjectCommand({ Bucket: c.s3.bucket, Key: `${c.prefix}/${key}`, Body: body, ContentLength: body.length }));
  } finally {
    s3.destroy();
  }
}

export const objectExists = (c: TestCluster, key: string): boolean => existsSync(objectFile(c, key));

/** The first batch of a segment object (Kafka RecordBatch v2 at byte 0): its offsets and where its last byte is. */
export function firstBatch(bytes: Buffer, segmentBase: number): { first: number; last: number; lastByte: number } {
  const baseOffset = Number(bytes.readBigInt64BE(0));
  const length = bytes.readInt32BE(8);
  const lastOffsetDelta = bytes.readInt32BE(23);
  if (baseOffset !== segmentBase || length < 49 || 12 + length > bytes.length)
    throw new Error(`no batch at the start of the segment (base ${baseOffset}, length ${length})`);
  return { first: baseOffset, last: baseOffset + lastOffsetDelta, lastByte: 12 + length - 1 };
}

/** Flips bit 2 of byte `at` of a file in place. */
export function flipByte(path: string, at: number): void {
  const b = readFileSync(path);
  b[at] ^= 0x04;
  writeFileSync(path, b);
}

/** `flowmq_log_corrupt_batches_total` summed over the running brokers. */
export async function corruptBatches(c: TestCluster): Promise<number> {
  let sum = 0;
  for (const b of c.running) {
    try {
      const text = await (await fetch(`${b.proc.http}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith('flowmq_log_corrupt_batches_total '));
      if (line) sum += Number(line.split(' ')[1]);
    } catch {
      // a broker going down: counted as 0
    }
  }
  return sum;
}

/**
 * Reads `count` records of a partition from `offset` with kcat for at most `timeoutMs`: the records it got (offset
 * and payload) and what it said on stderr.
 */
export async function kcatRead(
  bootstrap: string[],
  topic: string,
  partition: number,
  offset: number,
  count: number,
  timeoutMs: number,
): Promise<{ records: Array<{ offset: number; payload: string }>; stderr: string }> {
  const r = await run(
    'kcat',
    ['-b', bootstrap.join(','), '-C', '-t', topic, '-p', String(partition), '-o', String(offset), '-c', String(count), '-e', '-J', '-q'],
    { timeoutMs },
  );
  const records = r.stdout
    .split('\n')
    .filter((l) => l.trim().startsWith('{'))
    .map((l) => JSON.parse(l) as { offset: number; payload: string | null })
    .map((m) => ({ offset: m.offset, payload: String(m.payload) }));
  return { records, stderr: r.stderr };
}
