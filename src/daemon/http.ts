/** The daemon's HTTP pieces: errors with a status, the bind check, the token digest. */
import { createHash } from 'node:crypto';
import { UsageError } from '../errors.js';

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

export class HttpError extends Error {
  readonly status: number;
  readonly headers: Record<string, string>;
  constructor(status: number, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.status = status;
    this.headers = headers;
  }
}

/** Refuses a bind beyond loopback without a token (before anything is loaded). */
export function checkBind(host: string, token: string | undefined): void {
  if (!LOOPBACK.has(host) && (token ?? '') === '') throw new UsageError(`serve: listening on ${host} (not loopback) needs --token or VOXSLAB_TOKEN`);
}

/** Reason phrases of the statuses a refused upgrade answers with. */
export const STATUS_TEXT: Partial<Record<number, string>> = { 401: 'Unauthorized', 404: 'Not Found', 409: 'Conflict', 503: 'Service Unavailable' };

export function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}
