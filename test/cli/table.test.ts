import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { cell, clip, fmtAge, fmtBytes, fmtDuration, fmtTime, itemsTable, keyValues, ProgressBar, table } from '../../src/cli/table.js';

/** A writable that says it is (or is not) a terminal, keeping what was written. */
function sink(isTTY: boolean): NodeJS.WriteStream & { text: string } {
  const w = new Writable({
    write(chunk, _enc, cb) {
      (w as unknown as { text: string }).text += String(chunk);
      cb();
    },
  }) as unknown as NodeJS.WriteStream & { text: string };
  w.text = '';
  (w as { isTTY: boolean }).isTTY = isTTY;
  return w;
}

describe('CLI tables', () => {
  it('aligns columns two spaces apart and trims the end of each line', () => {
    assert.equal(
      table([
        ['NAME', 'N'],
        ['orders', '2'],
        ['a', ''],
      ]),
      'NAME    N\norders  2\na',
    );
  });
  it('prints a placeholder for an empty list, "-" for nothing, lists joined', () => {
    assert.equal(itemsTable([], [['X', (x: unknown) => x]], 'none here'), 'none here');
    assert.equal(
      itemsTable(
        [{ a: null, b: ['x', 'y'] }],
        [
          ['A', (r) => r.a],
          ['B', (r) => r.b],
        ],
        '',
      ),
      'A  B\n-  x,y',
    );
    assert.equal(cell([]), '-');
    assert.equal(cell({ k: 1 }), '{"k":1}');
    assert.equal(
      keyValues([
        ['stream', 'orders'],
        ['retention', null],
      ]),
      'stream:    orders\nretention: -',
    );
  });
  it('formats durations, ages, sizes and times', () => {
    assert.equal(fmtDuration(7 * 86_400_000), '7d');
    assert.equal(fmtDuration(90 * 60_000), '90m');
    assert.equal(fmtDuration(1500), '1500ms');
    assert.equal(fmtDuration(null), 'forever');
    assert.equal(fmtAge(3 * 3_600_000 + 5 * 60_000), '3h5m');
    assert.equal(fmtAge(12_400), '12s');
    assert.equal(fmtBytes(512), '512B');
    assert.equal(fmtBytes(1536), '1.5KiB');
    assert.equal(fmtBytes(20 * 1024 * 1024), '20MiB');
    assert.equal(fmtTime(0), '1970-01-01T00:00:00Z');
    assert.equal(fmtTime('2026-12-02T02:17:46.123Z'), '2026-12-02T02:17:46Z');
    assert.equal(fmtTime(null), '-');
    assert.equal(clip('a\nb'), 'a b');
    assert.equal(clip('x'.repeat(10), 5), 'xxxx…');
  });
});

describe('ProgressBar', () => {
  it('redraws in place on a terminal and ends with a newline', () => {
    const out = sink(true);
    const bar = new ProgressBar('resetting g', out, 10);
    bar.update(0, 4);
    bar.update(0, 4); // the same line is not drawn twice
    bar.update(2, 4, 's1');
    bar.done(4, 4, 'stream(s)');
    assert.equal(
      out.text,
      '\rresetting g [----------] 0/4\u001b[K' + '\rresetting g [#####-----] 2/4 s1\u001b[K' + '\rresetting g [##########] 4/4 stream(s)\u001b[K\n',
    );
  });
  it('prints only the final line elsewhere (a pipe, a log)', () => {
    const out = sink(false);
    const bar = new ProgressBar('resetting g', out, 4);
    bar.update(1, 2);
    bar.done(2, 2);
    assert.equal(out.text, 'resetting g [####] 2/2\n');
  });
});
