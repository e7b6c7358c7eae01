/**
 * NATS parsers fed in pieces: every fixture byte at a time (each byte a fresh buffer), and the stream of all valid
 * fixtures cut at every single point and at every pair of points of a shorter stream: the same operations, the
 * same error, wherever the chunk boundaries fall.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CLIENT_CASES, SERVER_CASES } from './fixtures.js';
import { NatsServerParser } from '../../../../src/protocols/nats/codec/index.js';
import { LIMITS, ServerRecorder, bytewise, clientParse, cut, serverParse } from './recorder.js';

const b = (s: string): Buffer => Buffer.from(s, 'latin1');

describe('byte at a time', () => {
  for (const c of SERVER_CASES) {
    test(`server: ${c.name}`, () => {
      const out = serverParse(bytewise(b(c.input)));
      assert.deepEqual(out.ops, c.ops);
      assert.equal(out.error, c.error);
    });
  }
  for (const c of CLIENT_CASES) {
    test(`client: ${c.name}`, () => {
      const out = clientParse(bytewise(b(c.input)));
      assert.deepEqual(out.ops, c.ops);
      assert.equal(out.error, c.error);
    });
  }
});

describe('every split point', () => {
  test('server: all valid fixtures in one stream, cut at every point', () => {
    const ok = SERVER_CASES.filter((c) => c.error === undefined);
    const stream = b(ok.map((c) => c.input).join(''));
    const expected = ok.flatMap((c) => c.ops);
    assert.deepEqual(serverParse([stream]).ops, expected);
    for (let i = 0; i <= stream.length; i++) {
      const out = serverParse(cut(stream, [i]));
      assert.equal(out.error, undefined, `cut at ${i}`);
      assert.deepEqual(out.ops, expected, `cut at ${i}`);
    }
  });

  test('server: a short stream cut at every pair of points', () => {
    const stream = b('PUB a.b r 3\r\nabc\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nxy\r\nSUB a.* q 1\r\nPING\r\n');
    const expected = serverParse([stream]).ops;
    assert.equal(expected.length, 4);
    for (let i = 0; i <= stream.length; i++) {
      for (let j = i; j <= stream.length; j++) {
        const out = serverParse(cut(stream, [i, j]));
        assert.equal(out.error, undefined, `cuts ${i}, ${j}`);
        assert.deepEqual(out.ops, expected, `cuts ${i}, ${j}`);
      }
    }
  });

  test('server: every error fixture cut at every point gives the same error', () => {
    for (const c of SERVER_CASES.filter((x) => x.error !== undefined)) {
      const input = b(c.input);
      for (let i = 0; i <= input.length; i++) {
        const out = serverParse(cut(input, [i]));
        assert.equal(out.error, c.error, `${c.name}, cut at ${i}`);
        assert.deepEqual(out.ops, c.ops, `${c.name}, cut at ${i}`);
      }
    }
  });

  test('client: all valid fixtures in one stream, cut at every point', () => {
    const ok = CLIENT_CASES.filter((c) => c.error === undefined);
    const stream = b(ok.map((c) => c.input).join(''));
    const expected = ok.flatMap((c) => c.ops);
    for (let i = 0; i <= stream.length; i++) {
      const out = clientParse(cut(stream, [i]));
      assert.equal(out.error, undefined, `cut at ${i}`);
      assert.deepEqual(out.ops, expected, `cut at ${i}`);
    }
  });
});

describe('borrowed chunks (a shared read buffer overwritten after every push)', () => {
  /** Keeps the payload Buffers themselves, reading them only at the end. */
  class Keeper extends ServerRecorder {
    readonly kept: Array<[string, Buffer, Buffer | null]> = [];
    constructor(private readonly p: NatsServerParser) {
      super();
    }
    override onPub(subject: string, _r: string | null, payload: Buffer): void {
      this.owned.push(this.p.ownedPayload);
      this.kept.push([subject, payload, null]);
    }
    override onHpub(subject: string, _r: string | null, headers: Buffer, payload: Buffer): void {
      this.owned.push(this.p.ownedPayload);
      this.kept.push([subject, payload, headers]);
    }
  }

  function run(stream: Buffer, points: number[]): Keeper {
    const p = new NatsServerParser({ ...LIMITS, borrowed: true });
    const k = new Keeper(p);
    const shared = Buffer.alloc(stream.length + 1);
    for (const piece of cut(stream, points)) {
      piece.copy(shared);
      p.push(shared.subarray(0, piece.length), k);
      shared.fill(0x5a);
    }
    return k;
  }

  test('every payload survives the reuse of its chunk, wherever the cuts fall', () => {
    const stream = b('PUB a 5\r\nhello\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nxy\r\nPUB a.b r 0\r\n\r\nPUB c 70\r\n' + 'q'.repeat(70) + '\r\n');
    for (let i = 0; i <= stream.length; i++) {
      const k = run(stream, [i]);
      assert.deepEqual(
        k.kept.map(([s, pl, h]) => [s, pl.toString('latin1'), h === null ? null : h.toString('latin1')]),
        [
          ['a', 'hello', null],
          ['h', 'xy', 'NATS/1.0\r\n\r\n'],
          ['a.b', '', null],
          ['c', 'q'.repeat(70), null],
        ],
        `cut at ${i}`,
      );
      assert.deepEqual(k.owned, [true, true, true, true]);
    }
  });

  test('copies kept across many slabs and large payloads stay intact', () => {
    const parts: string[] = [];
    const expected: Array<[string, string, null]> = [];
    for (let i = 0; i < 1500; i++) {
      const body = String(i)
        .padStart(4, '0')
        .repeat(i % 50 === 0 ? 1500 : 25);
      parts.push(`PUB s.${i} ${body.length}\r\n${body}\r\n`);
      expected.push([`s.${i}`, body, null]);
    }
    const stream = b(parts.join(''));
    const points: number[] = [];
    for (let at = 4093; at < stream.length; at += 4093) points.push(at);
    const k = run(stream, points);
    assert.equal(k.kept.length, expected.length);
    assert.deepEqual(
      k.kept.map(([s, pl]) => [s, pl.toString('latin1'), null]),
      expected,
    );
  });

  test('borrowed mode reads every fixture as the default mode does', () => {
    for (const c of SERVER_CASES) {
      const out = serverParse([b(c.input)], { ...LIMITS, borrowed: true });
      assert.deepEqual(out.ops, c.ops, c.name);
      assert.equal(out.error, c.error, c.name);
      assert.ok(out.owned.every((o) => o));
    }
    for (const c of CLIENT_CASES) {
      const out = clientParse([b(c.input)], { ...LIMITS, borrowed: true });
      assert.deepEqual(out.ops, c.ops, c.name);
    }
  });
});
