/**
 * AMQP 0-9-1 as a protocol module: the broker starts it when `amqp` is in --protocols.
 */
import { readFileSync } from 'node:fs';
import type { Config } from '../../config/index.js';
import { FlowError } from '../../core/index.js';
import { formatAddress as fmt } from '../listener.js';
import type { ProtocolListener, ProtocolModule, ProtocolModuleContext, RunningProtocol } from '../types.js';
import { AmqpAdapter } from './adapter.js';
import { resolveAmqpOptions } from './options.js';
import { tlsClientOptions } from '../../control/certs.js';
import { startAmqpListener } from './server.js';
import { replyTopics } from './direct-reply.js';
import { REPLY_TOPIC_PREFIX } from './reply-registry.js';
import { managementView } from './admin.js';

export const amqpModule: ProtocolModule = {
  name: 'amqp',
  check(c: Config): void {
    if ((c.amqpTlsCert === null) !== (c.amqpTlsKey === null)) {
      throw new FlowError('CONFIG_ERROR', 'AMQP over TLS needs both amqp-tls-cert and amqp-tls-key');
    }
  },
  async start(ctx: ProtocolModuleContext): Promise<RunningProtocol> {
    const c = ctx.config;
    // A half-configured TLS listener is refused before any listener opens.
    amqpModule.check!(c);
    const logger = ctx.logger.child({ protocol: 'amqp' });
    const options = resolveAmqpOptions({
      frameMax: c.amqpFrameMax,
      channelMax: c.amqpChannelMax,
      heartbeatSec: Math.floor(c.amqpHeartbeat / 1000),
      maxConnections: c.amqpMaxConnections,
      handshakeTimeoutMs: c.amqpHandshakeTimeout,
      maxMessageSize: c.amqpMaxMessageSize,
      certUser: c.tlsCertUser,
      ...(c.amqpMemoryHighWatermark !== null ? { memoryHighWatermark: c.amqpMemoryHighWatermark } : {}),
    });
    const adapter = new AmqpAdapter({ ...ctx, logger }, options, ctx.access);
    // Direct reply-to: replies published on the reply address as a topic (MQTT, NATS responders) go to the requester
    // and nowhere else; in cluster mode, to the broker holding the requester.
    ctx.engine.direct = replyTopics(adapter.replies, (m) => ctx.engine.forwardDirect(m));
    adapter.replies.watch = (topic, namespace, on) => ctx.engine.watchDirect(topic, namespace, on);
    const listeners = new Map<string, ProtocolListener>();
    try {
      const l = await startAmqpListener(adapter, { host: c.host, port: c.amqpPort });
      listeners.set('amqp', l);
      ctx.logger.info({ protocol: 'amqp', address: fmt(l.address()) }, 'listening');
      if (c.amqpTlsCert !== null && c.amqpTlsKey !== null) {
        // Client certificates (--tls-client-ca): a verified one lets the client log in with EXTERNAL.
        const t = await startAmqpListener(adapter, {
          host: c.host,
          port: c.amqpsPort,
          tls: { cert: readFileSync(c.amqpTlsCert), key: readFileSync(c.amqpTlsKey), ...tlsClientOptions(c) },
        });
        listeners.set('amqps', t);
        ctx.logger.info({ protocol: 'amqps', address: fmt(t.address()) }, 'listening');
      }
    } catch (err) {
      await Promise.allSettled([...listeners.values()].map((l) => l.close()));
      throw err;
    }
    let closing: Promise<void> | null = null;
    return {
      listeners,
      figures: () => adapter.figures(),
      amqpManagement: managementView(adapter),
      close() {
        if (ctx.engine.direct?.prefix === REPLY_TOPIC_PREFIX) ctx.engine.direct = null;
        closing ??= Promise.allSettled([...listeners.values()].map((l) => l.close())).then(() => undefined);
        return closing;
      },
    };
  },
};
