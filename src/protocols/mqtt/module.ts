/**
 * MQTT as a protocol module: one hub shared by the TCP, TLS and WebSocket listeners (a client id is one session
 * whatever transport it arrives on), started from the broker's config.
 */
import { readFileSync } from 'node:fs';
import type { TLSSocket } from 'node:tls';
import { certificateLogin, tlsClientOptions } from '../../control/certs.js';
import { httpTimeouts } from '../../control/http-guard.js';
import type { Config } from '../../config/index.js';
import { FlowError } from '../../core/index.js';
import type { AdapterContext, ProtocolListener, ProtocolModule, ProtocolModuleContext, RunningProtocol } from '../types.js';
import { formatAddress } from '../listener.js';
import { createMqttHub, startMqttListener, startMqttTlsListener, startMqttWsListener } from './server.js';

export const mqttModule: ProtocolModule = {
  name: 'mqtt',
  check(config: Config): void {
    if ((config.mqttTlsCert === null) !== (config.mqttTlsKey === null)) {
      throw new FlowError('CONFIG_ERROR', 'MQTT over TLS needs both mqtt-tls-cert and mqtt-tls-key');
    }
  },
  async start(ctx: ProtocolModuleContext): Promise<RunningProtocol> {
    const { config } = ctx;
    // Checked before anything opens, so that a half-configured TLS listener leaves no other listener behind.
    mqttModule.check!(config);
    const mctx: AdapterContext = { engine: ctx.engine, brokerId: ctx.brokerId, logger: ctx.logger.child({ protocol: 'mqtt' }) };
    const hub = await createMqttHub(mctx, {
      maxPacketSize: config.mqttMaxPacketSize,
      maxConnections: config.mqttMaxConnections,
      maxInflight: config.mqttMaxInflight,
      maxQueued: config.mqttMaxQueuedMessages,
      slowConsumer: config.mqttSlowConsumer,
      packetTimeoutMs: config.mqttPacketTimeout,
      maxPartialBytes: config.mqttMaxPartialBytes,
      queueQos0Offline: config.mqttQueueQos0,
      maxTopicLevels: config.mqttMaxTopicLevels,
      maxSessionExpiry: Math.floor(config.mqttSessionExpiryMax / 1000),
      maxKeepalive: config.mqttMaxKeepalive,
      sysIntervalMs: config.mqttSysInterval,
      // Authentication, authorization, quotas and the client registry: the control plane (src/control/access.ts).
      access: ctx.access,
      // Cluster mode: sessions owned per broker and taken over across brokers (src/protocols/mqtt/cluster.ts).
      cluster: ctx.cluster,
    });
    const listeners = new Map<string, ProtocolListener>();
    const close = async () => {
      await Promise.allSettled([...listeners.values()].map((l) => l.close()));
      // After the listeners: their connections hand unacknowledged messages back to the sessions first.
      hub.close();
    };
    try {
      const l = await startMqttListener(mctx, { host: config.host, port: config.mqttPort }, {}, hub);
      listeners.set('mqtt', l);
      ctx.logger.info({ protocol: 'mqtt', address: formatAddress(l.address()) }, 'listening');
      if (config.mqttTlsCert !== null && config.mqttTlsKey !== null) {
        const tlsFiles = { cert: readFileSync(config.mqttTlsCert), key: readFileSync(config.mqttTlsKey) };
        // mTLS (--tls-client-ca): a verified client certificate logs in as the directory user it names.
        const clientCerts = tlsClientOptions(config);
        const certificate = clientCerts.requestCert === true ? (s: TLSSocket) => certificateLogin(ctx.access, s, config.tlsCertUser) : undefined;
        const t = await startMqttTlsListener(mctx, { host: config.host, port: config.mqttsPort, ...tlsFiles, ...clientCerts, certificate }, hub);
        listeners.set('mqtts', t);
        ctx.logger.info({ protocol: 'mqtts', address: formatAddress(t.address()) }, 'listening');
      }
      if (config.mqttWs) {
        const w = await startMqttWsListener(
          mctx,
          {
            host: config.host,
            port: config.mqttWsPort,
            path: '/mqtt',
            timeouts: httpTimeouts({ headersTimeoutMs: config.httpHeadersTimeout, lingerMs: config.httpLinger }),
          },
          hub,
        );
        listeners.set('mqtt-ws', w);
        ctx.logger.info({ protocol: 'mqtt-ws', address: formatAddress(w.address()), path: '/mqtt' }, 'listening');
      }
    } catch (err) {
      await close();
      throw err;
    }
    return {
      listeners,
      // Drops by cause, slow-consumer disconnects, packet timeouts and the memory held by unfinished packets.
      figures: () => hub.figures(),
      // The admin API's DELETE /api/v1/mqtt/sessions/{clientId} (it kicks a connected client first).
      // In cluster mode the broker holding the session ends it (src/protocols/mqtt/cluster.ts).
      sessions: { delete: async (clientId) => (hub.cluster !== null ? hub.cluster.delete(clientId) : hub.deleteSession(clientId)) },
      close,
    };
  },
};
