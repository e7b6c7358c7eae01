// Overview: live rates drawn from successive /api/v1/overview samples (the API answers cumulative counters; a
// rate is the difference of two samples over the time between them), totals, and the broker's health.
import { api } from '../api.js';
import { LineChart, rates } from '../chart.js';
import { bytes, duration, h, num, section } from '../dom.js';

export const INTERVAL_MS = 2000;

function sums(o) {
  const t = { messagesIn: 0, messagesOut: 0, bytesIn: 0, bytesOut: 0 };
  for (const p of o.byProtocol ?? []) {
    t.messagesIn += p.messagesIn ?? 0;
    t.messagesOut += p.messagesOut ?? 0;
    t.bytesIn += p.bytesIn ?? 0;
    t.bytesOut += p.bytesOut ?? 0;
  }
  return t;
}

function byProtocolConnections(o) {
  const out = {};
  for (const p of o.byProtocol ?? []) out[p.protocol] = (out[p.protocol] ?? 0) + (p.connections ?? 0);
  return out;
}

function countOf(v) {
  if (typeof v === 'number') return v;
  if (v && typeof v === 'object') return v.count ?? v.total ?? Object.keys(v).length;
  return null;
}

export async function render(view) {
  const stat = (label, id) => h('div.stat', h('span.value', { id, 'data-stat': id }, '–'), h('span.label', label));
  const stats = h(
    'div.stats',
    stat('Connections', 'stat-connections'),
    stat('Messages in /s', 'stat-in'),
    stat('Messages out /s', 'stat-out'),
    stat('Streams', 'stat-streams'),
    stat('Queues', 'stat-queues'),
    stat('Users', 'stat-users'),
    stat('Policies', 'stat-policies'),
  );
  const canvas = (id) => h('canvas.chart', { id, role: 'img' });
  const msgCanvas = canvas('chart-messages');
  const bytesCanvas = canvas('chart-bytes');
  const connCanvas = canvas('chart-connections');
  const healthBox = h('div.health', h('span.muted', 'checking…'));
  const protoBox = h('div');
  view.append(
    h('h1', 'Overview'),
    stats,
    h('div.charts', section('Messages per second', msgCanvas), section('Bytes per second', bytesCanvas), section('Connections', connCanvas)),
    h('div.two', section('Broker', healthBox), section('By protocol and namespace', protoBox)),
  );
  const msgChart = new LineChart(msgCanvas, { series: ['in', 'out'], title: 'messages per second' });
  const bytesChart = new LineChart(bytesCanvas, {
    series: ['in', 'out'],
    title: 'bytes per second',
    format: (v) => bytes(v),
    tick: (v) => bytes(v),
    base: 1024,
  });
  const connChart = new LineChart(connCanvas, { series: ['total'], title: 'connections', format: (v) => num(Math.round(v)) });

  let prev = null;
  let stopped = false;
  const set = (id, v) => {
    const el = view.querySelector(`#${id}`);
    if (el) el.textContent = v;
  };

  const sample = async () => {
    const o = await api('GET', 'overview');
    const at = typeof o.at === 'number' ? o.at : Date.parse(o.at) || Date.now();
    const cur = { at, totals: sums(o) };
    set('stat-connections', num(o.connections));
    set('stat-streams', num(countOf(o.streams)));
    set('stat-queues', num(countOf(o.queues)));
    set('stat-users', num(countOf(o.users)));
    set('stat-policies', num(countOf(o.policies)));
    connChart.push(at, { total: o.connections ?? 0, ...byProtocolConnections(o) });
    if (prev) {
      const r = rates(prev.totals, cur.totals, (at - prev.at) / 1000);
      msgChart.push(at, { in: r.messagesIn, out: r.messagesOut });
      bytesChart.push(at, { in: r.bytesIn, out: r.bytesOut });
      set('stat-in', num(r.messagesIn));
      set('stat-out', num(r.messagesOut));
    }
    prev = cur;
    protoBox.replaceChildren(
      (o.byProtocol ?? []).length === 0
        ? h('p.empty', 'No traffic yet.')
        : h(
            'table.grid',
            h(
              'thead',
              h(
                'tr',
                ['Protocol', 'Namespace', 'Conns', 'Msgs in', 'Msgs out', 'Bytes in', 'Bytes out'].map((t) => h('th', t)),
              ),
            ),
            h(
              'tbody',
              o.byProtocol.map((p) =>
                h(
                  'tr',
                  h('td', p.protocol),
                  h('td', p.namespace ?? 'default'),
                  h('td.n', num(p.connections)),
                  h('td.n', num(p.messagesIn)),
                  h('td.n', num(p.messagesOut)),
                  h('td.n', bytes(p.bytesIn)),
                  h('td.n', bytes(p.bytesOut)),
                ),
              ),
            ),
          ),
    );
  };

  const healthCheck = async () => {
    const [ready, broker] = await Promise.all([
      fetch('/readyz', { credentials: 'same-origin' }).then(
        (r) => r.ok,
        () => false,
      ),
      api('GET', 'broker').catch(() => null),
    ]);
    const rows = [h('div', h('span', { class: `dot ${ready ? 'ok' : 'bad'}` }), ready ? 'Ready' : 'Not ready')];
    if (broker) {
      const id = broker.id ?? broker.brokerId;
      if (id !== undefined && id !== null) rows.push(h('div', h('span.muted', 'Broker id '), String(id)));
      if (broker.version) rows.push(h('div', h('span.muted', 'Version '), String(broker.version)));
      const up = broker.uptimeMs ?? (typeof broker.uptime === 'number' ? broker.uptime * (broker.uptime < 1e7 ? 1000 : 1) : null);
      if (up !== null) rows.push(h('div', h('span.muted', 'Up '), duration(up)));
      const listeners = broker.listeners;
      if (listeners && typeof listeners === 'object') {
        const where = (v) =>
          v && typeof v === 'object'
            ? `${v.address ?? ''}${v.port !== undefined ? `:${v.port}` : ''}${typeof v.connections === 'number' ? ` (${v.connections})` : ''}`
            : String(v);
        const list = Array.isArray(listeners)
          ? listeners.map((l) => `${l.name ?? l.protocol ?? ''} ${where(l)}`.trim())
          : Object.entries(listeners).map(([k, v]) => `${k} ${where(v)}`);
        rows.push(
          h(
            'div',
            h('span.muted', 'Listeners '),
            h(
              'span.chips',
              list.map((l) => h('span.chip', l)),
            ),
          ),
        );
      }
    }
    healthBox.replaceChildren(...rows);
  };

  await Promise.all([sample(), healthCheck().catch(() => undefined)]);
  let ticks = 0;
  const timer = setInterval(() => {
    if (stopped) return;
    sample().catch(() => undefined);
    if (++ticks % 5 === 0) healthCheck().catch(() => undefined);
  }, INTERVAL_MS);
  return () => {
    stopped = true;
    clearInterval(timer);
    msgChart.destroy();
    bytesChart.destroy();
    connChart.destroy();
  };
}
