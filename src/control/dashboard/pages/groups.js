// Consumer groups (Kafka groups, JetStream durable consumers): state, members, lag; one group's members and
// offsets per partition, offset reset (the group must be empty) and delete.
import { api, enc, list } from '../api.js';
import { act, button, field, h, num, section, table } from '../dom.js';

export async function render(view, params) {
  if (params[0] !== undefined) return detail(view, params[0]);
  const { items } = await list('consumer-groups');
  view.append(
    h('h1', 'Consumer groups'),
    table(
      [
        { title: 'Name', get: (g) => h('a', { href: `#/groups/${enc(g.name)}` }, g.name) },
        { title: 'Protocol', get: (g) => g.protocol },
        { title: 'State', get: (g) => h('span', { class: `state ${String(g.state).toLowerCase()}` }, g.state) },
        { title: 'Members', cls: 'n', get: (g) => num(g.members) },
        { title: 'Lag', cls: 'n', get: (g) => num(g.lag) },
      ],
      items,
      { empty: 'No consumer group.', rowAttrs: (g) => ({ 'data-group': g.name }) },
    ),
  );
}

async function detail(view, name) {
  const g = await api('GET', `consumer-groups/${enc(name)}`);
  const streams = [...new Set((g.offsets ?? []).map((o) => o.stream))];
  const stream = h(
    'select',
    streams.map((s) => h('option', { value: s }, s)),
  );
  const to = h(
    'select',
    ['earliest', 'latest', 'offset', 'timestamp'].map((t) => h('option', { value: t }, t)),
  );
  const at = h('input', { placeholder: 'offset, or time (2026-01-01T00:00:00Z)' });
  const form = h('form.create', field('Stream', stream), field('Reset to', to), field('Offset / time', at), h('button', { type: 'submit' }, 'Reset offsets'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const req = { stream: stream.value, to: to.value };
    if (to.value === 'offset') req.offset = Number(at.value);
    if (to.value === 'timestamp') req.timestamp = /^\d+$/.test(at.value) ? Number(at.value) : Date.parse(at.value);
    if (!confirm(`Move the offsets of group ${name} on ${stream.value} to ${to.value}?`)) return;
    if (await act(() => api('POST', `consumer-groups/${enc(name)}/reset`, req), 'Offsets reset.')) location.reload();
  });
  view.append(
    h('p.crumbs', h('a', { href: '#/groups' }, 'Consumer groups'), ' / ', name),
    h('h1', name),
    h(
      'div.toolbar',
      h('span', 'Protocol: ', h('b', g.protocol)),
      h('span', 'State: ', h('b', g.state)),
      h('span', 'Members: ', h('b', num(g.members))),
      h('span', 'Lag: ', h('b', num(g.lag))),
      button(
        'Delete group',
        async () => {
          if (!confirm(`Delete group ${name} and its committed offsets?`)) return;
          if (await act(() => api('DELETE', `consumer-groups/${enc(name)}`), 'Group deleted.')) location.hash = '#/groups';
        },
        'danger',
      ),
    ),
    section(
      'Members',
      table(
        [
          { title: 'Member', get: (m) => m.id },
          { title: 'Client id', get: (m) => m.clientId },
          { title: 'Host', get: (m) => m.host },
          { title: 'Assignments', get: (m) => (m.assignments ?? []).map((a) => `${a.stream}[${a.partition}]`).join(', ') || '–' },
        ],
        g.memberDetails ?? [],
        { empty: 'No member: the group is empty.' },
      ),
    ),
    section(
      'Offsets',
      table(
        [
          { title: 'Stream', get: (o) => h('a', { href: `#/streams/${enc(o.stream)}` }, o.stream) },
          { title: 'Partition', cls: 'n', get: (o) => String(o.partition) },
          { title: 'Committed', cls: 'n', get: (o) => num(o.committed) },
          { title: 'End', cls: 'n', get: (o) => num(o.end) },
          { title: 'Lag', cls: 'n', get: (o) => num(o.lag) },
        ],
        g.offsets ?? [],
        { empty: 'No committed offset.' },
      ),
    ),
    streams.length ? section('Reset offsets', h('p.muted', 'Only an empty group (no member) can be reset.'), form) : null,
  );
}
