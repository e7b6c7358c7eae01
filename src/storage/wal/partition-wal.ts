/**
 * The embedded hot tier, kept per partition: every key (a stream partition) has its own sequence of files, and a
 * closed file can leave the log whole to become a segment object (SegmentFileSource). In embedded mode the object
 * store is a directory on the same disk, so a segment is then a hard link: every byte produced is written to disk
 * once, where the shared-file layout (FileWal, `--wal-layout shared`) writes it to the WAL and again to a segment,
 * which capped a sustained produce at half the disk's bandwidth.
 *
 * Layout: `<dir>/<key dir>/<20-digit sequence number>.wal`. The key dir is the key with every byte outside
 * [A-Za-z0-9._@-] escaped as %XX (a long key is cut and given a hash); each file names its key and its first
 * offset itself:
 *
 *   header = "FMQPWL01" | u64 baseOffset | u16 keyLength | key
 *   frame  = u32 bodyLength | u32 crc | body
 *   body   = 0x01 | u64 baseOffset | u64 endOffset | data     an entry
 *          | 0x02 | trailer                                  the end of a file being handed over
 *
 * (big-endian; the crc is CRC-32C of the body seeded with the CRC-32C of the file's header, so a frame is only valid
 * in its own file). A zero length is never a frame: the zeros after a file's last frame (see Direct I/O) end it.
 *
 * Files are cut where the caller says (WalEntry.startsFile), and wherever a key has no open file (after a restart,
 * a trim or a handover): a file holds consecutive entries of one key. A key that has had a file keeps its next one
 * created ahead, empty, its directory entry already durable: starting a file then costs a group commit nothing more
 * (creating one costs a journal commit of its own, which under a sustained produce was in one group commit of
 * five). An empty file is nothing: recovery deletes it.
 *
 * Group commit, per key: a key's appends queue while its previous write runs and are then written together, in
 * order, with one write per file, on descriptors opened with O_DSYNC (durable when the write returns); they resolve
 * together. Keys do not wait for each other: at most `writeConcurrency` keys write at once (libuv's thread pool has
 * four threads), and a key whose write is slow (a file to start, a large group) holds up only its own appends (with
 * one group for all keys, every append waited for the slowest key's write of the group under way, then of its own).
 *
 * Direct I/O (default where the filesystem allows it): the files are new, and on the development VM a buffered
 * write of pages the cache has not held costs ~2.5 s of CPU per GiB (see ../direct-io.ts). A direct write starts
 * on a block boundary and is whole blocks from aligned memory, so a file's last partial block is kept in memory
 * and written again with the new frames, followed by zeros up to the next block: frames stay back to back (a
 * handed-over file is a compact segment), and on disk a file ends in less than a block of zeros, cut off when it is
 * closed. Rewriting that block in place relies on a 4 KiB write landing whole, as other direct-I/O logs do.
 *
 * Recovery (at open): every file is checked frame by frame. A key's files are written one after the other (a new
 * file gets its first frame only after the previous file's last write returned), so a torn write can only leave
 * garbage at the end of the key's last file that holds entries: it is cut off there, and newer files without
 * entries are deleted. Garbage anywhere else is corruption of acknowledged data (CORRUPT_DATA). A trailer frame
 * ends its file's entries: the file was being handed over when the broker stopped, and will be again if its segment
 * was not committed. Such a file is left byte for byte as it is: the object store may hold it (a link) as an object.
 * A handed-over file leaves the log (is deleted) only once the caller has committed its segment (release(true)).
 *
 * Failed writes (a full disk, EIO): a group never spans two files (an entry that starts a file starts a group),
 * so a group is durable whole or not at all. A failed group is refused with the groups queued behind it for its
 * key, and the key is fenced (frame.ts KeyFences) until the caller resumes it where its durable entries end. The
 * partial write is cut off (the last partial block written back from memory, the file truncated to its frames);
 * if that fails too, the file is marked torn and the cut retried before the key writes anything else (or closes
 * the file for a new one), so garbage can only ever be at the end of the key's last file, as recovery expects.
 */
import { constants } from 'node:fs';
import { mkdir, open, readdir, readFile, rmdir, unlink, type FileHandle } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { crc32c, FlowError, LatencyHistogram } from '../../core/index.js';
import { DIRECT_BLOCK, alignedBuffer } from '../direct-io.js';
import { errnoCode, fsOpen, shortWrite, syncDir, writeError, type FileOpener } from '../fs-util.js';
import { appendRefusal, EpochFences, fenceProblem, frameCrc, FRAME_HEADER, groupCommit, isSafeOffset, KeyFences, readU64, writeGroups, writeU64, type GroupCommit } from './frame.js';
import type { FileLayout, SegmentFileSource, WalEntry, WriteAheadLog } from './types.js';

