/** MQTT adapter: public surface. */
export { startMqttListener, type MqttListener } from './server.js';
export {
  MqttConnection,
  MqttClientRegistry,
  MQTT_DEFAULTS,
  allowAll,
  resolveMqttOptions,
  type AuthResult,
  type Authenticator,
  type MqttConnectionInit,
  type MqttConnectionStats,
  type MqttOptions,
  type ResolvedMqttOptions,
} from './connection.js';
export * as codec from './codec/index.js';
export { MqttProtocolError } from './codec/index.js';
