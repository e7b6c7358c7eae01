/**
 * One MQTT connection (3.1, 3.1.1 and 5.0): protocol state for one client over any Duplex stream (TCP, TLS,
 * WebSocket stream, a test pair). It talks to the routing core only (`ctx.engine`) and keeps session state in
 * its `MqttSession` (see session.ts), never in storage directly.
 *
 * Inbound: bytes -> codec -> packets -> engine.publish / subscribe / unsubscribe.
 * Outbound: the engine calls the session's `deliver()` synchronously for every matching publish; the session
 * forwards it here, where it becomes a PUBLISH frame under flow control (in-flight window = min(maxInflight,
 * the client's Receive Maximum), bounded queue, write high-water mark), so a slow consumer can never make
 * the broker's memory grow without bound.
 *
 * Timers: none per connection. The hub's shared tick calls `checkTimers()` (connect timeout, keep-alive).
 *
 * The connection is split by packet family, as Mosquitto's handle_*.c are; each family is functions over the
 * connection's state:
 *
 *   link.ts        MqttLink, the state and life of a connection: bytes in, read flow control, writes and the
 *                  reply backlog, protocol errors, timers (connect timeout, keep-alive), close
 *   connect.ts     CONNECT, authentication (AUTH, SCRAM, re-authentication), the session and CONNACK, DISCONNECT
 *   publish-in.ts  inbound PUBLISH, QoS 2 inbound state (PUBREL), PUBACK / PUBREC in arrival order after storage
 *   subscribe.ts   SUBSCRIBE / UNSUBSCRIBE (topic filters, shared and `$queue/` subscriptions), retained messages
 *   outbound.ts    delivery out: window, packet ids, queue, PUBLISH frames; PUBACK / PUBREC / PUBCOMP in, PUBREL
 *                  out; the resumed session's stored messages; `$queue/` deliveries
 *   connection.ts  MqttConnection: the dispatch of each packet to its family (`handle()`), and the entry points
 *                  the session and queue consumers call
 */
import type { Message, QueueDelivery, Subscription } from '../../core/index.js';
import { MqttProtocolError, ReasonCode, type MqttPacket } from './codec/index.js';
import type { MqttQueueConsumer } from './queue-consumer.js';
import { MqttLink, State } from './link.js';
import { onAuth, onConnect, onDisconnect } from './connect.js';
import { onPublish, onPubrel } from './publish-in.js';
import { onSubscribe, onUnsubscribe } from './subscribe.js';
import { deliver, deliverFromQueue, onPuback, onPubcomp, onPubrec, queueCancelled, queueCredit } from './outbound.js';

export type { CertificateLogin, MqttConnectionInit, MqttConnectionStats } from './link.js';

const PINGRESP = Buffer.from([0xd0, 0x00]);

export class MqttConnection extends MqttLink {
  protected handle(p: MqttPacket): void {
    if (this.state === State.AwaitingConnect) {
      if (p.type !== 'connect') throw new MqttProtocolError(`first packet is ${p.type}, not connect`, '[MQTT-3.1.0-1]');
      onConnect(this, p);
      return;
    }
    if (this.state === State.Authenticating) {
      // [MQTT-4.12.0-4] during enhanced authentication only AUTH (or DISCONNECT) may come.
      if (p.type === 'auth') onAuth(this, p);
      else if (p.type === 'disconnect') this.close('disconnect');
      else throw new MqttProtocolError(`${p.type} during authentication`, '[MQTT-4.12.0-4]', undefined, ReasonCode.PROTOCOL_ERROR);
      return;
    }
    switch (p.type) {
      case 'publish':
        onPublish(this, p);
        return;
      case 'puback':
        onPuback(this, p.packetId);
        return;
      case 'pubrec':
        onPubrec(this, p.packetId, p.reasonCode ?? 0);
        return;
      case 'pubrel':
        onPubrel(this, p.packetId);
        return;
      case 'pubcomp':
        onPubcomp(this, p.packetId);
        return;
      case 'subscribe':
        onSubscribe(this, p);
        return;
      case 'unsubscribe':
        onUnsubscribe(this, p);
        return;
      case 'pingreq':
        this.reply(PINGRESP); // [MQTT-3.12.4-1]
        return;
      case 'disconnect':
        onDisconnect(this, p);
        return;
      case 'auth':
        onAuth(this, p);
        return;
      case 'connect':
        throw new MqttProtocolError('second CONNECT', '[MQTT-3.1.0-2]', undefined, ReasonCode.PROTOCOL_ERROR);
      default:
        // CONNACK, SUBACK, UNSUBACK, PINGRESP travel server to client only.
        throw new MqttProtocolError(`${p.type} is not a client-to-server packet`, '[MQTT-4.8.0-1]', undefined, ReasonCode.PROTOCOL_ERROR);
    }
  }

  /**
   * Called (through the session) by the engine, synchronously, for every publish matching one or more of our
   * subscriptions. Never throws (a bug here must not break the publisher's connection).
   */
  deliver(msg: Message, subs: Subscription[]): void {
    deliver(this, msg, subs);
  }

  /** QueueConsumerHost: room for one more queue delivery (connected, nothing waiting, window and socket open). */
  queueCredit(c: MqttQueueConsumer): boolean {
    return queueCredit(this, c);
  }

  /** QueueConsumerHost: sends a queue delivery (the queue asked queueCredit just before). */
  deliverFromQueue(c: MqttQueueConsumer, qd: QueueDelivery): void {
    deliverFromQueue(this, c, qd);
  }

  /** QueueConsumerHost: the queue was deleted; the subscription ends (MQTT cannot tell the client). */
  queueCancelled(c: MqttQueueConsumer, reason: string): void {
    queueCancelled(this, c, reason);
  }
}