export interface PartitionWalOptions {
  /** Make every group durable (O_DSYNC) before acknowledging it. Default true; false only for tests and benchmarks. */
  fsync?: boolean;
  /** Write around the page cache (O_DIRECT) where the filesystem allows it. Default true. */
  directIo?: boolean;
  /** Keys written at the same time within a group. Default 4. */
  writeConcurrency?: number;
  /** Told about torn writes cut off at recovery (pino's Logger fits). */
  logger?: { warn(obj: object, msg: string): void };
  /** Opens the files entries are written to (tests inject failing writes here). Default: node:fs/promises. */
  io?: FileOpener;
}

const MAGIC = Buffer.from('FMQPWL01', 'latin1');
const ENTRY = 1;
const TRAILER = 2;
/** Frame header plus an entry body's fixed part (type, two u64 offsets). */
const ENTRY_HEAD = FRAME_HEADER + 1 + 16;
const MAX_KEY_BYTES = 4096;
const MAX_BODY = 0xffffffff;
const FILE_RE = /^(\d{20})\.wal$/;
/** Longest key dir name kept whole; longer ones are cut and given a hash (file names end at 255 bytes). */
const MAX_DIR_NAME = 200;

const fileName = (seq: number): string => `${String(seq).padStart(20, '0')}.wal`;

function keyDirName(keyBytes: Buffer): string {
  let out = '';
  for (const c of keyBytes) {
    const ch = String.fromCharCode(c);
    out += /[A-Za-z0-9._@-]/.test(ch) ? ch : `%${c.toString(16).padStart(2, '0').toUpperCase()}`;
  }
  if (out.length <= MAX_DIR_NAME) return out;
  return `${out.slice(0, 150)}~${createHash('sha256').update(keyBytes).digest('hex').slice(0, 32)}`;
}

function fileHeader(keyBytes: Buffer, base: number): Buffer {
  const h = Buffer.allocUnsafe(MAGIC.length + 8 + 2 + keyBytes.length);
  MAGIC.copy(h, 0);
  writeU64(h, base, 8);
  h.writeUInt16BE(keyBytes.length, 16);
  keyBytes.copy(h, 18);
  return h;
}

interface EntryPos {
  base: number;
  end: number;
  /** Where the entry's data starts in the file. */
  position: number;
  size: number;
}

interface WFile {
  base: number;
  path: string;
  seed: number;
  /** Written with the file's first frames; null once on disk. */
  header: Buffer | null;
  /** Durable bytes: header and complete frames. */
  size: number;
  /** endOffset of the last entry (the base while there is none). */
  end: number;
  entries: EntryPos[];
  /** Open for appends; null once closed. */
  fh: FileHandle | null;
  /** The close under way or done (the descriptor closed, the zeros after the last frame cut off). */
  closing: Promise<void> | null;
  direct: boolean;
  /** Direct I/O: the bytes of the last partial block, [size - size % DIRECT_BLOCK, size). */
  partial: Buffer | null;
  /** Being handed over (takeFile until release). */
  taking: boolean;
  /** The file's bytes, read at recovery and kept until the replay hands them out. */
  recovered: Buffer | null;
  /** A failed write could not be cut off: bytes beyond `size` may be garbage until the cut is made (see repair). */
  torn?: boolean;
}

interface KeyLog {
  key: string;
  keyBytes: Buffer;
  dir: string;
  files: WFile[];
  dirMade: boolean;
  /** Appends waiting for the key's next write. */
  pending: Group | null;
  /** Complete groups waiting before `pending` (a group ends where an entry starts a file). */
  queued: Group[];
  /** The key's write loop, from its first pending append until nothing is pending or being written. */
  flushing: Promise<void> | null;
  /** Sequence number of the key's next new file. */
  nextSeq: number;
  /** The next file, being created or ready (null if that failed: the file is then created when needed). */
  spare: Promise<NewFile | null> | null;
  /** When the key's current file was started (Date.now()), to tell a key that switches files often. */
  fileStartedAt: number;
}

/**
 * A file created ahead: empty, its directory entry durable; kept open for a key that switches files often (so the
 * switch in a group commit costs no open, which would wait for a thread-pool slot behind the other keys' writes),
 * closed otherwise (a quiet partition holds no spare descriptor).
 */
