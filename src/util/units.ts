/** Human-friendly durations and sizes for flags and config files: `7d`, `90s`, `500ms`; `16MiB`, `1mb`, `4096`. */
const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?$/i;
const DURATION_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** Parses a duration to ms; a bare number means ms. Returns null when it is not a duration. */
export function parseDuration(v: string | number): number | null {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? v : null;
  const m = DURATION.exec(v.trim());
  if (!m) return null;
  return Math.round(Number(m[1]) * DURATION_MS[(m[2] ?? 'ms').toLowerCase()]);
}

const SIZE = /^(\d+(?:\.\d+)?)\s*(b|kb|kib|k|mb|mib|m|gb|gib|g)?$/i;
const SIZE_BYTES: Record<string, number> = {
  b: 1,
  k: 1024,
  kb: 1000,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1000 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1000 ** 3,
  gib: 1024 ** 3,
};

/** Parses a byte size; a bare number means bytes. Returns null when it is not a size. */
export function parseSize(v: string | number): number | null {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? Math.floor(v) : null;
  const m = SIZE.exec(v.trim());
  if (!m) return null;
  return Math.floor(Number(m[1]) * SIZE_BYTES[(m[2] ?? 'b').toLowerCase()]);
}
