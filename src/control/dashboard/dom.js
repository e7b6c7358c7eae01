// Small DOM helpers. Everything the API answers goes into the page as text (textContent), never as HTML, so a
// message value, a client id or a stream name cannot inject markup or script.

/**
 * h('tag.class#id', {attr: value, onclick: fn}, ...children): an element. Children are nodes, strings (text)
 * or arrays of those; null/undefined/false are skipped.
 */
export function h(spec, attrs, ...children) {
  const m = /^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i.exec(spec);
  const el = document.createElement(m && m[1] ? m[1] : 'div');
  if (m && m[2]) {
    for (const part of m[2].match(/[.#][\w-]+/g)) {
      if (part[0] === '.') el.classList.add(part.slice(1));
      else el.id = part.slice(1);
    }
  }
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = Boolean(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/**
 * A table: columns [{title, get(row) → node|string, cls?}], rows; `empty` is shown when there are none.
 * `rowAttrs(row)` adds attributes to each <tr> (data-* for tests).
 */
export function table(columns, rows, { empty = 'Nothing here yet.', rowAttrs } = {}) {
  if (rows.length === 0) return h('p.empty', empty);
  return h(
    'table.grid',
    h(
      'thead',
      h(
        'tr',
        columns.map((c) => h('th', { class: c.cls }, c.title)),
      ),
    ),
    h(
      'tbody',
      rows.map((r) =>
        h(
          'tr',
          rowAttrs ? rowAttrs(r) : null,
          columns.map((c) => h('td', { class: c.cls }, c.get(r))),
        ),
      ),
    ),
  );
}

const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 || Number.isInteger(v) ? Math.round(v) : v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

export function num(n) {
  if (n === null || n === undefined || Number.isNaN(Number(n))) return '–';
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: 2 });
}

/** 93784000 → "1d 2h 3m". */
export function duration(ms) {
  if (ms === null || ms === undefined) return '–';
  let s = Math.floor(Number(ms) / 1000);
  const parts = [];
  for (const [unit, size] of [
    ['d', 86400],
    ['h', 3600],
    ['m', 60],
  ]) {
    if (s >= size) {
      parts.push(`${Math.floor(s / size)}${unit}`);
      s %= size;
    }
  }
  if (parts.length === 0 || (parts.length === 1 && s > 0)) parts.push(`${s}s`);
  return parts.slice(0, 3).join(' ');
}

/** 604800000 → "7d", 5400000 → "90m": the shortest exact spelling the API's duration parser reads back. */
export function durationSpec(ms) {
  if (ms === null || ms === undefined) return '';
  for (const [unit, size] of [
    ['d', 86400000],
    ['h', 3600000],
    ['m', 60000],
    ['s', 1000],
  ])
    if (ms % size === 0) return `${ms / size}${unit}`;
  return String(ms);
}

/** "tailBytes" → "tail bytes". */
export function words(key) {
  return String(key)
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase();
}

export function time(v) {
  if (v === null || v === undefined || v === '') return '–';
  const d = new Date(typeof v === 'number' ? v : String(v));
  return Number.isNaN(d.getTime())
    ? String(v)
    : d
        .toISOString()
        .replace('T', ' ')
        .replace(/\.\d+Z$/, 'Z');
}

/** A list of strings as small chips. */
export function chips(list) {
  if (!list || list.length === 0) return h('span.muted', '–');
  return h(
    'span.chips',
    list.map((x) => h('span.chip', String(x))),
  );
}

let flashTimer = null;
/** A message at the top of the page; errors stay until the next one, notices go after a few seconds. */
export function flash(message, kind = 'error') {
  const el = document.getElementById('flash');
  el.textContent = message;
  el.className = `flash ${kind}`;
  el.hidden = false;
  clearTimeout(flashTimer);
  if (kind !== 'error') flashTimer = setTimeout(() => (el.hidden = true), 4000);
}

export function clearFlash() {
  const el = document.getElementById('flash');
  if (el) el.hidden = true;
}

/** Runs an action from a button; shows its error instead of throwing, returns whether it worked. */
export async function act(fn, done) {
  try {
    await fn();
    if (done) flash(done, 'notice');
    return true;
  } catch (err) {
    // A 401 has already put the login form up, which says why.
    if (err.status !== 401) flash(err.message || String(err));
    return false;
  }
}

/** Splits a textarea/input of names or filters (commas, spaces or new lines) into a list. */
export function splitList(text) {
  return String(text ?? '')
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
}

export function field(label, input, hint) {
  return h('label.field', h('span.label', label), input, hint ? h('small.hint', hint) : null);
}

export function button(text, onclick, cls = '') {
  return h(`button${cls ? `.${cls.split(' ').join('.')}` : ''}`, { type: 'button', onclick }, text);
}

export function section(title, ...body) {
  return h('section.card', h('h2', title), ...body);
}
