/** MQTT adapter: public surface. */
export {
  createMqttHub,
  startMqttListener,
  startMqttTlsListener,
  startMqttWsListener,
  type MqttListener,
  type TlsListenOptions,
  type WsListenOptions,
} from './server.js';
export {
  MqttConnection,
  MQTT_DEFAULTS,
  allowAll,
  resolveMqttOptions,
  type AuthResult,
  type Authenticator,
  type EnhancedAuthenticator,
  type EnhancedAuthResult,
  type EnhancedAuthStep,
  type MqttConnectionInit,
  type MqttConnectionStats,
  type MqttOptions,
  type ResolvedMqttOptions,
} from './connection.js';
export { MqttHub, MqttSession, EXPIRY_NEVER, type MqttHubStats } from './session.js';
export * as codec from './codec/index.js';
export { MqttProtocolError } from './codec/index.js';
