// Cluster mode: every registered broker (alive, leaving or dead, lease remaining, endpoints, what each owns) and the
// owner rows of partitions, queues, consumer groups, JetStream consumers and MQTT sessions, from GET /api/v1/cluster
// (the shared store's view, refreshed every 2 s: a failover is watched as it happens).
import { api } from '../api.js';
import { duration, field, h, num, section, table } from '../dom.js';

const KINDS = ['partition', 'queue', 'group', 'consumer', 'session', 'txn'];

function state(b) {
  return !b.alive ? 'dead' : b.leaving ? 'leaving' : 'alive';
}

function endpoints(e) {
  return Object.entries(e ?? {})
    .map(([name, a]) => `${name} ${a.host}:${a.port}`)
    .join(', ');
}

export async function render(view) {
  const kind = h(
    'select#cluster-kind',
    h('option', { value: '' }, 'every kind'),
    KINDS.map((k) => h('option', { value: k }, k)),
  );
  const body = h('div#cluster-body');
  view.append(h('h1', 'Cluster'), body);

  const load = async () => {
    const q = new URLSearchParams({ limit: '500' });
    if (kind.value) q.set('kind', kind.value);
    const s = await api('GET', `cluster?${q}`);
    if (!s.enabled) {
      body.replaceChildren(h('p.empty#cluster-off', 'This broker does not run in cluster mode (flowmq start --cluster).'));
      return;
    }
    const now = Date.now();
    const alive = s.brokers.filter((b) => b.alive).length;
    body.replaceChildren(
      h('p.summary', `${alive} alive of ${s.brokers.length} registered; lease ${duration(s.leaseMs)}; answered by broker ${s.broker}.`),
      section(
        'Brokers',
        table(
          [
            { title: 'Broker', get: (b) => `${b.id}${b.self ? ' (this one)' : ''}` },
            { title: 'State', get: (b) => h('span', { class: `dot ${b.alive && !b.leaving ? 'ok' : 'bad'}` }, state(b)) },
            { title: 'Lease', cls: 'n', get: (b) => (b.alive ? duration(b.leaseRemainingMs) : `expired ${duration(-b.leaseRemainingMs)} ago`) },
            { title: 'Up', cls: 'n', get: (b) => duration(now - b.startedAt) },
            ...KINDS.map((k) => ({ title: `${k}s`, cls: 'n', get: (b) => num(b.owned?.[k] ?? 0) })),
            { title: 'Endpoints', get: (b) => endpoints(b.endpoints) },
          ],
          s.brokers,
          { empty: 'No broker registered.', rowAttrs: (b) => ({ 'data-broker': b.id, 'data-state': state(b) }) },
        ),
      ),
      section(
        'Owners',
        h('div.toolbar', field('Kind', kind)),
        table(
          [
            { title: 'Kind', get: (o) => o.kind },
            { title: 'Name', get: (o) => o.name },
            { title: 'Owner', get: (o) => (o.owner === null ? 'released' : o.alive ? String(o.owner) : `${o.owner} (dead)`) },
            { title: 'Epoch', cls: 'n', get: (o) => num(o.epoch) },
            { title: 'Since', cls: 'n', get: (o) => `${duration(now - o.since)} ago` },
            { title: 'Placement', get: (o) => (o.placement === null ? '–' : String(o.placement)) },
          ],
          s.owners.items,
          { empty: 'No owner rows.', rowAttrs: (o) => ({ 'data-kind': o.kind, 'data-owner': o.owner ?? '' }) },
        ),
        s.owners.next ? h('p.hint', 'Only the first 500 rows are shown: `flowmq cluster owners` lists them all.') : null,
      ),
    );
  };
  kind.addEventListener('change', () => void load().catch(() => undefined));
  await load();
  const timer = setInterval(() => void load().catch(() => undefined), 2000);
  return () => clearInterval(timer);
}
