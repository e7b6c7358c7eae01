// Connected clients of every protocol: filter by protocol, user, namespace or free text; kick one.
import { api, enc, list } from '../api.js';
import { act, bytes, button, duration, field, h, num, table } from '../dom.js';

export async function render(view) {
  const protocol = h(
    'select',
    ['', 'mqtt', 'kafka', 'amqp', 'nats'].map((p) => h('option', { value: p }, p || 'all')),
  );
  const user = h('input', { placeholder: 'user', size: 12 });
  const ns = h('input', { placeholder: 'namespace', size: 12 });
  const q = h('input', { placeholder: 'client id, address…', size: 20, type: 'search' });
  const auto = h('input', { type: 'checkbox', checked: true });
  const body = h('div');
  const summary = h('p.muted');
  const load = async () => {
    const params = new URLSearchParams();
    if (protocol.value) params.set('protocol', protocol.value);
    if (user.value.trim()) params.set('user', user.value.trim());
    if (ns.value.trim()) params.set('namespace', ns.value.trim());
    if (q.value.trim()) params.set('q', q.value.trim());
    const { items, truncated } = await list(`clients${params.size ? `?${params}` : ''}`);
    summary.textContent = `${items.length}${truncated ? '+' : ''} connection${items.length === 1 ? '' : 's'}`;
    body.replaceChildren(
      table(
        [
          { title: 'Id', get: (c) => String(c.id) },
          { title: 'Protocol', get: (c) => `${c.protocol}${c.listener && c.listener !== c.protocol ? ` (${c.listener})` : ''}` },
          { title: 'Client id', get: (c) => c.clientId ?? '–' },
          { title: 'User', get: (c) => c.user ?? h('span.muted', 'anonymous') },
          { title: 'Namespace', get: (c) => c.namespace ?? 'default' },
          { title: 'Address', get: (c) => (c.remoteAddress ? `${c.remoteAddress}:${c.remotePort ?? ''}` : '–') },
          { title: 'Connected', get: (c) => (c.connectedAt ? duration(Date.now() - Date.parse(c.connectedAt)) : '–') },
          { title: 'Msgs in', cls: 'n', get: (c) => num(c.messagesIn) },
          { title: 'Msgs out', cls: 'n', get: (c) => num(c.messagesOut) },
          { title: 'Bytes in', cls: 'n', get: (c) => bytes(c.bytesIn) },
          { title: 'Bytes out', cls: 'n', get: (c) => bytes(c.bytesOut) },
          {
            title: '',
            get: (c) =>
              button(
                'Kick',
                async () => {
                  if (!confirm(`Disconnect ${c.protocol} client ${c.clientId ?? c.id}?`)) return;
                  if (await act(() => api('DELETE', `clients/${enc(c.id)}`), 'Client disconnected.')) await load().catch(() => undefined);
                },
                'danger small',
              ),
          },
        ],
        items,
        { empty: 'No client is connected.', rowAttrs: (c) => ({ 'data-client': c.clientId ?? c.id }) },
      ),
    );
  };
  const reload = () => act(load);
  for (const el of [protocol, user, ns, q]) el.addEventListener('change', reload);
  view.append(
    h('h1', 'Connections'),
    h(
      'div.toolbar',
      field('Protocol', protocol),
      field('User', user),
      field('Namespace', ns),
      field('Search', q),
      h('label.check', auto, ' refresh every 5 s'),
      button('Refresh', reload),
    ),
    summary,
    body,
  );
  await load();
  const timer = setInterval(() => {
    if (auto.checked) load().catch(() => undefined);
  }, 5000);
  return () => clearInterval(timer);
}
