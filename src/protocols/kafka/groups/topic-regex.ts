/**
 * KIP-848's SubscribedTopicRegex: a pattern in RE2/J syntax (Java's RE2 port, the syntax of Go's regexp) that a
 * topic name must match as a whole (Kafka evaluates `Pattern.matcher(topic).matches()`). This translates it into a
 * JavaScript RegExp (unicode mode), or refuses it, which the heartbeat answers INVALID_REGULAR_EXPRESSION.
 *
 * Refused, as RE2 refuses them: backreferences (\1), lookahead and lookbehind ((?=, (?!, (?<=, (?<!), atomic groups,
 * possessive quantifiers, unknown escapes of letters and digits, repeat counts above 1000, unbalanced parentheses.
 * Refused because a JavaScript RegExp cannot express them the same way: flag groups other than a leading
 * `(?i)`, `(?s)`, `(?m)` (or a combination), the U (ungreedy) flag, \C, negated POSIX classes ([[:^alpha:]]).
 * Refused because a backtracking engine could take exponential time on them (RE2 runs in linear time, so Kafka
 * accepts them): a repeated group that holds a repetition or an alternation, e.g. (a+)+ or (a|ab)*.
 *
 * Translated: \Q...\E, \A, \z, \a, \x{...}, octal \0nn, \pL / \p{Greek} / \PL / \p{^Greek}, (?P<name>...), POSIX
 * classes inside brackets ([[:alpha:]]), a leading `]` in a class, a `{` that is no repeat, RE2's ASCII \s.
 */

export type TopicRegex = { ok: true; regex: RegExp } | { ok: false; reason: string };

const MAX_REPEAT = 1000;

const POSIX: Record<string, string> = {
  alnum: '0-9A-Za-z',
  alpha: 'A-Za-z',
  ascii: '\\x00-\\x7f',
  blank: '\\t ',
  cntrl: '\\x00-\\x1f\\x7f',
  digit: '0-9',
  graph: '!-~',
  lower: 'a-z',
  print: ' -~',
  punct: '!-\\/:-@\\[-`{-~',
  space: '\\t\\n\\v\\f\\r ',
  upper: 'A-Z',
  word: '0-9A-Za-z_',
  xdigit: '0-9A-Fa-f',
};

/** RE2's \s is ASCII white space only (no \v). */
const RE2_SPACE = '\\t\\n\\f\\r ';

/** A code point as itself (letters, digits, `_`) or as an escape that means it inside and outside a class. */
function lit(cp: number): string {
  const c = String.fromCodePoint(cp);
  return /^[A-Za-z0-9_]$/.test(c) ? c : `\\u{${cp.toString(16)}}`;
}

class Refused extends Error {}

function refuse(reason: string): never {
  throw new Refused(reason);
}

/** One-letter general categories and their two-letter subcategories: \p{L}, \p{Lu}. Anything else is a script. */
const CATEGORY = /^[CLMNPSZ][a-z]?$/;

class Translator {
  private i = 0;
  private out = '';
  /** Per open group: whether it holds a repetition or an alternation (at any depth). */
  private readonly groups: Array<{ risky: boolean }> = [];
  /** The last thing written could take a quantifier: a group that was risky, or anything else. */
  private lastAtom: 'none' | 'atom' | 'risky-group' = 'none';
  flags = '';

  constructor(private readonly src: string) {}

  run(): string {
    this.leadingFlags();
    while (this.i < this.src.length) this.token();
    if (this.groups.length > 0) refuse('missing closing )');
    return this.out;
  }

  private get cp(): number {
    return this.src.codePointAt(this.i) as number;
  }

  private take(): string {
    const c = String.fromCodePoint(this.cp);
    this.i += c.length;
    return c;
  }

  /** A leading (?i), (?s), (?m) (or a combination) becomes a flag of the whole pattern. */
  private leadingFlags(): void {
    const m = /^\(\?([a-zA-Z-]+)\)/.exec(this.src);
    if (!m) return;
    const f = m[1];
    if (!/^[ims]+$/.test(f)) refuse(`flags (?${f}) are not supported (only a leading (?i), (?s), (?m))`);
    this.flags = [...new Set(f)].join('');
    this.i = m[0].length;
  }

  private markRepeat(): void {
    for (const g of this.groups) g.risky = true;
  }

