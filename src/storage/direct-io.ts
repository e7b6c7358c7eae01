/**
 * Writing whole files around the page cache (O_DIRECT), where the platform and the filesystem allow it.
 *
 * Why: data written through the page cache is copied into it by the kernel, and pages the cache has not held
 * before must first be found and cleared. On the development VM (free memory is handed back to the host, so a
 * page is expensive the first time it is touched again) a buffered write of fresh data cost ~2.5 s of CPU per GiB
 * (kernel time in copy_folio_from_iter) against 42 ms with O_DIRECT, and under a sustained Kafka produce the
 * kernel's copies of segment writes took more than a third of both cores. Segment objects are written once and
 * read rarely (consumers that keep up read the log's in-memory tail), so keeping them out of the page cache costs
 * nothing that matters.
 *
 * O_DIRECT wants the memory address, the file offset and the length aligned to the device's logical block (512 B
 * or 4 KiB). Node can neither allocate aligned memory nor tell a buffer's address, so a staging buffer is
 * allocated with 4 KiB to spare and its aligned window found once, by trying a one-block direct write at each
 * 16-byte step (malloc's alignment) into the file being written (before its data). Data is copied into staging
 * windows (hot, reused memory) and written in whole 4 KiB blocks, two windows in turn so that copying overlaps
 * the previous write; the file's last partial block goes through an ordinary descriptor, and one fsync at the end
 * makes everything durable (a direct write may still sit in the device's volatile cache until then).
 */
import { constants } from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { errnoCode } from './fs-util.js';

/** Offsets and lengths of direct writes are multiples of this (covers 512-byte and 4 KiB logical blocks). */
export const DIRECT_BLOCK = 4096;
/** Largest write step, and the size of a staging window. */
export const DIRECT_MAX_STEP = 2 * 1024 * 1024;
/** Staging windows kept for reuse (up to `depth` per file being written). */
const MAX_POOLED = 12;
/** malloc's alignment: where an aligned window can start inside a staging buffer. */
const MALLOC_ALIGN = 16;

/** Thrown when no aligned window could be found: direct I/O is then given up for good. */
class NoAlignedWindow extends Error {}

export class DirectWriter {
  private readonly pool: Buffer[] = [];
  /** Set once direct writes turned out not to work after all; every later write is refused (callers fall back). */
  private broken = false;

  private constructor() {}

  /**
   * A writer for files in `dir`, or null when O_DIRECT cannot be used there (not Linux, a filesystem without it
   * such as tmpfs, or no aligned window found). Leaves nothing behind in `dir`.
   */
  static async open(dir: string): Promise<DirectWriter | null> {
    const O_DIRECT = constants.O_DIRECT;
    if (typeof O_DIRECT !== 'number' || O_DIRECT === 0) return null;
    const w = new DirectWriter();
    const probe = join(dir, `.tmp-direct-probe-${process.pid}`);
    let fh: FileHandle | null = null;
    try {
      fh = await open(probe, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | O_DIRECT);
      w.pool.push(await alignedBuffer(fh, DIRECT_MAX_STEP));
      return w;
    } catch {
      return null;
    } finally {
      await fh?.close().catch(() => undefined);
      await unlink(probe).catch(() => undefined);
    }
  }

  get usable(): boolean {
    return !this.broken;
  }

