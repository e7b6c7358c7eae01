import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isFlowError } from '../../src/core/index.js';
import { DiskSpace, type FsSpace } from '../../src/storage/disk-space.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

function fakeDisk(available: number, total = 100 * GiB) {
  const state = { available, total };
  const lines: string[] = [];
  return {
    state,
    lines,
    probe: async (): Promise<FsSpace> => ({ ...state }),
    logger: { warn: (_: object, msg: string) => lines.push(`warn ${msg}`), info: (_: object, msg: string) => lines.push(`info ${msg}`) },
  };
}

describe('DiskSpace (the free-space reserve)', () => {
  it('defaults to 5% of the filesystem, at most 1 GiB; 0 disables it', async () => {
    const small = fakeDisk(1 * GiB, 10 * GiB);
    const d1 = await DiskSpace.open({ dir: '.', minFreeBytes: null, probe: small.probe });
    assert.equal(d1.minFreeBytes, Math.floor(10 * GiB * 0.05));
    const large = fakeDisk(500 * GiB, 1000 * GiB);
    const d2 = await DiskSpace.open({ dir: '.', minFreeBytes: null, probe: large.probe });
    assert.equal(d2.minFreeBytes, GiB);
    const none = fakeDisk(0);
    const d3 = await DiskSpace.open({ dir: '.', minFreeBytes: 0, probe: none.probe });
    assert.equal(d3.refusal(), null, 'no reserve: never refuses, even with nothing free');
    for (const d of [d1, d2, d3]) d.close();
  });

  it('refuses with STORAGE_FULL below the reserve, counts appended bytes until the next look, and accepts again once space returns', async () => {
    const disk = fakeDisk(100 * MiB);
    const d = await DiskSpace.open({ dir: '.', minFreeBytes: 64 * MiB, probe: disk.probe, logger: disk.logger, refreshMs: 3_600_000 });
    assert.equal(d.refusal(), null);
    // 40 MiB appended since the last look: the estimate is below the reserve before statfs says so.
    d.written(40 * MiB);
    assert.ok(isFlowError(d.refusal(), 'STORAGE_FULL'));
    assert.deepEqual(d.figures().refusingWrites, true);
    // The look confirms it (the disk really has less now), and space comes back later.
    disk.state.available = 60 * MiB;
    await d.refresh();
    assert.ok(isFlowError(d.refusal(), 'STORAGE_FULL'));
    disk.state.available = 200 * MiB;
    await d.refresh();
    assert.equal(d.refusal(), null);
    assert.deepEqual(disk.lines, [
      'warn free disk space below the reserve: stream writes are refused until space returns',
      'info free disk space above the reserve again: stream writes accepted',
    ]);
    assert.equal(d.figures().refusals, 2);
    d.close();
  });
});
