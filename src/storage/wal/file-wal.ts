/**
 * The embedded hot tier: append-only, CRC-framed log files with group-commit fsync.
 *
 * Layout: `wal-<20-digit sequence>.log` files in one directory, written strictly in sequence order. A file is
 *
 *   "FMQWAL02" | u64 sequence | frame*
 *   frame = u32 bodyLength | u32 crc | body
 *   body  = u16 keyLength | key (utf8) | u64 baseOffset | u64 endOffset | data
 *
 * (all integers big-endian; the u64s are written as two u32 halves, which covers every safe integer). A frame with
 * an empty key is padding (see Direct I/O) and carries no entry; appends with an empty key are refused. The crc is
 * CRC-32C of the body, seeded with the CRC-32C of the file's sequence number: a frame is only valid in the file
 * it was written to. Files written before this format (no header, zlib CRC-32 of the body) are still read.
 *
 * Reuse: a file whose entries are all flushed is renamed to `spare-<n>.wal` (up to two are kept) instead of
 * being deleted, and the next new log file is that spare renamed back and overwritten from its start. Writing
 * over blocks the file already has makes a durable write flush the data alone, not a journal commit for the grown
 * file as well, which on ext4 roughly halves the WAL's fsync latency under load. The stale frames beyond the
 * new end can never be mistaken for new ones (their CRC seed is another file's), and the unused rest is cut off
 * when the file is retired.
 *
 * Group commit: appends queue their frames; at most one durable write is in flight, and the appends that
 * arrive meanwhile form the next group, written with one pwritev on a file opened with O_DSYNC (durable when it
 * returns: one system call and one thread-pool round trip instead of a write and an fdatasync). Every
 * append of a group shares the group's promise, so an append costs no syscall and no closure of its own.
 *
 * Direct I/O (option `directIo`): where the filesystem supports it, files are opened with O_DIRECT as well, so
 * group writes skip the page cache (see ../direct-io.ts). Such a write must start at an aligned offset and be a
 * whole number of 4 KiB blocks from aligned memory: a group is copied into an aligned staging buffer and ends with
 * a padding frame up to the next block, so every group starts on a block boundary.
 *
 * Recovery: only the tail of the last file can be torn, because a new file is created only after the previous
 * group was fully synced (and the previous file cut to its used length, synced), and a failed write is
 * truncated away before the next one.
 *
 * Failed writes (a full disk, EIO): the group is refused, and so is the group queued behind it; the keys of both
 * are fenced (frame.ts KeyFences) until the caller resumes them where their durable entries end. The partial
 * group is cut off (truncate and fdatasync); if even that fails, the cut is retried before the next group is
 * written, and that group fails while it cannot be made, so nothing is ever written after a torn frame. The log
 * goes on by itself once the disk takes writes again: no restart. So an invalid frame at the end of the last file is an unacknowledged
 * write (or the unused rest of a reused file) and is cut off; an invalid frame anywhere else is corruption of
 * acknowledged data and stops the replay with CORRUPT_DATA rather than silently losing it.
 */
