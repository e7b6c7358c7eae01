/**
 * Retention policies `workqueue` and `interest` (nats-server 2.9's stream.go and consumer.go semantics) over
 * FlowMQ's append-only streams. Nothing is rewritten in the log: a consumed message leaves the stream's view
 * (stream-view.ts), as a deleted one does, and the log start is moved past what nobody needs any more.
 *
 * - **workqueue**: a message is gone once the consumer whose filter matches it acknowledged it (consumers' filters
 *   may not overlap, so there is at most one; without one the message waits). Consumers must ack explicitly and
 *   deliver all (nats-server's 10098–10101 refusals, in its order).
 * - **interest**: a message is kept until every consumer that existed when it was stored (its `since` is below the
 *   message's sequence) and whose filter matches it is done with it; a message no consumer was there for is dropped
 *   at once (its sequence is used, as nats-server skips it). A consumer that goes away takes its interest with it.
 *
 * "Done with" is the consumer's stored state (ack floor and the acks above it; without acks, delivered), so a view
 * rebuilt after a restart from the log and the durable consumers' records agrees with the one before. What only a
 * deleted workqueue consumer knew (its acks) becomes a delete rule of the stream at its deletion. The prefix of the
 * stream that no one needs is deleted from the log (engine.deleteRecords) on the service's tick.
 */
import type { Engine } from '../../../core/index.js';
import type { ConsumerConfig } from './config.js';
import type { Consumer } from './consumer.js';
import { JsErr, type ApiError } from './errors.js';
import { subjectsCollide } from './subjects.js';
import type { DeleteRule, Retention, StreamView } from './stream-view.js';

/** Whether the stream's consumers are done with message `seq` of subject `topic` (a unified topic). */
export function consumedBy(consumers: Iterable<Consumer>, seq: number, topic: string, retention: Retention): boolean {
  if (retention === 'workqueue') {
    for (const c of consumers) if (c.acceptsTopic(topic)) return c.hasAcked(seq);
    return false;
  }
  for (const c of consumers) if (c.since < seq && c.acceptsTopic(topic) && !c.hasAcked(seq)) return false;
  return true;
}

/**
 * A consumer about to be created on a workqueue stream (nats-server's checks, order and errors); `others`: the
 * stream's consumers but the one of that name (an existing consumer may be created again).
 */
export function workqueueRefusal(cfg: ConsumerConfig, others: ReadonlyArray<{ config: ConsumerConfig }>): ApiError | null {
  if (cfg.ack_policy !== 'explicit') return JsErr.wqRequiresExplicitAck();
  if (others.length > 0) {
    const f = cfg.filter_subject;
    if (f === undefined) return JsErr.wqMultipleUnfiltered();
    for (const o of others) {
      const g = o.config.filter_subject;
      if (g === undefined || subjectsCollide(f, g)) return JsErr.wqNotUnique();
    }
  }
  if (cfg.deliver_policy !== 'all') return JsErr.wqNotDeliverAll();
  return null;
}

/**
 * Cluster mode: the stored durable consumers of the stream that this broker does not serve (`here` says which it
 * does), as far as workqueueRefusal needs them. The broker creating a workqueue stream's consumer serves the others
 * too (they are placed with the stream's partition), but one not loaded yet must still count cluster-wide.
 */
export async function storedOthers(
  engine: Engine,
  stream: string,
  except: string,
  here: (name: string) => boolean,
): Promise<Array<{ config: ConsumerConfig }>> {
  const out: Array<{ config: ConsumerConfig }> = [];
  for (const r of await engine.store.listConsumers(stream)) {
    if (r.name === except || here(r.name)) continue;
    let config: ConsumerConfig;
    try {
      config = JSON.parse(r.config) as ConsumerConfig;
    } catch {
      // Unreadable: no filter known, so it overlaps with everything.
      config = {} as ConsumerConfig;
    }
    out.push({ config });
  }
  return out;
}

/**
 * What a workqueue consumer's deletion must keep: the messages it consumed stay removed (a rule of the stream: below
 * its ack floor on its filter, and its acks above the floor), or null when it consumed nothing.
 */
export function workqueueLegacy(c: Consumer): Omit<DeleteRule, 'at'> | null {
  const floor = c.ackFloor;
  const seqs = [...c.acked].filter((s) => s > floor).sort((a, b) => a - b);
  if (floor <= 0 && seqs.length === 0) return null;
  const f = c.config.filter_subject;
  return {
    ...(floor > 0 ? { purge: { below: floor + 1, ...(f !== undefined ? { filter: f } : {}) } } : {}),
    ...(seqs.length > 0 ? { seqs } : {}),
  };
}

/**
 * Deletes from the log what precedes the first message the view still holds (nothing a consumer still needs: a
 * pending delivery is a live message), keeping the last record and stopping at an open Kafka transaction. Returns the promise of the deletion,
 * or null when there is nothing to delete.
 */
export function trimConsumed(engine: Engine, name: string, view: StreamView): Promise<number> | null {
  const { logStartOffset, highWatermark } = engine.offsets(name, 0);
  const first = view.firstSeq;
  let to = first > 0 ? first - 1 : Math.min(view.scanned, highWatermark);
  // The last record stays (state's last_ts is read from it, as nats-server keeps it), and an open transaction.
  to = Math.min(to, highWatermark - 1, engine.transactions.lso(name, 0, highWatermark));
  if (to <= logStartOffset) return null;
  return engine.deleteRecords(name, 0, to);
}
