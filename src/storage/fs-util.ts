/** Small file-system helpers shared by the local storage backends. */
import { open, type FileHandle } from 'node:fs/promises';
import { FlowError } from '../core/errors.js';

/** The errno code of a failed file-system call (ENOENT, EINVAL...), if it has one. */
export function errnoCode(err: unknown): string | undefined {
  return err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : undefined;
}

/** Errno codes that mean "no room": the filesystem is full, or the user's quota is. */
const NO_SPACE = new Set(['ENOSPC', 'EDQUOT']);

/** Whether `err`, or an error it was caused by, says there is no room left (ENOSPC, EDQUOT, STORAGE_FULL). */
export function isNoSpace(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    if (e instanceof FlowError && e.code === 'STORAGE_FULL') return true;
    const code = errnoCode(e);
    if (code !== undefined && NO_SPACE.has(code)) return true;
  }
  return false;
}

/**
 * A failed write as a FlowError: STORAGE_FULL when the disk (or a quota) is full, so that producers are told to
 * retry later, else STORAGE_ERROR (EIO and the like). A FlowError passes through unchanged.
 */
export function writeError(message: string, err: unknown): FlowError {
  if (err instanceof FlowError) return err;
  const code = errnoCode(err);
  return new FlowError(isNoSpace(err) ? 'STORAGE_FULL' : 'STORAGE_ERROR', code ? `${message}: ${code}` : message, { cause: err });
}

/**
 * A write to a regular file that returned fewer bytes than asked: write(2) does that when the filesystem has no room
 * for the rest (the next write would fail with ENOSPC), so it is reported as ENOSPC.
 */
export function shortWrite(written: number, wanted: number): Error {
  return Object.assign(new Error(`short write: ${written} of ${wanted} bytes (no space for the rest)`), { code: 'ENOSPC' });
}

/**
 * How the WALs open the files they write: a seam where tests put a handle whose writes fail on demand (a full disk,
 * an I/O error) in place of the real one. Production uses `fsOpen` (node:fs/promises).
 */
export interface FileOpener {
  open(path: string, flags: number | string, mode?: number): Promise<FileHandle>;
}

export const fsOpen: FileOpener = { open: (path, flags, mode) => open(path, flags, mode) };

/** Makes a directory's entries durable (a created, renamed or deleted file survives a crash only after this). */
export async function syncDir(dir: string): Promise<void> {
  const d = await open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}
