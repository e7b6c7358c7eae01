/**
 * Ports for servers that are told their port (a broker restarted on the same ports, nats-server, PostgreSQL, a proxy).
 *
 * A port found by binding port 0 comes from the kernel's ephemeral range, the range every other `listen(0)` and every
 * outgoing connection draws from: between the moment it is released here and the moment the server binds it (or
 * while a killed broker restarts on it), any other process of a parallel test run can take it, and the server fails
 * with EADDRINUSE. So the ports handed out here lie below that range, where only explicit binds go, and are checked
 * free by binding them once.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

const LOWEST = 10_000;
/** Ports already handed out by this process (another call must not get one the server has not bound yet). */
const given = new Set<number>();

/** The first port of the kernel's ephemeral range (32768 when it cannot be read). */
function ephemeralStart(): number {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(first) && first > 0 ? first : 32_768;
  } catch {
    return 32_768;
  }
}

/** Binds `port` on 127.0.0.1 and releases it: whether it was free. `port` 0 resolves to the port the kernel chose. */
function tryBind(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(undefined));
    s.listen({ port, host: '127.0.0.1', exclusive: true }, () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

/** A loopback port that is free now and outside the ephemeral range (falls back to a kernel-chosen one). */
export async function freePort(): Promise<number> {
  const top = ephemeralStart() - 1;
  if (top - LOWEST >= 1000) {
    for (let attempt = 0; attempt < 100; attempt++) {
      const port = LOWEST + Math.floor(Math.random() * (top - LOWEST + 1));
      if (given.has(port)) continue;
      if ((await tryBind(port)) !== undefined) {
        given.add(port);
        return port;
      }
    }
  }
  const port = await tryBind(0);
  if (port === undefined) throw new Error('no free loopback port');
  return port;
}
