/**
 * Inbound QoS 2 exactly once across a broker crash, for persistent sessions (MQTT 3.1.1 section 4.3.3 and 5.0
 * section 4.3.3, "Method B": store the packet identifier, then deliver).
 *
 * A QoS 2 message goes to several stores (stream partitions, the store queues of persistent sessions, in cluster
 * mode other brokers' sessions), and the session that remembers its packet id is one more: no single transaction
 * covers them all. So the session stores the packet id *first*, with a publish key (Message.pubKey: the session's
 * producer id, from the Kafka producer id allocator, and a sequence of its own), and only then routes the message,
 * carrying the key. A broker killed anywhere after that has the id and its key in the session record; when the client
 * re-sends the PUBLISH (DUP, same packet id, [MQTT-4.4.0-1]) the message is routed again with the same key, and every
 * destination that already took it recognises the key in a state stored atomically with its own write:
 * - a stream partition: the batch is stamped with the key as producer id and sequence and checked as a forwarded
 *   batch (ProducerState.checkForwarded: at or below the producer's last sequence is a duplicate);
 * - an MQTT session: the highest sequence taken per producer (MqttSession.marks), written in the same transaction as
 *   its queue entries (SessionStore.updateQueue's `marks`) and read back with the session record.
 * Both rules ("at or below the last is a duplicate") need one producer's messages to reach a destination in
 * sequence order: the publishes of a connection are routed in arrival order, those arriving while a session write is
 * pending waiting behind it (`MqttSession.routeGate`).
 *
 * The id is released by PUBREL (with its key); a new message with the same id after PUBCOMP gets a new sequence.
 * Not covered: durable queues (AMQP queues bound to the topic space, `$queue/...`) and retained messages take a
 * re-routed publish again; sessions that are not persistent end with a crash anyway.
 */
import type { ProducerIdAllocator, PubKey } from '../../core/index.js';
import type { MqttSession, PersistedState } from './session.js';

/** Sequences stay in Kafka's non-negative int32 range (they are batch sequences in a stream). */
const SEQ_SPACE = 0x80000000;

/** What a session stores of its publish keys (hub.persist). */
export function persistKeys(s: MqttSession, state: PersistedState): void {
  if (s.producer === null) return;
  state.pk = s.producer;
  state.ns = s.nextSeq;
  if (s.relSeq.size > 0) state.rs = [...s.relSeq];
}

/** A stored session's publish keys and, as a destination, the keys it took (SessionRecord.marks). */
export function restoreKeys(s: MqttSession, st: PersistedState, marks: Record<string, number> | undefined): void {
  for (const id of st.rel ?? []) s.relIds().add(id);
  if (typeof st.pk === 'number') {
    s.producer = st.pk;
    s.nextSeq = typeof st.ns === 'number' ? st.ns : 0;
    for (const [id, seq] of st.rs ?? []) {
      s.relIds().add(id);
      s.relSeqs().set(id, seq);
      s.relUnknowns().set(id, seq);
    }
  }
  if (marks !== undefined) {
    for (const [producer, seq] of Object.entries(marks)) s.takeKey({ producer: Number(producer), seq });
  }
}

/**
 * A new QoS 2 packet id of persistent session `s`: its publish key, once the session record holding the id and the
 * key is stored (the message may be routed then). The sequence is taken now, in arrival order; the record writes of
 * one session land in the order issued (the store's per-key order), so the keys resolve in that order too. Rejects
 * when the record could not be written.
 */
export async function newKey(s: MqttSession, id: number, ids: ProducerIdAllocator, persisted: (s: MqttSession) => Promise<void> | null): Promise<PubKey> {
  const seq = s.nextSeq;
  s.nextSeq = (seq + 1) % SEQ_SPACE;
  s.relSeqs().set(id, seq);
  if (s.producer === null) {
    const p = await (s.producerPending ??= ids.allocate().catch((err: unknown) => {
      s.producerPending = null;
      throw err;
    }));
    // Another publish of the session may have set it meanwhile: the first wins.
    s.producer ??= p;
  }
  const producer = s.producer;
  await persisted(s);
  return { producer, seq };
}

/** The id is released (PUBREL) or its message was refused: a later message with the id gets a new key. */
export function forgetKey(s: MqttSession, id: number): void {
  s.relSeq.delete(id);
  s.relUnknown.delete(id);
}
