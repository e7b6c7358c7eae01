/**
 * The MQTT adapter's options: authentication hooks, limits and their defaults, and their validation.
 */
import type { AccessControl } from '../../control/index.js';
import type { Cluster } from '../../cluster/index.js';
import { FlowError, type QoS } from '../../core/index.js';
import type { LogLimitOptions } from '../../util/log-limit.js';

/** Session Expiry Interval meaning "never expires" (v5 section 3.1.2.11.2). */
export const EXPIRY_NEVER = 0xffffffff;

/**
 * Outcome of authentication; CONNACK 0x00 / 0x04 / 0x05 in 3.1.1, 0x00 / 0x86 / 0x87 in 5.0. 'busy' (the password
 * could not be checked now, try later) is 0x03 Server unavailable in 3.1.1 and 0x89 Server busy in 5.0.
 */
export type AuthResult = 'ok' | 'bad-credentials' | 'not-authorized' | 'busy';

/**
 * The single authentication hook: the control plane plugs its user store in here. May be synchronous (no
 * extra latency on connect) or asynchronous (packets after CONNECT wait until it settles [MQTT-3.1.4-5]).
 * `remoteAddress` (without the port) lets it slow down repeated failures per client address.
 */
export type Authenticator = (clientId: string, username: string | null, password: Buffer | null, remoteAddress?: string) => AuthResult | Promise<AuthResult>;

/** One step of MQTT 5.0 enhanced authentication (section 4.12), e.g. SCRAM. */
export interface EnhancedAuthStep {
  clientId: string;
  method: string;
  data: Buffer | null;
  /** 0 for the CONNECT (or the AUTH 0x19 starting a re-authentication), then 1, 2... */
  step: number;
  reauth: boolean;
}
export type EnhancedAuthResult = { result: 'continue'; data?: Buffer } | { result: 'ok'; data?: Buffer } | { result: 'fail' };
export type EnhancedAuthenticator = (step: EnhancedAuthStep) => EnhancedAuthResult | Promise<EnhancedAuthResult>;

export interface MqttOptions {
  /** Largest accepted packet in bytes, fixed header included; v5 clients are told (Maximum Packet Size). */
  maxPacketSize?: number;
  /** The first packet must be a CONNECT within this many ms. */
  connectTimeoutMs?: number;
  /** Outbound QoS 1/2 messages awaiting acknowledgement per connection; also the v5 Receive Maximum granted. */
  maxInflight?: number;
  /** Messages waiting per session: behind a full in-flight window, and in the store while offline. */
  maxQueued?: number;
  /** When this many bytes wait in the socket's write buffer, QoS 0 deliveries to the client are dropped. */
  writeHighWaterMark?: number;
  /** Highest QoS granted to a subscription. */
  maxQos?: QoS;
  /**
   * Inbound QoS 1/2 publishes awaiting durable storage before the connection stops reading; also the replies
   * (acks, SUBACK, UNSUBACK, PINGRESP) written and not yet taken by the socket before it does.
   */
  maxPendingAcks?: number;
  /** A connection closed by the server is destroyed if the peer has not closed it after this many ms. */
  closeLingerMs?: number;
  authenticate?: Authenticator;
  /** v5 enhanced authentication; without it a CONNECT with an Authentication Method is refused (0x8C). */
  enhancedAuth?: EnhancedAuthenticator | null;
  /** Client connections across all MQTT listeners; beyond it CONNACK 0x97 (v5) / 0x03 (3.1.1). */
  maxConnections?: number;
  /** Topic levels of a topic name or filter. */
  maxTopicLevels?: number;
  /** Cap of the Session Expiry Interval (seconds); also the expiry of 3.1.1 Clean Session = 0 sessions. */
  maxSessionExpiry?: number;
  /** Highest Keep Alive a client may ask for (seconds; 0 = no limit); above it v5 gets Server Keep Alive. */
  maxKeepalive?: number;
  /** Topic aliases a v5 client may define (Topic Alias Maximum in CONNACK). */
  topicAliasMaximum?: number;
  /** Queue QoS 0 messages for offline sessions too (default: only QoS 1/2 are queued). */
  queueQos0Offline?: boolean;
  /** $SYS statistics interval, ms; 0 disables. */
  sysIntervalMs?: number;
  /** Resolution of the shared timer (keep-alive, expiry, will delay), ms. */
  tickMs?: number;
  /** A packet whose first byte has arrived must be complete within this many ms, whatever the keep-alive. */
  packetTimeoutMs?: number;
  /** Bytes all connections together may hold for packets not received completely. */
  maxPartialBytes?: number;
  /**
   * What happens when a message for a client would be dropped because the client does not keep up (its queue
   * behind the in-flight window is full, or its socket holds more than `writeHighWaterMark` bytes): 'drop' the
   * message, or 'disconnect' the client (v5 DISCONNECT 0x97) and keep the message in its persistent session.
   */
  slowConsumer?: SlowConsumerPolicy;
  /** Rate limits of the lines a client can trigger (protocol errors, timeouts, refused connects), per address. */
  logLimit?: LogLimitOptions;
  /**
   * The control plane (the broker's `ctx.access`): when set, it authenticates (passwords, the webhook, anonymous
   * per protocol, SCRAM-SHA-256/512 as v5 enhanced authentication) instead of `authenticate`, authorizes every
   * publish, subscription and will, applies the namespace quotas and lists the connection in the client registry.
   * null: everyone may do everything (stand-alone listeners, tests).
   */
  access?: AccessControl | null;
  /**
   * Cluster mode (the broker's `ctx.cluster`): sessions are owned ('session' kind) and taken over across brokers
   * (src/protocols/mqtt/cluster.ts); null: a single broker.
   */
  cluster?: Cluster | null;
}

