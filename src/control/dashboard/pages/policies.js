// Policies: the list, and a form to add one or edit one (PUT replaces it). Deny wins over allow; members of
// the group "admins" may do everything.
import { api, enc, list } from '../api.js';
import { act, button, chips, field, h, splitList, table, section } from '../dom.js';

const ACTIONS = ['publish', 'subscribe', 'create', 'delete', 'describe', 'alter', 'admin', 'respond'];

export async function render(view, _params, { session } = {}) {
  const box = h('div');
  const name = h('input#policy-name', { required: true, placeholder: 'sensors-publish' });
  const effect = h('select#policy-effect', h('option', { value: 'allow' }, 'allow'), h('option', { value: 'deny' }, 'deny'));
  const boxes = ACTIONS.map((a) => h('input', { type: 'checkbox', value: a, 'data-action': a }));
  const all = h('input', { type: 'checkbox', value: '*' });
  const resources = h('textarea#policy-resources', { rows: 2, required: true, placeholder: 'topic:sensors/#, stream:orders*' });
  const principals = h('textarea#policy-principals', { rows: 2, required: true, placeholder: 'user:alice, group:ops, everyone' });
  const description = h('input#policy-description');
  const namespace = h('input#policy-namespace', { placeholder: 'empty: every namespace (broker administrators only)' });
  const submit = h('button', { type: 'submit' }, 'Add policy');
  let editing = null;
  const form = h(
    'form.create#policy-form',
    field('Name', name),
    field('Effect', effect),
    h(
      'fieldset.actions',
      h('legend', 'Actions'),
      h('label.check', all, ' all (*)'),
      boxes.map((b) => h('label.check', b, ` ${b.value}`)),
    ),
    field(
      'Resources',
      resources,
      'kind:pattern — kinds topic, stream, queue, exchange, group, transactional-id, cluster, routing-key (exchange:key, denies only); topics take MQTT filters, others exact, prefix*, *, ~regex or !~regex',
    ),
    field('Principals', principals, 'user:NAME, group:NAME or everyone'),
    field('Namespace', namespace, 'scoped to this namespace: applies to its principals only'),
    field('Description', description),
    submit,
    button('Cancel', () => reset(), 'link'),
  );
  const reset = () => {
    editing = null;
    form.reset();
    name.disabled = false;
    submit.textContent = 'Add policy';
  };
  const edit = (p) => {
    editing = p.name;
    name.value = p.name;
    name.disabled = true;
    effect.value = p.effect;
    all.checked = p.actions.includes('*');
    for (const b of boxes) b.checked = p.actions.includes(b.value);
    resources.value = p.resources.join('\n');
    principals.value = p.principals.join('\n');
    description.value = p.description ?? '';
    namespace.value = p.namespace ?? '';
    submit.textContent = `Save policy ${p.name}`;
    form.scrollIntoView({ behavior: 'smooth' });
  };
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const actions = all.checked ? ['*'] : boxes.filter((b) => b.checked).map((b) => b.value);
    const doc = { effect: effect.value, actions, resources: splitList(resources.value), principals: splitList(principals.value) };
    if (description.value.trim()) doc.description = description.value.trim();
    if (namespace.value.trim()) doc.namespace = namespace.value.trim();
    // PUT names the policy in the path; POST in the body.
    const ok = await act(
      () => (editing ? api('PUT', `policies/${enc(editing)}`, doc) : api('POST', 'policies', { name: name.value.trim(), ...doc })),
      editing ? 'Policy saved.' : 'Policy added.',
    );
    if (ok) {
      reset();
      await act(load);
    }
  });

  const load = async () => {
    const { items } = await list('policies');
    box.replaceChildren(
      table(
        [
          { title: 'Name', get: (p) => p.name },
          { title: 'Namespace', get: (p) => p.namespace ?? '*' },
          { title: 'Effect', get: (p) => h('span', { class: `effect ${p.effect}` }, p.effect) },
          { title: 'Actions', get: (p) => chips(p.actions) },
          { title: 'Resources', get: (p) => chips(p.resources) },
          { title: 'Principals', get: (p) => chips(p.principals) },
          { title: 'Source', get: (p) => p.source ?? '–' },
          {
            title: '',
            get: (p) =>
              h(
                'span.actions',
                button('Edit', () => edit(p), 'small'),
                button(
                  'Delete',
                  async () => {
                    if (!confirm(`Delete policy ${p.name}?`)) return;
                    if (await act(() => api('DELETE', `policies/${enc(p.name)}`), 'Policy deleted.')) await act(load);
                  },
                  'danger small',
                ),
              ),
          },
        ],
        items,
        {
          empty: 'No policy: everyone who logs in may do everything (default policy "auto"). The first policy switches to deny-by-default.',
          rowAttrs: (p) => ({ 'data-policy': p.name }),
        },
      ),
    );
  };
  // A namespace administrator's policies are scoped to its namespace: prefilled when it has one.
  const own = session?.admin === false ? (session.adminNamespaces ?? []) : [];
  if (own.length === 1) namespace.value = own[0];
  view.append(h('h1', 'Policies'), box, section('Add or edit a policy', form));
  await load();
}
