/**
 * CONNECT, authentication and DISCONNECT of an MQTT connection (as Mosquitto's handle_connect.c, handle_auth.c,
 * handle_disconnect.c): the CONNECT's client id, keep-alive, will and v5 limits; login through the control plane
 * (directory users, client certificate, anonymous), the `authenticate` hook, or v5 enhanced authentication
 * (SCRAM-SHA-256/512 of the control plane, or the `enhancedAuth` hook), re-authentication included; then the
 * session (the hub's attach), the CONNACK, and the resumed session's stored messages (outbound.ts `restore()`).
 * A refused CONNECT gets a CONNACK with the reason and the connection closes.
 */
import { randomBytes } from 'node:crypto';
import { startSaslExchange, type AccessControl, type Principal } from '../../control/index.js';
import { isFlowError, isReservedName, isReservedTopic, namespaceNames } from '../../core/index.js';
import {
  ConnackCode,
  MqttProtocolError,
  ReasonCode,
  encodeAuth,
  encodeConnack,
  type AuthPacket,
  type ConnectPacket,
  type DisconnectPacket,
  type Properties,
} from './codec/index.js';
import { EXPIRY_NEVER, type AuthResult, type EnhancedAuthResult } from './options.js';
import { splitShared, type MqttSession } from './session.js';
import { State, errText, type MqttLink } from './link.js';
import { deliver, restore } from './outbound.js';

/** The SASL mechanisms MQTT 5.0 enhanced authentication offers (Authentication Method names as the SASL ones). */
const SCRAM_METHODS: ReadonlySet<string> = new Set(['SCRAM-SHA-256', 'SCRAM-SHA-512']);

