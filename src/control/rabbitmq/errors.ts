/** RabbitMQ's error shape, shared by the management API's files (context.ts re-exports it). */

/** A refusal in RabbitMQ's shape: `{"error": ..., "reason": ...}` with its status. */
export class RabbitError extends Error {
  /** A reason that is not a text (RabbitMQ answers some with an Erlang term as a JSON list); `reason` is its text. */
  reasonJson?: unknown;
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
/** RabbitMQ's refusal of a definitions file naming a vhost it does not have: `"reason":["no_such_vhost","x"]`. */
export const noSuchVhost = (vhost: string): RabbitError => Object.assign(badRequest(`no_such_vhost: ${vhost}`), { reasonJson: ['no_such_vhost', vhost] });

export const CHALLENGE = { 'www-authenticate': 'Basic realm="RabbitMQ Management"' };