interface NewFile {
  path: string;
  fh: FileHandle | null;
}

/** A key whose previous file was started less than this long before the current one keeps its next file open. */
const BUSY_KEY_MS = 10_000;

interface Group extends GroupCommit {
  entries: WalEntry[];
}

function newGroup(): Group {
  return { ...groupCommit(), entries: [] };
}

const roundUp = (n: number): number => Math.ceil(n / DIRECT_BLOCK) * DIRECT_BLOCK;

export class PartitionWal implements WriteAheadLog, SegmentFileSource {
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

  private readonly keys = new Map<string, KeyLog>();
  private totalBytes = 0;
  private closed = false;
  private closing: Promise<void> | null = null;
  /** Keys refused after a failed write, until the caller resumes them (see KeyFences). */
  private readonly fences = new KeyFences();
  /** Each key's ownership epoch, in memory (see EpochFences). */
  private readonly epochs = new EpochFences();
  private readonly io: FileOpener;
  private readonly fsync: boolean;
  private readonly dsync: number;
  /** O_DIRECT while wanted and working; 0 once a file could not be opened or aligned with it. */
  private direct: number;
  /** Aligned staging memory, one per write slot (null until first needed). */
  private readonly stages: Array<Buffer | null>;
  private readonly freeSlots: number[];
  private readonly slotWaiters: Array<(slot: number) => void> = [];

  private constructor(
    readonly dir: string,
    recovered: KeyLog[],
    truncated: number,
    private readonly opts: PartitionWalOptions,
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

  /** Opens the log in `dir`, recovering its files (see the top of this file). */
  static async open(dir: string, opts: PartitionWalOptions = {}): Promise<PartitionWal> {
    let names: string[];
    try {
      await mkdir(dir, { recursive: true });
      names = await readdir(dir);
    } catch (err) {
      throw new FlowError('STORAGE_ERROR', `cannot open WAL directory ${dir}`, { cause: err });
    }
    const keys: KeyLog[] = [];
    let truncated = 0;
    for (const name of names.sort()) {
      const kdir = join(dir, name);
      const r = await recoverKey(kdir, opts);
      truncated += r.truncated;
      if (r.log) keys.push(r.log);
    }
    return new PartitionWal(dir, keys, truncated, opts);
  }

  size(): number {
    return this.totalBytes;
  }

  /** Files currently held for `key` (for tests). */
  fileCount(key?: string): number {
    if (key !== undefined) return this.keys.get(key)?.files.length ?? 0;
    let n = 0;
    for (const kl of this.keys.values()) n += kl.files.length;
    return n;
  }

  async fence(key: string, epoch: number): Promise<void> {
    if (this.closed) throw new FlowError('CLOSED', 'WAL is closed');
    const bad = fenceProblem(key, epoch);
    if (bad) throw bad;
    this.epochs.raise(key, epoch);
  }

  append(entry: WalEntry): Promise<void> {
    // The epoch first: a fenced writer's entry must not lift the key's fence after a failed write either.
    const refused = appendRefusal(this.closed, entry) ?? this.epochs.check(entry) ?? this.fences.check(entry);
    if (refused) return Promise.reject(refused);
    const { key, data } = entry;
    if (1 + 16 + data.length > MAX_BODY) return Promise.reject(new FlowError('INVALID_ARGUMENT', 'WAL entry too large'));
    let kl = this.keys.get(key);
    if (kl === undefined) {
      const keyBytes = Buffer.from(key, 'utf8');
      if (keyBytes.length > MAX_KEY_BYTES) {
        return Promise.reject(new FlowError('INVALID_ARGUMENT', `WAL key longer than ${MAX_KEY_BYTES} bytes`));
      }
      kl = {
        key,
        keyBytes,
        dir: join(this.dir, keyDirName(keyBytes)),
        files: [],
        dirMade: false,
        pending: null,
        queued: [],
        flushing: null,
        nextSeq: 1,
        spare: null,
        fileStartedAt: -Infinity,
      };
      this.keys.set(key, kl);
    }
    let g = kl.pending;
    if (g === null || (entry.startsFile === true && g.entries.length > 0)) {
      // A group holds one file's entries: written with one write, durable whole or not at all.
      if (g !== null) kl.queued.push(g);
      g = kl.pending = newGroup();
    }
    // The caller must not modify `data` until the promise settles: it is written from this very buffer.
    g.entries.push(entry);
    kl.flushing ??= this.flushLoop(kl);
    return g.promise;
  }

  private async flushLoop(kl: KeyLog): Promise<void> {
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
      for (const x of [g, ...behind]) for (const e of x.entries) this.fences.refuse(kl.key, e.baseOffset, err);
    };
    // A group that arrived as the last one finished is seen here, in the same step that declares the loop idle.
    while (kl.pending !== null || kl.queued.length > 0) {
      await writeGroups(
        next,
        async (g) => {
          await this.withSlot((slot) => this.writeKey(kl, g.entries, slot));
          this.groupCount++;
        },
        failed,
      );
    }
    kl.flushing = null;
  }

