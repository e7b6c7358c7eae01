/**
 * The soak run's chart: an SVG of five panels (throughput, p99 latency, RSS, event-loop lag p99, handles) over time,
 * rendered to PNG by headless Chromium through playwright-core (the browser the dashboard tests already use:
 * Debian's /usr/bin/chromium, or CHROMIUM_PATH), so no native canvas module is needed.
 */
import { writeFile } from 'node:fs/promises';
import { chromium } from 'playwright-core';
import type { SoakSample } from './soak.js';

const PANELS: Array<{ key: keyof SoakSample; title: string; color: string }> = [
  { key: 'throughput', title: 'throughput (msg/s, all protocols)', color: '#1f77b4' },
  { key: 'p99Ms', title: 'p99 latency (ms)', color: '#d62728' },
  { key: 'rssMib', title: 'broker RSS (MiB)', color: '#2ca02c' },
  { key: 'lagP99Ms', title: 'event-loop lag p99 (ms)', color: '#9467bd' },
  { key: 'handles', title: 'active handles', color: '#ff7f0e' },
];

const W = 900;
const PANEL_H = 150;
const PAD = { left: 70, right: 20, top: 28, bottom: 22 };

export function soakSvg(samples: SoakSample[], title: string): string {
  const h = PANELS.length * PANEL_H + 40;
  const tMax = Math.max(1, ...samples.map((s) => s.t));
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${h}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15">${escape(title)}</text>`,
  ];
  PANELS.forEach((p, i) => {
    const y0 = 40 + i * PANEL_H;
    const plotW = W - PAD.left - PAD.right;
    const plotH = PANEL_H - PAD.top - PAD.bottom;
    const values = samples.map((s) => Number(s[p.key]));
    const vMax = Math.max(1e-9, ...values) * 1.1;
    const x = (t: number): number => PAD.left + (t / tMax) * plotW;
    const y = (v: number): number => y0 + PAD.top + plotH - (v / vMax) * plotH;
    parts.push(`<text x="${PAD.left}" y="${y0 + 18}" font-weight="bold">${escape(p.title)}</text>`);
    parts.push(`<rect x="${PAD.left}" y="${y0 + PAD.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#ccc"/>`);
    for (const frac of [0, 0.5, 1]) {
      parts.push(`<text x="${PAD.left - 6}" y="${y(vMax * frac) + 4}" text-anchor="end" fill="#555">${fmt(vMax * frac)}</text>`);
    }
    parts.push(`<text x="${PAD.left + plotW}" y="${y0 + PANEL_H - 6}" text-anchor="end" fill="#555">${tMax} s</text>`);
    const pts = samples.map((s) => `${x(s.t).toFixed(1)},${y(Number(s[p.key])).toFixed(1)}`).join(' ');
    parts.push(`<polyline points="${pts}" fill="none" stroke="${p.color}" stroke-width="2"/>`);
  });
  parts.push('</svg>');
  return parts.join('\n');
}

function fmt(v: number): string {
  return v >= 100 ? v.toFixed(0) : v.toFixed(1);
}

function escape(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
}

/** Writes the chart as SVG (`<out>.svg`) and PNG (`out`). */
export async function writeSoakChart(samples: SoakSample[], title: string, out: string): Promise<void> {
  const svg = soakSvg(samples, title);
  await writeFile(out.replace(/\.png$/, '') + '.svg', svg);
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage({ viewport: { width: W, height: PANELS.length * PANEL_H + 40 } });
    await page.setContent(`<html><body style="margin:0">${svg}</body></html>`);
    await page.screenshot({ path: out, fullPage: true });
  } finally {
    await browser.close();
  }
}
