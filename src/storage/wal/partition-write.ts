/**
 * The partition WAL's state (`PartitionWalState`, the base of `PartitionWal`: its keys, fences, write slots and
 * staging memory, counters) and its write path: a key's group-commit loop, the write slots, one write per file with
 * O_DSYNC (direct I/O through the staged last partial block), files started ahead (spares), closed, and a failed
 * write cut off (undo). See partition-wal.ts for the design.
 */
import { constants } from 'node:fs';
import { mkdir, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32c, FlowError, LatencyHistogram } from '../../core/index.js';
import { DIRECT_BLOCK, alignedBuffer } from '../direct-io.js';
import { errnoCode, fsOpen, shortWrite, syncDir, writeError, type FileOpener } from '../fs-util.js';
import { EpochFences, frameCrc, FRAME_HEADER, KeyFences, writeGroups, writeU64 } from './frame.js';
import type { WalEntry } from './types.js';
import {
  BUSY_KEY_MS,
  ENTRY,
  ENTRY_HEAD,
  fileHeader,
  fileName,
  roundUp,
  type EntryPos,
  type Group,
  type KeyLog,
  type NewFile,
  type PartitionWalOptions,
  type WFile,
} from './partition-file.js';

export class PartitionWalState {
  /** Group writes made, one key's each (for tests). */
  groupCount = 0;
  /** Duration of each durable write of a key's run of entries (ms), for /metrics. */
  readonly commitLatency = new LatencyHistogram();
  /** Writes made with O_DIRECT (for tests). */
  directWrites = 0;
  /** Files handed over whole (for tests and the admin API). */
  filesHandedOver = 0;
  /** Bytes cut off torn files by the recovery at open. */
  readonly recoveryTruncatedBytes: number;

  readonly keys = new Map<string, KeyLog>();
  totalBytes = 0;
  closed = false;
  closing: Promise<void> | null = null;
  /** Keys refused after a failed write, until the caller resumes them (see KeyFences). */
  readonly fences = new KeyFences();
  /** Each key's ownership epoch, in memory (see EpochFences). */
  readonly epochs = new EpochFences();
  readonly io: FileOpener;
  readonly fsync: boolean;
  readonly dsync: number;
  /** O_DIRECT while wanted and working; 0 once a file could not be opened or aligned with it. */
  direct: number;
  /** Aligned staging memory, one per write slot (null until first needed). */
  readonly stages: Array<Buffer | null>;
  readonly freeSlots: number[];
  readonly slotWaiters: Array<(slot: number) => void> = [];

  protected constructor(
    readonly dir: string,
    recovered: KeyLog[],
    truncated: number,
    readonly opts: PartitionWalOptions,
  ) {
    for (const kl of recovered) {
      this.keys.set(kl.key, kl);
      for (const f of kl.files) this.totalBytes += f.size;
    }
    this.recoveryTruncatedBytes = truncated;
    this.io = opts.io ?? fsOpen;
    this.fsync = opts.fsync ?? true;
    this.dsync = this.fsync ? constants.O_DSYNC : 0;
    const O_DIRECT = constants.O_DIRECT;
    this.direct = opts.directIo !== false && typeof O_DIRECT === 'number' ? O_DIRECT : 0;
    const n = Math.max(1, opts.writeConcurrency ?? 4);
    this.stages = new Array<Buffer | null>(n).fill(null);
    this.freeSlots = Array.from({ length: n }, (_, i) => i);
  }
}

export async function flushLoop(w: PartitionWalState, kl: KeyLog): Promise<void> {
  const next = (): Group | null => {
    const q = kl.queued.shift();
    if (q !== undefined) return q;
    const g = kl.pending;
    kl.pending = null;
    return g;
  };
  const failed = (g: Group, err: FlowError): void => {
    // What was queued behind the failed group was appended before anyone knew: it goes too, and the key waits
    // for its caller to resume it (no entry may follow a hole).
    const behind = kl.queued.splice(0);
    if (kl.pending !== null) behind.push(kl.pending);
    kl.pending = null;
    for (const b of behind) b.reject(err);
    for (const x of [g, ...behind]) for (const e of x.entries) w.fences.refuse(kl.key, e.baseOffset, err);
  };
  // A group that arrived as the last one finished is seen here, in the same step that declares the loop idle.
  while (kl.pending !== null || kl.queued.length > 0) {
    await writeGroups(
      next,
      async (g) => {
        await withSlot(w, (slot) => writeKey(w, kl, g.entries, slot));
        w.groupCount++;
      },
      failed,
    );
  }
  kl.flushing = null;
}

export async function withSlot<T>(w: PartitionWalState, fn: (slot: number) => Promise<T>): Promise<T> {
  const slot = w.freeSlots.pop() ?? (await new Promise<number>((resolve) => w.slotWaiters.push(resolve)));
  try {
    return await fn(slot);
  } finally {
    const next = w.slotWaiters.shift();
    if (next) next(slot);
    else w.freeSlots.push(slot);
  }
}

