/**
 * The formats of the NATS monitoring port's answers that follow Go's (monitor-json.ts): durations as Go's
 * time.Duration.String() (/connz rtt) and nats-server's uptime strings (myUptime).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { goDuration, natsUptime } from '../../../src/protocols/nats/monitor-json.js';

describe('NATS monitor formats', () => {
  it("goDuration writes what Go's Duration.String writes", () => {
    const cases: Array<[number, string]> = [
      [0, '0s'],
      [999, '999ns'],
      [1500, '1.5µs'],
      [3_412_612, '3.412612ms'],
      [1e9, '1s'],
      [61.5e9, '1m1.5s'],
      [3_723e9, '1h2m3s'],
    ];
    for (const [ns, s] of cases) assert.equal(goDuration(ns), s, String(ns));
  });

  it('natsUptime leaves out leading zero units, as nats-server', () => {
    const cases: Array<[number, string]> = [
      [0, '0s'],
      [59_999, '59s'],
      [61_000, '1m1s'],
      [3_600_000, '1h0m0s'],
      [86_400_000 + 1000, '1d0h0m1s'],
      [366 * 86_400_000, '1y1d0h0m0s'],
    ];
    for (const [ms, s] of cases) assert.equal(natsUptime(ms), s, String(ms));
  });
});
