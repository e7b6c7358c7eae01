// Broker health: liveness and readiness as a load balancer sees them, the broker's status and figures, and the
// log level changed at run time.
import { api } from '../api.js';
import { act, button, field, h, section } from '../dom.js';

async function probe(path) {
  try {
    const r = await fetch(path, { credentials: 'same-origin' });
    return { ok: r.ok, status: r.status, text: await r.text() };
  } catch (err) {
    return { ok: false, status: 0, text: err.message };
  }
}

export async function render(view) {
  const [live, ready, broker, level] = await Promise.all([probe('/healthz'), probe('/readyz'), api('GET', 'broker'), api('GET', 'log-level').catch(() => null)]);
  const row = (name, r) => h('div.probe', h('span', { class: `dot ${r.ok ? 'ok' : 'bad'}` }), h('b', name), ` ${r.status || 'no answer'} `, h('code', r.text.slice(0, 200)));
  const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace'];
  const sel = h('select#log-level', levels.map((l) => h('option', { value: l, selected: level?.level === l }, l)));
  view.append(
    h('h1', 'Health'),
    h('div.two', section('Probes', row('/healthz', live), row('/readyz', ready)), section('Log level', field('Level', sel), button('Apply', () => act(() => api('PUT', 'log-level', { level: sel.value }), `Log level set to ${sel.value}.`)))),
    section('Broker status', h('pre.json', JSON.stringify(broker, null, 2))),
  );
}
