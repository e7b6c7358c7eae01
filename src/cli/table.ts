/**
 * What the CLI prints: aligned tables, key/value blocks, sizes, durations and times in a form people read, and a
 * progress bar for long operations (on a terminal only: a pipe or a log gets the final line alone).
 */

/** Rows aligned in columns, two spaces apart; the first row is the header. Trailing blanks trimmed. */
export function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => (c ?? '').padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** A table of `items` with the given columns (header → cell), or `empty` when there are none. */
export function itemsTable<T>(items: readonly T[], columns: ReadonlyArray<[string, (item: T) => unknown]>, empty: string): string {
  if (items.length === 0) return empty;
  return table([columns.map(([h]) => h), ...items.map((it) => columns.map(([, f]) => cell(f(it))))]);
}

/** `key:   value` lines, keys padded to one width. */
export function keyValues(pairs: ReadonlyArray<[string, unknown]>): string {
  const w = Math.max(...pairs.map(([k]) => k.length)) + 1;
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(w)} ${cell(v)}`.trimEnd()).join('\n');
}

/** One table cell: lists joined, nothing as "-", objects as compact JSON. */
export function cell(v: unknown): string {
  if (v === null || v === undefined || v === '') return '-';
  if (Array.isArray(v)) return v.length === 0 ? '-' : v.map(cell).join(',');
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

/** A retention or TTL in ms as the shortest whole unit (7d, 12h); null is forever. */
export function fmtDuration(ms: number | null | undefined, none = 'forever'): string {
  if (ms === null || ms === undefined) return none;
  for (const [u, n] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms % n === 0) return `${ms / n}${u}`;
  }
  return `${ms}ms`;
}

/** An uptime or an age, rounded: 3d4h, 2h5m, 4m10s, 12s. */
export function fmtAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d > 0) return `${d}d${h}h`;
  if (h > 0) return `${h}h${m}m`;
  if (m > 0) return `${m}m${s % 60}s`;
  return `${s}s`;
}

/** Bytes with a binary unit: 512B, 1.5KiB, 20MiB. */
export function fmtBytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v}B` : `${Number(v.toFixed(v < 10 ? 1 : 0))}${units[i]}`;
}

/** A time (ms since the epoch or an ISO string) as an ISO string without milliseconds. */
export function fmtTime(t: unknown): string {
  if (t === null || t === undefined || t === '') return '-';
  const d = typeof t === 'number' ? new Date(t) : new Date(String(t));
  return Number.isNaN(d.getTime()) ? String(t) : d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Shortens a value for a table cell (the message browser), marking the cut. */
export function clip(s: string, max = 60): string {
  const one = s.replace(/[\r\n\t]/g, ' ');
  return one.length <= max ? one : `${one.slice(0, max - 1)}…`;
}

/**
 * A progress bar on stderr, redrawn in place; on anything but a terminal it prints nothing until `done()`, which
 * always prints the final line (so a script's log shows the outcome, not a hundred carriage returns).
 */
export class ProgressBar {
  private last = '';

  constructor(
    private readonly label: string,
    private readonly out: NodeJS.WriteStream = process.stderr,
    private readonly width = 30,
  ) {}

  private line(done: number, total: number, note: string): string {
    const frac = total > 0 ? Math.min(1, done / total) : 1;
    const fill = Math.round(frac * this.width);
    return `${this.label} [${'#'.repeat(fill)}${'-'.repeat(this.width - fill)}] ${done}/${total}${note ? ` ${note}` : ''}`;
  }

  update(done: number, total: number, note = ''): void {
    if (!this.out.isTTY) return;
    const l = this.line(done, total, note);
    if (l === this.last) return;
    this.last = l;
    this.out.write(`\r${l}\u001b[K`);
  }

  done(done: number, total: number, note = ''): void {
    const l = this.line(done, total, note);
    this.out.write(this.out.isTTY ? `\r${l}\u001b[K\n` : `${l}\n`);
  }
}
