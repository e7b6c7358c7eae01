/**
 * Cluster mode: the collector of what deleted streams left behind.
 *
 * A broker drops what it holds of a deleted stream (LogManager.dropStream: the segment objects of its partitions,
 * their WAL entries at the next trim), and every other broker does the same when the deletion reaches it. A partition
 * that had no live owner at that moment (its owner killed or paused, its lease not yet run out) is held by nobody:
 * its segment objects and its unsealed WAL entries had no one to drop them, and the metastore's rows pointing at them
 * went with the stream. This pass finds them by name, without any record of the deletion: a WAL key is
 * `<stream>@<createdAt>/<partition>` (partition.ts) and a segment object lives under
 * `streams/<stream>/<createdAt>/<partition>/` (LogState.objectPrefix); whatever carries a stream and creation time
 * that the catalog does not hold belongs to a deleted stream (a stream created again under the same name has another
 * creation time).
 *
 * The WAL keys and the objects are listed before the catalog is read: anything listed was written after its stream's
 * row was committed (a partition is opened, and so fenced and written, only for a stream in the catalog), so a stream
 * that exists when the catalog is read is in it. Deleting is idempotent, so brokers may collect at the same time.
 */
import type { LogState } from './log-state.js';

export interface Collected {
  /** WAL keys dropped (entries and fence), and the bytes of entries they held. */
  walKeys: number;
  walBytes: number;
  /** Segment objects deleted. */
  objects: number;
}

/** Objects deleted per pass at most (the rest waits for the next one). */
const MAX_OBJECTS_PER_PASS = 10_000;

/** `name@createdAt` of a WAL key `<name>@<createdAt>/<partition>`, or null for a key of another shape. */
export function streamOfWalKey(key: string): string | null {
  const slash = key.lastIndexOf('/');
  if (slash < 0 || !/^\d+$/.test(key.slice(slash + 1))) return null;
  const head = key.slice(0, slash);
  const at = head.lastIndexOf('@');
  if (at <= 0 || !/^\d+$/.test(head.slice(at + 1))) return null;
  return head;
}

/** `name@createdAt` of an object key `streams/<name>/<createdAt>/<partition>/<file>`, or null for another shape. */
export function streamOfObjectKey(key: string): string | null {
  const parts = key.split('/');
  if (parts.length < 5 || parts[0] !== 'streams') return null;
  const createdAt = parts[parts.length - 3];
  const partition = parts[parts.length - 2];
  if (!/^\d+$/.test(createdAt) || !/^\d+$/.test(partition)) return null;
  return `${parts.slice(1, -3).join('/')}@${createdAt}`;
}

/**
 * One pass: drops the WAL keys and deletes the segment objects of streams the catalog no longer holds. Nothing to do
 * for a WAL that cannot list its keys (a broker's own files: every partition is its own, dropped with the stream).
 */
export async function collectDeleted(lm: LogState): Promise<Collected> {
  const out: Collected = { walKeys: 0, walBytes: 0, objects: 0 };
  if (lm.wal.sharedKeys === undefined || lm.wal.dropKeys === undefined) return out;
  const walKeys = await lm.wal.sharedKeys();
  const objects = await lm.objects.list('streams/');
  const live = new Set((await lm.meta.listStreams()).map((d) => `${d.name}@${d.createdAt}`));
  const deadKeys = walKeys.filter((k) => {
    const s = streamOfWalKey(k);
    return s !== null && !live.has(s) && !lm.byKey.has(k);
  });
  if (deadKeys.length > 0) {
    out.walBytes = await lm.wal.dropKeys(deadKeys);
    out.walKeys = deadKeys.length;
  }
  for (const o of objects) {
    if (out.objects >= MAX_OBJECTS_PER_PASS) break;
    const s = streamOfObjectKey(o.key);
    if (s === null || live.has(s)) continue;
    await lm.objects.delete(o.key);
    lm.indexCache.delete(o.key);
    out.objects++;
  }
  lm.stats.deletedStreamWalKeys += out.walKeys;
  lm.stats.deletedStreamWalBytes += out.walBytes;
  lm.stats.deletedStreamObjects += out.objects;
  if (out.walKeys > 0 || out.objects > 0) lm.logger.info(out, 'log: collected what deleted streams left in the WAL and the object store');
  return out;
}
