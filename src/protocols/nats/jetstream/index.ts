export { JetStream, type JetStreamOptions, type JetStreamPublisher } from './service.js';
