/**
 * NATS as a protocol module: one NatsAdapter shared by the TCP listener (TLS on the same port when configured) and
 * the WebSocket listener, started from the broker's nats-* config.
 */
import { readFileSync } from 'node:fs';
import type { Config } from '../../config/index.js';
import { FlowError } from '../../core/index.js';
import { tlsClientOptions } from '../../control/certs.js';
import { httpTimeouts } from '../../control/http-guard.js';
import { formatAddress as fmt } from '../listener.js';
import { LogLimiter } from '../../util/log-limit.js';
import type { ProtocolListener, ProtocolModule, ProtocolModuleContext, RunningProtocol } from '../types.js';
import { NatsAdapter } from './adapter.js';
import { JetStream, jwtJetStreamLimits } from './jetstream/index.js';
import { NatsMonitor } from './monitor.js';
import { resolveNatsOptions } from './options.js';
import { NatsOperators } from './auth-jwt.js';
import { accountLinks } from './account-links.js';
import type { Logger } from 'pino';
import { preboundIdentity } from './prebound.js';
import { newListenerCounts, startNatsListener, startNatsWsListener, type NatsListenerShared, type NatsTlsSettings } from './server.js';

export const natsModule: ProtocolModule = {
  name: 'nats',
  check(c: Config): void {
    // loadConfig checks these too; a Config built by hand does not go through it.
    if ((c.natsTlsCert === null) !== (c.natsTlsKey === null)) {
      throw new FlowError('CONFIG_ERROR', 'NATS over TLS needs both nats-tls-cert and nats-tls-key');
    }
    if (c.natsJetstreamDomain !== null && !/^[A-Za-z0-9_-]+$/.test(c.natsJetstreamDomain)) {
      throw new FlowError('CONFIG_ERROR', `nats-jetstream-domain ${JSON.stringify(c.natsJetstreamDomain)}: one subject token of [A-Za-z0-9_-]`);
    }
    if ((c.natsTlsRequired || c.natsTlsHandshakeFirst || c.natsWsTls) && c.natsTlsCert === null) {
      throw new FlowError('CONFIG_ERROR', 'nats-tls-required, nats-tls-handshake-first and nats-ws-tls need nats-tls-cert and nats-tls-key');
    }
  },
  async start(ctx: ProtocolModuleContext): Promise<RunningProtocol> {
    const c = ctx.config;
    // The WebSocket listener's and the monitoring port's HTTP timeouts and lingering close (control/http-guard.ts).
    const httpGuard = httpTimeouts({ headersTimeoutMs: c.httpHeadersTimeout, lingerMs: c.httpLinger });
    // A half-configured TLS listener is refused before any listener opens.
    natsModule.check!(c);
    // Read before anything listens: a missing file stops the start with nothing left open.
    const tlsSettings: NatsTlsSettings | undefined =
      c.natsTlsCert !== null && c.natsTlsKey !== null
        ? {
            cert: readFileSync(c.natsTlsCert),
            key: readFileSync(c.natsTlsKey),
            required: c.natsTlsRequired || c.natsTlsHandshakeFirst,
            handshakeFirst: c.natsTlsHandshakeFirst,
            clientAuth: tlsClientOptions(c),
          }
        : undefined;
    const logger = ctx.logger.child({ protocol: 'nats' });
    const options = resolveNatsOptions({
      maxPayload: c.natsMaxPayload,
      maxControlLine: c.natsMaxControlLine,
      maxPending: c.natsMaxPending,
      maxPendingMsgs: c.natsMaxPendingMsgs,
      pingIntervalMs: c.natsPingInterval,
      maxPingsOut: c.natsMaxPingsOut,
      authTimeoutMs: c.natsAuthTimeout,
      maxConnections: c.natsMaxConnections,
      maxSubscriptions: c.natsMaxSubscriptions,
    });
    // The JetStream API over FlowMQ streams: the adapter hands it every publish with a reply subject (PubAcks).
    // Cluster mode: consumers owned by one broker each, requests for them forwarded there (jetstream/cluster.ts).
    const jetstream = new JetStream(ctx.engine, logger.child({ component: 'jetstream' }), {
      cluster: ctx.cluster,
      domain: c.natsJetstreamDomain,
      enabled: c.natsJetstream,
    });
    await jetstream.start();
    const adapter = new NatsAdapter(
      { ...ctx, logger },
      options,
      {
        access: ctx.access,
        token: c.natsToken,
        certUser: c.tlsClientCa === null ? null : c.tlsCertUser,
        noAuthUser: c.natsNoAuthUser,
        operators: operatorMode(c.natsOperator, c.natsAccounts, logger),
        responses: { max: c.natsResponseMax, ttlMs: c.natsResponseTtl },
      },
      // Off: publishes with a reply are plain publishes (no PubAck) and INFO says no jetstream.
      c.natsJetstream ? jetstream : undefined,
      // The server id and client ids of the port bound at the start (prebound.ts), whose early INFO said them.
      preboundIdentity(c.host, c.natsPort) ?? undefined,
    );
    // JetStream API requests are authorized by who sent them: the adapter knows its connections' Access.
    // Operator mode: an account JWT's JetStream limits are its namespace's (read again after a reload).
    jetstream.authorizer = {
      control: ctx.access,
      accessOf: (origin) => adapter.accessOf(origin),
      jwtLimits: (namespace) => {
        const claims = adapter.operators?.claimsOfNamespace(namespace);
        return claims === undefined ? undefined : jwtJetStreamLimits(claims.nats?.limits);
      },
    };
    // A request crossing into another namespace by a service import (src/core/links.ts) is a JetStream publish there
    // too: an imported `$KV.>` put gets its PubAck from the exporter's stream.
    if (c.natsJetstream) ctx.engine.links.requestPublisher = (msg, reply) => jetstream.publish(msg, reply);
    ctx.engine.links.onWriteFailed = (err) => adapter.writeFailed(err);
    // Operator mode: the account JWTs' exports and imports are links between their namespaces.
    const applyAccountLinks = (ops: NatsOperators | null): void => {
      const { defs, refused } = ops === null ? { defs: [], refused: [] } : accountLinks(ops);
      for (const r of refused) logger.warn(r, 'nats account JWT export or import not taken');
      const out = ctx.engine.links.configure('nats-jwt', defs);
      for (const r of out.refused) logger.warn(r, 'namespace import refused');
      if (defs.length > 0) logger.info({ imports: out.active }, 'nats account JWT exports and imports applied');
    };
    applyAccountLinks(adapter.operators);
    const logLimit = new LogLimiter(logger);
    let ending: Promise<void> | null = null;
    const shared: NatsListenerShared = {
      adapter,
      logLimit,
      endConnections: () => (ending ??= adapter.closeAll()),
      counts: newListenerCounts(),
    };
    const listeners = new Map<string, ProtocolListener>();
    let closing: Promise<void> | null = null;
    const close = () => {
      closing ??= Promise.allSettled([...listeners.values()].map((l) => l.close()))
        .then(() => shared.endConnections())
        .then(() => jetstream.close())
        .then(() => logLimit.stop());
      return closing;
    };
    // A NATS port bound at the start of `flowmq start` (prebound.ts) serves its waiting clients once the WebSocket and
    // monitoring ports are open too, as nats-server opens its client port last.
    let served!: { resolve: () => void; reject: (err: unknown) => void };
    const serveAfter = new Promise<void>((resolve, reject) => (served = { resolve, reject }));
    serveAfter.catch(() => {});
    try {
      const l = await startNatsListener(shared, { host: c.host, port: c.natsPort, tls: tlsSettings, serveAfter });
      listeners.set('nats', l);
      const tlsMode = tlsSettings === undefined ? undefined : c.natsTlsHandshakeFirst ? 'handshake-first' : tlsSettings.required ? 'required' : 'available';
      ctx.logger.info({ protocol: 'nats', address: fmt(l.address()), ...(tlsMode ? { tls: tlsMode } : {}) }, 'listening');
      if (c.natsWsPort !== null) {
        const wsTls = c.natsWsTls && tlsSettings ? { cert: tlsSettings.cert, key: tlsSettings.key, clientAuth: tlsSettings.clientAuth } : undefined;
        const w = await startNatsWsListener(shared, { host: c.host, port: c.natsWsPort, tls: wsTls, timeouts: httpGuard });
        listeners.set('nats-ws', w);
        ctx.logger.info({ protocol: 'nats-ws', address: fmt(w.address()), ...(wsTls ? { tls: 'wss' } : {}) }, 'listening');
      }
      if (c.natsMonitorPort !== null) {
        // nats-server's monitoring endpoints (monitor.ts): off unless asked for, unauthenticated as nats-server's.
        const monitor = new NatsMonitor(adapter, jetstream, {
          host: c.host,
          port: c.natsMonitorPort,
          allow: c.natsMonitorAllow,
          timeouts: httpGuard,
          setting: () => {
            const ws = listeners.get('nats-ws');
            return {
              host: c.host,
              port: l.address().port,
              tlsRequired: tlsSettings?.required === true,
              tlsVerify: tlsSettings?.clientAuth?.rejectUnauthorized === true,
              websocket: ws === undefined ? null : { host: c.host, port: ws.address().port, tls: c.natsWsTls },
            };
          },
        });
        const m = await monitor.listen();
        listeners.set('nats-monitor', m);
        ctx.logger.info(
          { protocol: 'nats-monitor', address: fmt(m.address()), ...(c.natsMonitorAllow.length > 0 ? { allow: c.natsMonitorAllow } : {}) },
          'listening',
        );
      }
      served.resolve();
    } catch (err) {
      served.reject(err);
      await close();
      throw err;
    }
    return {
      listeners,
      groups: jetstream.groupAdmin(),
      figures: () => {
        const { pending, ...refusals } = shared.counts;
        return {
          ...adapter.figures(),
          jetstream: jetstream.figures(),
          listener: { ...refusals, handshaking: pending, logLinesSuppressed: logLimit.suppressedTotal },
        };
      },
      reload: () => {
        // The operator's and accounts' JWT files read again (a bad one keeps the chain in force), then every
        // subscription checked against the permissions now in force (the users file was reloaded before).
        const figures: Record<string, unknown> = {};
        if (adapter.operators !== null) {
          try {
            adapter.operators = operatorMode(c.natsOperator, c.natsAccounts, logger);
            figures.accounts = adapter.operators?.accountCount ?? 0;
            applyAccountLinks(adapter.operators);
          } catch (err) {
            logger.warn({ err }, 'nats reload: the operator or account JWTs did not load; the previous ones stay in force');
            figures.accountsError = (err as Error).message;
          }
        }
        figures.subscriptionsEnded = adapter.recheckSubscriptions();
        return Promise.resolve(figures);
      },
      close,
    };
  },
};

/** Operator mode from --nats-operator and --nats-accounts (null when no operator is configured). */
function operatorMode(operator: string | null, accounts: string | null, logger: Logger): NatsOperators | null {
  const list = (v: string | null) =>
    (v ?? '')
      .split(',')
      .map((x) => x.trim())
      .filter((x) => x !== '');
  if (list(operator).length === 0) {
    if (list(accounts).length > 0) throw new FlowError('CONFIG_ERROR', 'nats-accounts needs nats-operator (the operator that signed them)');
    return null;
  }
  const n = NatsOperators.load(list(operator), list(accounts));
  logger.info({ accounts: n.accountCount }, 'nats operator mode: user JWTs of the preloaded accounts log in');
  return n;
}