  private async withSlot<T>(fn: (slot: number) => Promise<T>): Promise<T> {
    const slot = this.freeSlots.pop() ?? (await new Promise<number>((resolve) => this.slotWaiters.push(resolve)));
    try {
      return await fn(slot);
    } finally {
      const next = this.slotWaiters.shift();
      if (next) next(slot);
      else this.freeSlots.push(slot);
    }
  }

  /** Writes one key's entries of a group: one write per file, files in order. */
  private async writeKey(kl: KeyLog, entries: WalEntry[], slot: number): Promise<void> {
    // Nothing of the key is written (nor its file closed for another) while its last file may end in garbage.
    const last = kl.files.length > 0 ? kl.files[kl.files.length - 1] : undefined;
    if (last?.torn === true) {
      await this.undo(last, slot);
      last.torn = false;
    }
    let i = 0;
    while (i < entries.length) {
      let f = kl.files.length > 0 ? kl.files[kl.files.length - 1] : undefined;
      if (f === undefined || f.fh === null || f.taking || (entries[i].startsFile === true && f.entries.length > 0)) {
        // The finished file is closed in the background: closing is not part of durability, and waiting for a
        // thread-pool slot here would hold up the whole group. A handover waits for it (f.closing).
        if (f !== undefined && f.fh !== null) this.closeFile(f).catch(() => undefined);
        f = await this.createFile(kl, entries[i].baseOffset);
      }
      let j = i + 1;
      while (j < entries.length && entries[j].startsFile !== true) j++;
      await this.writeRun(f, entries, i, j, slot);
      i = j;
    }
  }