export type SlowConsumerPolicy = 'drop' | 'disconnect';

export type ResolvedMqttOptions = Required<MqttOptions>;

export const allowAll: Authenticator = () => 'ok';

export const MQTT_DEFAULTS: ResolvedMqttOptions = {
  maxPacketSize: 1024 * 1024,
  connectTimeoutMs: 10_000,
  maxInflight: 100,
  maxQueued: 1000,
  writeHighWaterMark: 1024 * 1024,
  maxQos: 2,
  maxPendingAcks: 1000,
  closeLingerMs: 2000,
  authenticate: allowAll,
  enhancedAuth: null,
  maxConnections: 1_000_000,
  maxTopicLevels: 128,
  maxSessionExpiry: 7 * 24 * 3600,
  maxKeepalive: 0,
  topicAliasMaximum: 100,
  queueQos0Offline: false,
  sysIntervalMs: 10_000,
  tickMs: 1000,
  // At the default 1 MiB maximum packet size, 30 s still admits a link of ~35 KB/s (~280 kbit/s); a slower
  // client should send smaller packets. It is the time one stranger can pin a partial packet's memory.
  packetTimeoutMs: 30_000,
  // 64 such maximum-size packets at once, a small part of a broker's memory; legitimate large packets arrive
  // in milliseconds on a LAN, so many connections rarely hold partial packets at the same time.
  maxPartialBytes: 64 * 1024 * 1024,
  slowConsumer: 'drop',
  logLimit: {},
  access: null,
  cluster: null,
};

class MqttConfigError extends FlowError {
  constructor(message: string) {
    super('CONFIG_ERROR', message);
  }
}

/** Fills defaults and validates; throws FlowError('CONFIG_ERROR') on nonsense. */
export function resolveMqttOptions(opts: MqttOptions = {}): ResolvedMqttOptions {
  const o: ResolvedMqttOptions = { ...MQTT_DEFAULTS };
  for (const [k, v] of Object.entries(opts) as Array<[string, unknown]>) if (v !== undefined) Object.assign(o, { [k]: v });
  const int = (name: keyof MqttOptions, v: number, min: number, max = Number.MAX_SAFE_INTEGER) => {
    if (!Number.isInteger(v) || v < min || v > max) {
      throw new MqttConfigError(`mqtt option ${name} must be an integer in ${min}..${max}, got ${v}`);
    }
  };
  int('maxPacketSize', o.maxPacketSize, 1, 268_435_455 + 5);
  int('connectTimeoutMs', o.connectTimeoutMs, 1);
  int('maxInflight', o.maxInflight, 1, 65535);
  int('maxQueued', o.maxQueued, 1);
  int('writeHighWaterMark', o.writeHighWaterMark, 1);
  int('maxPendingAcks', o.maxPendingAcks, 1, 65535);
  int('closeLingerMs', o.closeLingerMs, 1);
  int('maxConnections', o.maxConnections, 1);
  int('maxTopicLevels', o.maxTopicLevels, 1);
  int('maxSessionExpiry', o.maxSessionExpiry, 0, EXPIRY_NEVER);
  int('maxKeepalive', o.maxKeepalive, 0, 65535);
  int('topicAliasMaximum', o.topicAliasMaximum, 0, 65535);
  int('sysIntervalMs', o.sysIntervalMs, 0);
  int('tickMs', o.tickMs, 1);
  int('packetTimeoutMs', o.packetTimeoutMs, 1);
  int('maxPartialBytes', o.maxPartialBytes, 1);
  if (o.slowConsumer !== 'drop' && o.slowConsumer !== 'disconnect') throw new MqttConfigError('mqtt option slowConsumer must be drop or disconnect');
  if (o.maxQos !== 0 && o.maxQos !== 1 && o.maxQos !== 2) throw new MqttConfigError('mqtt option maxQos must be 0, 1 or 2');
  if (typeof o.authenticate !== 'function') throw new MqttConfigError('mqtt option authenticate must be a function');
  if (o.enhancedAuth !== null && typeof o.enhancedAuth !== 'function') throw new MqttConfigError('mqtt option enhancedAuth must be a function');
  return o;
}
