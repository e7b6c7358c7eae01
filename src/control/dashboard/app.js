// The dashboard's shell: the session (login form when there is none), the hash router (#/streams/orders) and
// the navigation. Each page is a module whose render(view, params) fills <main> and may return a function that
// stops its timers when the page is left.
import { api, setCsrfToken, whenUnauthenticated, ApiError } from './api.js';
import { clearFlash, flash, h } from './dom.js';
import * as overview from './pages/overview.js';
import * as connections from './pages/connections.js';
import * as streams from './pages/streams.js';
import * as queues from './pages/queues.js';
import * as groups from './pages/groups.js';
import * as users from './pages/users.js';
import * as policies from './pages/policies.js';
import * as namespaces from './pages/namespaces.js';
import * as health from './pages/health.js';
import * as cluster from './pages/cluster.js';

const PAGES = { overview, connections, streams, queues, groups, users, policies, namespaces, health, cluster };

const view = document.getElementById('view');
/**
 * Whether this browser logged in (not a secret: the session itself is an HttpOnly cookie the page cannot read).
 * Without it the page shows the login form without asking the API, whose 401 may carry a Basic challenge that
 * makes the browser open its own password dialog.
 */
const MARK = 'flowmq.dashboard.session';
const marked = () => {
  try {
    return localStorage.getItem(MARK) === '1';
  } catch {
    return true; // storage disabled: ask the API
  }
};
const mark = (on) => {
  try {
    if (on) localStorage.setItem(MARK, '1');
    else localStorage.removeItem(MARK);
  } catch {
    // storage disabled: nothing to remember
  }
};
let session = null;
let leave = null;
let renderId = 0;

function showLogin(message) {
  session = null;
  mark(false);
  setCsrfToken(null);
  stopPage();
  document.getElementById('nav').hidden = true;
  document.getElementById('who').hidden = true;
  document.body.dataset.state = 'login';
  const form = document.getElementById('login-template').content.firstElementChild.cloneNode(true);
  view.replaceChildren(form);
  const err = form.querySelector('#login-error');
  if (message) {
    err.textContent = message;
    err.hidden = false;
  }
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.hidden = true;
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      const s = await api('POST', 'login', { username: form.username.value, password: form.password.value });
      mark(true);
      startSession(s);
    } catch (e) {
      err.textContent = e instanceof ApiError && e.status === 401 ? 'Invalid username or password.' : e.message;
      err.hidden = false;
      button.disabled = false;
    }
  });
  form.username.focus();
}

function startSession(s) {
  session = s;
  setCsrfToken(s.csrfToken);
  document.getElementById('nav').hidden = false;
  // Users, policies and namespaces are administrators' pages: hidden for a plain user (a namespace administrator's
  // are scoped by the API to the namespaces it administers, s.adminNamespaces).
  const administers = s.admin !== false || (s.adminNamespaces ?? []).length > 0;
  for (const page of ['users', 'policies', 'namespaces']) {
    const link = document.querySelector(`#nav a[data-page="${page}"]`);
    if (link) link.hidden = !administers;
  }
  const who = document.getElementById('who');
  who.hidden = false;
  document.getElementById('who-name').textContent = s.user ?? 'bootstrap admin (no users yet)';
  document.getElementById('logout').hidden = !s.user;
  document.body.dataset.state = 'app';
  route();
}

function stopPage() {
  if (typeof leave === 'function') {
    try {
      leave();
    } catch {
      // a page's cleanup failing must not keep the next one from showing
    }
  }
  leave = null;
}

/** Renders the page the URL's hash names (#/streams/orders → streams with params ['orders']). */
async function route() {
  if (!session) return;
  stopPage();
  clearFlash();
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const name = parts[0] && PAGES[parts[0]] ? parts[0] : 'overview';
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === name);
  document.body.dataset.page = name;
  const id = ++renderId;
  const page = h('div.page', { 'data-page': name });
  view.replaceChildren(page);
  try {
    const stop = await PAGES[name].render(page, parts.slice(1), { session });
    if (id === renderId) leave = stop;
    else if (typeof stop === 'function') stop();
  } catch (err) {
    if (id === renderId && !(err instanceof ApiError && err.status === 401)) {
      page.append(h('p.error', `Could not load this page: ${err.message}`));
    }
  }
}

whenUnauthenticated(() => {
  if (!session) return;
  // Bootstrap ends when the first user is created: from then on everyone signs in, this page too.
  showLogin(session.via === 'bootstrap' ? 'The first user exists now: sign in as an administrator.' : 'Your session has ended; sign in again.');
});

document.getElementById('logout').addEventListener('click', async () => {
  try {
    await api('POST', 'logout');
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) flash(err.message);
  }
  showLogin();
});

window.addEventListener('hashchange', route);

async function boot() {
  // Bootstrap (no user exists yet) also needs the API's answer: loopback callers are let in without a login.
  if (!marked() && !(await bootstrapping())) return showLogin();
  try {
    startSession(await api('GET', 'session'));
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) showLogin();
    else {
      showLogin();
      flash(`The broker's API did not answer as expected: ${err.message}`);
    }
  }
}

/** True while the broker has no user at all (the API lets loopback callers in as an administrator). */
async function bootstrapping() {
  try {
    const r = await fetch('/api/v1/session', { credentials: 'omit', headers: { accept: 'application/json', 'x-requested-with': 'XMLHttpRequest' } });
    return r.ok;
  } catch {
    return false;
  }
}

boot();
