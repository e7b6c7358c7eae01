// Streams: the list and a create form (name, partitions, bindings, retention); one stream's partitions with
// offsets, its bindings and retention (changed live), the consumer groups reading it with their lag, and a
// message browser.
import { api, enc, list } from '../api.js';
import { act, button, bytes, chips, duration, durationSpec, field, h, num, section, splitList, table, time, words } from '../dom.js';

function retentionText(s) {
  const ms = s.retentionMs ?? s.retention ?? null;
  return ms === null || ms === undefined ? 'forever' : typeof ms === 'number' ? duration(ms) : String(ms);
}

export async function render(view, params) {
  if (params[0] !== undefined) return detail(view, params[0]);
  const body = h('div');
  const load = async () => {
    const { items, truncated } = await list('streams');
    body.replaceChildren(
      table(
        [
          { title: 'Name', get: (s) => h('a', { href: `#/streams/${enc(s.name)}` }, s.name) },
          { title: 'Partitions', cls: 'n', get: (s) => num(s.partitions) },
          { title: 'Bindings', get: (s) => chips(s.bindings) },
          { title: 'Retention', get: retentionText },
          { title: 'Created', get: (s) => time(s.createdAt) },
        ],
        items,
        { empty: 'No stream yet: create one below.', rowAttrs: (s) => ({ 'data-stream': s.name }) },
      ),
      // replaceChildren would show a null as the text "null".
      ...(truncated ? [h('p.muted', 'Showing the first 1000 streams.')] : []),
    );
  };

  const name = h('input#stream-name', { name: 'name', required: true, placeholder: 'orders', pattern: '[^\\s]+' });
  const partitions = h('input#stream-partitions', { name: 'partitions', type: 'number', min: 1, value: '1' });
  const bindings = h('textarea#stream-bindings', { name: 'bindings', rows: 2, placeholder: 'factory/+/telemetry, orders/#' });
  const retention = h('input#stream-retention', { name: 'retention', placeholder: '7d (empty: keep forever)' });
  const form = h(
    'form.create#stream-create',
    field('Name', name),
    field('Partitions', partitions),
    field('Bindings', bindings, 'topic filters, separated by commas or new lines'),
    field('Retention', retention),
    h('button', { type: 'submit' }, 'Create stream'),
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const req = { name: name.value.trim(), partitions: Number(partitions.value) || 1 };
    const b = splitList(bindings.value);
    if (b.length) req.bindings = b;
    if (retention.value.trim()) req.retention = /^\d+$/.test(retention.value.trim()) ? Number(retention.value.trim()) : retention.value.trim();
    if (await act(() => api('POST', 'streams', req), `Stream ${req.name} created.`)) {
      form.reset();
      await act(load);
    }
  });
  view.append(h('h1', 'Streams'), body, section('Create a stream', form));
  await load();
}

