// Users (add, change password, groups and namespace, delete), groups, and API tokens.
import { api, enc, list } from '../api.js';
import { act, button, chips, field, h, section, splitList, table, time } from '../dom.js';

export async function render(view) {
  const usersBox = h('div');
  const groupsBox = h('div');
  const tokensBox = h('div');
  const nameOf = (u) => u.username ?? u.name;
  const load = async () => {
    // Groups of users are the broker's: a namespace administrator is refused them (403) and sees the page without.
    const [users, groups, tokens] = await Promise.all([
      list('users'),
      list('groups').catch((e) => (e.status === 403 ? null : Promise.reject(e))),
      list('tokens').catch(() => ({ items: [] })),
    ]);
    usersBox.replaceChildren(
      table(
        [
          { title: 'Name', get: (u) => nameOf(u) },
          { title: 'Groups', get: (u) => chips(u.groups) },
          { title: 'Namespace', get: (u) => u.namespace ?? 'default' },
          { title: 'Source', get: (u) => u.source ?? '–' },
          { title: 'Created', get: (u) => time(u.createdAt) },
          {
            title: '',
            get: (u) =>
              h(
                'span.actions',
                button(
                  'Password',
                  async () => {
                    const password = prompt(`New password for ${nameOf(u)}:`);
                    if (password) await act(() => api('PATCH', `users/${enc(nameOf(u))}`, { password }), 'Password changed.');
                  },
                  'small',
                ),
                button(
                  'Groups',
                  async () => {
                    const g = prompt(`Groups of ${nameOf(u)} (comma separated):`, (u.groups ?? []).join(', '));
                    if (g !== null && (await act(() => api('PATCH', `users/${enc(nameOf(u))}`, { groups: splitList(g) }), 'Groups changed.'))) await act(load);
                  },
                  'small',
                ),
                button(
                  'Namespace',
                  async () => {
                    const n = prompt(`Namespace of ${nameOf(u)}:`, u.namespace ?? 'default');
                    if (n && (await act(() => api('PATCH', `users/${enc(nameOf(u))}`, { namespace: n.trim() }), 'Namespace changed.'))) await act(load);
                  },
                  'small',
                ),
                button(
                  'Delete',
                  async () => {
                    if (!confirm(`Delete user ${nameOf(u)} (and their API tokens)?`)) return;
                    if (await act(() => api('DELETE', `users/${enc(nameOf(u))}`), 'User deleted.')) await act(load);
                  },
                  'danger small',
                ),
              ),
          },
        ],
        users.items,
        { empty: 'No user: anyone on this machine may administer the broker until the first one is created.', rowAttrs: (u) => ({ 'data-user': nameOf(u) }) },
      ),
    );
    groupsBox.replaceChildren(
      groups === null
        ? h('p.muted', "Groups of users are the broker's: its administrators manage them.")
        : table(
            [
              { title: 'Name', get: (g) => g.name },
              { title: 'Description', get: (g) => g.description ?? '' },
              {
                title: '',
                get: (g) =>
                  button(
                    'Delete',
                    async () => {
                      if (!confirm(`Delete group ${g.name}?`)) return;
                      if (await act(() => api('DELETE', `groups/${enc(g.name)}`), 'Group deleted.')) await act(load);
                    },
                    'danger small',
                  ),
              },
            ],
            groups.items,
            { empty: 'No group. (Members of "admins" may do everything.)' },
          ),
    );
    tokensBox.replaceChildren(
      table(
        [
          { title: 'Id', get: (t) => h('code', t.id) },
          { title: 'User', get: (t) => t.user },
          { title: 'Description', get: (t) => t.description ?? '' },
          { title: 'Expires', get: (t) => (t.expiresAt ? time(t.expiresAt) : 'never') },
          {
            title: '',
            get: (t) =>
              button(
                'Revoke',
                async () => {
                  if (!confirm(`Revoke token ${t.id}?`)) return;
                  if (await act(() => api('DELETE', `tokens/${enc(t.id)}`), 'Token revoked.')) await act(load);
                },
                'danger small',
              ),
          },
        ],
        tokens.items,
        { empty: 'No API token.' },
      ),
    );
  };

  const uname = h('input#user-name', { required: true, autocomplete: 'off' });
  const upass = h('input#user-password', { type: 'password', required: true, autocomplete: 'new-password' });
  const ugroups = h('input#user-groups', { placeholder: 'admins, operators' });
  const uns = h('input#user-namespace', { placeholder: 'default' });
  const userForm = h(
    'form.create#user-create',
    field('Name', uname),
    field('Password', upass),
    field('Groups', ugroups),
    field('Namespace', uns),
    h('button', { type: 'submit' }, 'Add user'),
  );
  userForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const req = { username: uname.value.trim(), password: upass.value, groups: splitList(ugroups.value) };
    if (uns.value.trim()) req.namespace = uns.value.trim();
    if (await act(() => api('POST', 'users', req), `User ${req.username} added.`)) {
      userForm.reset();
      await act(load);
    }
  });

  const gname = h('input', { required: true });
  const gdesc = h('input');
  const groupForm = h('form.create', field('Name', gname), field('Description', gdesc), h('button', { type: 'submit' }, 'Add group'));
  groupForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const req = { name: gname.value.trim() };
    if (gdesc.value.trim()) req.description = gdesc.value.trim();
    if (await act(() => api('POST', 'groups', req), 'Group added.')) {
      groupForm.reset();
      await act(load);
    }
  });

  const tdesc = h('input', { placeholder: 'CI deploys' });
  const tttl = h('input', { placeholder: '30d (empty: never expires)' });
  const tokenOut = h('div');
  const tokenForm = h('form.create', field('Description', tdesc), field('Expires after', tttl), h('button', { type: 'submit' }, 'Create token'), tokenOut);
  tokenForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const req = {};
    if (tdesc.value.trim()) req.description = tdesc.value.trim();
    if (tttl.value.trim()) req.ttl = tttl.value.trim();
    await act(async () => {
      const t = await api('POST', 'tokens', req);
      tokenOut.replaceChildren(h('p.notice', 'Copy it now, it is not shown again: ', h('code.secret', t.token)));
      await load();
    });
  });

  view.append(
    h('h1', 'Users'),
    usersBox,
    section('Add a user', userForm),
    h('div.two', section('Groups', groupsBox, groupForm), section('API tokens', tokensBox, tokenForm)),
  );
  await load();
}
