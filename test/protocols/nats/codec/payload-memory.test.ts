/**
 * Payload memory of the NATS parsers (issue 24): with a PayloadBudget, what a payload spanning chunks holds follows
 * the bytes that arrived, not the size its control line announced; a payload cut by a read boundary is still
 * taken whole (from the budget); the budget is given back as bytes arrive, on stop and on errors; and the same
 * operations come out however the bytes are cut.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { NatsProtocolError, NatsServerParser, PayloadBudget, type NatsParserOptions } from '../../../../src/protocols/nats/codec/index.js';
import { ServerRecorder, cut, serverParse } from './recorder.js';

const LIMITS = { maxControlLine: 4096, maxPayload: 1024 * 1024 };

/** Sizes of the Buffer allocations `fn` makes (allocUnsafe and allocUnsafeSlow, which concat uses too). */
function allocations(fn: () => void): number[] {
  const sizes: number[] = [];
  const a = Buffer.allocUnsafe;
  const s = Buffer.allocUnsafeSlow;
  Buffer.allocUnsafe = (n: number) => (sizes.push(n), a(n));
  Buffer.allocUnsafeSlow = (n: number) => (sizes.push(n), s(n));
  try {
    fn();
  } finally {
    Buffer.allocUnsafe = a;
    Buffer.allocUnsafeSlow = s;
  }
  return sizes;
}

const sum = (xs: number[]) => xs.reduce((x, y) => x + y, 0);

/** A parser with the budget; `warm`: its subject cache already allocated (a first publish on `big` and `s`). */
function parser(budget: PayloadBudget, extra: Partial<NatsParserOptions> = {}, warm = false): { p: NatsServerParser; r: ServerRecorder } {
  const p = new NatsServerParser({ ...LIMITS, budget, ...extra });
  const r = new ServerRecorder(p);
  if (warm) {
    p.push(Buffer.from('PUB big 0\r\n\r\n'), r);
    r.ops.length = 0;
    r.owned.length = 0;
  }
  return { p, r };
}