async function detail(view, name) {
  const s = await api('GET', `streams/${enc(name)}`);
  const stops = [];
  const parts = s.partitionDetails ?? [];
  const partsTable = h('div');
  const showParts = (p) =>
    partsTable.replaceChildren(
      table(
        [
          { title: 'Partition', cls: 'n', get: (r) => String(r.partition) },
          { title: 'Log start', cls: 'n', get: (r) => num(r.logStartOffset) },
          { title: 'High watermark', cls: 'n', get: (r) => num(r.highWatermark) },
          {
            title: 'Messages',
            cls: 'n',
            get: (r) => (r.highWatermark !== undefined && r.logStartOffset !== undefined ? num(r.highWatermark - r.logStartOffset) : '–'),
          },
          ...Object.keys(p[0] ?? {})
            .filter((k) => !['partition', 'logStartOffset', 'highWatermark'].includes(k))
            .map((k) => ({
              title: words(k),
              cls: 'n',
              get: (r) => (typeof r[k] !== 'number' ? String(r[k] ?? '–') : /bytes$/i.test(k) ? bytes(r[k]) : num(r[k])),
            })),
        ],
        p,
      ),
    );
  showParts(parts);

  // Bindings and retention, changed live.
  const bindings = h('textarea#edit-bindings', { rows: 2, value: (s.bindings ?? []).join('\n') });
  const retention = h('input#edit-retention', { value: durationSpec(s.retentionMs), placeholder: '7d, 12h or ms; empty: unchanged' });
  const addParts = h('input#edit-partitions', { type: 'number', min: s.partitions, value: String(s.partitions) });
  const settings = h(
    'form.create#stream-settings',
    field('Bindings', bindings, 'topic filters; an empty list unbinds the stream'),
    field('Retention', retention),
    field('Partitions', addParts, 'can only grow'),
    h('button', { type: 'submit' }, 'Save'),
  );
  settings.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const patch = { bindings: splitList(bindings.value) };
    const r = retention.value.trim();
    if (r) patch.retention = /^\d+$/.test(r) ? Number(r) : r;
    if (Number(addParts.value) > s.partitions) patch.partitions = Number(addParts.value);
    if (await act(() => api('PATCH', `streams/${enc(name)}`, patch), 'Stream updated.')) location.reload();
  });

  const groupsBox = h('div', h('span.muted', 'loading…'));
  view.append(
    h('p.crumbs', h('a', { href: '#/streams' }, 'Streams'), ' / ', name),
    h('h1', name),
    h(
      'div.toolbar',
      h('span', 'Partitions: ', h('b', String(s.partitions))),
      h('span', 'Bindings: ', chips(s.bindings)),
      h('span', 'Retention: ', retentionText(s)),
      s.topic ? h('span', 'Topic: ', h('code', s.topic)) : null,
      button('Flush to object store', () =>
        act(async () => showParts((await api('POST', `streams/${enc(name)}/flush`)).partitionDetails ?? parts), 'Flushed.'),
      ),
      button(
        'Delete stream',
        async () => {
          if (!confirm(`Delete stream ${name} and all its messages?`)) return;
          if (await act(() => api('DELETE', `streams/${enc(name)}`), `Stream ${name} deleted.`)) location.hash = '#/streams';
        },
        'danger',
      ),
    ),
    section('Partitions', partsTable),
    section('Messages', browser(name, s, stops)),
    h('div.two', section('Consumer groups', groupsBox), section('Settings', settings)),
  );
  loadGroups(name, groupsBox).catch((e) => groupsBox.replaceChildren(h('p.muted', `Consumer groups unavailable: ${e.message}`)));
  return () => stops.forEach((f) => f());
}

/** The consumer groups with committed offsets on this stream, and their lag per partition. */
async function loadGroups(stream, box) {
  const { items } = await list('consumer-groups', 200);
  const rows = [];
  for (const g of items.slice(0, 50)) {
    const d = await api('GET', `consumer-groups/${enc(g.name)}`).catch(() => null);
    for (const o of d?.offsets ?? []) if (o.stream === stream) rows.push({ group: g.name, ...o });
  }
  box.replaceChildren(
    table(
      [
        { title: 'Group', get: (r) => h('a', { href: `#/groups/${enc(r.group)}` }, r.group) },
        { title: 'Partition', cls: 'n', get: (r) => String(r.partition) },
        { title: 'Committed', cls: 'n', get: (r) => num(r.committed) },
        { title: 'End', cls: 'n', get: (r) => num(r.end) },
        { title: 'Lag', cls: 'n', get: (r) => num(r.lag) },
      ],
      rows,
      { empty: 'No consumer group has offsets on this stream.' },
    ),
  );
}

