// Queues with their depth (ready and unacknowledged messages, consumers), purge and delete; exchanges and
// bindings as the AMQP side sees them.
import { api, enc, list } from '../api.js';
import { act, button, bytes, chips, field, h, num, section, table } from '../dom.js';

export async function render(view) {
  const queuesBox = h('div');
  const exchangesBox = h('div');
  const load = async () => {
    const { items } = await list('queues');
    queuesBox.replaceChildren(
      table(
        [
          { title: 'Name', get: (q) => q.name },
          { title: 'Durable', get: (q) => (q.durable ? 'yes' : 'no') },
          { title: 'Ready', cls: 'n', get: (q) => num(q.messages ?? q.ready) },
          { title: 'Unacked', cls: 'n', get: (q) => num(q.unacked) },
          { title: 'Consumers', cls: 'n', get: (q) => num(q.consumers) },
          { title: 'Depth', get: (q) => bar(q.messages ?? 0, q.unacked ?? 0) },
          { title: 'Bytes', cls: 'n', get: (q) => bytes(q.bytes) },
          {
            title: 'Flags',
            get: (q) => chips([q.exclusive ? 'exclusive' : null, q.autoDelete ? 'auto-delete' : null, ...Object.keys(q.arguments ?? {})].filter(Boolean)),
          },
          {
            title: '',
            get: (q) =>
              h(
                'span.actions',
                button(
                  'Purge',
                  async () => {
                    if (!confirm(`Remove every ready message of queue ${q.name}?`)) return;
                    if (await act(() => api('POST', `queues/${enc(q.name)}/purge`), 'Queue purged.')) await act(load);
                  },
                  'small',
                ),
                button(
                  'Delete',
                  async () => {
                    if (!confirm(`Delete queue ${q.name}?`)) return;
                    if (await act(() => api('DELETE', `queues/${enc(q.name)}`), 'Queue deleted.')) await act(load);
                  },
                  'danger small',
                ),
              ),
          },
        ],
        items,
        { empty: 'No queue yet.', rowAttrs: (q) => ({ 'data-queue': q.name }) },
      ),
    );
    const ex = await list('exchanges').catch(() => ({ items: [] }));
    exchangesBox.replaceChildren(
      table(
        [
          { title: 'Name', get: (x) => (x.name === '' ? h('span.muted', '(default)') : x.name) },
          { title: 'Type', get: (x) => x.type ?? '–' },
          { title: 'Durable', get: (x) => (x.durable === undefined ? '–' : x.durable ? 'yes' : 'no') },
        ],
        ex.items,
        { empty: 'No exchange.' },
      ),
    );
  };
  const name = h('input#queue-name', { required: true, placeholder: 'jobs' });
  const durable = h('input', { type: 'checkbox', checked: true });
  const form = h('form.create', field('Name', name), h('label.check', durable, ' durable'), h('button', { type: 'submit' }, 'Create queue'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (await act(() => api('POST', 'queues', { name: name.value.trim(), durable: durable.checked }), 'Queue created.')) {
      form.reset();
      await act(load);
    }
  });
  view.append(h('h1', 'Queues'), queuesBox, h('div.two', section('Create a queue', form), section('Exchanges', exchangesBox)));
  await load();
  const timer = setInterval(() => load().catch(() => undefined), 5000);
  return () => clearInterval(timer);
}

/** A depth bar: ready (solid) and unacked (light), scaled logarithmically so 10 and 10,000 both show. */
function bar(ready, unacked) {
  const total = ready + unacked;
  const width = total === 0 ? 0 : Math.min(100, 12 * Math.log10(total + 1) + 4);
  const el = h('span.bar', h('span.ready'), h('span.unacked'));
  el.firstChild.style.width = `${total ? (width * ready) / total : 0}%`;
  el.lastChild.style.width = `${total ? (width * unacked) / total : 0}%`;
  el.title = `${ready} ready, ${unacked} unacked`;
  return el;
}
