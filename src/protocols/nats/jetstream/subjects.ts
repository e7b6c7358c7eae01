/**
 * NATS subjects of the JetStream API against FlowMQ's unified topics and stream bindings. A stream's JetStream
 * subjects are its bindings (MQTT filters on unified topics) written as NATS subjects: levels become tokens with the
 * separator swap of src/core/topic.ts (a `.` inside a level is a `/` inside a token), `+` is `*` and `#` is `>`.
 * One difference cannot be written away: an MQTT `a/#` binding also captures `a` itself, where the NATS `a.>` would
 * not (docs/nats.md documents it).
 */
import { FlowError, swapSeparators } from '../../../core/index.js';

/** A NATS subject (wildcards allowed) as an MQTT filter on unified topics; throws INVALID_FILTER. */
export function subjectToFilter(subject: string): string {
  if (subject.length === 0) throw new FlowError('INVALID_FILTER', 'subject must not be empty');
  const tokens = subject.split('.');
  const out: string[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    if (t.length === 0) throw new FlowError('INVALID_FILTER', `subject "${subject}" has an empty token`);
    // eslint-disable-next-line no-control-regex -- NUL is refused in a subject
    if (/[\s\u0000]/.test(t)) throw new FlowError('INVALID_FILTER', `subject "${subject}" holds white space`);
    if (t === '>') {
      if (i !== tokens.length - 1) throw new FlowError('INVALID_FILTER', `">" must be the last token of "${subject}"`);
      out.push('#');
    } else if (t === '*') out.push('+');
    else if (t.includes('+') || t.includes('#') || t.includes('*') || t.includes('>')) {
      // `+` and `#` cannot be part of a unified level; `*`/`>` inside a token is not a wildcard in NATS, but a
      // stream subject like that is surely a mistake.
      throw new FlowError('INVALID_FILTER', `subject "${subject}" holds a wildcard inside a token`);
    } else out.push(swapSeparators(t));
  }
  return out.join('/');
}

/** A stream binding (MQTT filter) as the NATS subject JetStream clients see. */
export function filterToSubject(filter: string): string {
  return filter
    .split('/')
    .map((l) => (l === '#' ? '>' : l === '+' ? '*' : swapSeparators(l)))
    .join('.');
}

/** Does the NATS subject filter `subject` match the unified topic `topic`? (NATS rules: `>` one or more tokens.) */
export function subjectMatches(subject: string, topic: string): boolean {
  const tokens = subject.split('.');
  const levels = topic.split('/');
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    if (t === '>') return levels.length > i;
    if (i >= levels.length) return false;
    if (t === '*') continue;
    if (swapSeparators(t) !== levels[i]) return false;
  }
  return tokens.length === levels.length;
}

/** True when some subject could match both NATS subject filters. */
export function subjectsCollide(a: string, b: string): boolean {
  const x = a.split('.');
  const y = b.split('.');
  for (let i = 0; ; i++) {
    const p = x[i];
    const q = y[i];
    if (p === '>' || q === '>') return p !== undefined && q !== undefined;
    if (p === undefined || q === undefined) return p === q;
    if (p !== '*' && q !== '*' && p !== q) return false;
  }
}

/** Stream and consumer names usable in API subjects (what nats.js and nats-server accept). */
export function isValidApiName(name: string): boolean {
  // eslint-disable-next-line no-control-regex -- NUL is refused in a name
  return name.length > 0 && name.length <= 255 && !/[.*>/\\\s\u0000]/.test(name);
}

/** Unified topic levels of an API subject (after `$JS/API/`) back as NATS tokens. */
export function levelsToTokens(levels: string[]): string[] {
  return levels.map((l) => swapSeparators(l));
}
