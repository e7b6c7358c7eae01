import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { diskFsyncBandwidth } from '../../bench/disk.js';

describe('bench: disk probe', () => {
  it('measures buffered and direct fsync bandwidth, reports the faster, and leaves nothing behind', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'flowmq-disk-'));
    try {
      const r = await diskFsyncBandwidth(dir, 0.2, 64 * 1024);
      assert.ok(r.buffered.blocks > 0 && r.buffered.mbPerSec > 0);
      if (r.direct) assert.ok(r.direct.blocks > 0 && r.direct.mbPerSec > 0);
      const best = Math.max(r.buffered.mbPerSec, r.direct?.mbPerSec ?? 0);
      assert.equal(r.mbPerSec, best);
      assert.equal(r.mode, r.direct && r.direct.mbPerSec === best ? 'direct' : 'buffered');
      assert.deepEqual(readdirSync(dir), []);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
