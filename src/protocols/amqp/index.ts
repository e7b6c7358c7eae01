/** AMQP 0-9-1 adapter: public surface. */
export { amqpModule } from './module.js';
export { AmqpAdapter, type AuthOutcome } from './adapter.js';
export { startAmqpListener, type AmqpListenOptions } from './server.js';
export { AmqpConnection, type AmqpConnectionInit } from './connection.js';
export { AmqpChannel, queueArguments } from './channel.js';
export { resolveAmqpOptions, type AmqpOptions, type ResolvedAmqpOptions } from './options.js';
export { AmqpError, replyCodeOf } from './errors.js';
export { messageOfPublish, propertiesOf, swapSeparators } from './properties.js';