export function onConnect(conn: MqttLink, p: ConnectPacket): void {
  conn.level = p.protocolLevel;
  const props = p.properties ?? {};
  let clientId = p.clientId;
  if (clientId.length === 0) {
    if (!p.cleanSession && conn.level !== 5) {
      // [MQTT-3.1.3-8] an empty id only makes sense for a session that is not kept.
      refuse(conn, ConnackCode.IDENTIFIER_REJECTED, 'empty client id with clean session 0 [MQTT-3.1.3-8]');
      return;
    }
    // [MQTT-3.1.3-6] (v5 [MQTT-3.1.3-6] too, returned as Assigned Client Identifier [MQTT-3.2.2-16]).
    clientId = `flowmq-${randomBytes(8).toString('hex')}`;
    conn.assignedId = clientId;
  }
  if (isReservedName(clientId)) {
    // `$ns/...` is how the session of another namespace's client is keyed (core namespaces.ts): no client, of any
    // namespace, names one. [MQTT-3.1.3-9] 3.1.1 0x02 Identifier rejected, v5 0x85 Client Identifier not valid.
    refuse(conn, conn.level === 5 ? ReasonCode.CLIENT_IDENTIFIER_NOT_VALID : ConnackCode.IDENTIFIER_REJECTED, 'client id in the reserved $ns/ space');
    return;
  }
  if (p.will !== null && isReservedTopic(p.will.topic)) {
    // A will on another namespace's topic: refused as a will on a denied topic is (v5 0x87, 3.1.1 0x05).
    refuse(conn, conn.level === 5 ? ReasonCode.NOT_AUTHORIZED : ConnackCode.NOT_AUTHORIZED, 'will topic in the reserved $ns/ space');
    return;
  }
  conn.clientId = clientId;
  conn.keepaliveMs = p.keepalive * 1000;
  conn.will = p.will;
  if (conn.level === 5) {
    conn.clientReceiveMax = props.receiveMaximum ?? 65535;
    conn.clientMaxPacket = props.maximumPacketSize ?? Number.MAX_SAFE_INTEGER;
    conn.clientAliasMax = props.topicAliasMaximum ?? 0;
    conn.requestProblemInfo = props.requestProblemInformation !== 0;
    conn.requestResponse = props.requestResponseInformation;
  }
  if (!conn.hub.hasRoom()) {
    conn.hub.stats.connectionsRefused++;
    refuse(conn, conn.level === 5 ? ReasonCode.QUOTA_EXCEEDED : ConnackCode.SERVER_UNAVAILABLE, 'connection limit reached');
    return;
  }
  if (props.authenticationMethod !== undefined && conn.opts.access !== null && SCRAM_METHODS.has(props.authenticationMethod)) {
    // [MQTT-4.12] enhanced authentication with SCRAM: the client-first message comes in the CONNECT.
    conn.authMethod = props.authenticationMethod;
    conn.scramAuth = true;
    conn.pendingConnect = p;
    conn.state = State.Authenticating;
    conn.scram = startSaslExchange(conn.opts.access.guard, conn.authMethod as 'SCRAM-SHA-256' | 'SCRAM-SHA-512', conn.address, { protocol: 'mqtt' });
    scramStep(conn, props.authenticationData ?? Buffer.alloc(0), false);
    return;
  }
  if (props.authenticationMethod !== undefined) {
    // Under the control plane only its SCRAM methods are offered: a hook's 'ok' would carry no identity.
    const hook = conn.opts.access !== null ? null : conn.opts.enhancedAuth;
    if (hook === null) {
      refuse(conn, ReasonCode.BAD_AUTHENTICATION_METHOD, `authentication method ${props.authenticationMethod} is not supported`);
      return;
    }
    conn.authMethod = props.authenticationMethod;
    conn.pendingConnect = p;
    conn.state = State.Authenticating;
    runEnhancedAuth(conn, props.authenticationData ?? null, false);
    return;
  }
  if (conn.opts.access !== null) {
    conn.pendingConnect = p;
    // [MQTT-3.1.4-5] nothing after CONNECT is processed before the CONNECT is accepted.
    conn.state = State.Authenticating;
    conn.pauseReading();
    login(conn, conn.opts.access, p);
    return;
  }
  let auth: AuthResult | Promise<AuthResult>;
  try {
    auth = conn.opts.authenticate(clientId, p.username, p.password, conn.address);
  } catch (err) {
    authFailed(conn, err);
    return;
  }
  conn.pendingConnect = p;
  // [MQTT-3.1.4-5] nothing after CONNECT is processed before the CONNECT is accepted.
  conn.state = State.Authenticating;
  conn.pauseReading();
  if (typeof auth === 'string') {
    accept(conn, auth, undefined);
    return;
  }
  auth.then(
    (r) => accept(conn, r, undefined),
    (err: unknown) => authFailed(conn, err),
  );
}

/**
 * Username/password through the control plane (the directory's users, then the webhook for unknown ones). No
 * username: anonymous, if the broker lets MQTT clients in without credentials. While nobody could log in (no
 * users, no webhook) and anonymous access is allowed, credentials are not checked at all: the zero-setup broker
 * lets everyone in, as it did before users existed (and as Mosquitto does without a password file).
 */
function login(conn: MqttLink, ac: AccessControl, p: ConnectPacket): void {
  const anonymous = ac.anonymousAllowed('mqtt');
  // A verified client certificate logs in as the user it names, unless the client sent a username: credentials win.
  const cert = p.username === null && conn.certificate !== null ? conn.certificate() : null;
  if (cert !== null) {
    if (cert.verdict === 'ok') loggedIn(conn, cert.principal, undefined);
    else {
      conn.logLimited(
        'info',
        'certificate refused',
        { clientId: conn.clientId, remote: conn.remote, user: cert.user },
        'mqtt client certificate names no user',
      );
      accept(conn, 'bad-credentials', undefined);
    }
    return;
  }
  if (p.username === null || (!ac.hasUsers && anonymous)) {
    if (!anonymous) {
      accept(conn, 'not-authorized', undefined);
      return;
    }
    loggedIn(conn, ac.principal(null), undefined);
    return;
  }
  ac.password(p.username, p.password, conn.address, 'mqtt').then(
    (r) => {
      if (r.verdict === 'ok') loggedIn(conn, r.principal, undefined);
      else accept(conn, r.verdict === 'busy' ? 'busy' : 'bad-credentials', undefined);
    },
    (err: unknown) => authFailed(conn, err),
  );
}

