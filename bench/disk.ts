/**
 * The machine's own sequential, fsync'd write bandwidth: 1 MiB blocks, each made durable before the next, into a
 * file in the directory the broker's data lives in (same filesystem). This is the ceiling for an acks=all produce
 * path that makes every acknowledged byte durable; Kafka produce throughput is reported as a share of it.
 *
 * Measured two ways, and the faster one is the disk's figure: through the page cache (write + fdatasync), and
 * around it (O_DIRECT + fdatasync, where the filesystem supports it). The broker writes segment objects with
 * O_DIRECT; on a VM whose fresh pages are expensive, the buffered probe alone measures the kernel's copying
 * rather than the disk, and would understate the physical limit the broker is compared with.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, constants, fdatasyncSync, openSync, rmSync, writeSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { alignedBuffer } from '../src/storage/direct-io.js';
import { nowS, percentiles, type Percentiles } from './util.js';

export interface DiskModeResult {
  /** 1 MB = 10^6 bytes. */
  mbPerSec: number;
  blocks: number;
  seconds: number;
  /** Per block: write + fdatasync (ms). */
  blockMs: Percentiles;
}

export interface DiskResult extends DiskModeResult {
  /** Which way of writing gave the figure above. */
  mode: 'buffered' | 'direct';
  buffered: DiskModeResult;
  /** null where O_DIRECT is not available (other platforms, tmpfs). */
  direct: DiskModeResult | null;
}

function run(fd: number, block: Buffer, seconds: number): DiskModeResult {
  const samples: number[] = [];
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
  return { mbPerSec: (samples.length * block.length) / elapsed / 1e6, blocks: samples.length, seconds: elapsed, blockMs: percentiles(samples) };
}

/** Each mode writes synchronously (write, fdatasync, next block); finding aligned memory for O_DIRECT is the only await. */
export async function diskFsyncBandwidth(dir: string, seconds: number, blockBytes = 1 << 20): Promise<DiskResult> {
  const file = join(dir, 'fsync-probe.bin');
  let buffered: DiskModeResult;
  const fd = openSync(file, 'w');
  try {
    buffered = run(fd, randomBytes(blockBytes), seconds);
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  let direct: DiskModeResult | null = null;
  const O_DIRECT = constants.O_DIRECT;
  if (typeof O_DIRECT === 'number' && O_DIRECT !== 0) {
    const fh = await open(file, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | O_DIRECT).catch(() => null);
    if (fh !== null) {
      try {
        // The broker's own way of finding aligned memory; none (not supported here) means no direct figure.
        const block = await alignedBuffer(fh, blockBytes).catch(() => null);
        if (block) {
          block.set(randomBytes(blockBytes));
          direct = run(fh.fd, block, seconds);
        }
      } finally {
        await fh.close();
        rmSync(file, { force: true });
      }
    }
  }
  const best = direct !== null && direct.mbPerSec > buffered.mbPerSec ? direct : buffered;
  return { ...best, mode: best === direct ? 'direct' : 'buffered', buffered, direct };
}
