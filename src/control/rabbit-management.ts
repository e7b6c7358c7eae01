/**
 * The RabbitMQ management HTTP API subset (src/control/rabbitmq/), started only with --amqp-management-port: its
 * module (and fastify's) is imported then, not at every broker start.
 */
import type { RabbitManagement } from './rabbitmq/server.js';
import type { RabbitManagementOptions } from './rabbitmq/context.js';

export type { RabbitManagement } from './rabbitmq/server.js';
export type { RabbitManagementOptions } from './rabbitmq/context.js';

export async function startRabbitManagement(opts: RabbitManagementOptions): Promise<RabbitManagement> {
  const { startRabbitManagement: start } = await import('./rabbitmq/server.js');
  return start(opts);
}