/** Writes one key's entries of a group: one write per file, files in order. */
export async function writeKey(w: PartitionWalState, kl: KeyLog, entries: WalEntry[], slot: number): Promise<void> {
  // Nothing of the key is written (nor its file closed for another) while its last file may end in garbage.
  const last = kl.files.length > 0 ? kl.files[kl.files.length - 1] : undefined;
  if (last?.torn === true) {
    await undo(w, last, slot);
    last.torn = false;
  }
  let i = 0;
  while (i < entries.length) {
    let f = kl.files.length > 0 ? kl.files[kl.files.length - 1] : undefined;
    if (f === undefined || f.fh === null || f.taking || (entries[i].startsFile === true && f.entries.length > 0)) {
      // The finished file is closed in the background: closing is not part of durability, and waiting for a
      // thread-pool slot here would hold up the whole group. A handover waits for it (f.closing).
      if (f !== undefined && f.fh !== null) closeFile(f).catch(() => undefined);
      f = await createFile(w, kl, entries[i].baseOffset);
    }
    let j = i + 1;
    while (j < entries.length && entries[j].startsFile !== true) j++;
    await writeRun(w, f, entries, i, j, slot);
    i = j;
  }
}

export async function createFile(w: PartitionWalState, kl: KeyLog, base: number): Promise<WFile> {
  const clash = kl.files.findIndex((x) => x.base === base);
  if (clash >= 0) {
    const old = kl.files[clash];
    if (old.entries.length > 0) {
      throw new FlowError('STORAGE_ERROR', `WAL for ${kl.key} already has a file starting at offset ${base}`);
    }
    // An empty file left by a failed first write: replaced.
    kl.files.splice(clash, 1);
    await closeFile(old);
    await unlink(old.path).catch(() => undefined);
  }
  if (!kl.dirMade) {
    await mkdir(kl.dir, { recursive: true });
    if (w.fsync) await syncDir(w.dir);
    kl.dirMade = true;
  }
  const spare = kl.spare === null ? null : await kl.spare;
  let path: string;
  let fh: FileHandle;
  try {
    if (spare === null) throw new Error('no file created ahead');
    path = spare.path;
    fh = spare.fh ?? (await openFile(w, path, false));
  } catch {
    ({ path, fh } = await newFile(w, kl));
  }
  // The next one, in the background; kept open when this key switches files often.
  const now = Date.now();
  const busy = now - kl.fileStartedAt < BUSY_KEY_MS;
  kl.fileStartedAt = now;
  kl.spare = spareFile(w, kl, busy).catch(() => null);
  const header = fileHeader(kl.keyBytes, base);
  const direct = w.direct !== 0;
  const f: WFile = {
    base,
    path,
    seed: crc32c(header),
    header,
    size: 0,
    end: base,
    entries: [],
    fh,
    closing: null,
    direct,
    partial: direct ? Buffer.allocUnsafe(DIRECT_BLOCK) : null,
    taking: false,
    recovered: null,
  };
  kl.files.push(f);
  return f;
}

/** Creates the key's next file, its directory entry durable (or a crash could lose a file of acknowledged frames). */
export async function newFile(w: PartitionWalState, kl: KeyLog): Promise<NewFile & { fh: FileHandle }> {
  const path = join(kl.dir, fileName(kl.nextSeq++));
  const fh = await openFile(w, path, true);
  try {
    if (w.fsync) await syncDir(kl.dir);
  } catch (err) {
    await fh.close().catch(() => undefined);
    // Left here, an empty file could end up between two of the key's files with entries (which recovery
    // refuses): it goes.
    await unlink(path).catch(() => undefined);
    throw err;
  }
  return { path, fh };
}

/** The key's next file, created in the background; open when `keepOpen`, else closed until needed. */
export async function spareFile(w: PartitionWalState, kl: KeyLog, keepOpen: boolean): Promise<NewFile> {
  const { path, fh } = await newFile(w, kl);
  if (keepOpen) return { path, fh };
  await fh.close();
  return { path, fh: null };
}

/** Closes and deletes the key's file created ahead, if any. */
export async function dropSpare(kl: KeyLog): Promise<void> {
  const spare = kl.spare === null ? null : await kl.spare;
  kl.spare = null;
  if (spare === null) return;
  await spare.fh?.close().catch(() => undefined);
  await unlink(spare.path).catch(() => undefined);
}

/** Opens a new (or created ahead) file for appends: O_DSYNC with fsync on, O_DIRECT while the filesystem takes it. */
export async function openFile(w: PartitionWalState, path: string, create: boolean): Promise<FileHandle> {
  const flags = constants.O_WRONLY | (create ? constants.O_CREAT | constants.O_TRUNC : 0) | w.dsync;
  if (w.direct !== 0) {
    try {
      return await w.io.open(path, flags | w.direct);
    } catch (err) {
      if (errnoCode(err) !== 'EINVAL') throw err;
      w.direct = 0; // e.g. tmpfs: no O_DIRECT, the page cache it is
    }
  }
  return w.io.open(path, flags);
}

