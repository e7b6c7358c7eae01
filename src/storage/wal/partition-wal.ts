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
 *
 * Rooms: partition-file.ts (the format, what is kept of a key's files, recovery at open), partition-write.ts (the
 * state and the write path: group commit, slots, direct I/O, spares, undo); this file keeps the WriteAheadLog and
 * SegmentFileSource methods (append, replay, handover, trim, close).
 */
import { mkdir, open, readdir, rmdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { FlowError } from '../../core/index.js';
import { DIRECT_BLOCK } from '../direct-io.js';
import { errnoCode, shortWrite } from '../fs-util.js';
import { appendRefusal, fenceProblem, frameCrc, FRAME_HEADER } from './frame.js';
import type { FileLayout, SegmentFileSource, WalEntry, WriteAheadLog } from './types.js';
import { MAX_BODY, MAX_KEY_BYTES, keyDirName, newGroup, readRange, recoverKey, TRAILER, type KeyLog, type PartitionWalOptions } from './partition-file.js';
import { PartitionWalState, closeFile, dropSpare, flushLoop } from './partition-write.js';

export type { PartitionWalOptions };

export class PartitionWal extends PartitionWalState implements WriteAheadLog, SegmentFileSource {
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
    kl.flushing ??= flushLoop(this, kl);
    return g.promise;
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
      await closeFile(f);
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
          await closeFile(f);
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
        await dropSpare(kl);
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
        for (const f of kl.files) await closeFile(f);
        await dropSpare(kl);
      }
    })();
    return this.closing;
  }
}
