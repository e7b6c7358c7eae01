/** RabbitMQ's error shape, shared by the management API's files (context.ts re-exports it). */

/** A refusal in RabbitMQ's shape: `{"error": ..., "reason": ...}` with its status. */
export class RabbitError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    readonly reason: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(reason);
  }
}

export const notFound = (): RabbitError => new RabbitError(404, 'Object Not Found', 'Not Found');
export const badRequest = (reason: string): RabbitError => new RabbitError(400, 'bad_request', reason);

export const CHALLENGE = { 'www-authenticate': 'Basic realm="RabbitMQ Management"' };