export async function writeRun(w: PartitionWalState, f: WFile, entries: WalEntry[], from: number, to: number, slot: number): Promise<void> {
  const bufs: Buffer[] = [];
  let bytes = 0;
  if (f.header !== null) {
    bufs.push(f.header);
    bytes += f.header.length;
  }
  const added: EntryPos[] = [];
  for (let k = from; k < to; k++) {
    const e = entries[k];
    const head = Buffer.allocUnsafe(ENTRY_HEAD);
    head.writeUInt32BE(1 + 16 + e.data.length, 0);
    head[FRAME_HEADER] = ENTRY;
    writeU64(head, e.baseOffset, FRAME_HEADER + 1);
    writeU64(head, e.endOffset, FRAME_HEADER + 9);
    head.writeUInt32BE(frameCrc(f.seed, head, e.data, e.dataCrc), 4);
    bufs.push(head, e.data);
    added.push({ base: e.baseOffset, end: e.endOffset, position: f.size + bytes + ENTRY_HEAD, size: e.data.length });
    bytes += ENTRY_HEAD + e.data.length;
  }
  const fh = f.fh as FileHandle;
  try {
    const t0 = performance.now();
    if (f.direct) await writeDirect(w, f, fh, bufs, bytes, slot);
    else {
      const { bytesWritten } = await fh.writev(bufs, f.size);
      if (bytesWritten !== bytes) throw shortWrite(bytesWritten, bytes);
    }
    w.commitLatency.record(performance.now() - t0);
  } catch (err) {
    try {
      await undo(w, f, slot);
    } catch {
      f.torn = true; // cut before the key's next write (writeKey)
    }
    throw writeError(`WAL write to ${f.path} failed`, err);
  }
  f.header = null;
  f.size += bytes;
  f.end = entries[to - 1].endOffset;
  for (const a of added) f.entries.push(a);
  w.totalBytes += bytes;
}

/**
 * The file's last partial block, then `bufs`, then zeros to the next block, written at the partial block's start
 * from the slot's aligned staging memory (grown as needed: aligned by probing past the file's data).
 */
export async function writeDirect(w: PartitionWalState, f: WFile, fh: FileHandle, bufs: Buffer[], bytes: number, slot: number): Promise<void> {
  const partialLen = f.size % DIRECT_BLOCK;
  const blockStart = f.size - partialLen;
  const total = roundUp(partialLen + bytes);
  const stage = await stagingBuffer(w, slot, fh, total, blockStart + (partialLen > 0 ? DIRECT_BLOCK : 0));
  const partial = f.partial as Buffer;
  let at = partial.copy(stage, 0, 0, partialLen);
  for (const b of bufs) at += b.copy(stage, at);
  stage.fill(0, at, total);
  const { bytesWritten } = await fh.write(stage, 0, total, blockStart);
  if (bytesWritten !== total) throw shortWrite(bytesWritten, total);
  w.directWrites++;
  const newSize = f.size + bytes;
  const tail = newSize % DIRECT_BLOCK;
  stage.copy(partial, 0, newSize - tail - blockStart, newSize - blockStart);
}

export async function stagingBuffer(w: PartitionWalState, slot: number, fh: FileHandle, size: number, probeAt: number): Promise<Buffer> {
  const have = w.stages[slot];
  if (have !== null && have.length >= size) return have;
  let n = 1024 * 1024;
  while (n < size) n *= 2;
  // The probe writes a block of zeros at `probeAt`, past the file's data, where zeros mean its end.
  const b = await alignedBuffer(fh, n, probeAt);
  w.stages[slot] = b;
  return b;
}

/**
 * After a failed write: the durable bytes of the last partial block are written back from memory (a direct write
 * rewrote that block) and the rest is cut off, durably. Throws if that fails (the caller retries it later).
 */
export async function undo(w: PartitionWalState, f: WFile, slot: number): Promise<void> {
  const fh = f.fh ?? (await w.io.open(f.path, 'r+'));
  try {
    if (f.fh !== null && f.direct && f.partial !== null && f.size % DIRECT_BLOCK > 0) {
      const partialLen = f.size % DIRECT_BLOCK;
      const stage = await stagingBuffer(w, slot, fh, DIRECT_BLOCK, f.size - partialLen + DIRECT_BLOCK);
      f.partial.copy(stage, 0, 0, partialLen);
      stage.fill(0, partialLen, DIRECT_BLOCK);
      await fh.write(stage, 0, DIRECT_BLOCK, f.size - partialLen);
    }
    await fh.truncate(f.size);
    if (w.fsync) await fh.datasync();
  } finally {
    if (fh !== f.fh) await fh.close().catch(() => undefined);
  }
}

/**
 * Closes a file to appends (at once: the next write of its key opens another). The zeros after its last frame
 * stay: they mean its end, a handover writes its trailer over them, and a restart cuts what is left (a truncate
 * here cost a journal commit in the group that started the next file). Every caller gets the same promise.
 */
export function closeFile(f: WFile): Promise<void> {
  const fh = f.fh;
  f.fh = null;
  f.partial = null;
  if (fh !== null) f.closing = fh.close();
  return f.closing ?? Promise.resolve();
}
