/**
 * The embedded object store: one file per object under a root directory, the key's `/` segments becoming
 * directories. Writes go to a temporary file beside the target, are fsynced and renamed over it, so a reader
 * sees the old object, nothing, or the whole new one, as the ObjectStore contract (and S3) promise.
 *
 * Objects are written around the page cache (O_DIRECT, see ../direct-io.ts) where the filesystem allows it, and
 * through it otherwise (or with `directIo: false`).
 */
import { link, mkdir, open, readdir, rename, rmdir, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { FlowError } from '../../core/index.js';
import { DirectWriter } from '../direct-io.js';
import { errnoCode, syncDir } from '../fs-util.js';
import { checkRange, type ObjectInfo, type ObjectStore, type PutOptions } from './types.js';

/** Names starting with this are in-progress writes: never listed, and refused as key segments. */
const TMP_PREFIX = '.tmp-';

/** Splits a key into path segments, refusing anything that could escape the root or alias another key. */
function keySegments(key: string): string[] {
  if (typeof key !== 'string' || key.length === 0) throw new FlowError('INVALID_ARGUMENT', 'object key is empty');
  if (key.includes('\0')) throw new FlowError('INVALID_ARGUMENT', 'object key contains a NUL byte');
  // A backslash is a separator on Windows: refusing it keeps a key meaning the same file everywhere.
  if (key.includes('\\')) throw new FlowError('INVALID_ARGUMENT', `object key "${key}" contains a backslash`);
  if (key.startsWith('/')) throw new FlowError('INVALID_ARGUMENT', `object key "${key}" is absolute`);
  const segs = key.split('/');
  for (const s of segs) {
    if (s === '') throw new FlowError('INVALID_ARGUMENT', `object key "${key}" has an empty segment`);
    if (s === '.' || s === '..') throw new FlowError('INVALID_ARGUMENT', `object key "${key}" has a "${s}" segment`);
    if (s.startsWith(TMP_PREFIX)) {
      throw new FlowError('INVALID_ARGUMENT', `object key "${key}" uses the reserved prefix "${TMP_PREFIX}"`);
    }
  }
  return segs;
}

/** Bytes written (directly) or written and flushed (through the page cache) at a time with `yieldToLatency`... */
const FLUSH_CHUNK = 256 * 1024;
/**
 * ...and without it. Measured on a virtio disk with a WAL of 2 MiB O_DSYNC writes running alongside: 16 MiB
 * objects went at 164 MB/s in 256 KiB steps (the WAL at 922 MB/s), 528 MB/s in 2 MiB steps (WAL 688 MB/s), 920 MB/s
 * with one flush at the end (WAL 357 MB/s, p99 13.7 ms): a log that fell behind catches up in 2 MiB steps.
 */
const BULK_FLUSH_CHUNK = 2 * 1024 * 1024;

export interface FsObjectStoreOptions {
  /** Write objects with O_DIRECT when the filesystem supports it. Default true. */
  directIo?: boolean;
}

export class FsObjectStore implements ObjectStore {
  readonly kind = 'fs';
  private closed = false;
  private direct: Promise<DirectWriter | null> | null = null;
  /** Operations, bytes and failures by operation, for figures() (/metrics), in the S3 store's shape. */
  private readonly ops: Record<'put' | 'adopt' | 'get' | 'list' | 'delete', { requests: number; bytes: number; errors: number; retries: number }> = {
    put: { requests: 0, bytes: 0, errors: 0, retries: 0 },
    adopt: { requests: 0, bytes: 0, errors: 0, retries: 0 },
    get: { requests: 0, bytes: 0, errors: 0, retries: 0 },
    list: { requests: 0, bytes: 0, errors: 0, retries: 0 },
    delete: { requests: 0, bytes: 0, errors: 0, retries: 0 },
  };

  constructor(
    readonly rootDir: string,
    private readonly options: FsObjectStoreOptions = {},
  ) {}

  /** Whether objects are being written with O_DIRECT (settled by the first put). */
  async usesDirectIo(): Promise<boolean> {
    return (await this.directWriter())?.usable === true;
  }

  private directWriter(): Promise<DirectWriter | null> {
    if (this.options.directIo === false) return Promise.resolve(null);
    this.direct ??= mkdir(this.rootDir, { recursive: true })
      .then(() => DirectWriter.open(this.rootDir))
      .catch(() => null);
    return this.direct;
  }

  private check(): void {
    if (this.closed) throw new FlowError('CLOSED', 'object store is closed');
  }

  private pathOf(key: string): string {
    return join(this.rootDir, ...keySegments(key));
  }

  /** The object's directory and file path. */
  private placeOf(key: string): { dir: string; target: string } {
    const segs = keySegments(key);
    const dir = join(this.rootDir, ...segs.slice(0, -1));
    return { dir, target: join(dir, segs[segs.length - 1]) };
  }

  /**
   * Makes `dir` and runs `fn` in it. A concurrent delete may remove the freshly created (empty) directory before
   * `fn` put a file in it: the directory is made again and `fn` retried.
   */
  private async inDir(key: string, dir: string, fn: () => Promise<void>): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await mkdir(dir, { recursive: true });
        await fn();
        return;
      } catch (err) {
        if (errnoCode(err) === 'ENOENT' && attempt < 5) continue;
        throw this.putError(key, err);
      }
    }
  }

  put(key: string, data: Buffer | readonly Buffer[], options: PutOptions = {}): Promise<void> {
    const bytes = Buffer.isBuffer(data) ? data.length : data.reduce((n, b) => n + b.length, 0);
    return this.counted(
      'put',
      () => this.putObject(key, data, options),
      () => bytes,
    );
  }

  private async putObject(key: string, data: Buffer | readonly Buffer[], options: PutOptions): Promise<void> {
    this.check();
    const { dir, target } = this.placeOf(key);
    const tmp = join(dir, `${TMP_PREFIX}${randomBytes(8).toString('hex')}`);
    await this.inDir(key, dir, () => this.writeDurably(tmp, data, options.yieldToLatency !== true));
    try {
      await rename(tmp, target);
      // The rename itself is only durable once the directory is synced.
      await syncDir(dir);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw this.putError(key, err);
    }
  }

  /**
   * A hard link: no byte is copied, and the file stays where it is (its owner deletes it once the object is
   * committed, so a crash before that leaves the data where its owner finds it). Linked under a temporary name
   * and renamed over the target, so the object appears whole, as with put.
   */
  adopt(key: string, path: string): Promise<void> {
    return this.counted('adopt', () => this.adoptFile(key, path));
  }

  private async adoptFile(key: string, path: string): Promise<void> {
    this.check();
    const { dir, target } = this.placeOf(key);
    const tmp = join(dir, `${TMP_PREFIX}${randomBytes(8).toString('hex')}`);
    await this.inDir(key, dir, () => link(path, tmp));
    try {
      await rename(tmp, target);
      // Renaming a link over another link of the same file (the same file adopted again) changes nothing and
      // leaves the temporary name: removed here (and absent, as it should be, in every other case).
      await unlink(tmp).catch(() => undefined);
      await syncDir(dir);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw this.putError(key, err);
    }
  }

  private async writeDurably(path: string, data: Buffer | readonly Buffer[], bulk: boolean): Promise<void> {
    const parts = Buffer.isBuffer(data) ? [data] : data;
    const flushChunk = bulk ? BULK_FLUSH_CHUNK : FLUSH_CHUNK;
    const direct = await this.directWriter();
    if (direct?.usable) {
      try {
        // Bulk writes keep three steps in flight: each step's turn on a busy event loop is slow to come.
        await direct.writeFile(path, parts, flushChunk, bulk ? 4 : 2);
        return;
      } catch (err) {
        await unlink(path).catch(() => undefined);
        // Direct I/O that turned out not to work here falls back to the page cache; any other error is the put's.
        if (direct.usable) throw err;
      }
    }
    // Random names make a collision with a leftover of a crashed process (same pid) practically impossible.
    const fh = await open(path, 'w');
    try {
      // Written and flushed `flushChunk` bytes at a time: on ext4 (data=ordered) one fsync of a 16 MiB file makes
      // every other fsync on the disk, the WAL's included, wait for all of it; small flushes keep the WAL's
      // acknowledgement latency low while segments are being sealed (measured on a virtio disk: the WAL's p99
      // group commit with one segment being written went from ~9 ms with 1 MiB flushes to ~6 ms with 256 KiB),
      // larger ones let a backlog be written at all (see BULK_FLUSH_CHUNK).
      // Parts are gathered into groups of up to that size, each written with one writev (a segment of small
      // batches must not cost a system call per batch) and then flushed.
      let group: Buffer[] = [];
      let groupBytes = 0;
      const writeGroup = async (): Promise<void> => {
        const written = (await fh.writev(group)).bytesWritten;
        if (written < groupBytes) {
          // A short writev (rare): write what is left of the group in order.
          const rest = Buffer.concat(group).subarray(written);
          let off = 0;
          while (off < rest.length) off += (await fh.write(rest, off, rest.length - off)).bytesWritten;
        }
        group = [];
        groupBytes = 0;
      };
      for (const part of parts) {
        for (let off = 0; off < part.length;) {
          const n = Math.min(flushChunk - groupBytes, part.length - off);
          group.push(off === 0 && n === part.length ? part : part.subarray(off, off + n));
          groupBytes += n;
          off += n;
          if (groupBytes >= flushChunk) {
            await writeGroup();
            await fh.datasync();
          }
        }
      }
      if (groupBytes > 0) await writeGroup();
      await fh.sync();
    } catch (err) {
      await fh.close().catch(() => undefined);
      await unlink(path).catch(() => undefined);
      throw err;
    }
    await fh.close();
  }

  get(key: string, range?: { start: number; end: number }): Promise<Buffer> {
    return this.counted(
      'get',
      () => this.getObject(key, range),
      (b) => b.length,
    );
  }

  private async getObject(key: string, range?: { start: number; end: number }): Promise<Buffer> {
    this.check();
    const path = this.pathOf(key);
    if (range !== undefined) checkRange(key, range);
    let fh;
    try {
      fh = await open(path, 'r');
    } catch (err) {
      throw this.ioError(`object "${key}" not found`, err, true);
    }
    try {
      const st = await fh.stat();
      // A key that is only a prefix of other keys is a directory here, and no object.
      if (!st.isFile()) throw new FlowError('NOT_FOUND', `object "${key}" not found`);
      const size = st.size;
      // A range reaching past the end is cut at the end, as an HTTP range read would be.
      const start = range ? Math.min(range.start, size) : 0;
      const end = range ? Math.min(range.end, size) : size;
      const buf = Buffer.allocUnsafe(end - start);
      let got = 0;
      while (got < buf.length) {
        const { bytesRead } = await fh.read(buf, got, buf.length - got, start + got);
        if (bytesRead === 0) break; // shrank meanwhile; cannot happen with rename-only writes
        got += bytesRead;
      }
      return got === buf.length ? buf : buf.subarray(0, got);
    } catch (err) {
      throw this.ioError(`cannot read object "${key}"`, err);
    } finally {
      await fh.close();
    }
  }

  list(prefix: string): Promise<ObjectInfo[]> {
    return this.counted('list', () => this.listObjects(prefix));
  }

  private async listObjects(prefix: string): Promise<ObjectInfo[]> {
    this.check();
    if (prefix.startsWith('/') || prefix.includes('\\') || prefix.split('/').some((s) => s === '..' || s === '.')) {
      throw new FlowError('INVALID_ARGUMENT', `bad object key prefix "${prefix}"`);
    }
    // Only the directory named by the prefix's complete segments can hold matches; walk just that.
    const cut = prefix.lastIndexOf('/');
    const dirKey = cut < 0 ? '' : prefix.slice(0, cut);
    if (dirKey !== '' && dirKey.split('/').includes('')) return []; // "a//b": no valid key can match
    const out: ObjectInfo[] = [];
    await this.walk(dirKey === '' ? this.rootDir : join(this.rootDir, ...dirKey.split('/')), dirKey, prefix, out);
    // S3 lists in UTF-8 byte order; plain string comparison would order by UTF-16 units instead.
    out.sort((a, b) => Buffer.compare(Buffer.from(a.key), Buffer.from(b.key)));
    return out;
  }

  private async walk(dir: string, dirKey: string, prefix: string, out: ObjectInfo[]): Promise<void> {
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      throw this.ioError(`cannot list objects under "${dirKey}"`, err);
    }
    for (const e of entries) {
      if (e.name.startsWith(TMP_PREFIX)) continue;
      const key = dirKey === '' ? e.name : `${dirKey}/${e.name}`;
      if (e.isDirectory()) {
        // Descend only where keys can still start with the prefix.
        if (key.startsWith(prefix) || prefix.startsWith(`${key}/`)) await this.walk(join(dir, e.name), key, prefix, out);
      } else if (e.isFile() && key.startsWith(prefix)) {
        try {
          out.push({ key, size: (await stat(join(dir, e.name))).size });
        } catch (err) {
          if (errnoCode(err) !== 'ENOENT') throw this.ioError(`cannot stat object "${key}"`, err);
        }
      }
    }
  }

  delete(key: string): Promise<void> {
    return this.counted('delete', () => this.deleteObject(key));
  }

  private async deleteObject(key: string): Promise<void> {
    this.check();
    const segs = keySegments(key);
    try {
      await unlink(join(this.rootDir, ...segs));
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      // EISDIR/EPERM: the key names a "directory" of other keys, which is no object.
      if (code === 'EISDIR' || code === 'EPERM') return;
      throw this.ioError(`cannot delete object "${key}"`, err);
    }
    // Remove directories the delete left empty, so deleted streams leave nothing behind. Best effort: a
    // directory that is not empty, or is being written into, stays (put retries if it loses that race).
    for (let n = segs.length - 1; n > 0; n--) {
      try {
        await rmdir(join(this.rootDir, ...segs.slice(0, n)));
      } catch {
        break;
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  /** Operations, bytes and failures by operation (an absent object's NOT_FOUND is no failure). */
  figures(): Record<string, unknown> {
    const operations: Record<string, { requests: number; bytes: number; errors: number; retries: number }> = {};
    for (const [op, f] of Object.entries(this.ops)) operations[op] = { ...f };
    return { kind: this.kind, operations };
  }

  private async counted<T>(op: keyof FsObjectStore['ops'], fn: () => Promise<T>, bytes?: (r: T) => number): Promise<T> {
    const f = this.ops[op];
    f.requests++;
    try {
      const r = await fn();
      if (bytes) f.bytes += bytes(r);
      return r;
    } catch (err) {
      if (!(err instanceof FlowError && err.code === 'NOT_FOUND')) f.errors++;
      throw err;
    }
  }

  private putError(key: string, err: unknown): FlowError {
    const code = errnoCode(err);
    if (code === 'ENOTDIR' || code === 'EISDIR' || code === 'ENOTEMPTY' || code === 'EEXIST') {
      // S3 allows both "a" and "a/b"; a directory tree cannot, so this store refuses the second one.
      return new FlowError('INVALID_ARGUMENT', `object key "${key}" collides with another key used as its directory (or the reverse)`, { cause: err });
    }
    return new FlowError('STORAGE_ERROR', `cannot write object "${key}": ${code ?? String(err)}`, { cause: err });
  }

  private ioError(message: string, err: unknown, notFoundIsExpected = false): FlowError {
    if (err instanceof FlowError) return err;
    const code = errnoCode(err);
    if (code === 'ENOENT' || code === 'ENOTDIR' || (notFoundIsExpected && code === 'EISDIR')) {
      return new FlowError('NOT_FOUND', notFoundIsExpected ? message : `${message}: not found`, { cause: err });
    }
    return new FlowError('STORAGE_ERROR', `${message}: ${code ?? String(err)}`, { cause: err });
  }
}
