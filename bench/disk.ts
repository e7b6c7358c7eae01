/**
 * The machine's own sequential, fsync'd write bandwidth: 1 MiB blocks, each followed by fdatasync, into a file
 * in the directory the broker's data lives in (same filesystem). This is the ceiling for an acks=all produce
 * path that makes every acknowledged byte durable; Kafka produce throughput is reported as a share of it.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, fdatasyncSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { nowS, percentiles, type Percentiles } from './util.js';

export interface DiskResult {
  /** 1 MB = 10^6 bytes. */
  mbPerSec: number;
  blocks: number;
  seconds: number;
  /** Per block: write + fdatasync (ms). */
  blockMs: Percentiles;
}

export function diskFsyncBandwidth(dir: string, seconds: number, blockBytes = 1 << 20): DiskResult {
  const file = join(dir, 'fsync-probe.bin');
  const block = randomBytes(blockBytes);
  const fd = openSync(file, 'w');
  const samples: number[] = [];
  try {
    // A short warm-up (file creation, first allocations) that is not counted.
    const warmEnd = nowS() + 0.3;
    while (nowS() < warmEnd) {
      writeSync(fd, block);
      fdatasyncSync(fd);
    }
    const t0 = nowS();
    const end = t0 + seconds;
    let t = t0;
    while (t < end) {
      writeSync(fd, block);
      fdatasyncSync(fd);
      const t1 = nowS();
      samples.push((t1 - t) * 1000);
      t = t1;
    }
    const elapsed = t - t0;
    return { mbPerSec: (samples.length * blockBytes) / elapsed / 1e6, blocks: samples.length, seconds: elapsed, blockMs: percentiles(samples) };
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
}
