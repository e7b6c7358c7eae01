/**
 * The normalized message every adapter hands the core and every adapter receives back.
 */
export type QoS = 0 | 1 | 2;

export interface Header {
  key: string;
  value: Buffer | null;
}

export interface Message {
  /** Unified topic, `/`-separated. */
  topic: string;
  payload: Buffer;
  /** Partitioning key (Kafka record key); null when none. */
  key: Buffer | null;
  /** Ordered headers (Kafka headers, MQTT v5 user properties, AMQP headers...). */
  headers: Header[];
  /** Creation time, ms since epoch. */
  timestamp: number;
  /** Requested delivery guarantee for live delivery. */
  qos: QoS;
  retain: boolean;
  /** Identifier of the publishing connection, so adapters can implement "no local". */
  origin?: string;
}

export function makeMessage(topic: string, payload: Buffer, init: Partial<Message> = {}): Message {
  return {
    topic,
    payload,
    key: init.key ?? null,
    headers: init.headers ?? [],
    timestamp: init.timestamp ?? Date.now(),
    qos: init.qos ?? 0,
    retain: init.retain ?? false,
    origin: init.origin,
  };
}
