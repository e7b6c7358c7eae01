export { startBroker, type Broker } from './broker.js';
export { loadConfig, type Config } from './config/index.js';
export * from './core/index.js';
