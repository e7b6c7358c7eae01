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
export { MqttConnection, type MqttConnectionInit, type MqttConnectionStats } from './connection.js';
export {
  EXPIRY_NEVER,
  MQTT_DEFAULTS,
  allowAll,
  resolveMqttOptions,
  type AuthResult,
  type Authenticator,
  type EnhancedAuthenticator,
  type EnhancedAuthResult,
  type EnhancedAuthStep,
  type MqttOptions,
  type ResolvedMqttOptions,
} from './options.js';
export { MqttHub, MqttSession, type MqttHubStats } from './session.js';
export * as codec from './codec/index.js';
export { MqttProtocolError } from './codec/index.js';