  private async createFile(kl: KeyLog, base: number): Promise<WFile> {
    const clash = kl.files.findIndex((x) => x.base === base);
    if (clash >= 0) {
      const old = kl.files[clash];
      if (old.entries.length > 0) {
        throw new FlowError('STORAGE_ERROR', `WAL for ${kl.key} already has a file starting at offset ${base}`);
      }
      // An empty file left by a failed first write: replaced.
      kl.files.splice(clash, 1);
      await this.closeFile(old);
      await unlink(old.path).catch(() => undefined);
    }
    if (!kl.dirMade) {
      await mkdir(kl.dir, { recursive: true });
      if (this.fsync) await syncDir(this.dir);
      kl.dirMade = true;
    }
    const spare = kl.spare === null ? null : await kl.spare;
    let path: string;
    let fh: FileHandle;
    try {
      if (spare === null) throw new Error('no file created ahead');
      path = spare.path;
      fh = spare.fh ?? (await this.openFile(path, false));
    } catch {
      ({ path, fh } = await this.newFile(kl));
    }
    // The next one, in the background; kept open when this key switches files often.
    const now = Date.now();
    const busy = now - kl.fileStartedAt < BUSY_KEY_MS;
    kl.fileStartedAt = now;
    kl.spare = this.spareFile(kl, busy).catch(() => null);
    const header = fileHeader(kl.keyBytes, base);
    const direct = this.direct !== 0;
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
  private async newFile(kl: KeyLog): Promise<NewFile & { fh: FileHandle }> {
    const path = join(kl.dir, fileName(kl.nextSeq++));
    const fh = await this.openFile(path, true);
    try {
      if (this.fsync) await syncDir(kl.dir);
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
  private async spareFile(kl: KeyLog, keepOpen: boolean): Promise<NewFile> {
    const { path, fh } = await this.newFile(kl);
    if (keepOpen) return { path, fh };
    await fh.close();
    return { path, fh: null };
  }

  /** Closes and deletes the key's file created ahead, if any. */
  private async dropSpare(kl: KeyLog): Promise<void> {
    const spare = kl.spare === null ? null : await kl.spare;
    kl.spare = null;
    if (spare === null) return;
    await spare.fh?.close().catch(() => undefined);
    await unlink(spare.path).catch(() => undefined);
  }

  /** Opens a new (or created ahead) file for appends: O_DSYNC with fsync on, O_DIRECT while the filesystem takes it. */
  private async openFile(path: string, create: boolean): Promise<FileHandle> {
    const flags = constants.O_WRONLY | (create ? constants.O_CREAT | constants.O_TRUNC : 0) | this.dsync;
    if (this.direct !== 0) {
      try {
        return await this.io.open(path, flags | this.direct);
      } catch (err) {
        if (errnoCode(err) !== 'EINVAL') throw err;
        this.direct = 0; // e.g. tmpfs: no O_DIRECT, the page cache it is
      }
    }
    return this.io.open(path, flags);
  }

  private async writeRun(f: WFile, entries: WalEntry[], from: number, to: number, slot: number): Promise<void> {
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
      if (f.direct) await this.writeDirect(f, fh, bufs, bytes, slot);
      else {
        const { bytesWritten } = await fh.writev(bufs, f.size);
        if (bytesWritten !== bytes) throw shortWrite(bytesWritten, bytes);
      }
      this.commitLatency.record(performance.now() - t0);
    } catch (err) {
      try {
        await this.undo(f, slot);
      } catch {
        f.torn = true; // cut before the key's next write (writeKey)
      }
      throw writeError(`WAL write to ${f.path} failed`, err);
    }
    f.header = null;
    f.size += bytes;
    f.end = entries[to - 1].endOffset;
    for (const a of added) f.entries.push(a);
    this.totalBytes += bytes;
  }

  /**
   * The file's last partial block, then `bufs`, then zeros to the next block, written at the partial block's start
   * from the slot's aligned staging memory (grown as needed: aligned by probing past the file's data).
   */
  private async writeDirect(f: WFile, fh: FileHandle, bufs: Buffer[], bytes: number, slot: number): Promise<void> {
    const partialLen = f.size % DIRECT_BLOCK;
    const blockStart = f.size - partialLen;
    const total = roundUp(partialLen + bytes);
    const stage = await this.stage(slot, fh, total, blockStart + (partialLen > 0 ? DIRECT_BLOCK : 0));
    const partial = f.partial as Buffer;
    let at = partial.copy(stage, 0, 0, partialLen);
    for (const b of bufs) at += b.copy(stage, at);
    stage.fill(0, at, total);
    const { bytesWritten } = await fh.write(stage, 0, total, blockStart);
    if (bytesWritten !== total) throw shortWrite(bytesWritten, total);
    this.directWrites++;
    const newSize = f.size + bytes;
    const tail = newSize % DIRECT_BLOCK;
    stage.copy(partial, 0, newSize - tail - blockStart, newSize - blockStart);
  }

  private async stage(slot: number, fh: FileHandle, size: number, probeAt: number): Promise<Buffer> {
    const have = this.stages[slot];
    if (have !== null && have.length >= size) return have;
    let n = 1024 * 1024;
    while (n < size) n *= 2;
    // The probe writes a block of zeros at `probeAt`, past the file's data, where zeros mean its end.
    const b = await alignedBuffer(fh, n, probeAt);
    this.stages[slot] = b;
    return b;
  }

  /**
   * After a failed write: the durable bytes of the last partial block are written back from memory (a direct write
   * rewrote that block) and the rest is cut off, durably. Throws if that fails (the caller retries it later).
   */
  private async undo(f: WFile, slot: number): Promise<void> {
    const fh = f.fh ?? (await this.io.open(f.path, 'r+'));
    try {
      if (f.fh !== null && f.direct && f.partial !== null && f.size % DIRECT_BLOCK > 0) {
        const partialLen = f.size % DIRECT_BLOCK;
        const stage = await this.stage(slot, fh, DIRECT_BLOCK, f.size - partialLen + DIRECT_BLOCK);
        f.partial.copy(stage, 0, 0, partialLen);
        stage.fill(0, partialLen, DIRECT_BLOCK);
        await fh.write(stage, 0, DIRECT_BLOCK, f.size - partialLen);
      }
      await fh.truncate(f.size);
      if (this.fsync) await fh.datasync();
    } finally {
      if (fh !== f.fh) await fh.close().catch(() => undefined);
    }
  }

  /**
   * Closes a file to appends (at once: the next write of its key opens another). The zeros after its last frame
   * stay: they mean its end, a handover writes its trailer over them, and a restart cuts what is left (a truncate
   * here cost a journal commit in the group that started the next file). Every caller gets the same promise.
   */
  private closeFile(f: WFile): Promise<void> {
    const fh = f.fh;
    f.fh = null;
    f.partial = null;
    if (fh !== null) f.closing = fh.close();
    return f.closing ?? Promise.resolve();
  }

  async replay(fn: (entry: WalEntry) => void): Promise<void> {
    if (this.closed) throw new FlowError('CLOSED', 'WAL is closed');
    for (const kl of [...this.keys.values()]) {
      for (const f of [...kl.files]) {
        if (f.entries.length === 0) continue;
        let buf = f.recovered;
        f.recovered = null;
        if (buf === null) {
          try {
            buf = await readRange(f.path, f.size);
          } catch (err) {
            if (errnoCode(err) === 'ENOENT' && !kl.files.includes(f)) continue; // trimmed or handed over meanwhile
            throw new FlowError('STORAGE_ERROR', `cannot read WAL file ${f.path}`, { cause: err });
          }
        }
        f.entries.forEach((e, i) =>
          fn({ key: kl.key, baseOffset: e.base, endOffset: e.end, epoch: 0, data: buf.subarray(e.position, e.position + e.size), startsFile: i === 0 }),
        );
      }
    }
  }

  async takeFile(
    key: string,
    baseOffset: number,
    endOffset: number,
    trailer: (layout: FileLayout) => Buffer,
  ): Promise<{ path: string; size: number; release(moved: boolean): void } | null> {
    if (this.closed) throw new FlowError('CLOSED', 'WAL is closed');
    const kl = this.keys.get(key);
    if (kl === undefined) return null;
    // Its entries are all durable (`end` moves only after a write), so no write in flight is for this file: one
    // that is (a caller that did not cut here) makes `end` differ, and the file is not taken.
    const f = kl.files.find((x) => x.base === baseOffset);
    if (f === undefined || f.taking || f.entries.length === 0 || f.end !== endOffset) return null;
    f.taking = true;
    try {
      await this.closeFile(f);
      // A file written with O_DIRECT ends in zeros up to a block boundary: the trailer frame is padded (zeros
      // before the trailer) to end on a block boundary too, so it usually takes the place of those zeros and the
      // file keeps its size: no truncate, and its fdatasync flushes data without a journal commit.
      const positions = f.entries.map((e) => e.position);
      const length = trailer({ positions, trailerPos: 0 }).length;
      const unpadded = f.size + FRAME_HEADER + 1 + length;
      const size = f.direct ? Math.ceil(unpadded / DIRECT_BLOCK) * DIRECT_BLOCK : unpadded;
      const filler = Buffer.alloc(size - unpadded);
      const t = trailer({ positions, trailerPos: unpadded - length + filler.length });
      if (t.length !== length) throw new Error('trailer length changed with its position');
      const head = Buffer.allocUnsafe(FRAME_HEADER + 1);
      head.writeUInt32BE(1 + filler.length + t.length, 0);
      head[FRAME_HEADER] = TRAILER;
      head.writeUInt32BE(frameCrc(f.seed, Buffer.concat([head, filler]), t), 4);
      const fh = await open(f.path, 'r+');
      try {
        const { bytesWritten } = await fh.writev([head, filler, t], f.size);
        if (bytesWritten !== size - f.size) throw shortWrite(bytesWritten, size - f.size);
        // More zeros than that only after an alignment probe past the data: cut off, so the footer ends the file.
        if ((await fh.stat()).size > size) await fh.truncate(size);
        if (this.fsync) await fh.datasync();
        f.torn = false; // whatever a failed write left after the entries is under the trailer, or cut off
      } finally {
        await fh.close();
      }
      let released = false;
      return {
        path: f.path,
        size,
        release: (moved: boolean) => {
          if (released) return;
          released = true;
          f.taking = false;
          if (!moved) return;
          const i = kl.files.indexOf(f);
          if (i >= 0) kl.files.splice(i, 1);
          this.totalBytes -= f.size;
          this.filesHandedOver++;
          // The object (a link or a copy of the file) is committed: the log's name for the file goes. Left behind by
          // a failure or a crash, the file is replayed and trimmed at the next open (its entries are flushed).
          unlink(f.path).catch((err: unknown) => {
            if (errnoCode(err) !== 'ENOENT') this.opts.logger?.warn({ file: f.path, err: String(err) }, 'WAL: handed-over file could not be deleted');
          });
        },
      };
    } catch (err) {
      f.taking = false;
      throw new FlowError('STORAGE_ERROR', `cannot hand over WAL file ${f.path}`, { cause: err });
    }
  }

  async trim(flushedUpTo: (key: string) => number): Promise<number> {
    if (this.closed) throw new FlowError('CLOSED', 'WAL is closed');
    let released = 0;
    for (const kl of [...this.keys.values()]) {
      const upTo = flushedUpTo(kl.key);
      for (const f of [...kl.files]) {
        if (f.taking || f.end > upTo) continue;
        if (f.fh !== null) {
          // The open file: closed when no write of this key is running or queued (the next append opens another).
          if (kl.flushing !== null) continue;
          await this.closeFile(f);
          if (f.taking) continue;
        }
        try {
          await unlink(f.path);
        } catch (err) {
          if (errnoCode(err) !== 'ENOENT') throw new FlowError('STORAGE_ERROR', `cannot delete WAL file ${f.path}`, { cause: err });
        }
        const i = kl.files.indexOf(f);
        if (i < 0) continue;
        kl.files.splice(i, 1);
        this.totalBytes -= f.size;
        released += f.size;
      }
      // A key nothing needs any more (a deleted stream's partition: it is never appended to again) goes entirely.
      if (upTo === Number.MAX_SAFE_INTEGER && kl.files.length === 0 && kl.flushing === null) {
        this.keys.delete(kl.key);
        this.fences.forget(kl.key);
        await this.dropSpare(kl);
        await rmdir(kl.dir).catch(() => undefined);
      }
    }
    return released;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      // Appends already accepted are finished, not dropped.
      for (;;) {
        const loops = [...this.keys.values()].flatMap((kl) => (kl.flushing === null ? [] : [kl.flushing]));
        if (loops.length === 0) break;
        await Promise.all(loops);
      }
      for (const kl of this.keys.values()) {
        for (const f of kl.files) await this.closeFile(f);
        await this.dropSpare(kl);
      }
    })();
    return this.closing;
  }
}