  /**
   * Creates (or truncates) `path` with the concatenation of `parts`, written directly in steps of `stepBytes`
   * (rounded to whole blocks, at most DIRECT_MAX_STEP) with up to `depth` - 1 writes in flight while the next
   * window is filled, and fsyncs it. Throws on any failure; the caller removes
   * the file. A failure to find an aligned window marks the writer unusable.
   */
  async writeFile(path: string, parts: readonly Buffer[], stepBytes: number, depth = 2): Promise<void> {
    if (this.broken) throw new Error('direct I/O is not usable here');
    const step = Math.min(DIRECT_MAX_STEP, Math.max(DIRECT_BLOCK, Math.floor(stepBytes / DIRECT_BLOCK) * DIRECT_BLOCK));
    const fh = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_DIRECT);
    let tailFh: FileHandle | null = null;
    const windows: Buffer[] = [];
    // The write in flight from each window, if any: a window is filled again only once its write is done.
    const inflight: Array<Promise<void> | undefined> = [];
    try {
      for (let i = 0; i < Math.max(2, depth); i++) windows.push(await this.take(fh));
      let cur = 0;
      let fill = 0;
      let pos = 0;
      for (const part of parts) {
        for (let off = 0; off < part.length;) {
          const n = Math.min(step - fill, part.length - off);
          part.copy(windows[cur], fill, off, off + n);
          fill += n;
          off += n;
          if (fill === step) {
            const write = writeFully(fh, windows[cur], step, pos);
            write.catch(() => undefined); // awaited below; a failure must not go unhandled meanwhile
            inflight[cur] = write;
            pos += step;
            fill = 0;
            cur = (cur + 1) % windows.length;
            await inflight[cur];
          }
        }
      }
      await Promise.all(inflight);
      const whole = fill - (fill % DIRECT_BLOCK);
      if (whole > 0) await writeFully(fh, windows[cur], whole, pos);
      if (fill > whole) {
        // The last partial block cannot be written directly (its length is not a whole block).
        tailFh = await open(path, constants.O_WRONLY);
        await writeFully(tailFh, windows[cur].subarray(whole, fill), fill - whole, pos + whole);
      }
      // A probe write (see alignedBuffer) may have left the file longer than the data.
      await fh.truncate(pos + fill);
      await (tailFh ?? fh).sync();
    } catch (err) {
      if (err instanceof NoAlignedWindow) this.broken = true;
      throw err;
    } finally {
      // No window goes back to the pool while a write may still be reading it.
      await Promise.allSettled(inflight);
      await tailFh?.close().catch(() => undefined);
      await fh.close().catch(() => undefined);
      for (const w of windows) if (this.pool.length < MAX_POOLED) this.pool.push(w);
    }
  }

  /** A staging window from the pool, or a new one aligned by probing `fh` (a fresh file opened with O_DIRECT). */
  private async take(fh: FileHandle): Promise<Buffer> {
    return this.pool.pop() ?? (await alignedBuffer(fh, DIRECT_MAX_STEP));
  }
}

async function writeFully(fh: FileHandle, buf: Buffer, length: number, position: number): Promise<void> {
  let done = 0;
  while (done < length) {
    const { bytesWritten } = await fh.write(buf, done, length - done, position + done);
    if (bytesWritten <= 0) throw new Error(`write made no progress at byte ${position + done}`);
    done += bytesWritten;
  }
}

/**
 * `size` bytes of new, zeroed memory whose start is aligned for direct I/O, found by one-block direct writes of
 * zeros at `position` of `fh`, a file open with O_DIRECT (the caller overwrites or discards that block afterwards).
 */
export async function alignedBuffer(fh: FileHandle, size: number, position = 0): Promise<Buffer> {
  // Zeroed: the probe writes it to disk, and it must not carry whatever the memory held before.
  const raw = Buffer.alloc(size + DIRECT_BLOCK);
  // Large allocations are page-aligned mappings behind a 16-byte header, so the last step usually fits at once.
  const candidates = [DIRECT_BLOCK - MALLOC_ALIGN];
  for (let k = 0; k < DIRECT_BLOCK; k += MALLOC_ALIGN) if (k !== candidates[0]) candidates.push(k);
  for (const k of candidates) {
    try {
      await fh.write(raw, k, DIRECT_BLOCK, position);
      return raw.subarray(k, k + size);
    } catch (err) {
      if (errnoCode(err) !== 'EINVAL') throw err;
    }
  }
  throw new NoAlignedWindow('no window of a staging buffer is aligned for direct I/O');
}
