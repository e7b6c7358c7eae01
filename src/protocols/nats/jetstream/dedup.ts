/**
 * What makes a stream's duplicate window (Nats-Msg-Id dedupe, message-api.ts) survive a restart on a single broker:
 *
 * - its length: a `duplicate_window` other than the default 2 minutes (set, or derived from a shorter `max_age`) is
 *   kept in the stream's stored configs under WINDOW_KEY, read back at start;
 * - its ids: not stored, but rebuilt at start from the headers of the stream's records still inside the window,
 *   reading at most the last `maxDedupIds` (200,000) records, the bound the window has in memory anyway. The ids
 *   keep their records' timestamps, so they leave the window when they would have without the restart. Only streams
 *   marked with IDS_KEY are read (set once a publish with a Nats-Msg-Id reached the stream): a Kafka topic or MQTT
 *   stream of 200,000 fresh records held the NATS listener of a restarting broker ~350 ms while it was read.
 *
 * Cluster mode keeps the window in the memory of the partition's owner (docs/nats.md), and a broker that becomes the
 * owner rebuilds it the same way before it checks its first id (windowLoad): a publish retried through any broker
 * after the owner died, was paused past its lease or handed the partition over is still found a duplicate.
 */
import { decodeBatch, readBatchInfo, type StreamDef } from '../../../core/index.js';
import type { JetStreamState } from './service-state.js';
import { DEFAULT_DUPLICATE_WINDOW_NS } from './stream-info.js';

/** The stream config holding a non-default duplicate window, in ns. */
export const WINDOW_KEY = 'nats.duplicate_window';

/** Set (to "true") in a stream's configs once a publish with a Nats-Msg-Id reached it: its ids are rebuilt at start. */
export const IDS_KEY = 'nats.msg_ids';

/** Streams whose IDS_KEY is being written, per JetStream service (written once each). */
const marking = new WeakMap<JetStreamState, Set<string>>();

/** Marks `stream` as holding Nats-Msg-Ids (IDS_KEY), once; a failed write is logged and tried again by a later id. */
export function markIds(js: JetStreamState, stream: string): void {
  const e = js.engine.getAnyStream(stream);
  if (e === undefined || e.def.configs?.[IDS_KEY] === 'true' || js.cluster !== null) return;
  let busy = marking.get(js);
  if (!busy) marking.set(js, (busy = new Set()));
  if (busy.has(stream)) return;
  busy.add(stream);
  const { name: _n, partitions: _p, bindings: _b, createdAt: _c, id: _i, ...settings } = e.def;
  js.engine.setSettings(stream, { ...settings, configs: { ...(e.def.configs ?? {}), [IDS_KEY]: 'true' } }).then(
    () => busy.delete(stream),
    (err: unknown) => {
      busy.delete(stream);
      js.logger.warn({ err, stream }, 'JetStream: the mark of a stream holding message ids was not stored');
    },
  );
}

/** Bytes read per step while rebuilding. */
const READ_BYTES = 1024 * 1024;

/** The stored duplicate window of a stream, ns (the default when none is stored or it cannot be read). */
export function storedWindowNs(def: StreamDef): number {
  const v = Number(def.configs?.[WINDOW_KEY]);
  return Number.isSafeInteger(v) && v > 0 ? v : DEFAULT_DUPLICATE_WINDOW_NS;
}

/** Sets a stream's duplicate window, storing it with the stream's configs when it is not the default. */
export async function keepWindow(js: JetStreamState, def: StreamDef, ns: number): Promise<StreamDef> {
  js.duplicateWindowNs.set(def.name, ns);
  const want = ns === DEFAULT_DUPLICATE_WINDOW_NS ? undefined : String(ns);
  if (def.configs?.[WINDOW_KEY] === want) return def;
  const configs: Record<string, string> = { ...(def.configs ?? {}) };
  if (want === undefined) delete configs[WINDOW_KEY];
  else configs[WINDOW_KEY] = want;
  const { name: _n, partitions: _p, bindings: _b, createdAt: _c, id: _i, ...settings } = def;
  return js.engine.setSettings(def.name, { ...settings, configs });
}

