import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { LogLimiter, logKey } from '../../src/util/log-limit.js';

function capture() {
  const lines: Array<Record<string, unknown>> = [];
  const out = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n')) if (l) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { lines, logger: pino({ level: 'debug' }, out) };
}

const flush = () => new Promise((r) => setImmediate(r));

describe('LogLimiter', () => {
  it('writes at most perKey lines per key and window, and reports the suppressed count on the next line', async () => {
    const { lines, logger } = capture();
    let now = 0;
    const l = new LogLimiter(logger, { perKey: 3, windowMs: 1000 }, () => now);
    const key = logKey('protocol error', '10.0.0.1');
    for (let i = 0; i < 10; i++) l.log('warn', key, { i }, 'mqtt protocol error');
    await flush();
    assert.deepEqual(
      lines.map((x) => x.i),
      [0, 1, 2],
    );
    assert.equal(l.suppressedTotal, 7);
    now = 1000;
    l.log('warn', key, { i: 10 }, 'mqtt protocol error');
    await flush();
    assert.equal(lines.length, 4);
    assert.equal(lines[3].suppressed, 7);
    assert.equal(lines[3].i, 10);
    l.stop();
  });

  it('limits each address on its own, and all addresses together', async () => {
    const { lines, logger } = capture();
    const l = new LogLimiter(logger, { perKey: 2, global: 5, windowMs: 1000 }, () => 0);
    for (let a = 0; a < 10; a++) for (let i = 0; i < 3; i++) l.log('info', logKey('connect timeout', `10.0.0.${a}`), { a }, 'timeout');
    await flush();
    assert.equal(lines.length, 5);
    assert.deepEqual(
      lines.map((x) => x.a),
      [0, 0, 1, 1, 2],
    );
    assert.equal(l.suppressedTotal, 25);
    l.stop();
  });

  it('sweep reports what a quiet key suppressed, then forgets it', async () => {
    const { lines, logger } = capture();
    let now = 0;
    const l = new LogLimiter(logger, { perKey: 1, windowMs: 1000 }, () => now);
    for (let i = 0; i < 4; i++) l.log('warn', 'k', {}, 'bad frame');
    now = 1500;
    l.sweep();
    await flush();
    assert.equal(lines.length, 2);
    assert.equal(lines[1].suppressed, 3);
    assert.equal(lines[1].key, 'k');
    assert.equal(l.size, 1);
    now = 3000;
    l.sweep();
    assert.equal(l.size, 0);
    l.stop();
  });

  it('tracks at most maxKeys keys; others share one overflow key', async () => {
    const { lines, logger } = capture();
    const l = new LogLimiter(logger, { perKey: 1, global: 1000, maxKeys: 3, windowMs: 1000 }, () => 0);
    for (let a = 0; a < 100; a++) l.log('info', `k${a}`, { a }, 'x');
    await flush();
    assert.equal(l.size, 4);
    assert.equal(lines.length, 4);
    l.stop();
  });
});