import { constants } from 'node:fs';
import { open, readdir, mkdir, rename, unlink, stat, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { crc32c, FlowError, LatencyHistogram } from '../../core/index.js';
import { errnoCode, fsOpen, shortWrite, syncDir, writeError, type FileOpener } from '../fs-util.js';
import { appendRefusal, EpochFences, fenceProblem, frameCrc, groupCommit, KeyFences, readU64, writeGroups, writeU64, type GroupCommit } from './frame.js';
import { DIRECT_BLOCK, alignedBuffer } from '../direct-io.js';
import type { WalEntry, WriteAheadLog } from './types.js';

export interface FileWalOptions {
  /** A file is closed and a new one started before a group would take it past this size. Default 64 MiB. */
  maxFileBytes?: number;
  /** Make every group durable (O_DSYNC) before acknowledging it. Default true; false only for tests and benchmarks. */
  fsync?: boolean;
  /**
   * Write groups around the page cache (O_DIRECT, with fsync on) where the filesystem allows it. Default false:
   * on the development VM it was no faster (the copy into aligned memory runs on the event loop, where the
   * kernel's copy into the reused files' cached pages runs on the thread pool), but it keeps the WAL out of the
   * page cache.
   */
  directIo?: boolean;
  /** Told once per replay that truncated a torn tail (pino's Logger fits). */
  logger?: { warn(obj: object, msg: string): void };
  /** Opens the files groups are written to (tests inject failing writes here). Default: node:fs/promises. */
  io?: FileOpener;
}

const FILE_RE = /^wal-(\d{20})\.log$/;
const SPARE_RE = /^spare-(\d+)\.wal$/;
/** Flushed files kept for reuse; two cover a roll while the next spare is still being made. */
const MAX_SPARES = 2;
const FILE_MAGIC = Buffer.from('FMQWAL02', 'latin1');
/** Bytes before the first frame of a file: magic and u64 sequence number. */
export const WAL_FILE_HEADER_BYTES = 16;
const HEADER = 8; // u32 length + u32 crc
const BODY_FIXED = 2 + 16; // u16 key length + two u64 offsets
const MAX_KEY_BYTES = 0xffff;
const MAX_BODY = 0xffffffff;
/** Smallest frame: header and a body with an empty key (a padding frame's least size). */
const MIN_FRAME = HEADER + BODY_FIXED;
/** Read-ahead for replay: large enough to make small frames cheap, small enough to not matter in memory. */
const READ_CHUNK = 1 << 20;

const fileName = (seq: number): string => `wal-${String(seq).padStart(20, '0')}.log`;

interface WalFile {
  seq: number;
  path: string;
  /** Bytes of complete, durable frames (the active file grows only after a group is synced). */
  size: number;
  /** Largest endOffset per key in this file; null until the file has been scanned by a replay. */
  maxEnd: Map<string, number> | null;
  /** Set while trim is deleting it, so that a concurrent trim does not delete it twice. */
  deleting: boolean;
  /**
   * Frame CRC seed (CRC-32C of the sequence number); null for a file of the old format (zlib CRC-32, no header);
   * undefined until the file has been scanned by a replay.
   */
  seed: number | null | undefined;
  /** A reused file: it holds stale bytes beyond `size`, cut off when it is retired. */
  reused: boolean;
  /** Open with O_DIRECT: groups are written from aligned memory in whole blocks. */
  direct?: boolean;
}

function seedOf(seq: number): number {
  const b = Buffer.allocUnsafe(8);
  writeU64(b, seq, 0);
  return crc32c(b);
}

function fileHeader(seq: number): Buffer {
  const b = Buffer.allocUnsafe(WAL_FILE_HEADER_BYTES);
  FILE_MAGIC.copy(b, 0);
  writeU64(b, seq, 8);
  return b;
}

interface Group extends GroupCommit {
  bufs: Buffer[];
  /** Per entry, the CRC of its data's tail the caller gave, if any. */
  crcs: Array<{ from: number; crc: number } | undefined>;
  bytes: number;
  keys: string[];
  bases: number[];
  ends: number[];
}

function newGroup(): Group {
  return { ...groupCommit(), bufs: [], crcs: [], bytes: 0, keys: [], bases: [], ends: [] };
}

/** Reads arbitrary ranges of a file through a read-ahead buffer, so replaying small frames is not a syscall each. */
class ChunkReader {
  private buf: Buffer = Buffer.alloc(0);
  private bufPos = 0;
  constructor(
    private readonly fh: FileHandle,
    private readonly limit: number,
  ) {}

  /** Exactly `n` bytes at `pos`; the caller guarantees pos + n <= limit. The view is valid until the next call. */
  async read(pos: number, n: number): Promise<Buffer> {
    if (pos >= this.bufPos && pos + n <= this.bufPos + this.buf.length) {
      return this.buf.subarray(pos - this.bufPos, pos - this.bufPos + n);
    }
    const size = Math.min(Math.max(n, READ_CHUNK), this.limit - pos);
    const b = Buffer.allocUnsafe(size);
    let got = 0;
    while (got < size) {
      const { bytesRead } = await this.fh.read(b, got, size - got, pos + got);
      if (bytesRead === 0) throw new FlowError('STORAGE_ERROR', 'WAL file shrank while being read');
      got += bytesRead;
    }
    this.buf = b;
    this.bufPos = pos;
    return b.subarray(0, n);
  }
}

type FrameCheck =
  | { ok: true; length: number }
  /** `extent` is the frame's byte length when its header was readable and fits the file, else null. */
  | { ok: false; reason: string; extent: number | null };

export class FileWal implements WriteAheadLog {
  /** Bytes cut off the end of the last file by the latest replay (a torn write). */
  lastReplayTruncatedBytes = 0;
  /** Durable (O_DSYNC) group writes made; exposed so tests can see group commit at work. */
  syncCount = 0;
  /** Groups written (one writev each). */
  groupCount = 0;
  /** Duration of each group's durable write (ms), for /metrics. */
  readonly commitLatency = new LatencyHistogram();

  private readonly files: WalFile[] = [];
  /** Paths of flushed files kept for reuse. */
  private readonly spares: string[];
  private nextSpare: number;
  /** Files started from a spare (for tests and the admin API). */
  reusedFiles = 0;
  /** The file appends go to, and its handle (opened with O_APPEND); both null between files. */
  private active: WalFile | null = null;
  private activeFh: FileHandle | null = null;
  private nextSeq: number;
  private totalBytes = 0;
  private pending: Group | null = null;
  private flushing: Promise<void> | null = null;
  private recovery: Promise<void> | null = null;
  private recovered = false;
  private rollRequested = false;
  private retiring: Promise<void> | null = null;
  private closed = false;
  private closing: Promise<void> | null = null;
  /**
   * Set when a failed write could not be cut off (or a retired file not cut to its length): the file may hold a torn
   * frame, so nothing may be written after it until this has succeeded. Retried before every group.
   */
  private repair: (() => Promise<void>) | null = null;
  /** Keys refused after a failed write, until the caller resumes them (see KeyFences). */
  private readonly fences = new KeyFences();
  /** Each key's ownership epoch, in memory (see EpochFences). */
  private readonly epochs = new EpochFences();
  private readonly io: FileOpener;
  /** Encoded keys; partitions are few and appended to over and over. */
  private readonly keyCache = new Map<string, Buffer>();

  private readonly maxFileBytes: number;
  private readonly fsync: boolean;
  /** O_DSYNC when groups must be durable, else no flag. */
  private readonly dsync: number;
  /** O_DIRECT while it is wanted and works; 0 once a file could not be opened with it. */
  private direct: number;
  /** Aligned staging memory for direct group writes, grown to the largest group. */
  private stage: Buffer | null = null;
  /** Group writes made with O_DIRECT (for tests). */
  directGroups = 0;
  private readonly logger: FileWalOptions['logger'];

  private constructor(
    readonly dir: string,
    existing: WalFile[],
    spares: Array<{ n: number; path: string }>,
    opts: FileWalOptions,
  ) {
    this.files = existing;
    this.spares = spares.map((x) => x.path);
    this.nextSpare = spares.reduce((m, x) => Math.max(m, x.n + 1), 1);
    for (const f of existing) this.totalBytes += f.size;
    this.nextSeq = existing.length > 0 ? existing[existing.length - 1].seq + 1 : 1;
    this.maxFileBytes = opts.maxFileBytes ?? 64 * 1024 * 1024;
    this.fsync = opts.fsync ?? true;
    this.dsync = this.fsync ? constants.O_DSYNC : 0;
    const O_DIRECT = constants.O_DIRECT;
    this.direct = this.fsync && opts.directIo === true && typeof O_DIRECT === 'number' ? O_DIRECT : 0;
    this.logger = opts.logger;
    this.io = opts.io ?? fsOpen;
  }

  static async open(dir: string, opts: FileWalOptions = {}): Promise<FileWal> {
    if (opts.maxFileBytes !== undefined && !(Number.isSafeInteger(opts.maxFileBytes) && opts.maxFileBytes > 0)) {
      throw new FlowError('INVALID_ARGUMENT', `maxFileBytes must be a positive integer, got ${opts.maxFileBytes}`);
    }
    try {
      await mkdir(dir, { recursive: true });
      const files: WalFile[] = [];
      const spares: Array<{ n: number; path: string }> = [];
      for (const name of await readdir(dir)) {
        const spare = SPARE_RE.exec(name);
        if (spare) spares.push({ n: Number(spare[1]), path: join(dir, name) });
        const m = FILE_RE.exec(name);
        if (!m) continue;
        const path = join(dir, name);
        const st = await stat(path);
        files.push({ seq: Number(m[1]), path, size: st.size, maxEnd: null, deleting: false, seed: undefined, reused: false });
      }
      files.sort((a, b) => a.seq - b.seq);
      return new FileWal(dir, files, spares.slice(0, MAX_SPARES), opts);
    } catch (err) {
      throw new FlowError('STORAGE_ERROR', `cannot open WAL directory ${dir}`, { cause: err });
    }
  }

  /** Number of log files currently held (closed ones plus the active one). */
  fileCount(): number {
    return this.files.length;
  }

  size(): number {
    return this.totalBytes;
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
    const { key, baseOffset, endOffset, data } = entry;
    let keyBytes = this.keyCache.get(key);
    if (keyBytes === undefined) {
      keyBytes = Buffer.from(key, 'utf8');
      if (keyBytes.length > MAX_KEY_BYTES) {
        return Promise.reject(new FlowError('INVALID_ARGUMENT', `WAL key longer than ${MAX_KEY_BYTES} bytes`));
      }
      // Bounded so that a churn of short-lived partitions cannot grow it forever.
      if (this.keyCache.size >= 10_000) this.keyCache.clear();
      this.keyCache.set(key, keyBytes);
    }
    const bodyLen = BODY_FIXED + keyBytes.length + data.length;
    if (bodyLen > MAX_BODY) {
      return Promise.reject(new FlowError('INVALID_ARGUMENT', 'WAL entry too large'));
    }
    // The header carries everything but the data, so the data is never copied until the group's writev. Its
    // CRC depends on the file the group lands in, so it is filled in when the group is written.
    const head = Buffer.allocUnsafe(HEADER + BODY_FIXED + keyBytes.length);
    head.writeUInt32BE(bodyLen, 0);
    head.writeUInt16BE(keyBytes.length, HEADER);
    keyBytes.copy(head, HEADER + 2);
    const at = HEADER + 2 + keyBytes.length;
    writeU64(head, baseOffset, at);
    writeU64(head, endOffset, at + 8);

    const g = (this.pending ??= newGroup());
    // The caller must not modify `data` until the promise settles: it is written from this very buffer.
    g.bufs.push(head, data);
    g.crcs.push(entry.dataCrc);
    g.bytes += head.length + data.length;
    g.keys.push(key);
    g.bases.push(baseOffset);
    g.ends.push(endOffset);
    this.flushing ??= this.flushLoop();
    return g.promise;
  }

  private async flushLoop(): Promise<void> {
    try {
      await this.ensureRecovered();
    } catch (err) {
      const e = err instanceof FlowError ? err : new FlowError('STORAGE_ERROR', 'WAL recovery failed', { cause: err });
      const g = this.pending;
      this.pending = null;
      this.flushing = null;
      g?.reject(e);
      return;
    }
    for (;;) {
      // Every group that arrived while the previous one was in flight is written next, as one.
      await writeGroups(
        () => {
          const g = this.pending;
          this.pending = null;
          return g;
        },
        (g) => this.writeGroup(g),
        (g, err) => {
          // The group queued behind the failed one was appended before anyone knew: it goes too, and every key of
          // both waits for its caller to resume it (no entry may follow a hole).
          const behind = this.pending;
          this.pending = null;
          behind?.reject(err);
          for (const x of behind === null ? [g] : [g, behind]) {
            for (let i = 0; i < x.keys.length; i++) this.fences.refuse(x.keys[i], x.bases[i], err);
          }
        },
      );
      // A group that arrived as the last one finished is seen here, in the same step that declares the loop idle.
      if (this.pending !== null) continue;
      if (!(this.rollRequested && this.active)) break;
      // A trim asked for the active file while a group was in flight; appends arriving during this await
      // are picked up by the next turn of the loop.
      await this.retireActive().catch(() => undefined);
    }
    this.flushing = null;
  }

  private async writeGroup(g: Group): Promise<void> {
    if (this.repair !== null) {
      await this.repair();
      this.repair = null;
    }
    if (this.active && (this.rollRequested || (this.active.size > 0 && this.active.size + g.bytes > this.maxFileBytes))) {
      await this.retireActive();
    }
    let a = this.active;
    let fh = this.activeFh;
    if (a === null || fh === null) [a, fh] = await this.createActive();
    const seed = a.seed ?? null;
    for (let i = 0; i < g.bufs.length; i += 2) g.bufs[i].writeUInt32BE(frameCrc(seed, g.bufs[i], g.bufs[i + 1], g.crcs[i / 2]), 4);
    // A file's first group carries its header.
    const bufs = a.size === 0 ? [fileHeader(a.seq), ...g.bufs] : g.bufs;
    let bytes = a.size === 0 ? WAL_FILE_HEADER_BYTES + g.bytes : g.bytes;
    try {
      // With fsync on, the file is open with O_DSYNC: the write returns once the data is durable.
      let bytesWritten: number;
      const t0 = performance.now();
      if (a.direct) {
        const aligned = await this.stageGroup(fh, a, seed, bufs, bytes);
        bytes = aligned.length;
        bytesWritten = (await fh.write(aligned, 0, bytes, a.size)).bytesWritten;
        this.directGroups++;
      } else {
        bytesWritten = (await fh.writev(bufs, a.size)).bytesWritten;
      }
      if (bytesWritten !== bytes) throw shortWrite(bytesWritten, bytes);
      this.commitLatency.record(performance.now() - t0);
      if (this.fsync) this.syncCount++;
    } catch (err) {
      // Cut the partial group off so that later groups never follow a torn frame; if even that fails, it is
      // tried again before the next group is written (which fails while it cannot be done).
      const cut = async (): Promise<void> => {
        await fh.truncate(a.size);
        if (this.fsync) await fh.datasync();
      };
      await cut().catch(() => {
        this.repair = cut;
      });
      throw writeError(`WAL write to ${a.path} failed`, err);
    }
    this.groupCount++;
    a.size += bytes;
    this.totalBytes += bytes;
    const maxEnd = a.maxEnd ?? (a.maxEnd = new Map<string, number>());
    for (let i = 0; i < g.keys.length; i++) {
      const k = g.keys[i];
      const prev = maxEnd.get(k);
      if (prev === undefined || g.ends[i] > prev) maxEnd.set(k, g.ends[i]);
    }
  }

  /**
   * The group copied into aligned staging memory and padded to whole blocks with a padding frame (a direct write's
   * length must be). The staging buffer grows to the largest group; a new one is aligned by probing the file at
   * the group's own position, which the group then overwrites.
   */
  private async stageGroup(fh: FileHandle, a: WalFile, seed: number | null, bufs: Buffer[], bytes: number): Promise<Buffer> {
    let pad = (DIRECT_BLOCK - (bytes % DIRECT_BLOCK)) % DIRECT_BLOCK;
    if (pad > 0 && pad < MIN_FRAME) pad += DIRECT_BLOCK;
    const total = bytes + pad;
    if (this.stage === null || this.stage.length < total) {
      let size = 4 * 1024 * 1024;
      while (size < total) size *= 2;
      this.stage = await alignedBuffer(fh, size, a.size);
    }
    const out = this.stage.subarray(0, total);
    let at = 0;
    for (const b of bufs) at += b.copy(out, at);
    if (pad > 0) {
      // An empty key, offsets 0 and zeros: a valid frame that replay skips.
      out.fill(0, at, total);
      out.writeUInt32BE(pad - HEADER, at);
      out.writeUInt32BE(crc32c(out, at + HEADER, total, seed ?? 0), at + 4);
    }
    return out;
  }

  private async createActive(): Promise<[WalFile, FileHandle]> {
    // The previous file must be cut to its length before anything acknowledged can follow it.
    while (this.retiring) await this.retiring.catch(() => undefined);
    if (this.repair !== null) {
      await this.repair();
      this.repair = null;
    }
    const seq = this.nextSeq++;
    const path = join(this.dir, fileName(seq));
    let fh: FileHandle | null = null;
    let reused = false;
    const spare = this.spares.shift();
    if (spare !== undefined) {
      let renamed = false;
      try {
        await rename(spare, path);
        renamed = true;
        fh = await this.openLog(path, constants.O_RDWR);
        reused = true;
        this.reusedFiles++;
      } catch {
        // A spare that cannot be reused is only a missed optimisation: it goes, and a new file is made.
        await unlink(renamed ? path : spare).catch(() => undefined);
      }
    }
    try {
      fh ??= await this.openLog(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL);
      // The new directory entry must be durable too, or a crash could lose a file of acknowledged frames.
      if (this.fsync) await syncDir(this.dir);
    } catch (err) {
      await fh?.close().catch(() => undefined);
      // A file left here would lie between acknowledged ones with no frames of its own (a spare's stale header
      // even looks like corruption): it goes. O_EXCL makes sure it is ours.
      if (fh !== null || reused) await unlink(path).catch(() => undefined);
      throw err;
    }
    const f: WalFile = { seq, path, size: 0, maxEnd: new Map<string, number>(), deleting: false, seed: seedOf(seq), reused, direct: this.direct !== 0 };
    this.files.push(f);
    this.active = f;
    this.activeFh = fh;
    return [f, fh];
  }

  /** Opens a log file for writing: O_DSYNC with fsync on, and O_DIRECT while the filesystem takes it. */
  private async openLog(path: string, flags: number): Promise<FileHandle> {
    if (this.direct !== 0) {
      try {
        const fh = await this.io.open(path, flags | this.dsync | this.direct);
        if (this.stage !== null) return fh;
        try {
          // The first staging buffer is aligned now, at the start of this empty file, where the first group goes.
          this.stage = await alignedBuffer(fh, 4 * 1024 * 1024, 0);
          return fh;
        } catch {
          // No alignment found (a device with larger blocks): the page cache it is, through a plain descriptor.
          await fh.close().catch(() => undefined);
          this.direct = 0;
          return await this.io.open(path, (flags & ~(constants.O_CREAT | constants.O_EXCL)) | this.dsync);
        }
      } catch (err) {
        if (errnoCode(err) !== 'EINVAL') throw err;
        this.direct = 0; // e.g. tmpfs: no O_DIRECT; groups go through the page cache
        // Linux refuses O_DIRECT after creating the file: it is ours (O_EXCL would have failed otherwise).
        if ((flags & constants.O_CREAT) !== 0) await unlink(path).catch(() => undefined);
      }
    }
    return this.io.open(path, flags | this.dsync);
  }

  /** Makes the active file an ordinary closed file; the next group starts a new one (after this finishes). */
  private retireActive(): Promise<void> {
    const r = this.retire().finally(() => {
      if (this.retiring === r) this.retiring = null;
    });
    this.retiring = r;
    return r;
  }

  private async retire(): Promise<void> {
    this.rollRequested = false;
    const a = this.active;
    const fh = this.activeFh;
    this.active = null;
    this.activeFh = null;
    if (fh === null) return;
    // A reused file's stale rest goes, durably, before any later file can hold acknowledged data: recovery
    // accepts invalid bytes only at the end of the last file. If that fails, it is retried before the next file
    // is started (see repair).
    const finish = async (): Promise<void> => {
      if (a?.reused) {
        await fh.truncate(a.size);
        if (this.fsync) await fh.datasync();
        a.reused = false;
      }
      await fh.close().catch(() => undefined);
    };
    try {
      await finish();
    } catch (err) {
      this.repair = finish;
      throw writeError(`WAL file ${a?.path} could not be cut to its length`, err);
    }
  }

  private ensureRecovered(): Promise<void> {
    if (this.recovered) return Promise.resolve();
    // Appends before replay still need the torn tail cut off first, or their frames would follow it.
    this.recovery ??= this.scan(() => undefined, true).then(
      () => {
        this.recovered = true;
      },
      (err: unknown) => {
        this.recovery = null;
        throw err;
      },
    );
    return this.recovery;
  }

  async replay(fn: (entry: WalEntry) => void): Promise<void> {
    if (this.closed) throw new FlowError('CLOSED', 'WAL is closed');
    if (!this.recovered && this.recovery === null) {
      this.recovery = this.scan(fn, true).then(
        () => {
          this.recovered = true;
        },
        (err: unknown) => {
          this.recovery = null;
          throw err;
        },
      );
      return this.recovery;
    }
    // A later replay (or one racing the first appends' recovery) reads only frames known to be complete.
    await this.ensureRecovered();
    await this.scan(fn, false);
  }

  /**
   * Reads every file in order. With `recover`, this is the first look at the files: it learns each file's keys
   * and cuts a torn tail off the last file; otherwise it reads up to the sizes already known to be good.
   */
  private async scan(fn: (entry: WalEntry) => void, recover: boolean): Promise<void> {
    if (recover) this.lastReplayTruncatedBytes = 0;
    const files = this.files.filter((f) => !f.deleting);
    for (let fi = 0; fi < files.length; fi++) {
      const f = files[fi];
      if (!recover && f.size === 0) continue;
      const isLast = fi === files.length - 1 && f !== this.active;
      let fh: FileHandle;
      try {
        fh = await open(f.path, recover && isLast ? 'r+' : 'r');
      } catch (err) {
        if (errnoCode(err) === 'ENOENT' && !recover) continue; // trimmed meanwhile
        throw new FlowError('STORAGE_ERROR', `cannot open WAL file ${f.path}`, { cause: err });
      }
      try {
        const limit = recover ? (await fh.stat()).size : f.size;
        const maxEnd = new Map<string, number>();
        const reader = new ChunkReader(fh, limit);
        if (recover) {
          f.seed = null; // the old format, unless the file starts with a header
          if (limit >= FILE_MAGIC.length && (await reader.read(0, FILE_MAGIC.length)).equals(FILE_MAGIC)) {
            f.seed = seedOf(f.seq);
            const seq = limit >= WAL_FILE_HEADER_BYTES ? readU64(await reader.read(0, WAL_FILE_HEADER_BYTES), 8) : -1;
            if (seq !== f.seq) {
              // A torn header, or a reused file whose new header never landed: its first group was not
              // acknowledged, so nothing in the file was.
              if (!isLast) throw new FlowError('CORRUPT_DATA', `WAL file ${f.path}: bad file header`);
              await this.cutTail(fh, f, 0, limit, 'file header not written');
              this.totalBytes -= f.size;
              f.size = 0;
              f.maxEnd = maxEnd;
              continue;
            }
          }
        }
        const seed = f.seed ?? null;
        let pos = seed === null ? 0 : WAL_FILE_HEADER_BYTES;
        while (pos < limit) {
          const c = await this.checkFrame(reader, pos, limit, seed);
          if (!c.ok) {
            if (!recover) {
              throw new FlowError('CORRUPT_DATA', `WAL file ${f.path}: ${c.reason} at byte ${pos}`);
            }
            // A torn write leaves garbage only at the very end; a good frame after the bad one means the bad
            // one was once acknowledged, and dropping it (and what follows) would silently lose data.
            const followedByGood = c.extent !== null && (await this.checkFrame(reader, pos + c.extent, limit, seed)).ok;
            if (!isLast || followedByGood) {
              throw new FlowError('CORRUPT_DATA', `WAL file ${f.path}: ${c.reason} at byte ${pos}, before its end`);
            }
            await this.cutTail(fh, f, pos, limit, c.reason);
            break;
          }
          const frame = await reader.read(pos, HEADER + c.length);
          const keyLen = frame.readUInt16BE(HEADER);
          if (keyLen === 0) {
            pos += HEADER + c.length; // padding up to a block boundary
            continue;
          }
          const key = frame.toString('utf8', HEADER + 2, HEADER + 2 + keyLen);
          const at = HEADER + 2 + keyLen;
          const baseOffset = readU64(frame, at);
          const endOffset = readU64(frame, at + 8);
          // Copied out of the read-ahead buffer: the caller may keep entries long after the replay.
          const data = Buffer.from(frame.subarray(at + 16));
          const prev = maxEnd.get(key);
          if (prev === undefined || endOffset > prev) maxEnd.set(key, endOffset);
          fn({ key, baseOffset, endOffset, epoch: 0, data }); // epochs are not stored (see EpochFences)
          pos += HEADER + c.length;
        }
        if (recover) {
          this.totalBytes += pos - f.size;
          f.size = pos;
          f.maxEnd = maxEnd;
        }
      } finally {
        await fh.close();
      }
    }
  }

  /** Cuts the unacknowledged end off the last file (a torn write, or the unused rest of a reused file). */
  private async cutTail(fh: FileHandle, f: WalFile, at: number, limit: number, reason: string): Promise<void> {
    await fh.truncate(at);
    await fh.sync();
    this.lastReplayTruncatedBytes = limit - at;
    this.logger?.warn(
      { file: f.path, at, droppedBytes: limit - at, reason },
      'WAL: unacknowledged bytes at the end of the log dropped (a torn write, or the unused rest of a reused file)',
    );
  }

  /** Validates the frame at `pos` without consuming it. */
  private async checkFrame(reader: ChunkReader, pos: number, limit: number, seed: number | null): Promise<FrameCheck> {
    if (pos + HEADER > limit) return { ok: false, reason: 'short frame header', extent: null };
    const head = await reader.read(pos, HEADER);
    const length = head.readUInt32BE(0);
    const crc = head.readUInt32BE(4);
    if (length < BODY_FIXED) return { ok: false, reason: `impossible frame length ${length}`, extent: null };
    if (pos + HEADER + length > limit) return { ok: false, reason: 'short frame body', extent: null };
    const frame = await reader.read(pos, HEADER + length);
    const body = frame.subarray(HEADER);
    const actual = seed === null ? crc32(body) : crc32c(body, 0, body.length, seed);
    if (actual !== crc) return { ok: false, reason: 'CRC mismatch', extent: HEADER + length };
    // The CRC matched, so anything inconsistent below was written that way: never a torn write.
    const keyLen = body.readUInt16BE(0);
    const bad = (reason: string): FrameCheck => ({ ok: false, reason, extent: HEADER + length });
    if (BODY_FIXED + keyLen > length) return bad('key overruns frame');
    const base = body.readUInt32BE(2 + keyLen);
    const end = body.readUInt32BE(2 + keyLen + 8);
    // High halves above 2^21 - 1 would not be safe integers.
    if (base >= 0x200000 || end >= 0x200000) return bad('offset out of range');
    if (readU64(body, 2 + keyLen + 8) < readU64(body, 2 + keyLen)) return bad('endOffset below baseOffset');
    return { ok: true, length };
  }

  async trim(flushedUpTo: (key: string) => number): Promise<number> {
    if (this.closed) throw new FlowError('CLOSED', 'WAL is closed');
    // Files not yet scanned have unknown contents and are kept.
    const fullyFlushed = (f: WalFile): boolean => {
      if (f.maxEnd === null) return false;
      for (const [k, end] of f.maxEnd) if (flushedUpTo(k) < end) return false;
      return true;
    };
    const a = this.active;
    if (a && a.size > 0 && fullyFlushed(a)) {
      // Everything in the active file is flushed: retire it now when idle (else after the current group) so
      // that this trim, or the next one, can delete it.
      if (this.flushing === null) await this.retireActive();
      else this.rollRequested = true;
    }
    let released = 0;
    for (const f of [...this.files]) {
      if (f === this.active || f.deleting || !fullyFlushed(f)) continue;
      f.deleting = true;
      try {
        // A file of a useful size is kept for reuse (see the top of this file); a lost rename in a crash
        // only brings back a file whose entries are all flushed, which replay skips.
        if (this.spares.length < MAX_SPARES && f.size >= this.maxFileBytes / 2) {
          const spare = join(this.dir, `spare-${this.nextSpare++}.wal`);
          await rename(f.path, spare);
          this.spares.push(spare);
        } else {
          await unlink(f.path);
        }
      } catch (err) {
        if (errnoCode(err) !== 'ENOENT') {
          f.deleting = false;
          throw new FlowError('STORAGE_ERROR', `cannot delete WAL file ${f.path}`, { cause: err });
        }
      }
      const i = this.files.indexOf(f);
      if (i >= 0) this.files.splice(i, 1);
      this.totalBytes -= f.size;
      released += f.size;
    }
    return released;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      // Appends already accepted are finished, not dropped.
      while (this.flushing) await this.flushing;
      await this.retireActive();
    })();
    return this.closing;
  }
}
