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
  /**
   * Absolute expiry, ms since epoch: not delivered after it (MQTT v5 Message Expiry Interval, AMQP
   * expiration). Absent: never expires.
   */
  expiresAt?: number;
  /** MIME type of the payload (MQTT v5 Content Type, AMQP content-type). */
  contentType?: string;
  /** Where a reply goes (MQTT v5 Response Topic, AMQP reply-to), as a unified topic. */
  responseTopic?: string;
  /** Ties a reply to its request (MQTT v5 Correlation Data, AMQP correlation-id). */
  correlationData?: Buffer;
  /** 1 when the payload is UTF-8 text (MQTT v5 Payload Format Indicator). */
  payloadFormat?: number;
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
    // Optional properties are copied only when set, so plain messages keep their plain shape.
    ...(init.expiresAt !== undefined ? { expiresAt: init.expiresAt } : {}),
    ...(init.contentType !== undefined ? { contentType: init.contentType } : {}),
    ...(init.responseTopic !== undefined ? { responseTopic: init.responseTopic } : {}),
    ...(init.correlationData !== undefined ? { correlationData: init.correlationData } : {}),
    ...(init.payloadFormat !== undefined ? { payloadFormat: init.payloadFormat } : {}),
  };
}