/**
 * The client proved who it is: its authorization, the will's topic (refused: v5 0x87 Not authorized, 3.1.1 0x05,
 * the decision's mapping), its namespace's connection quota (v5 0x97 Quota exceeded, 3.1.1 0x03 Server
 * unavailable), then the session.
 */
function loggedIn(conn: MqttLink, principal: Principal, authProps: Properties | undefined): void {
  if (conn.state === State.Closed) return;
  const ac = conn.opts.access!;
  // The namespace of the identity (core namespaces.ts): names are qualified with it from here on.
  const names = namespaceNames(principal.namespace);
  const access = names.isDefault ? ac.accessFor(principal, 'mqtt', conn.address) : ac.namespacedAccessFor(principal, names, 'mqtt', conn.address);
  const v5 = conn.level === 5;
  const will = conn.pendingConnect?.will ?? null;
  if (will !== null && !access.can('publish', 'topic', will.topic)) {
    refuse(conn, v5 ? ReasonCode.NOT_AUTHORIZED : ConnackCode.NOT_AUTHORIZED, `not authorized to publish the will to ${will.topic}`);
    return;
  }
  const lease = ac.quotas.connect(principal);
  if ('refused' in lease) {
    refuse(conn, v5 ? ReasonCode.QUOTA_EXCEEDED : ConnackCode.SERVER_UNAVAILABLE, lease.refused);
    return;
  }
  conn.access = access;
  conn.names = names;
  conn.lease = lease;
  if (conn.client !== null) {
    conn.client.user = principal.user;
    conn.client.namespace = principal.namespace;
    conn.client.clientId = conn.clientId;
  }
  accept(conn, 'ok', authProps);
}

/** One step of a SCRAM exchange carried in CONNECT / AUTH (section 4.12); `reauth`: on a connected client (0x19). */
function scramStep(conn: MqttLink, data: Buffer, reauth: boolean): void {
  const ex = conn.scram!;
  const method = conn.authMethod!;
  conn.pauseReading();
  Promise.resolve(ex.step(data)).then(
    (r) => {
      if (conn.state === State.Closed) return;
      if (r.state === 'continue') {
        // [MQTT-4.12.0-2] AUTH 0x18 Continue authentication, with the same method.
        conn.send(encodeAuth(ReasonCode.CONTINUE_AUTHENTICATION, { authenticationMethod: method, authenticationData: r.challenge }));
        conn.resumeReading();
        return;
      }
      conn.scram = null;
      if (r.state === 'failed') {
        conn.logLimited(
          'info',
          'scram failed',
          { clientId: conn.clientId, remote: conn.remote, user: r.username, reason: r.reason },
          'mqtt SCRAM authentication failed',
        );
        const code = r.busy === true ? ReasonCode.SERVER_BUSY : ReasonCode.NOT_AUTHORIZED;
        if (reauth) conn.disconnectWith(code, 're-authentication failed');
        else refuse(conn, code, r.busy === true ? 'authentication: server busy, try again later' : 'authentication failed');
        return;
      }
      const principal = conn.opts.access!.principal(r.principal);
      if (reauth) {
        // Re-authentication renews the same identity; becoming someone else on an open connection is not offered.
        if (conn.access === null || conn.access.principal.user !== r.principal) {
          conn.disconnectWith(ReasonCode.NOT_AUTHORIZED, 're-authentication as another user');
          return;
        }
        conn.send(encodeAuth(ReasonCode.SUCCESS, { authenticationMethod: method, authenticationData: r.challenge }));
        conn.resumeReading();
        return;
      }
      // The server-final message (v=...) goes in the CONNACK's Authentication Data.
      loggedIn(conn, principal, { authenticationMethod: method, authenticationData: r.challenge });
    },
    (err: unknown) => authFailed(conn, err),
  );
}

