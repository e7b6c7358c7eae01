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
   * The namespace of a publisher whose adapter isolates namespaces (namespaces.ts), set by it for namespaces other
   * than `default`: only such a message may be published on that namespace's `$ns/<ns>/` topics.
   */
  namespace?: string;
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
  /** Application message id (AMQP message-id; NATS Nats-Msg-Id). */
  messageId?: string;
  /** 0-9 (AMQP priority). */
  priority?: number;
  /**
   * True: the publisher asked for the message to survive a restart (AMQP delivery-mode 2, MQTT QoS >= 1, Kafka
   * always); false: transient (AMQP delivery-mode 1). Absent: the protocol did not say (treated as persistent
   * by durable queues).
   */
  persistent?: boolean;
  /** AMQP content-encoding, type, app-id, user-id. */
  contentEncoding?: string;
  type?: string;
  appId?: string;
  userId?: string;
  /**
   * The AMQP headers table exactly as published (its encoded field-table bytes), so an AMQP consumer gets every
   * value type back; `headers` carries the same entries as bytes for the other protocols. Set only by the AMQP
   * adapter; dropped when a message is re-published by another protocol.
   */
  amqpHeaders?: Buffer;
  /**
   * The type class of each AMQP header value by key (`int` for every integer width, `float`, `str`, `bool`, `bytes`,
   * `timestamp`, `decimal`, `table`, `array`; a void value has none), as RabbitMQ's headers exchange compares them:
   * a binding value matches a header of the same class and value only. Set by the AMQP adapter at publish; never
   * stored or forwarded, so a message from another protocol, or one routed again after a restart, matches by bytes.
   */
  amqpHeaderClasses?: ReadonlyMap<string, string>;
  /**
   * The AMQP expiration property exactly as published (a per-message TTL in ms, as text): AMQP consumers get it back
   * as sent, as RabbitMQ passes properties on; `expiresAt` is what the broker enforces. Set only by the AMQP adapter.
   */
  amqpExpiration?: string;
  /**
   * The NATS header block exactly as an HPUB carried it (`NATS/1.0…` up to and including its closing empty line),
   * so NATS subscribers get it byte for byte as nats-server passes headers on unread; `headers` (and `status`,
   * `messageId`, `correlationData`) carry what could be read of it for the other protocols, nothing when it does not
   * parse. Set only by the NATS adapter; dropped when a message is re-published by another protocol, and by
   * whoever changes the headers of a copy (a JetStream headers-only delivery).
   */
  natsHeaders?: Buffer;
  /**
   * The exchange and routing key the message was published with (AMQP basic.deliver reports them; dead-letter
   * records name them). Set by Router.publishTo; absent for publishes into the unified topic space by MQTT, Kafka
   * or NATS, which are `amq.topic` with the topic's dotted form as routing key.
   */
  exchange?: string;
  routingKey?: string;
  /** Dead-letter history, newest first (rendered as AMQP x-death by the AMQP adapter). */
  deaths?: DeathRecord[];
  /**
   * The unified topic a delivery names when it is not the topic it was routed on: a JetStream delivery is routed
   * to the pull request's inbox but names the stream message's own subject (the NATS adapter renders it as the
   * MSG subject). Absent: `topic`.
   */
  deliverTopic?: string;
  /**
   * Stored data re-published to a reply subject (a JetStream pull or push delivery, a STREAM.MSG.GET answer): the
   * topic the data was stored under. Authorization follows the data: a live subscriber receives the message only when
   * it may subscribe to this topic as well as to `topic`, and a topic-space binding (stream, queue, exchange) takes
   * it only when its filter matches this topic too, so an inbox anyone can subscribe to never carries a denied
   * topic's payload. Cluster forwarding carries it. Absent: the message is its own topic's data.
   */
  guardTopic?: string;
  /**
   * A NATS status ("503", "404 No Messages", "408 Request Timeout"): the NATS adapter renders it as the status of
   * the `NATS/1.0` header line (no-responders, JetStream pull statuses); other adapters ignore it.
   */
  status?: string;
  /**
   * An MQTT QoS 2 publish of a persistent session: the publishing session's producer id (from the Kafka producer
   * id allocator, so unique) and the sequence the session stored with the packet id before routing it. A retried
   * PUBLISH after a broker crash is routed again with the same key, and every destination that already has it
   * recognises it: a stream partition by its producer state (the batch is stamped with it, checked as a forwarded
   * batch: at or below the last sequence is a duplicate), an MQTT session by the highest sequence per producer it
   * took (stored with its queue in one transaction). Carried by cluster forwarding; not by stored queue messages.
   */
  pubKey?: PubKey;
}

/** See Message.pubKey. */
export interface PubKey {
  producer: number;
  seq: number;
}

/** Why and where a message was dead-lettered (one entry per queue and reason, counted). */
export interface DeathRecord {
  queue: string;
  reason: 'rejected' | 'expired' | 'maxlen' | 'delivery_limit';
  /** The exchange and routing keys the message had been published with when it died. */
  exchange: string;
  routingKeys: string[];
  count: number;
  /** ms since epoch of the first death for this queue and reason. */
  time: number;
  /** The original per-message expiration, if any (AMQP original-expiration). */
  originalExpiration?: string;
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
    ...(init.namespace !== undefined ? { namespace: init.namespace } : {}),
    ...(init.contentType !== undefined ? { contentType: init.contentType } : {}),
    ...(init.responseTopic !== undefined ? { responseTopic: init.responseTopic } : {}),
    ...(init.correlationData !== undefined ? { correlationData: init.correlationData } : {}),
    ...(init.payloadFormat !== undefined ? { payloadFormat: init.payloadFormat } : {}),
    ...(init.messageId !== undefined ? { messageId: init.messageId } : {}),
    ...(init.priority !== undefined ? { priority: init.priority } : {}),
    ...(init.persistent !== undefined ? { persistent: init.persistent } : {}),
    ...(init.contentEncoding !== undefined ? { contentEncoding: init.contentEncoding } : {}),
    ...(init.type !== undefined ? { type: init.type } : {}),
    ...(init.appId !== undefined ? { appId: init.appId } : {}),
    ...(init.userId !== undefined ? { userId: init.userId } : {}),
    ...(init.amqpHeaders !== undefined ? { amqpHeaders: init.amqpHeaders } : {}),
    ...(init.amqpExpiration !== undefined ? { amqpExpiration: init.amqpExpiration } : {}),
    ...(init.natsHeaders !== undefined ? { natsHeaders: init.natsHeaders } : {}),
    ...(init.exchange !== undefined ? { exchange: init.exchange } : {}),
    ...(init.routingKey !== undefined ? { routingKey: init.routingKey } : {}),
    ...(init.deaths !== undefined ? { deaths: init.deaths } : {}),
    ...(init.deliverTopic !== undefined ? { deliverTopic: init.deliverTopic } : {}),
    ...(init.guardTopic !== undefined ? { guardTopic: init.guardTopic } : {}),
    ...(init.status !== undefined ? { status: init.status } : {}),
  };
}
