/**
 * Typed errors with a stable `code`. Adapters map these codes to their protocol's own error replies.
 */
export type ErrorCode =
  | 'INVALID_TOPIC'
  | 'INVALID_FILTER'
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'CORRUPT_DATA'
  | 'STORAGE_ERROR'
  | 'CLOSED'
  | 'CONFIG_ERROR'
  | 'PROTOCOL_ERROR'
  | 'LIMIT_EXCEEDED';

export class FlowError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'FlowError';
  }
}

export const isFlowError = (e: unknown, code?: ErrorCode): e is FlowError =>
  e instanceof FlowError && (code === undefined || e.code === code);