function runEnhancedAuth(conn: MqttLink, data: Buffer | null, reauth: boolean): void {
  const hook = conn.opts.enhancedAuth!;
  const step = conn.authStep++;
  let r: EnhancedAuthResult | Promise<EnhancedAuthResult>;
  try {
    r = hook({ clientId: conn.clientId, method: conn.authMethod!, data, step, reauth });
  } catch (err) {
    authFailed(conn, err);
    return;
  }
  const settle = (res: EnhancedAuthResult) => {
    if (conn.state === State.Closed) return;
    if (res.result === 'continue') {
      // [MQTT-4.12.0-2] the server continues with AUTH 0x18 carrying the same method.
      conn.send(encodeAuth(ReasonCode.CONTINUE_AUTHENTICATION, { authenticationMethod: conn.authMethod!, authenticationData: res.data }));
      conn.resumeReading();
      return;
    }
    if (res.result === 'fail') {
      if (reauth) conn.disconnectWith(ReasonCode.NOT_AUTHORIZED, 're-authentication failed');
      else refuse(conn, ReasonCode.NOT_AUTHORIZED, 'enhanced authentication failed');
      return;
    }
    conn.authStep = 0;
    if (reauth) {
      conn.send(encodeAuth(ReasonCode.SUCCESS, { authenticationMethod: conn.authMethod!, authenticationData: res.data }));
      conn.resumeReading();
      return;
    }
    conn.pauseReading();
    accept(conn, 'ok', { authenticationMethod: conn.authMethod!, authenticationData: res.data });
  };
  if ('then' in r) {
    conn.pauseReading();
    r.then(settle, (err: unknown) => authFailed(conn, err));
  } else settle(r);
}

export function onAuth(conn: MqttLink, p: AuthPacket): void {
  if (conn.level !== 5) throw new MqttProtocolError('AUTH below MQTT 5', '[MQTT-4.8.0-1]');
  const method = p.properties?.authenticationMethod;
  // [MQTT-4.12.0-5] [MQTT-4.12.1-1] AUTH carries the method of the CONNECT; re-authentication needs one.
  if (conn.authMethod === null || method !== conn.authMethod) {
    throw new MqttProtocolError('AUTH with another (or no) authentication method', '[MQTT-4.12.0-5]', undefined, ReasonCode.PROTOCOL_ERROR);
  }
  if (conn.scramAuth) {
    const data = p.properties?.authenticationData ?? Buffer.alloc(0);
    if (conn.state === State.Connected) {
      if (p.reasonCode === ReasonCode.RE_AUTHENTICATE) {
        if (conn.scram !== null)
          throw new MqttProtocolError('re-authentication while one is under way', '[MQTT-4.12.1-1]', undefined, ReasonCode.PROTOCOL_ERROR);
        conn.scram = startSaslExchange(conn.opts.access!.guard, method as 'SCRAM-SHA-256' | 'SCRAM-SHA-512', conn.address, { protocol: 'mqtt' });
      } else if (p.reasonCode !== ReasonCode.CONTINUE_AUTHENTICATION || conn.scram === null) {
        throw new MqttProtocolError('AUTH without re-authentication', '[MQTT-4.12.1-1]', undefined, ReasonCode.PROTOCOL_ERROR);
      }
      scramStep(conn, data, true);
      return;
    }
    if (p.reasonCode !== ReasonCode.CONTINUE_AUTHENTICATION || conn.scram === null) {
      throw new MqttProtocolError('AUTH during connect must continue authentication', '[MQTT-4.12.0-1]', undefined, ReasonCode.PROTOCOL_ERROR);
    }
    scramStep(conn, data, false);
    return;
  }
  if (conn.state === State.Connected) {
    if (p.reasonCode !== ReasonCode.RE_AUTHENTICATE && conn.authStep === 0) {
      throw new MqttProtocolError('AUTH without re-authentication', '[MQTT-4.12.1-1]', undefined, ReasonCode.PROTOCOL_ERROR);
    }
    runEnhancedAuth(conn, p.properties?.authenticationData ?? null, true);
    return;
  }
  if (p.reasonCode !== ReasonCode.CONTINUE_AUTHENTICATION) {
    throw new MqttProtocolError('AUTH during connect must continue authentication', '[MQTT-4.12.0-1]', undefined, ReasonCode.PROTOCOL_ERROR);
  }
  runEnhancedAuth(conn, p.properties?.authenticationData ?? null, false);
}

