/** MQTT adapter: public surface. */
export { createMqttHub, startMqttListener, startMqttTlsListener, startMqttWsListener, type MqttListener } from './server.js';
export { MqttConnection } from './connection.js';
export { MQTT_DEFAULTS, resolveMqttOptions, type MqttOptions } from './options.js';
export { MqttHub } from './hub.js';
export * as codec from './codec/index.js';
