/**
 * The messages of a forwarded live batch (`live.publish`, `live.store`: rpc.ts's LivePublishHead), decoded in order
 * with what the head says of each: the shared groups the receiver serves for it and the delivery-only properties the
 * stored-message encoding leaves out. Used by live.ts and live-durable.ts.
 */
import type { Message } from '../core/index.js';
import type { LivePublishHead } from './rpc.js';
import { decodeMessage } from './wire.js';

const NO_GROUPS: ReadonlySet<string> = new Set();

/**
 * Calls `each(i, msg, groups)` for every message of the batch in order; a message that cannot be decoded is passed to
 * `bad` and skipped (its index is not seen by `each`).
 */
export function eachForwarded(
  msgs: Buffer[],
  head: LivePublishHead,
  bad: (err: unknown) => void,
  each: (i: number, msg: Message, groups: ReadonlySet<string>) => void,
): void {
  const g = head.g ?? [];
  const x = head.x ?? [];
  let gi = 0;
  let xi = 0;
  for (let i = 0; i < msgs.length; i++) {
    let groups = NO_GROUPS;
    if (gi < g.length && g[gi][0] === i) groups = new Set(g[gi++][1]);
    const extra = xi < x.length && x[xi][0] === i ? x[xi++] : null;
    let msg: Message;
    try {
      msg = decodeMessage(msgs[i]);
    } catch (err) {
      bad(err);
      continue;
    }
    if (extra !== null) {
      const [, deliverTopic, status, guardTopic] = extra;
      if (deliverTopic !== null) msg.deliverTopic = deliverTopic;
      if (status !== null) msg.status = status;
      if (typeof guardTopic === 'string') msg.guardTopic = guardTopic;
    }
    each(i, msg, groups);
  }
}