function authFailed(conn: MqttLink, err: unknown): void {
  conn.ctx.logger.error({ clientId: conn.clientId, remote: conn.remote, err }, 'mqtt authenticator failed');
  refuse(conn, conn.level === 5 ? ReasonCode.SERVER_UNAVAILABLE : ConnackCode.SERVER_UNAVAILABLE, 'authenticator failed');
}

function accept(conn: MqttLink, auth: AuthResult, authProps: Properties | undefined): void {
  if (conn.state === State.Closed) return;
  if (auth === 'busy') {
    // 3.1.1 has no "busy": 0x03 Server unavailable is its nearest (section 3.2.2.3); v5 has 0x89 (section 3.2.2.2).
    refuse(conn, conn.level === 5 ? ReasonCode.SERVER_BUSY : ConnackCode.SERVER_UNAVAILABLE, 'authentication: server busy, try again later');
    return;
  }
  if (auth !== 'ok') {
    const v5 = conn.level === 5;
    refuse(
      conn,
      auth === 'bad-credentials'
        ? v5
          ? ReasonCode.BAD_USER_NAME_OR_PASSWORD
          : ConnackCode.BAD_USERNAME_OR_PASSWORD
        : v5
          ? ReasonCode.NOT_AUTHORIZED
          : ConnackCode.NOT_AUTHORIZED,
      `authentication: ${auth}`,
    );
    return;
  }
  const p = conn.pendingConnect!;
  conn.pendingConnect = null;
  const props = p.properties ?? {};
  // Session lifetime: 3.1.1 Clean Session 0 keeps it (up to the configured maximum); v5 says how long.
  const requested = conn.level === 5 ? (props.sessionExpiryInterval ?? 0) : p.cleanSession ? 0 : EXPIRY_NEVER;
  const expiry = Math.min(requested, conn.opts.maxSessionExpiry);
  conn.hub.attach(conn, conn.names.name(conn.clientId), p.cleanSession, expiry, conn.level, conn.access).then(
    ({ session, present }) => connected(conn, session, present, requested, expiry, authProps),
    (err: unknown) => {
      // Cluster mode: UNAVAILABLE is another broker holding the session and not handing it over yet (retriable).
      if (isFlowError(err, 'UNAVAILABLE'))
        conn.logLimited(
          'info',
          'session unavailable',
          { clientId: conn.clientId, remote: conn.remote, err: errText(err) },
          'mqtt session not available here yet',
        );
      else conn.ctx.logger.error({ clientId: conn.clientId, err: errText(err) }, 'mqtt session could not be loaded');
      refuse(conn, conn.level === 5 ? ReasonCode.SERVER_UNAVAILABLE : ConnackCode.SERVER_UNAVAILABLE, 'session store failed');
    },
  );
}

