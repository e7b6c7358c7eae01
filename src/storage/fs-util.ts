/** Small file-system helpers shared by the local storage backends. */
import { open } from 'node:fs/promises';

/** The errno code of a failed file-system call (ENOENT, EINVAL...), if it has one. */
export function errnoCode(err: unknown): string | undefined {
  return err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : undefined;
}

/** Makes a directory's entries durable (a created, renamed or deleted file survives a crash only after this). */
export async function syncDir(dir: string): Promise<void> {
  const d = await open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}