describe('NATS payload memory', () => {
  test('an announced 1 MiB payload with a few bytes sent holds those bytes, not a mebibyte', () => {
    const budget = new PayloadBudget(64 * 1024 * 1024);
    const { p, r } = parser(budget, {}, true);
    const head = Buffer.from('PUB big 1048576\r\n' + 'a'.repeat(100));
    const sizes = allocations(() => p.push(head, r));
    assert.ok(sum(sizes) <= 2 * 100 + 64, `allocated ${sizes.join(', ')} for 100 payload bytes`);
    assert.deepEqual(budget.figures(), { aheadBytes: 0, aheadLimit: 64 * 1024 * 1024, gathering: 1, gathered: 1 });
    assert.equal(p.midOperation, true);
    // Byte by byte for a while: each copy buffer is as large as what came before, so the total stays within twice.
    let arrived = 100;
    const one = Buffer.from('b');
    const trickle = allocations(() => {
      for (let k = 0; k < 5000; k++) p.push(Buffer.from(one), r);
    });
    arrived += 5000;
    assert.ok(sum(sizes) + sum(trickle) <= 2 * arrived + 64, `allocated ${sum(sizes) + sum(trickle)} for ${arrived} bytes`);
    assert.ok(trickle.length < 20, `${trickle.length} allocations for 5000 single bytes`);
    // The rest in reads of 64 KiB: views of the chunks, joined once.
    const rest = Buffer.alloc(1048576 - arrived, 0x63);
    const all = Buffer.concat([rest, Buffer.from('\r\nPING\r\n')]);
    const reads = cut(
      all,
      Array.from({ length: Math.floor(all.length / 65536) }, (_, i) => (i + 1) * 65536),
    );
    const joinAllocs = allocations(() => {
      for (const c of reads) p.push(c, r);
    });
    assert.deepEqual(joinAllocs, [1048576], 'one allocation: the join');
    assert.equal(r.ops.length, 2);
    const [op, subject, reply, payload] = r.ops[0]! as [string, string, null, string];
    assert.deepEqual([op, subject, reply], ['PUB', 'big', null]);
    assert.equal(payload, 'a'.repeat(100) + 'b'.repeat(5000) + 'c'.repeat(rest.length));
    assert.deepEqual(r.ops[1], ['PING']);
    assert.deepEqual(r.owned, [true]);
    assert.deepEqual(budget.figures(), { aheadBytes: 0, aheadLimit: 64 * 1024 * 1024, gathering: 0, gathered: 1 });
  });

  test('a payload cut by a read boundary is taken whole from the budget, which it gives back as its bytes come', () => {
    const budget = new PayloadBudget(1 << 20);
    const { p, r } = parser(budget, {}, true);
    const sizes = allocations(() => p.push(Buffer.from('PUB big 1000\r\n' + 'x'.repeat(300)), r));
    assert.deepEqual(sizes, [1000], 'the whole payload at once');
    assert.equal(budget.aheadBytes, 700);
    p.push(Buffer.from('x'.repeat(200)), r);
    assert.equal(budget.aheadBytes, 500);
    p.push(Buffer.from('x'.repeat(500) + '\r\n'), r);
    assert.equal(budget.aheadBytes, 0);
    assert.deepEqual(r.ops, [['PUB', 'big', null, 'x'.repeat(1000)]]);
    assert.equal(budget.gathered, 0);
  });

  test('past the budget, payloads are gathered; more than 64 KiB to come is always gathered', () => {
    const budget = new PayloadBudget(1000);
    const a = parser(budget);
    a.p.push(Buffer.from('PUB s 900\r\nx'), a.r);
    assert.equal(budget.aheadBytes, 899);
    const b = parser(budget);
    b.p.push(Buffer.from('PUB s 900\r\nx'), b.r);
    assert.equal(budget.aheadBytes, 899, 'the second does not fit');
    assert.equal(budget.gathering, 1);
    const roomy = new PayloadBudget(1 << 30);
    const c = parser(roomy);
    c.p.push(Buffer.from('PUB s 100000\r\nx'), c.r);
    assert.deepEqual([roomy.aheadBytes, roomy.gathering], [0, 1], 'no reservation for a payload arriving over several reads');
    b.p.push(Buffer.from('x'.repeat(899) + '\r\n'), b.r);
    assert.deepEqual(b.r.ops, [['PUB', 's', null, 'x'.repeat(900)]]);
    assert.equal(budget.gathering, 0);
  });

  test('stop, a protocol error and a failing handler give back what a partial payload held', () => {
    const budget = new PayloadBudget(1 << 20);
    const a = parser(budget);
    a.p.push(Buffer.from('PUB s 1000\r\nxx'), a.r);
    const b = parser(budget);
    b.p.push(Buffer.from('PUB s 500000\r\nxx'), b.r);
    assert.deepEqual([budget.aheadBytes, budget.gathering], [998, 1]);
    a.p.stop();
    b.p.stop();
    assert.deepEqual([budget.aheadBytes, budget.gathering], [0, 0]);

    const c = parser(budget);
    c.p.push(Buffer.from('PUB s 1000\r\nxx'), c.r);
    assert.throws(() => c.p.push(Buffer.from('y'.repeat(998) + 'XX'), c.r), NatsProtocolError);
    const d = parser(budget);
    d.p.push(Buffer.from('PUB s 500000\r\nxx'), d.r);
    assert.throws(() => d.p.push(Buffer.alloc(499998 + 2, 0x79), d.r), NatsProtocolError);
    assert.deepEqual([budget.aheadBytes, budget.gathering], [0, 0]);

    const e = new NatsServerParser({ ...LIMITS, budget });
    e.push(Buffer.from('PUB s 1000\r\nxx'), { onPub: () => undefined } as unknown as ServerRecorder);
    assert.equal(budget.aheadBytes, 998);
    assert.throws(() =>
      e.push(Buffer.from('y'.repeat(998) + '\r\nPUB t 1000\r\nz'), {
        onPub: () => {
          throw new Error('handler failed');
        },
      } as unknown as ServerRecorder),
    );
    assert.deepEqual([budget.aheadBytes, budget.gathering], [0, 0]);
  });

  test('the same operations wherever the chunks are cut, gathered (views or copies) or taken whole', () => {
    const payload = Buffer.alloc(3000);
    for (let i = 0; i < payload.length; i++) payload[i] = 0x41 + (i % 26);
    const stream = Buffer.concat([
      Buffer.from(`PUB a r ${payload.length}\r\n`),
      payload,
      Buffer.from(`\r\nHPUB h 12 ${12 + payload.length}\r\nNATS/1.0\r\n\r\n`),
      payload,
      Buffer.from('\r\nPUB e 0\r\n\r\nPING\r\n'),
    ]);
    const expected = serverParse([stream], LIMITS).ops;
    assert.equal(expected.length, 4);
    for (const limit of [0, 1 << 20]) {
      for (const borrowed of [false, true]) {
        for (const step of [1, 7, 511, 512, 513, 1500]) {
          const points: number[] = [];
          for (let k = step; k < stream.length; k += step) points.push(k);
          const budget = new PayloadBudget(limit);
          const chunks = cut(stream, points).map((c) => Buffer.from(c));
          const out = serverParse(chunks, { ...LIMITS, budget, borrowed });
          assert.equal(out.error, undefined, `step ${step}`);
          assert.deepEqual(out.ops, expected, `budget ${limit}, borrowed ${borrowed}, step ${step}`);
          assert.ok(out.owned.every((o) => o) || !borrowed, 'borrowed chunks: every payload is a copy');
          assert.deepEqual([budget.aheadBytes, budget.gathering], [0, 0]);
        }
      }
    }
  });

  test('partials counts the operations a chunk left half-sent', () => {
    const { p, r } = parser(new PayloadBudget(0));
    p.push(Buffer.from('PI'), r);
    assert.equal(p.partials, 1);
    p.push(Buffer.from('NG\r\nPUB x 5\r\nab'), r);
    assert.equal(p.partials, 2);
    p.push(Buffer.from('c'), r);
    assert.equal(p.partials, 2, 'the same payload');
    p.push(Buffer.from('de\r\n'), r);
    assert.equal(p.midOperation, false);
    assert.deepEqual(r.ops, [['PING'], ['PUB', 'x', null, 'abcde']]);
  });
});
