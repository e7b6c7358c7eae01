/**
 * The broker's statistics under `$SYS/broker/` (as Mosquitto publishes them), retained in memory only so that a new
 * subscriber sees them at once; published by the hub every `sysIntervalMs`.
 */
import type { LogLimiter } from '../../util/log-limit.js';
import type { AdapterContext } from '../types.js';

export interface SysFigures {
  version: string;
  /** When the broker started (ms since the epoch). */
  started: number;
  connected: number;
  total: number;
  received: number;
  sent: number;
}

export function publishSysTopics(ctx: AdapterContext, logLimit: LogLimiter, f: SysFigures): void {
  const e = ctx.engine;
  const topics: Array<[string, string]> = [
    ['version', `FlowMQ ${f.version}`],
    ['uptime', `${Math.floor((Date.now() - f.started) / 1000)} seconds`],
    ['clients/connected', String(f.connected)],
    ['clients/total', String(f.total)],
    ['messages/received', String(f.received)],
    ['messages/sent', String(f.sent)],
    ['messages/dropped', String(e.stats.dropped)],
    ['retained messages/count', String(e.retained.size)],
  ];
  for (const [t, v] of topics) {
    try {
      // Retained: a failing retained-store write (disk full) is logged, not left as an unhandled rejection that would
      // end the process.
      e.publish({
        topic: `$SYS/broker/${t}`,
        payload: Buffer.from(v),
        key: null,
        headers: [],
        timestamp: Date.now(),
        qos: 0,
        retain: true,
        origin: 'mqtt:$SYS',
      })?.catch((err: unknown) => logLimit.log('warn', 'sys-retain', { err: String(err) }, 'mqtt $SYS retained message not stored'));
    } catch (err) {
      ctx.logger.warn({ err: String(err) }, 'mqtt $SYS publish failed');
    }
  }
}
