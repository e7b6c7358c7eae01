/**
 * The configuration, CLI and metrics references of docs/, made from the tables that define them: the options table
 * (config/index.ts OPTIONS), the command list (cli/commands/index.ts) and the metrics registry (control/metrics.ts
 * createMetrics). `npm run docs` writes them between their markers; test/cli/reference.test.ts fails when a doc no
 * longer says what its table does.
 */
import { envName, formatDefault, OPTIONS } from '../config/index.js';
import { createMetrics } from '../control/index.js';
import { HISTOGRAM_BOUNDS_MS, type HistogramSnapshot } from '../core/index.js';
import { newLogStats } from '../storage/log/index.js';
import { GROUPS, SINGLES } from './commands/index.js';

/** One generated part of a doc: the file, the marker name, and the text between the markers. */
export interface GeneratedPart {
  readonly file: string;
  readonly name: string;
  render(): string;
}

export const GENERATED: readonly GeneratedPart[] = [
  { file: 'docs/configuration.md', name: 'options', render: configReference },
  { file: 'docs/cli.md', name: 'commands', render: cliReference },
  { file: 'docs/cli.md', name: 'metrics', render: metricsReference },
];

/** A table cell: pipes escaped, so that help text cannot end a cell. */
const cell = (s: string): string => s.replace(/\|/g, '\\|');

export function configReference(): string {
  const rows = OPTIONS.map((o) => `| \`--${o.name}\` | \`${envName(o.name)}\` | ${cell(formatDefault(o))} | ${cell(o.help)} |`);
  return ['| option | environment | default | meaning |', '|---|---|---|---|', ...rows].join('\n');
}

export function cliReference(): string {
  const lines: string[] = [
    '| command | what it does |',
    '|---|---|',
    '| `flowmq start [--config FILE] [options]` | run a broker (options: [configuration](configuration.md)) |',
  ];
  for (const g of GROUPS) {
    const aliases = g.aliases?.length ? ` (also \`${g.aliases.join('`, `')}\`)` : '';
    lines.push(`| **\`flowmq ${g.name}\`**${aliases} | ${cell(g.summary)} |`);
    for (const [name, sub] of Object.entries(g.subs)) {
      lines.push(`| \`flowmq ${g.name} ${name}${sub.usage ? ` ${cell(sub.usage)}` : ''}\` | ${cell(sub.summary)} |`);
    }
  }
  for (const [name, sub] of Object.entries(SINGLES)) {
    lines.push(`| \`flowmq ${name}${sub.usage ? ` ${cell(sub.usage)}` : ''}\` | ${cell(sub.summary)} |`);
  }
  lines.push('| `flowmq version` | print the version |');
  return lines.join('\n');
}

/**
 * Every metric the broker can export, read from a registry made with every source present (the sources are never
 * read: metrics are only collected at scrape). prom-client's own process and Node.js set is summed up in one row.
 */
export function metricsReference(): string {
  const none = (): never => {
    throw new Error('a reference registry is never scraped');
  };
  const histogram = { snapshot: (): HistogramSnapshot => none() };
  const metrics = createMetrics({
    clients: { totals: none },
    engine: { stats: { published: 0, delivered: 0, captured: 0, dropped: 0 }, listQueues: none, getQueue: none, listStreams: none },
    log: { stats: newLogStats(), memoryStats: { chunkBytes: 0 } },
    wal: { size: none, commitLatency: histogram },
    storage: { figures: none },
    listeners: new Map(),
    protocols: none,
    auth: { stats: { ok: 0, bad: 0, busy: 0, throttled: 0 }, verifier: { stats: { checked: 0, busy: 0 }, queued: 0 } },
    access: { stats: { denied: 0 } },
    oidc: { stats: { verified: 0, refused: 0, jwksErrors: 0 } },
    quotas: { figures: none, storedBytes: none },
    ready: () => true,
  });
  const own = metrics.registry
    .getMetricsAsArray()
    .map((m) => ({ name: m.name, type: String(m.type), labels: ((m as { labelNames?: string[] }).labelNames ?? []).join(', '), help: m.help }))
    .filter((m) => !/^flowmq_(process_|nodejs_)/.test(m.name))
    .sort((a, b) => a.name.localeCompare(b.name));
  const rows = own.map((m) => `| \`${m.name}\` | ${m.type} | ${m.labels} | ${cell(m.help)} |`);
  rows.push(
    "| `flowmq_process_*`, `flowmq_nodejs_*` | | | prom-client's runtime set: CPU, resident memory, heap spaces, event-loop lag, GC durations, handles |",
  );
  const bounds = `${HISTOGRAM_BOUNDS_MS[0] * 1000} µs`;
  return ['| metric | type | labels | what |', '|---|---|---|---|', ...rows, '', `Histograms have one \`le\` per doubling, from ${bounds} up.`].join('\n');
}

/** A doc's text with the generated part `name` replaced (the markers stay); throws when the markers are missing. */
export function withPart(doc: string, name: string, body: string): string {
  const begin = `<!-- generated:${name} (npm run docs; do not edit by hand) -->`;
  const end = `<!-- /generated:${name} -->`;
  const a = doc.indexOf(begin);
  const b = doc.indexOf(end);
  if (a < 0 || b < a) throw new Error(`markers of "${name}" not found`);
  return `${doc.slice(0, a + begin.length)}\n${body}\n${doc.slice(b)}`;
}