  private token(): void {
    const c = this.take();
    switch (c) {
      case '\\':
        this.out += this.escape(false);
        this.lastAtom = 'atom';
        return;
      case '[':
        this.out += this.charClass();
        this.lastAtom = 'atom';
        return;
      case '(':
        this.openGroup();
        return;
      case ')': {
        const g = this.groups.pop();
        if (!g) refuse('unexpected )');
        this.out += ')';
        if (g.risky) this.markRepeat();
        this.lastAtom = g.risky ? 'risky-group' : 'atom';
        return;
      }
      case '|':
        for (const g of this.groups) g.risky = true;
        this.out += '|';
        this.lastAtom = 'none';
        return;
      case '*':
      case '+':
      case '?':
        this.quantifier(c, c !== '?');
        return;
      case '{': {
        const m = /^(\d+)(,(\d*))?\}/.exec(this.src.slice(this.i));
        if (!m) {
          // RE2 reads a brace that starts no repeat as a literal; unicode mode does not.
          this.out += '\\{';
          this.lastAtom = 'atom';
          return;
        }
        const lo = Number(m[1]);
        const hi = m[2] === undefined ? lo : m[3] === '' ? Infinity : Number(m[3]);
        if (lo > MAX_REPEAT || (hi !== Infinity && hi > MAX_REPEAT)) refuse(`repeat count above ${MAX_REPEAT}`);
        if (hi < lo) refuse(`invalid repeat {${m[0]}`);
        this.i += m[0].length;
        this.quantifier(`{${m[0]}`, hi > 1);
        return;
      }
      case '}':
        this.out += '\\}';
        this.lastAtom = 'atom';
        return;
      case ']':
        this.out += '\\]';
        this.lastAtom = 'atom';
        return;
      case '^':
      case '$':
        this.out += c;
        this.lastAtom = 'none';
        return;
      default:
        this.out += c === '.' ? '.' : lit(c.codePointAt(0) as number);
        this.lastAtom = 'atom';
    }
  }

  private quantifier(q: string, repeats: boolean): void {
    if (this.lastAtom === 'none') refuse(`missing argument to repetition operator ${q}`);
    if (repeats && this.lastAtom === 'risky-group') refuse('a repeated group holding a repetition or an alternation (nested repetition) is not supported');
    let s = q;
    if (this.src[this.i] === '?') {
      this.i++;
      s += '?';
    } else if (this.src[this.i] === '+') {
      refuse('possessive repetition is not RE2 syntax');
    }
    const next = this.src[this.i];
    if (next === '*' || next === '+' || next === '?' || (next === '{' && /^\{\d+(,\d*)?\}/.test(this.src.slice(this.i)))) {
      refuse(`invalid nested repetition operator ${s}${next}`);
    }
    if (repeats) this.markRepeat();
    this.out += s;
    this.lastAtom = 'none';
  }

  private openGroup(): void {
    if (this.src[this.i] !== '?') {
      this.out += '(';
      this.groups.push({ risky: false });
      this.lastAtom = 'none';
      return;
    }
    const rest = this.src.slice(this.i + 1);
    const named = /^P?<([^>]*)>/.exec(rest);
    if (named) {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(named[1])) refuse(`invalid group name <${named[1]}>`);
      this.i += 1 + named[0].length;
      this.out += `(?<${named[1]}>`;
    } else if (rest.startsWith(':')) {
      this.i += 2;
      this.out += '(?:';
    } else if (/^(=|!|<=|<!)/.test(rest)) {
      refuse('lookahead and lookbehind are not RE2 syntax');
    } else if (rest.startsWith('>')) {
      refuse('atomic groups are not RE2 syntax');
    } else {
      refuse('flag groups are not supported (only a leading (?i), (?s), (?m))');
    }
    this.groups.push({ risky: false });
    this.lastAtom = 'none';
  }

  /** An escape after the backslash; `inClass` inside brackets. */
  private escape(inClass: boolean): string {
    if (this.i >= this.src.length) refuse('trailing backslash');
    const c = this.take();
    switch (c) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
        return `\\${c}`;
      case 's':
        return inClass ? RE2_SPACE : `[${RE2_SPACE}]`;
      case 'S':
        if (inClass) refuse('\\S inside a character class is not supported');
        return `[^${RE2_SPACE}]`;
      case 'b':
      case 'B':
        if (inClass) refuse(`\\${c} inside a character class`);
        return `\\${c}`;
      case 'A':
        if (inClass) refuse('\\A inside a character class');
        return '^';
      case 'z':
        if (inClass) refuse('\\z inside a character class');
        return '$';
      case 'a':
        return lit(7);
      case 'f':
      case 't':
      case 'n':
      case 'r':
      case 'v':
        return `\\${c}`;
      case 'x': {
        const braced = /^\{([0-9A-Fa-f]{1,6})\}/.exec(this.src.slice(this.i));
        const two = /^[0-9A-Fa-f]{2}/.exec(this.src.slice(this.i));
        const m = braced ?? two;
        if (!m) refuse('invalid \\x escape');
        const cp = parseInt(braced ? braced[1] : m[0], 16);
        if (cp > 0x10ffff) refuse('invalid \\x escape');
        this.i += m[0].length;
        return lit(cp);
      }
      case 'p':
      case 'P':
        return this.unicodeClass(c === 'P');
      case 'Q': {
        if (inClass) refuse('\\Q inside a character class');
        const end = this.src.indexOf('\\E', this.i);
        const text = end < 0 ? this.src.slice(this.i) : this.src.slice(this.i, end);
        this.i = end < 0 ? this.src.length : end + 2;
        return [...text].map((ch) => lit(ch.codePointAt(0) as number)).join('');
      }
      case 'C':
        refuse('\\C (any byte) is not supported');
    }
    if (c >= '0' && c <= '7') {
      // Octal: \0, \0nn, or \nnn of two or three digits; a single \1-\7 would be a backreference.
      const m = /^[0-7]{0,2}/.exec(this.src.slice(this.i)) as RegExpExecArray;
      if (c !== '0' && m[0].length === 0) refuse('backreferences are not RE2 syntax');
      this.i += m[0].length;
      return lit(parseInt(c + m[0], 8));
    }
    if (/[0-9A-Za-z]/.test(c)) refuse(`invalid escape sequence \\${c}`);
    // Any other character escaped stands for itself.
    return lit(c.codePointAt(0) as number);
  }

  private unicodeClass(negated: boolean): string {
    let name: string;
    const braced = /^\{(\^?)([A-Za-z_]+)\}/.exec(this.src.slice(this.i));
    if (braced) {
      if (braced[1] === '^') negated = !negated;
      name = braced[2];
      this.i += braced[0].length;
    } else {
      const one = /^[A-Za-z]/.exec(this.src.slice(this.i));
      if (!one) refuse('invalid \\p escape');
      name = one[0];
      this.i += 1;
    }
    const prop = name === 'Any' ? 'Any' : CATEGORY.test(name) ? name : `Script=${name}`;
    return `\\${negated ? 'P' : 'p'}{${prop}}`;
  }

  private charClass(): string {
    let s = '[';
    if (this.src[this.i] === '^') {
      s += '^';
      this.i++;
    }
    // A `]` first in the class is a literal in RE2 (an empty class in JavaScript).
    if (this.src[this.i] === ']') {
      s += '\\]';
      this.i++;
    }
    for (;;) {
      if (this.i >= this.src.length) refuse('missing closing ]');
      const c = this.take();
      if (c === ']') return s + ']';
      if (c === '\\') {
        s += this.escape(true);
        continue;
      }
      if (c === '[' && this.src[this.i] === ':') {
        const m = /^:(\^?)([a-z]+):\]/.exec(this.src.slice(this.i));
        if (m) {
          if (m[1] === '^') refuse('negated POSIX classes are not supported');
          const range = POSIX[m[2]];
          if (range === undefined) refuse(`invalid character class range [:${m[2]}:]`);
          s += range;
          this.i += m[0].length;
          continue;
        }
      }
      if (c === '-') {
        s += '-';
        continue;
      }
      s += lit(c.codePointAt(0) as number);
    }
  }
}

/** The RegExp matching the topic names the pattern matches as a whole, or why it is refused. */
export function compileTopicRegex(source: string): TopicRegex {
  try {
    const t = new Translator(source);
    const body = t.run();
    return { ok: true, regex: new RegExp(`^(?:${body})$`, `u${t.flags}`) };
  } catch (err) {
    if (err instanceof Refused) return { ok: false, reason: err.message };
    return { ok: false, reason: (err as Error).message };
  }
}
