/**
 * One broker per data directory: two processes appending to the same WAL and SQLite file would corrupt both.
 * The lock is a file holding the owner's pid, created exclusively; a lock left by a process that no longer runs
 * (a crash, kill -9) is taken over.
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { FlowError } from '../core/index.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: the process exists but belongs to someone else.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Takes the lock of `dir` or throws CONFIG_ERROR naming the process that holds it; returns the release function. */
export function lockDataDir(dir: string): () => void {
  const path = join(dir, 'LOCK');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx');
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return () => {
        try {
          if (readFileSync(path, 'utf8').trim() === String(process.pid)) unlinkSync(path);
        } catch {
          // already gone
        }
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const holder = Number.parseInt(readFileSync(path, 'utf8'), 10);
      if (Number.isInteger(holder) && holder !== process.pid && alive(holder)) {
        throw new FlowError('CONFIG_ERROR', `data directory ${dir} is in use by another broker (pid ${holder})`);
      }
      unlinkSync(path); // stale: its owner is gone
    }
  }
  throw new FlowError('CONFIG_ERROR', `cannot lock data directory ${dir}`);
}
