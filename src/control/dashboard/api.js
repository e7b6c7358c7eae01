// The dashboard's client of /api/v1: the session cookie (HttpOnly, set by POST /api/v1/login) goes with every
// request by itself; state-changing requests add the session's CSRF token, which the page keeps in memory only.

let csrfToken = null;
/** Called when the API answers 401: the session is gone (expired, logged out elsewhere). */
let onUnauthenticated = () => {};

export function setCsrfToken(token) {
  csrfToken = token ?? null;
}

export function whenUnauthenticated(fn) {
  onUnauthenticated = fn;
}

/** An API refusal, with the envelope's code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** `path` is under /api/v1 unless it starts with '/' (e.g. '/readyz'). */
export async function api(method, path, body) {
  const url = path.startsWith('/') ? path : `/api/v1/${path}`;
  // X-Requested-With: a script's call, not a navigation. The API should not answer it with a Basic challenge
  // (WWW-Authenticate), which makes the browser open its own password dialog over the page's login form.
  const headers = { accept: 'application/json', 'x-requested-with': 'XMLHttpRequest' };
  if (method !== 'GET' && method !== 'HEAD') {
    // The API refuses state-changing requests that are not JSON (a form post cannot be), body or not.
    headers['content-type'] = 'application/json';
    if (csrfToken) headers['x-csrf-token'] = csrfToken;
  }
  let res;
  try {
    res = await fetch(url, {
      method,
      headers,
      credentials: 'same-origin',
      body: body === undefined ? (headers['content-type'] ? '{}' : undefined) : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, 'UNREACHABLE', `the broker did not answer (${err.message})`);
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!res.ok) {
    const e =
      data && typeof data === 'object' && data.error
        ? data.error
        : { code: `HTTP_${res.status}`, message: typeof data === 'string' && data ? data : res.statusText };
    if (res.status === 401 && !url.endsWith('/login')) onUnauthenticated();
    throw new ApiError(res.status, e.code, e.message);
  }
  return data;
}

/** Every item of a list (following `next` cursors), up to `max` items; `truncated` says when more exist. */
export async function list(path, max = 1000) {
  const items = [];
  let cursor = null;
  for (;;) {
    const sep = path.includes('?') ? '&' : '?';
    const page = await api('GET', `${path}${sep}limit=${Math.min(1000, max - items.length)}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    const got = Array.isArray(page) ? page : (page.items ?? []);
    items.push(...got);
    cursor = Array.isArray(page) ? null : (page.next ?? null);
    if (cursor === null || got.length === 0) return { items, truncated: false };
    if (items.length >= max) return { items, truncated: true };
  }
}

export const enc = encodeURIComponent;
