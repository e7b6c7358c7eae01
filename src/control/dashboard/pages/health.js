// Broker health: liveness and readiness as a load balancer sees them, the broker's status (listeners with their
// connections, routing figures), and the log level changed at run time.
import { api } from '../api.js';
import { act, button, duration, field, h, num, section, table, words } from '../dom.js';

async function probe(path) {
  try {
    const r = await fetch(path, { credentials: 'same-origin' });
    return { ok: r.ok, status: r.status, text: await r.text() };
  } catch (err) {
    return { ok: false, status: 0, text: err.message };
  }
}

/** Numbers and short strings of an object as a definition list (nested objects are left to the raw view). */
function kv(obj) {
  const rows = Object.entries(obj ?? {}).filter(([, v]) => v === null || typeof v !== 'object');
  if (rows.length === 0) return h('p.empty', 'No figures.');
  return h(
    'dl.kv',
    rows.map(([k, v]) => [h('dt', words(k)), h('dd', typeof v === 'number' ? num(v) : String(v))]),
  );
}

export async function render(view) {
  const [live, ready, broker, level] = await Promise.all([
    probe('/healthz'),
    probe('/readyz'),
    api('GET', 'broker'),
    api('GET', 'log-level').catch(() => null),
  ]);
  const row = (name, r) =>
    h('div.probe', h('span', { class: `dot ${r.ok ? 'ok' : 'bad'}` }), h('b', name), ` ${r.status || 'no answer'} `, h('code', r.text.slice(0, 200)));
  const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace'];
  const sel = h(
    'select#log-level',
    levels.map((l) => h('option', { value: l, selected: level?.level === l }, l)),
  );
  const listeners = Object.entries(broker.listeners ?? {}).map(([name, l]) => ({ name, ...(l && typeof l === 'object' ? l : { address: l }) }));
  const up = broker.uptimeMs ?? null;
  view.append(
    h('h1', 'Health'),
    h(
      'div.two',
      section(
        'Probes',
        row('/healthz', live),
        row('/readyz', ready),
        h(
          'dl.kv',
          h('dt', 'version'),
          h('dd', String(broker.version ?? '–')),
          h('dt', 'broker id'),
          h('dd', String(broker.brokerId ?? broker.id ?? '–')),
          h('dt', 'up'),
          h('dd', up === null ? '–' : duration(up)),
        ),
      ),
      section(
        'Log level',
        h(
          'div.toolbar',
          field('Level', sel),
          button('Apply', () => act(() => api('PUT', 'log-level', { level: sel.value }), `Log level set to ${sel.value}.`)),
        ),
      ),
    ),
    section(
      'Listeners',
      table(
        [
          { title: 'Listener', get: (l) => l.name },
          { title: 'Address', get: (l) => `${l.address ?? ''}${l.port !== undefined ? `:${l.port}` : ''}` },
          { title: 'Connections', cls: 'n', get: (l) => num(l.connections) },
        ],
        listeners,
        { empty: 'No listener.' },
      ),
    ),
    h('div.two', section('Routing', kv(broker.stats)), section('Access control', kv(broker.access))),
    section('Broker status', h('details', h('summary', 'Everything GET /api/v1/broker answers'), h('pre.json', JSON.stringify(broker, null, 2)))),
  );
}
