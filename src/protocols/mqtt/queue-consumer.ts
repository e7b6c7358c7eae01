/**
 * MQTT `$queue/<name>`: an MQTT subscription that consumes the core queue `<name>` (declared by AMQP or the API)
 * instead of matching topics. The queue's competing-consumer semantics apply: each message goes to one consumer;
 * a QoS 1 subscription receives QoS 1 PUBLISHes whose PUBACK is the queue ack; a QoS 0 subscription is a no-ack
 * consumer (the message leaves the queue when it is written). QoS 2 is granted as 1. Deliveries a client has not
 * acknowledged when its connection ends go back to the queue, redelivered, for another consumer.
 */
import type { QueueConsumer, QueueDelivery, QueueHandle } from '../../core/index.js';
import type { Delivery } from './session.js';

export const QUEUE_PREFIX = '$queue/';

/** What the consumer asks of its MQTT connection. */
export interface QueueConsumerHost {
  queueCredit(c: MqttQueueConsumer): boolean;
  deliverFromQueue(c: MqttQueueConsumer, d: QueueDelivery): void;
  queueCancelled(c: MqttQueueConsumer, reason: string): void;
}

let seq = 0;

export class MqttQueueConsumer implements QueueConsumer {
  readonly tag: string;
  /** Unique per connection, so that releasing one connection's deliveries leaves a reconnected client's alone. */
  readonly owner: string;
  readonly priority = 0;
  /** False until the SUBACK is sent: no delivery before it. */
  started = false;

  constructor(
    readonly handle: QueueHandle,
    /** The subscription's filter, `$queue/<name>`. */
    readonly filter: string,
    clientId: string,
    readonly noAck: boolean,
    private readonly host: QueueConsumerHost,
  ) {
    this.owner = `mqtt:${clientId}#${++seq}`;
    this.tag = this.owner;
  }

  hasCredit(): boolean {
    return this.host.queueCredit(this);
  }

  deliver(d: QueueDelivery): void {
    this.host.deliverFromQueue(this, d);
  }

  cancelled(reason: string): void {
    this.host.queueCancelled(this, reason);
  }
}

/** An MQTT delivery that came from a queue: its PUBACK acks `queueId` in the consumer's queue. */
export interface QueueBoundDelivery extends Delivery {
  queueConsumer: MqttQueueConsumer;
  queueId: number;
}

export const isQueueBound = (d: Delivery): d is QueueBoundDelivery => (d as Partial<QueueBoundDelivery>).queueConsumer !== undefined;
