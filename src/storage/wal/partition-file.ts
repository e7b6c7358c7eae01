/**
 * The partition WAL's files: the on-disk format (header, entry and trailer frames, key dir and file names), what is
 * kept in memory of a key's files and groups (KeyLog, WFile, Group), and recovery at open (a key's files checked frame
 * by frame, a torn end cut off). See partition-wal.ts for the design.
 */
import { open, readdir, readFile, rmdir, unlink, type FileHandle } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { crc32c, FlowError } from '../../core/index.js';
import { DIRECT_BLOCK } from '../direct-io.js';
import { errnoCode, type FileOpener } from '../fs-util.js';
import { FRAME_HEADER, groupCommit, isSafeOffset, readU64, writeU64, type GroupCommit } from './frame.js';
import type { WalEntry } from './types.js';

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

export const MAGIC = Buffer.from('FMQPWL01', 'latin1');
export const ENTRY = 1;
export const TRAILER = 2;
/** Frame header plus an entry body's fixed part (type, two u64 offsets). */
export const ENTRY_HEAD = FRAME_HEADER + 1 + 16;
export const MAX_KEY_BYTES = 4096;
export const MAX_BODY = 0xffffffff;
export const FILE_RE = /^(\d{20})\.wal$/;
/** Longest key dir name kept whole; longer ones are cut and given a hash (file names end at 255 bytes). */
export const MAX_DIR_NAME = 200;

export const fileName = (seq: number): string => `${String(seq).padStart(20, '0')}.wal`;

export function keyDirName(keyBytes: Buffer): string {
  let out = '';
  for (const c of keyBytes) {
    const ch = String.fromCharCode(c);
    out += /[A-Za-z0-9._@-]/.test(ch) ? ch : `%${c.toString(16).padStart(2, '0').toUpperCase()}`;
  }
  if (out.length <= MAX_DIR_NAME) return out;
  return `${out.slice(0, 150)}~${createHash('sha256').update(keyBytes).digest('hex').slice(0, 32)}`;
}

export function fileHeader(keyBytes: Buffer, base: number): Buffer {
  const h = Buffer.allocUnsafe(MAGIC.length + 8 + 2 + keyBytes.length);
  MAGIC.copy(h, 0);
  writeU64(h, base, 8);
  h.writeUInt16BE(keyBytes.length, 16);
  keyBytes.copy(h, 18);
  return h;
}

export interface EntryPos {
  base: number;
  end: number;
  /** Where the entry's data starts in the file. */
  position: number;
  size: number;
}

export interface WFile {
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

export interface KeyLog {
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
export interface NewFile {
  path: string;
  fh: FileHandle | null;
}

/** A key whose previous file was started less than this long before the current one keeps its next file open. */
export const BUSY_KEY_MS = 10_000;

export interface Group extends GroupCommit {
  entries: WalEntry[];
}

export function newGroup(): Group {
  return { ...groupCommit(), entries: [] };
}

export const roundUp = (n: number): number => Math.ceil(n / DIRECT_BLOCK) * DIRECT_BLOCK;

export async function readRange(path: string, size: number): Promise<Buffer> {
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

export interface ScannedFile {
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
export function scanFile(path: string, buf: Buffer): ScannedFile {
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
      // A torn write leaves garbage only at the very end (as in file-wal.ts): a good frame after the bad one means
      // the bad one was acknowledged, and cutting the file there would silently drop it and every entry after it.
      if (validFrameAt(buf, pos + FRAME_HEADER + length, file.seed)) {
        throw new FlowError('CORRUPT_DATA', `WAL file ${path}: CRC mismatch at byte ${pos}, before its end`);
      }
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

/** Whether a complete frame with a good CRC starts at `pos` of the file. */
function validFrameAt(buf: Buffer, pos: number, seed: number): boolean {
  if (pos + FRAME_HEADER > buf.length) return false;
  const length = buf.readUInt32BE(pos);
  if (length === 0 || pos + FRAME_HEADER + length > buf.length) return false;
  return crc32c(buf, pos + FRAME_HEADER, pos + FRAME_HEADER + length, seed) === buf.readUInt32BE(pos + 4);
}

/** Recovers one key's directory: checks its files, cuts a torn tail, drops newer files without entries. */
export async function recoverKey(kdir: string, opts: PartitionWalOptions): Promise<{ log: KeyLog | null; truncated: number }> {
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