async function readRange(path: string, size: number): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const b = Buffer.allocUnsafe(size);
    let got = 0;
    while (got < size) {
      const { bytesRead } = await fh.read(b, got, size - got, got);
      if (bytesRead === 0) throw new FlowError('STORAGE_ERROR', `WAL file ${path} is shorter than its frames`);
      got += bytesRead;
    }
    return b;
  } finally {
    await fh.close();
  }
}

interface ScannedFile {
  file: WFile;
  /** Bytes on disk. */
  length: number;
  keyBytes: Buffer | null;
  /** Why the bytes after `file.size` are not frames, when they are not all zeros. */
  garbage: string | null;
  /** A complete trailer frame follows the entries (the file was being handed over). */
  trailer: boolean;
}

/** Checks one file frame by frame (see the top of this file). */
function scanFile(path: string, buf: Buffer): ScannedFile {
  const base = buf.length >= 16 ? readU64(buf, 8) : 0;
  const file: WFile = {
    base,
    path,
    seed: 0,
    header: null,
    size: 0,
    end: base,
    entries: [],
    fh: null,
    closing: null,
    direct: false,
    partial: null,
    taking: false,
    recovered: buf,
  };
  const result: ScannedFile = { file, length: buf.length, keyBytes: null, garbage: null, trailer: false };
  if (buf.length < 18 || !buf.subarray(0, 8).equals(MAGIC) || !isSafeOffset(base) || 18 + buf.readUInt16BE(16) > buf.length) {
    result.garbage = buf.every((x) => x === 0) ? null : 'bad file header';
    return result;
  }
  const headerLen = 18 + buf.readUInt16BE(16);
  result.keyBytes = buf.subarray(18, headerLen);
  file.seed = crc32c(buf, 0, headerLen);
  let pos = headerLen;
  file.size = pos;
  for (;;) {
    if (pos + FRAME_HEADER > buf.length) {
      if (!buf.subarray(pos).every((x) => x === 0)) result.garbage = 'short frame header';
      break;
    }
    const length = buf.readUInt32BE(pos);
    if (length === 0) {
      if (!buf.subarray(pos).every((x) => x === 0)) result.garbage = 'bytes after the zeros that end the file';
      break;
    }
    if (pos + FRAME_HEADER + length > buf.length) {
      result.garbage = 'short frame body';
      break;
    }
    const body = buf.subarray(pos + FRAME_HEADER, pos + FRAME_HEADER + length);
    if (crc32c(body, 0, body.length, file.seed) !== buf.readUInt32BE(pos + 4)) {
      result.garbage = 'CRC mismatch';
      break;
    }
    const type = body[0];
    if (type === TRAILER) {
      result.trailer = true; // a handover under way: the entries end here
      break;
    }
    if (type !== ENTRY || length < 17) throw new FlowError('CORRUPT_DATA', `WAL file ${path}: bad frame at byte ${pos}`);
    const b = readU64(body, 1);
    const e = readU64(body, 9);
    if (!isSafeOffset(b) || !isSafeOffset(e) || e < b) {
      throw new FlowError('CORRUPT_DATA', `WAL file ${path}: bad offsets at byte ${pos}`);
    }
    file.entries.push({ base: b, end: e, position: pos + ENTRY_HEAD, size: length - 17 });
    file.end = e;
    pos += FRAME_HEADER + length;
    file.size = pos;
  }
  return result;
}

