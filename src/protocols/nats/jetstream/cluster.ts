/**
 * JetStream in cluster mode: where a consumer is served, and how a request for it reaches that broker.
 *
 * - A consumer is owned ('consumer' kind, named "<stream>/<consumer>": stream names hold no '/', consumer names
 *   neither) by one broker at a time, placed lazily: the broker placement picks for it claims it when it is first
 *   used (Cluster.ensure) and loads its state from the metastore; it moves to its new placement when brokers join
 *   (handover: the old owner writes its state, then lets go), and a dead owner's consumers are taken by their
 *   placement brokers (orphans, at the reconcile). Every write of its state is fenced by the owner row's epoch.
 * - Every broker answers the JetStream API for its own clients (the service's `$JS.API.>` and `$JS.ACK.>`
 *   subscriptions are this broker's): stream requests are served where they arrive (the catalog is shared), and a
 *   consumer request arriving at a broker that does not serve the consumer is forwarded to its owner
 *   (`js.request`: the JSON answer comes back in the reply and the requesting broker publishes it to its client's
 *   inbox). A pull request's deliveries and statuses, and ack confirmations, are sent back to the broker the request
 *   came from (`js.deliver`, one-way), which publishes them to its client: nothing depends on the owner knowing the
 *   client's inbox. Acks are forwarded one-way (`js.ack`): one lost in a failover only means a redelivery.
 * - A request to an owner that moved or died is retried against the owner the store names (NOT_OWNER, UNAVAILABLE),
 *   for up to two leases: long enough for a dead owner's lease to expire and its consumers to be taken over.
 */
import type { Cluster } from '../../../cluster/index.js';
import { decodeMessage, encodeMessage, RPC } from '../../../cluster/index.js';
import { FlowError, type Message } from '../../../core/index.js';
import { backoffDelay } from '../../../util/backoff.js';

export function consumerKey(stream: string, name: string): string {
  return `${stream}/${name}`;
}

export function splitConsumerKey(key: string): [string, string] {
  const i = key.indexOf('/');
  return i < 0 ? [key, ''] : [key.slice(0, i), key.slice(i + 1)];
}

/** A delivery or status sent back to the requesting broker: the properties the stored-message encoding leaves out. */
export function encodeDelivery(msg: Message): Buffer {
  return RPC.jsDeliver.message.encode({ s: msg.status ?? null, d: msg.deliverTopic ?? null, g: msg.guardTopic ?? null }, encodeMessage(msg));
}

export function decodeDelivery(body: Buffer): Message {
  // `g` is absent from a broker of the version before guard topics.
  const { head, tail } = RPC.jsDeliver.message.decode(body, 'js.deliver');
  const msg = decodeMessage(tail);
  if (head.s !== null) msg.status = head.s;
  if (head.d !== null) msg.deliverTopic = head.d;
  if (typeof head.g === 'string') msg.guardTopic = head.g;
  return msg;
}

/** Errors after which the owner is looked up again and the request retried. */
export function retriable(err: unknown): boolean {
  return err instanceof FlowError && (err.code === 'NOT_OWNER' || err.code === 'UNAVAILABLE');
}

/**
 * The broker to send a consumer's request to: this one if it serves it, else the owner this broker knows of, else
 * the owner the store names (when alive), else the consumer's placement broker (which claims it).
 */
export async function targetOf(cluster: Cluster, key: string, fresh: boolean): Promise<number> {
  if (cluster.owns('consumer', key) !== null) return cluster.id;
  const known = fresh ? null : cluster.owner('consumer', key);
  if (known !== null) return known.broker;
  const looked = await cluster.lookup('consumer', key);
  if (looked !== null) return looked.broker;
  return cluster.placement('consumer', key) ?? cluster.id;
}

/** How long a consumer request keeps retrying: two leases (a dead owner's lease expires, its consumers move). */
export function retryWindowMs(cluster: Cluster): number {
  return 2 * cluster.leaseMs + 1000;
}

export function pause(attempt: number): Promise<void> {
  return new Promise((r) => setTimeout(r, backoffDelay(attempt + 1, 25, 500)));
}
