/**
 * Reading accepted sockets into one reusable buffer.
 *
 * By default Node allocates a fresh 64 KiB ArrayBuffer for every socket read. At hundreds of MB/s that is
 * thousands of allocations a second whose memory V8 counts as external: every ~64 MB of it starts a full
 * collection, and those collections (and the freeing of the dead buffers that must finish before the next one)
 * stall the event loop for milliseconds each time. Node's `onread` option reads into a caller's buffer instead,
 * but `net.Server` offers it only for sockets it creates itself, not for accepted ones. This applies the same
 * mechanism to a socket accepted with `pauseOnConnect` (before anything was read): the socket keeps its normal
 * life cycle ('end', 'close', pause/resume, writes); only its incoming bytes go to `onBytes` instead of 'data'.
 *
 * The bytes passed to `onBytes` are valid only during the call (the next read of any socket reuses the memory),
 * so the receiver copies what it keeps. One buffer serves every socket: reads are delivered one at a time on the
 * event loop.
 *
 * The socket's slots for the option are private to Node; they are found by their values on a probe socket built
 * with the public option, and when that is not possible (another Node version) `readInto` returns false and the
 * caller reads 'data' events as usual.
 */
import { Socket } from 'node:net';

/** One read's worth of the shared buffer, like Node's default allocation. */
const READ_BUFFER_BYTES = 64 * 1024;

interface Slots {
  buffer: symbol;
  callback: symbol;
}

let slots: Slots | null | undefined;
let shared: Buffer | null = null;

function findSlots(): Slots | null {
  const buffer = Buffer.alloc(1);
  const callback = (): boolean => true;
  try {
    // `onread` is a documented option of the Socket constructor that @types/node does not declare.
    const probe = new Socket({ onread: { buffer, callback } } as ConstructorParameters<typeof Socket>[0]);
    const self = probe as unknown as Record<symbol, unknown>;
    const syms = Object.getOwnPropertySymbols(probe);
    const b = syms.find((s) => self[s] === buffer);
    const c = syms.find((s) => self[s] === callback);
    probe.destroy();
    return b !== undefined && c !== undefined ? { buffer: b, callback: c } : null;
  } catch {
    return null;
  }
}

/**
 * Makes `socket` (accepted paused, nothing read yet) deliver its bytes to `onBytes` from the shared buffer and
 * starts reading. Returns false, changing nothing, when this Node does not allow it.
 */
export function readInto(socket: Socket, onBytes: (bytes: Buffer) => void): boolean {
  if (slots === undefined) slots = findSlots();
  const handle = (socket as unknown as { _handle?: { useUserBuffer?: (b: Buffer) => void } })._handle;
  if (slots === null || !handle || typeof handle.useUserBuffer !== 'function') return false;
  shared ??= Buffer.allocUnsafeSlow(READ_BUFFER_BYTES);
  const self = socket as unknown as Record<symbol, unknown>;
  self[slots.buffer] = shared;
  // Returning true keeps reading; the receiver pauses the socket itself when it has to.
  self[slots.callback] = (n: number, buf: Buffer): boolean => {
    onBytes(buf.subarray(0, n));
    return true;
  };
  handle.useUserBuffer(shared);
  socket.resume();
  return true;
}