/**
 * At start: every stream's window length, and the ids of the records inside it (single-partition streams, where
 * sequences are offsets + 1). Returns how many ids were found.
 */
export async function rebuildWindows(js: JetStreamState): Promise<number> {
  let found = 0;
  for (const d of js.engine.listAllStreams()) {
    const ns = storedWindowNs(d);
    js.duplicateWindowNs.set(d.name, ns);
    if (d.partitions !== 1 || js.cluster !== null || d.configs?.[IDS_KEY] !== 'true') continue;
    found += await rebuildIds(js, d.name, ns / 1e6);
  }
  return found;
}

/**
 * Cluster mode, at the owner of a single-partition stream, before a Nats-Msg-Id (or an expectation on the last one)
 * is checked: null when the window holds what this ownership of the partition (its epoch) stored, else the rebuild of
 * the ids from the stream's records (started by the first such publish of the ownership; later ones wait for the
 * same one). Not the owner: null (the publish is forwarded, or made here when the owner cannot be reached).
 */
export function windowLoad(js: JetStreamState, stream: string): Promise<void> | null {
  const where = js.engine.storage.locate?.(stream, 0);
  if (where === undefined || !where.local) return null;
  const had = js.dedupEpochs.get(stream);
  if (had !== undefined && had.epoch === where.epoch) return had.loading;
  const def = js.engine.getAnyStream(stream)?.def;
  const ns = js.duplicateWindowNs.get(stream) ?? (def === undefined ? DEFAULT_DUPLICATE_WINDOW_NS : storedWindowNs(def));
  const entry: { epoch: number; loading: Promise<void> | null } = { epoch: where.epoch, loading: null };
  js.dedupEpochs.set(stream, entry);
  js.dedup.delete(stream);
  const loading = rebuildIds(js, stream, ns / 1e6).then(
    (found) => {
      if (js.dedupEpochs.get(stream) === entry) entry.loading = null;
      if (found > 0) js.logger.debug({ stream, ids: found, epoch: where.epoch }, 'JetStream: duplicate window rebuilt by the partition owner');
    },
    (err: unknown) => {
      // Tried again by the next publish with an id.
      if (js.dedupEpochs.get(stream) === entry) js.dedupEpochs.delete(stream);
      throw err;
    },
  );
  entry.loading = loading;
  return loading;
}

async function rebuildIds(js: JetStreamState, stream: string, windowMs: number): Promise<number> {
  const { logStartOffset, highWatermark } = js.engine.offsets(stream, 0);
  if (highWatermark <= logStartOffset) return 0;
  const since = await js.engine.offsetForTimestamp(stream, 0, Date.now() - windowMs);
  let from = Math.max(since, logStartOffset, highWatermark - js.maxDedupIds);
  let found = 0;
  while (from < highWatermark) {
    const batches = await js.engine.read(stream, 0, from, READ_BYTES);
    let next = from;
    for (const b of batches) {
      const info = readBatchInfo(b);
      next = Math.max(next, info.baseOffset + info.lastOffsetDelta + 1);
      for (const rec of decodeBatch(b)) {
        if (rec.offset < from) continue;
        const id = msgIdOf(rec.headers);
        if (id === undefined) continue;
        let ids = js.dedup.get(stream);
        if (!ids) js.dedup.set(stream, (ids = new Map<string, { seq: number; at: number }>()));
        ids.delete(id);
        ids.set(id, { seq: rec.offset + 1, at: rec.timestamp });
        found++;
      }
    }
    if (next <= from) break;
    from = next;
  }
  // Those past the window are forgotten by the first look-up (message-api.ts prune).
  return found;
}

function msgIdOf(headers: ReadonlyArray<{ key: string; value: Buffer | null }>): string | undefined {
  for (const h of headers) {
    if (h.key.length === 11 && h.key.toLowerCase() === 'nats-msg-id') return h.value === null ? '' : h.value.toString('utf8');
  }
  return undefined;
}
