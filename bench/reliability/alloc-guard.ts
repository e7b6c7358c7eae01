/**
 * Watches the size of every buffer allocation while a decoder runs, so the fuzzer can fail an input that makes a
 * decoder allocate from a length field instead of from the bytes that arrived (a 5-byte header that asks for
 * 2 GiB). Buffer.alloc/allocUnsafe/allocUnsafeSlow (Buffer.concat and Buffer.from go through them) and the
 * Uint8Array and ArrayBuffer constructors are wrapped; the pure-JS decompressors capture `Uint8Array` when their
 * module is evaluated, so this module must be imported before anything that imports them.
 *
 * Outside `limit` (Infinity by default) nothing is checked. An allocation above the limit is recorded (that record
 * fails the input, whatever the decoder does next) and gets zero bytes instead, so that a decoder cannot take the
 * process down while it is fuzzed. Not an exception: lz4js catches a failed Uint8Array allocation and falls back
 * to filling a plain Array of that length, which ends the process.
 */

export const allocGuard = {
  /** Largest single allocation allowed now, in bytes. */
  limit: Infinity,
  /** Size of the first allocation above the limit since the last reset, or 0. */
  violation: 0,
  /** Where the first allocation above the limit was made. */
  stack: '',
  /** Largest allocation seen since the last reset. */
  largest: 0,
  reset(limit: number): void {
    this.limit = limit;
    this.violation = 0;
    this.stack = '';
    this.largest = 0;
  },
};

/** The size to allocate: `n`, or 0 when it is above the limit. */
function check<T>(n: T): T | 0 {
  if (typeof n !== 'number') return n;
  if (n > allocGuard.largest) allocGuard.largest = n;
  if (n > allocGuard.limit) {
    if (allocGuard.violation === 0) {
      allocGuard.violation = n;
      allocGuard.stack = new Error().stack?.split('\n').slice(2, 9).join('\n') ?? '';
    }
    return 0;
  }
  return n;
}

let installed = false;

function install(): void {
  if (installed) return;
  installed = true;
  for (const name of ['alloc', 'allocUnsafe', 'allocUnsafeSlow'] as const) {
    const orig = Buffer[name] as (size: number, ...rest: unknown[]) => Buffer;
    (Buffer as unknown as Record<string, unknown>)[name] = function (this: unknown, size: number, ...rest: unknown[]) {
      return orig.call(this, check(size), ...rest);
    };
  }
  const g = globalThis as unknown as Record<string, unknown>;
  for (const name of ['Uint8Array', 'ArrayBuffer'] as const) {
    const Orig = g[name] as new (...args: unknown[]) => object;
    g[name] = new Proxy(Orig, {
      construct(target, args, newTarget) {
        const sized = args.length > 0 ? [check(args[0]), ...args.slice(1)] : args;
        return Reflect.construct(target, sized, newTarget === g[name] ? target : newTarget) as object;
      },
    });
  }
}

install();