/** Recovers one key's directory: checks its files, cuts a torn tail, drops newer files without entries. */
async function recoverKey(kdir: string, opts: PartitionWalOptions): Promise<{ log: KeyLog | null; truncated: number }> {
  let names: string[];
  try {
    names = await readdir(kdir);
  } catch (err) {
    if (errnoCode(err) === 'ENOTDIR') return { log: null, truncated: 0 };
    throw new FlowError('STORAGE_ERROR', `cannot read WAL directory ${kdir}`, { cause: err });
  }
  const found = names
    .map((n) => ({ n, m: FILE_RE.exec(n) }))
    .filter((x) => x.m !== null)
    .map((x) => ({ path: join(kdir, x.n), seq: Number(x.m![1]) }))
    .sort((a, b) => a.seq - b.seq);
  const nextSeq = found.length > 0 ? found[found.length - 1].seq + 1 : 1;
  const scanned: ScannedFile[] = [];
  for (const x of found) {
    let buf: Buffer;
    try {
      buf = await readFile(x.path);
    } catch (err) {
      throw new FlowError('STORAGE_ERROR', `cannot read WAL file ${x.path}`, { cause: err });
    }
    scanned.push(scanFile(x.path, buf));
  }
  let last = -1;
  for (let i = 0; i < scanned.length; i++) if (scanned[i].file.entries.length > 0) last = i;
  let keyBytes: Buffer | null = null;
  let truncated = 0;
  const files: WFile[] = [];
  for (let i = 0; i < scanned.length; i++) {
    const s = scanned[i];
    const f = s.file;
    if (s.garbage !== null && i < last) {
      throw new FlowError('CORRUPT_DATA', `WAL file ${f.path}: ${s.garbage} at byte ${f.size}, before the key's last entry`);
    }
    if (i > last) {
      // Created, never given a complete frame: nothing in it was acknowledged.
      await unlink(f.path);
      if (s.garbage !== null) {
        truncated += s.length;
        opts.logger?.warn({ file: f.path, droppedBytes: s.length, reason: s.garbage }, 'WAL: unacknowledged file dropped (a torn write)');
      }
      continue;
    }
    if (keyBytes === null) keyBytes = s.keyBytes;
    else if (s.keyBytes === null || !s.keyBytes.equals(keyBytes)) {
      throw new FlowError('CORRUPT_DATA', `WAL file ${f.path} names another key than its directory's other files`);
    }
    if (s.length > f.size && !s.trailer) {
      // Zeros after the last frame (a direct write's block padding), or a torn write: cut off either way. A file
      // ended by a trailer is left as it is: it may be a segment object's too (the object store links it), so its
      // bytes must not change; it is never appended to again, and a new handover writes its trailer anew.
      const fh = await open(f.path, 'r+');
      try {
        await fh.truncate(f.size);
        await fh.sync();
      } finally {
        await fh.close();
      }
      if (s.garbage !== null) {
        truncated += s.length - f.size;
        opts.logger?.warn(
          { file: f.path, at: f.size, droppedBytes: s.length - f.size, reason: s.garbage },
          'WAL: unacknowledged bytes at the end of the log dropped (a torn write)',
        );
      }
      f.recovered = f.recovered!.subarray(0, f.size);
    }
    files.push(f);
  }
  if (files.length === 0 || keyBytes === null) {
    await rmdir(kdir).catch(() => undefined);
    return { log: null, truncated };
  }
  for (let i = 1; i < files.length; i++) {
    if (files[i].base < files[i - 1].end) throw new FlowError('CORRUPT_DATA', `WAL file ${files[i].path} starts below the end of the one before`);
  }
  const log: KeyLog = {
    key: keyBytes.toString('utf8'),
    keyBytes: Buffer.from(keyBytes),
    dir: kdir,
    files,
    dirMade: true,
    pending: null,
    queued: [],
    flushing: null,
    nextSeq,
    spare: null,
    fileStartedAt: -Infinity,
  };
  return { log, truncated };
}