/** The message browser: a page of messages of one partition from an offset, with older/newer paging. */
function browser(name, s, stops) {
  const parts = s.partitionDetails ?? [];
  const partition = h(
    'select#browse-partition',
    Array.from({ length: s.partitions }, (_, p) => h('option', { value: String(p) }, String(p))),
  );
  const offset = h('input#browse-offset', { type: 'number', min: 0, size: 8 });
  const limit = h(
    'select#browse-limit',
    [10, 20, 50, 100].map((n) => h('option', { value: String(n), selected: n === 20 }, String(n))),
  );
  const out = h('div#browse-results');
  let next = null;

  const known = new Map(parts.map((p) => [p.partition, { ...p }]));
  const bounds = () => {
    const p = Number(partition.value);
    if (!known.has(p)) known.set(p, { partition: p, logStartOffset: 0, highWatermark: 0 });
    return known.get(p);
  };
  const load = async (from) => {
    const n = Number(limit.value);
    const start = Math.max(0, Math.floor(from));
    offset.value = String(start);
    const page = await api('GET', `streams/${enc(name)}/messages?partition=${Number(partition.value)}&offset=${start}&limit=${n}`);
    const items = page.items ?? [];
    // The answer carries the partition's current bounds: "Latest" and "Earliest" follow new messages.
    if (typeof page.highWatermark === 'number') {
      const b = bounds();
      b.highWatermark = page.highWatermark;
      if (typeof page.logStartOffset === 'number') b.logStartOffset = page.logStartOffset;
    }
    next = typeof page.next === 'number' ? page.next : items.length ? items[items.length - 1].offset + 1 : null;
    out.replaceChildren(
      table(
        [
          { title: 'Offset', cls: 'n', get: (m) => String(m.offset) },
          { title: 'Time', get: (m) => time(m.timestamp) },
          { title: 'Key', get: (m) => (m.key === null || m.key === undefined ? h('span.muted', 'null') : value(m.key, m.encoding)) },
          { title: 'Value', get: (m) => value(m.value, m.encoding) },
          {
            title: 'Headers',
            get: (m) =>
              m.headers?.length
                ? h(
                    'span.chips',
                    m.headers.map((x) => h('span.chip', `${x.key}=${x.value ?? ''}`)),
                  )
                : h('span.muted', '–'),
          },
        ],
        items,
        { empty: `No message at offset ${start} or after in partition ${partition.value}.`, rowAttrs: (m) => ({ 'data-offset': String(m.offset) }) },
      ),
    );
  };
  const latest = () => {
    const b = bounds();
    return Math.max(b.logStartOffset ?? 0, (b.highWatermark ?? 0) - Number(limit.value));
  };
  const go = (from) => act(() => load(from));
  // Follow: show the newest messages every 2 s (what a tail -f would show).
  const follow = h('input#browse-follow', { type: 'checkbox' });
  const timer = setInterval(async () => {
    if (!follow.checked || !box.isConnected) return;
    try {
      const head = await api('GET', `streams/${enc(name)}/messages?partition=${Number(partition.value)}&offset=${bounds().highWatermark}&limit=1`);
      if (typeof head.highWatermark === 'number') bounds().highWatermark = head.highWatermark;
      await load(latest());
    } catch {
      // shown on the next manual load
    }
  }, 2000);
  stops.push(() => clearInterval(timer));
  partition.addEventListener('change', () => go(latest()));
  const box = h(
    'div',
    h(
      'div.toolbar',
      field('Partition', partition),
      field('From offset', offset),
      field('Show', limit),
      button('Load', () => go(Number(offset.value) || 0)),
      button('Earliest', () => go(bounds().logStartOffset ?? 0)),
      button('Older', () => go(Number(offset.value) - Number(limit.value))),
      button('Newer', () => go(next ?? Number(offset.value))),
      button('Latest', () => go(latest())),
      h('label.check', follow, ' follow'),
    ),
    out,
  );
  go(latest());
  return box;
}

function value(v, encoding) {
  const text = v === null || v === undefined ? '' : String(v);
  const node = h('span.payload', encoding === 'base64' ? h('span.tag', 'base64') : null, text.length > 300 ? text.slice(0, 300) + '…' : text);
  if (text.length > 300) node.title = text.slice(0, 5000);
  return node;
}
