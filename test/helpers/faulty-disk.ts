/**
 * A FileOpener (the WALs' seam for opening the files they write) whose handles fail on demand, as a full or failing
 * disk would: while `full`, every write lands part of its bytes (whole 4 KiB blocks, as O_DIRECT would) and then
 * fails with ENOSPC; while `failCuts`, truncate fails with EIO (a failed write can then not be cut off at once).
 */
import { open, type FileHandle } from 'node:fs/promises';
import type { FileOpener } from '../../src/storage/fs-util.js';

const fsError = (code: string): Error => Object.assign(new Error(`${code}: injected by the test`), { code });

export class FaultyDisk implements FileOpener {
  full = false;
  failCuts = false;
  /** Writes failed so far. */
  failedWrites = 0;

  async open(path: string, flags: number | string, mode?: number): Promise<FileHandle> {
    return this.wrap(await open(path, flags, mode));
  }

  /** Lands the first half of a write (rounded down to whole blocks), as a write cut short by a full disk. */
  private async tear(fh: FileHandle, buf: Buffer, length: number, position: number): Promise<void> {
    const part = Math.floor(length / 2 / 4096) * 4096;
    if (part > 0) await fh.write(buf, 0, part, position).catch(() => undefined);
  }

  private wrap(fh: FileHandle): FileHandle {
    const disk = this;
    return new Proxy(fh, {
      get(target, prop) {
        if (prop === 'write') {
          return async (buf: Buffer, offset = 0, length = buf.length - offset, position: number | null = null) => {
            if (disk.full) {
              disk.failedWrites++;
              if (position !== null) await disk.tear(target, buf.subarray(offset), length, position);
              throw fsError('ENOSPC');
            }
            return target.write(buf, offset, length, position);
          };
        }
        if (prop === 'writev') {
          return async (bufs: Buffer[], position?: number) => {
            if (disk.full) {
              disk.failedWrites++;
              const all = Buffer.concat(bufs);
              if (position !== undefined) await disk.tear(target, all, all.length, position);
              throw fsError('ENOSPC');
            }
            return target.writev(bufs, position);
          };
        }
        if (prop === 'truncate') {
          return async (len?: number) => {
            if (disk.failCuts) throw fsError('EIO');
            return target.truncate(len);
          };
        }
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
  }
}
