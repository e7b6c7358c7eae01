export { JetStream, type JetStreamOptions } from './service.js';
