/**
 * The AMQP module's view for the RabbitMQ management API (the contract is the control plane's:
 * src/control/rabbitmq/types.ts): live connections with their channels and consumers, read from the adapter's
 * connection set when asked (nothing is kept or counted for it), and the resource alarms.
 */
import type { AmqpChannelView, AmqpConnectionView, AmqpManagementView } from '../../control/index.js';
import type { AmqpAdapter } from './adapter.js';
import type { AmqpChannel } from './channel.js';
import { AmqpConnection } from './connection.js';
import { tableToJson } from './properties.js';
import type { FieldTable } from './codec/index.js';
import { AmqpConsumer } from './consume.js';

function channelView(ch: AmqpChannel): AmqpChannelView {
  const consumers = [];
  for (const c of ch.consumers?.values() ?? []) {
    consumers.push({
      tag: c.tag,
      queue: c.queue.def.name,
      ackRequired: !c.noAck,
      prefetchCount: c instanceof AmqpConsumer ? c.prefetch : 0,
      priority: c.priority ?? 0,
    });
  }
  for (const [tag, c] of ch.streamConsumers ?? []) {
    consumers.push({ tag, queue: c.stream, ackRequired: !c.noAck, prefetchCount: ch.consumerPrefetch, priority: 0 });
  }
  let unconfirmed = 0;
  for (let i = ch.confirmHead; i < ch.confirms.length; i++) if (ch.confirms[i].state === 0) unconfirmed++;
  return {
    number: ch.ch,
    prefetchCount: ch.consumerPrefetch,
    globalPrefetchCount: ch.channelPrefetch,
    unacked: ch.unacked?.size ?? 0,
    confirm: ch.confirm,
    transactional: ch.tx,
    uncommittedMessages: ch.txPublishes?.length ?? 0,
    uncommittedAcks: ch.txSettles?.length ?? 0,
    unconfirmed,
    consumers,
  };
}

function connectionView(c: AmqpConnection): AmqpConnectionView {
  const f = c.managementFigures();
  const s = c.stream as unknown as { localAddress?: string; localPort?: number; bytesRead?: number; bytesWritten?: number };
  return {
    id: c.id,
    state: f.state,
    user: c.user ?? c.loginName,
    vhost: c.vhost,
    namespace: c.principal.namespace,
    peerHost: c.remoteAddress ?? '',
    peerPort: c.remotePort ?? 0,
    host: s.localAddress ?? '',
    port: s.localPort ?? 0,
    tls: c.listener === 'amqps',
    authMechanism: c.loginMechanism,
    frameMax: c.frameMax,
    channelMax: f.channelMax,
    heartbeatSec: f.heartbeatSec,
    connectedAt: f.openedAt,
    recvOct: s.bytesRead ?? 0,
    sendOct: s.bytesWritten ?? 0,
    recvCnt: f.frames.in,
    sendCnt: f.frames.out,
    clientProperties: c.clientProperties === null ? {} : tableToJson(c.clientProperties as FieldTable),
    channels: f.channels.map(channelView),
  };
}

export function managementView(adapter: AmqpAdapter): AmqpManagementView {
  const all = (): AmqpConnection[] => [...adapter.connections].filter((c): c is AmqpConnection => c instanceof AmqpConnection);
  return {
    connections: () => all().map(connectionView),
    alarms: () => adapter.alarms,
    totals: () => ({
      publish: adapter.stats.published,
      confirm: adapter.stats.confirmsAcked,
      returnUnroutable: adapter.stats.returned,
      dropUnroutable: adapter.stats.droppedUnroutable,
    }),
    memoryLimit: () => adapter.options.memoryHighWatermark,
    close(id, reason) {
      const c = all().find((x) => x.id === id);
      if (c === undefined) return false;
      c.kick(reason);
      return true;
    },
  };
}
