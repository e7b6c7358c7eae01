/**
 * NATS subject and queue-name rules, as nats-server 2.9 applies them (its sublist's subject check): tokens are
 * separated by `.`, none is empty, none holds whitespace (space, tab, CR, LF, form feed); a token that is exactly
 * `*` matches one token and exactly `>` one or more and must be the last. A longer token holding `*` or `>`
 * (`a*`, `>b`) is an ordinary literal token, as in nats-server. These rules say nothing of `/`, `+`, `#` or NUL:
 * the mapping to unified topics refuses those separately.
 */

const DOT = 0x2e;
const STAR = 0x2a;
const GT = 0x3e;

const isSpace = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0d || c === 0x0a || c === 0x0c;

/**
 * Whether `s` is a valid NATS subject. With `wildcards: false` (a publish subject) the `*` and `>` tokens are
 * refused too; with `wildcards: true` (a subscription) they are allowed, `>` only as the last token.
 */
export function isValidSubject(s: string, opts: { wildcards: boolean }): boolean {
  const n = s.length;
  if (n === 0) return false;
  let tokenStart = 0;
  let sawFwc = false;
  for (let i = 0; i <= n; i++) {
    const c = i < n ? s.charCodeAt(i) : DOT;
    if (c === DOT) {
      const len = i - tokenStart;
      if (len === 0 || sawFwc) return false;
      if (len === 1) {
        const t = s.charCodeAt(tokenStart);
        if (t === GT || t === STAR) {
          if (!opts.wildcards) return false;
          if (t === GT) sawFwc = true;
        }
      }
      tokenStart = i + 1;
    } else if (isSpace(c)) {
      return false;
    }
  }
  return true;
}

/** Whether `s` is a literal subject (no wildcard token): a valid publish subject. */
export const isValidLiteralSubject = (s: string): boolean => isValidSubject(s, { wildcards: false });

/**
 * Whether `q` is a usable queue-group name: not empty, no whitespace. nats-server takes any such token (dots and
 * wildcard characters are plain characters in a queue name).
 */
export function isValidQueueName(q: string): boolean {
  if (q.length === 0) return false;
  for (let i = 0; i < q.length; i++) if (isSpace(q.charCodeAt(i))) return false;
  return true;
}