function connected(conn: MqttLink, session: MqttSession, present: boolean, requested: number, expiry: number, authProps: Properties | undefined): void {
  const early = conn.early;
  conn.early = null;
  if (conn.state === State.Closed) {
    // Closed while the session was loading: give it back, with what matched it meanwhile (stored or dropped as
    // for any offline session).
    conn.hub.detach(session, conn, [], null);
    if (early !== null && !session.ended) for (const e of early) session.deliver(e.msg, e.subs);
    else if (early !== null) for (let i = 0; i < early.length; i++) conn.hub.dropped('closed', true);
    return;
  }
  conn.session = session;
  conn.state = State.Connected;
  if (conn.access !== null) authorizeSession(conn, session, present);
  let connackProps: Properties | undefined;
  if (conn.level === 5) {
    connackProps = { ...authProps };
    // [MQTT-3.2.2-16] an assigned client id is returned to the client.
    if (conn.assignedId !== null) connackProps.assignedClientIdentifier = conn.assignedId;
    if (expiry !== requested) connackProps.sessionExpiryInterval = expiry;
    connackProps.receiveMaximum = conn.opts.maxInflight;
    if (conn.opts.maxQos < 2) connackProps.maximumQoS = conn.opts.maxQos;
    connackProps.maximumPacketSize = conn.opts.maxPacketSize;
    if (conn.opts.topicAliasMaximum > 0) connackProps.topicAliasMaximum = conn.opts.topicAliasMaximum;
    const ka = conn.opts.maxKeepalive;
    if (ka > 0 && (conn.keepaliveMs === 0 || conn.keepaliveMs > ka * 1000)) {
      // [MQTT-3.2.2-21] the client must use the Server Keep Alive instead of its own.
      connackProps.serverKeepAlive = ka;
      conn.keepaliveMs = ka * 1000;
    }
    if ((conn.requestResponse ?? 0) === 1) connackProps.responseInformation = `flowmq/response/${conn.clientId}`;
  }
  // [MQTT-3.2.2-1] [MQTT-3.2.2-2] [MQTT-3.2.2-3] Session Present says whether a stored session was resumed.
  conn.send(encodeConnack({ type: 'connack', sessionPresent: present, returnCode: 0, properties: connackProps }, conn.level));
  // Not `level`: that key is the log line's own level for pino and every log parser.
  conn.ctx.logger.debug({ clientId: conn.clientId, remote: conn.remote, protocolVersion: conn.level, present }, 'mqtt client connected');
  // Stored messages first (restore() holds newer ones behind them), then those that matched during the attach.
  if (present) restore(conn, session);
  if (early !== null) for (const e of early) deliver(conn, e.msg, e.subs);
  if (!present) conn.resumeReading();
}

/**
 * The session now acts for this connection's identity (also while offline, until another connection resumes it).
 * A resumed session's subscriptions were granted to whoever had it before, maybe another user, maybe under other
 * policies: each is checked again, and one the identity may not have is removed (its filter is told to nobody:
 * MQTT has no way to say so outside a SUBACK; the client sees no more messages on it, and a log line says why).
 */
function authorizeSession(conn: MqttLink, s: MqttSession, present: boolean): void {
  const access = conn.access!;
  if (!present || s.subs.size === 0) return;
  let removed = false;
  for (const [f, sub] of s.subs) {
    if (access.subscription(splitShared(f).filter) !== 'deny') continue;
    conn.ctx.engine.unsubscribe(sub);
    s.subs.delete(f);
    removed = true;
    conn.logLimited(
      'info',
      'subscription dropped',
      { clientId: conn.clientId, remote: conn.remote, filter: f },
      'mqtt stored subscription not authorized for conn client, removed',
    );
  }
  if (removed && s.persistent) conn.hub.persist(s);
}

/** CONNACK with a failure code, then close [MQTT-3.2.2-5]; the will was never accepted so it is dropped. */
function refuse(conn: MqttLink, code: number, why: string): void {
  conn.logLimited('info', 'connect refused', { clientId: conn.clientId || undefined, remote: conn.remote, code, why }, 'mqtt connect refused');
  conn.will = null;
  const props = conn.level === 5 && conn.requestProblemInfo ? { reasonString: why } : conn.level === 5 ? {} : undefined;
  conn.send(encodeConnack({ type: 'connack', sessionPresent: false, returnCode: code, properties: props }, conn.level));
  conn.close('refused');
}

export function onDisconnect(conn: MqttLink, p: DisconnectPacket): void {
  const reason = p.reasonCode ?? 0;
  const exp = p.properties?.sessionExpiryInterval;
  const s = conn.session;
  if (exp !== undefined && s !== null) {
    // [MQTT-3.14.2-2] a session that was to end with the connection cannot be made to last now.
    if (s.expiry === 0 && exp !== 0) {
      throw new MqttProtocolError('DISCONNECT sets a session expiry after CONNECT set 0', '[MQTT-3.14.2-2]', undefined, ReasonCode.PROTOCOL_ERROR);
    }
    s.expiry = Math.min(exp, conn.opts.maxSessionExpiry);
  }
  // [MQTT-3.14.4-3] a normal DISCONNECT discards the will; v5 0x04 asks for it to be published.
  if (reason !== ReasonCode.DISCONNECT_WITH_WILL) conn.will = null;
  conn.close('disconnect');
}
