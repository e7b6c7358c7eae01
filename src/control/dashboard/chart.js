// A small time-series line chart drawn on a <canvas>: a few series over the last N samples, a y axis from 0 to
// a rounded maximum, a time axis, and a legend with each series' latest value.

const COLORS = ['#1f77b4', '#e8590c', '#2f9e44', '#9c36b5', '#c92a2a', '#1098ad', '#5c940d', '#862e9c'];

function niceMax(v, base = 10) {
  if (!(v > 0)) return 1;
  if (base !== 10) {
    // Bytes: round in the unit the value is shown in (KiB, MiB...), so the ticks read 0 2 4 6 8 KiB.
    const unit = base ** Math.max(0, Math.floor(Math.log(v) / Math.log(base)));
    return niceMax(v / unit) * unit;
  }
  const p = 10 ** Math.floor(Math.log10(v));
  // Maxima whose quarter is round too (the grid has four steps): 4 → 0 1 2 3 4, 200 → 0 50 100 150 200.
  for (const m of [1, 2, 4, 8, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

export class LineChart {
  /**
   * @param {HTMLCanvasElement} canvas
   * @param {{ series?: string[], window?: number, format?: (v:number)=>string, tick?: (v:number, max:number)=>string, base?: number, title?: string }} opts
   */
  constructor(canvas, opts = {}) {
    this.canvas = canvas;
    this.window = opts.window ?? 60;
    this.format = opts.format ?? ((v) => (v >= 100 ? Math.round(v).toLocaleString('en-US') : v.toFixed(v < 10 ? 2 : 1)));
    this.title = opts.title ?? '';
    this.base = opts.base ?? 10;
    this.tick = opts.tick ?? ((v, max) => (max >= 4 ? Math.round(v).toLocaleString('en-US') : v.toFixed(2)));
    this.series = new Map();
    for (const name of opts.series ?? []) this.addSeries(name);
    this.times = [];
    this.resize = () => this.draw();
    window.addEventListener('resize', this.resize);
  }

  addSeries(name) {
    if (!this.series.has(name))
      this.series.set(name, { color: COLORS[this.series.size % COLORS.length], values: new Array(this.times?.length ?? 0).fill(null) });
    return this.series.get(name);
  }

  /** One sample: time (ms) and {series: value}; a series missing from `values` gets no point. */
  push(t, values) {
    this.times.push(t);
    for (const name of Object.keys(values)) this.addSeries(name);
    for (const [name, s] of this.series) s.values.push(values[name] ?? null);
    if (this.times.length > this.window) {
      this.times.shift();
      for (const s of this.series.values()) s.values.shift();
    }
    this.draw();
  }

  /** The points drawn, for tests and the accessible description. */
  latest() {
    const out = {};
    for (const [name, s] of this.series) out[name] = s.values[s.values.length - 1] ?? null;
    return out;
  }

  destroy() {
    window.removeEventListener('resize', this.resize);
  }

  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth || 400;
    const hgt = c.clientHeight || 180;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(hgt * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(hgt * dpr);
    }
    const g = c.getContext('2d');
    if (!g) return;
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, hgt);
    const left = 56;
    const right = 10;
    const top = 26;
    const bottom = 22;
    const pw = w - left - right;
    const ph = hgt - top - bottom;
    let max = 0;
    for (const s of this.series.values()) for (const v of s.values) if (v !== null && v > max) max = v;
    const ymax = niceMax(max, this.base);
    g.font = '11px system-ui, sans-serif';
    g.textBaseline = 'middle';
    // Grid and y labels.
    g.strokeStyle = '#e3e6ea';
    g.fillStyle = '#6b7280';
    g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const y = top + ph - (ph * i) / 4;
      g.beginPath();
      g.moveTo(left, Math.round(y) + 0.5);
      g.lineTo(left + pw, Math.round(y) + 0.5);
      g.stroke();
      g.textAlign = 'right';
      g.fillText(this.tick((ymax * i) / 4, ymax), left - 6, y);
    }
    // Time labels: first and last sample.
    const n = this.times.length;
    if (n > 0) {
      g.textAlign = 'left';
      g.textBaseline = 'alphabetic';
      g.fillText(new Date(this.times[0]).toLocaleTimeString('en-GB'), left, hgt - 5);
      g.textAlign = 'right';
      g.fillText(new Date(this.times[n - 1]).toLocaleTimeString('en-GB'), left + pw, hgt - 5);
    }
    // Lines: x by sample index over the samples there are (at most `window`), first at the left edge.
    const xAt = (i) => left + (n <= 1 ? pw : (pw * i) / (n - 1));
    for (const s of this.series.values()) {
      g.strokeStyle = s.color;
      g.lineWidth = 2;
      g.beginPath();
      let pen = false;
      s.values.forEach((v, i) => {
        if (v === null) {
          pen = false;
          return;
        }
        const x = xAt(i);
        const y = top + ph - (ph * v) / ymax;
        if (pen) g.lineTo(x, y);
        else g.moveTo(x, y);
        pen = true;
      });
      g.stroke();
    }
    // Legend with latest values.
    g.textBaseline = 'middle';
    g.textAlign = 'left';
    let x = left;
    for (const [name, s] of this.series) {
      const last = s.values[s.values.length - 1];
      const label = `${name} ${last === null || last === undefined ? '–' : this.format(last)}`;
      g.fillStyle = s.color;
      g.fillRect(x, 9, 10, 10);
      g.fillStyle = '#1f2937';
      g.fillText(label, x + 14, 14);
      x += g.measureText(label).width + 30;
    }
    c.setAttribute('aria-label', `${this.title}: ${[...this.series].map(([k, s]) => `${k} ${s.values[s.values.length - 1] ?? '–'}`).join(', ')}`);
  }
}

/**
 * Rates between two cumulative samples: for each key of `pick(sample)`, (b - a) / seconds, never negative (a
 * counter that went down, e.g. after a broker restart, counts as 0).
 */
export function rates(a, b, seconds) {
  const out = {};
  for (const k of Object.keys(b)) out[k] = seconds > 0 && a[k] !== undefined ? Math.max(0, (b[k] - a[k]) / seconds) : 0;
  return out;
}
