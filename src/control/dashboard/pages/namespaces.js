// Namespaces (the unit of isolation: AMQP virtual hosts, NATS accounts) with their quotas and usage.
import { api, enc, list } from '../api.js';
import { act, button, bytes, field, h, num, section, table } from '../dom.js';

const QUOTAS = [
  ['maxConnections', 'Max connections', num],
  ['publishRate', 'Publish rate (msg/s)', num],
  ['bytesInRate', 'Bytes in /s', bytes],
  ['bytesOutRate', 'Bytes out /s', bytes],
  ['maxStorageBytes', 'Storage', bytes],
];

export async function render(view) {
  const box = h('div');
  const load = async () => {
    const { items } = await list('namespaces');
    box.replaceChildren(
      table(
        [
          { title: 'Name', get: (n) => n.name },
          { title: 'Description', get: (n) => n.description ?? '' },
          ...QUOTAS.map(([k, title, fmt]) => ({
            title,
            cls: 'n',
            get: (n) => (n.quotas?.[k] === undefined || n.quotas?.[k] === null ? h('span.muted', 'none') : fmt(n.quotas[k])),
          })),
          { title: 'Usage', get: (n) => usage(n.usage, n.quotas) },
          {
            title: '',
            get: (n) =>
              h(
                'span.actions',
                button('Quotas', () => edit(n), 'small'),
                n.name === 'default'
                  ? null
                  : button(
                      'Delete',
                      async () => {
                        if (!confirm(`Delete namespace ${n.name}?`)) return;
                        if (await act(() => api('DELETE', `namespaces/${enc(n.name)}`), 'Namespace deleted.')) await act(load);
                      },
                      'danger small',
                    ),
              ),
          },
        ],
        items,
        { empty: 'Only the default namespace exists.', rowAttrs: (n) => ({ 'data-namespace': n.name }) },
      ),
    );
  };
  const name = h('input#namespace-name', { required: true });
  const description = h('input');
  const inputs = Object.fromEntries(QUOTAS.map(([k]) => [k, h('input', { type: 'number', min: 0, placeholder: 'none' })]));
  const submit = h('button', { type: 'submit' }, 'Add namespace');
  let editing = null;
  const form = h(
    'form.create',
    field('Name', name),
    field('Description', description),
    QUOTAS.map(([k, title]) => field(title, inputs[k])),
    submit,
  );
  const edit = (n) => {
    editing = n.name;
    name.value = n.name;
    name.disabled = true;
    description.value = n.description ?? '';
    for (const [k] of QUOTAS) inputs[k].value = n.quotas?.[k] ?? '';
    submit.textContent = `Save ${n.name}`;
  };
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const quotas = {};
    for (const [k] of QUOTAS) if (inputs[k].value !== '') quotas[k] = Number(inputs[k].value);
    const doc = { quotas };
    if (description.value.trim()) doc.description = description.value.trim();
    const ok = editing
      ? await act(() => api('PATCH', `namespaces/${enc(editing)}`, doc), 'Quotas saved.')
      : await act(() => api('POST', 'namespaces', { name: name.value.trim(), ...doc }), 'Namespace added.');
    if (ok) {
      editing = null;
      name.disabled = false;
      submit.textContent = 'Add namespace';
      form.reset();
      await act(load);
    }
  });
  view.append(h('h1', 'Namespaces'), box, section('Add a namespace or change quotas', form));
  await load();
}

// Usage: connections and users, messages and bytes in/out, bytes stored (hot tier + objects) against the storage
// quota, and what the quotas refused or held back; any other figure the API adds is shown as it comes.
const SHOWN = new Set(['users', 'connections', 'messagesIn', 'messagesOut', 'bytesIn', 'bytesOut', 'storedBytes', 'storedHotBytes', 'storedObjectBytes']);

function usage(u, quotas) {
  if (!u || typeof u !== 'object') return h('span.muted', '–');
  const n = (k) => (typeof u[k] === 'number' ? u[k] : 0);
  const max = quotas?.maxStorageBytes;
  const chips = [
    `connections ${num(n('connections'))}`,
    `users ${num(n('users'))}`,
    `msgs in ${num(n('messagesIn'))} / out ${num(n('messagesOut'))}`,
    `bytes in ${bytes(n('bytesIn'))} / out ${bytes(n('bytesOut'))}`,
    `stored ${bytes(n('storedBytes'))}${typeof max === 'number' ? ` of ${bytes(max)}` : ''} (hot ${bytes(n('storedHotBytes'))}, objects ${bytes(n('storedObjectBytes'))})`,
    ...Object.entries(u)
      .filter(([k, v]) => !SHOWN.has(k) && typeof v === 'number' && v > 0)
      .map(([k, v]) => `${k} ${num(v)}`),
  ];
  return h(
    'span.chips',
    chips.map((c) => h('span.chip', c)),
  );
}
