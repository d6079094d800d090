// The console's shell: log in with an API key, the navigation, and one page per hash route.
'use strict';
import { api, h, session } from './lib.js';
import { flowsPage } from './flows.js';
import { partitionedPage } from './partitioned.js';
import { queuePage, queuesPage } from './queues.js';
import { durablePage, streamPage, streamsPage } from './streams.js';
import { workPage } from './work.js';

const routes = [
  [/^#\/queues\/(.+)$/, queuePage, 'queues'],
  [/^#\/queues$/, queuesPage, 'queues'],
  [/^#\/partitioned(?:\/(.+))?$/, partitionedPage, 'partitioned'],
  [/^#\/streams\/(.+)$/, streamPage, 'streams'],
  [/^#\/streams$/, streamsPage, 'streams'],
  [/^#\/durable(?:\/(.+))?$/, durablePage, 'durable'],
  [/^#\/flows(?:\/([^/]+)\/([^/]+))?$/, flowsPage, 'flows'],
  [/^#\/work(?:\/([^/]+))?(?:\/([^/]+))?$/, workPage, 'work'],
];

// What a page started (timers, long polls) is stopped when another page opens.
let page = null;
function stopPage() {
  if (page) page.abort();
  page = new AbortController();
  return page.signal;
}

function login(main) {
  const input = h('input', { id: 'key', type: 'password', placeholder: 'pbk_…', autocomplete: 'off', required: true });
  const message = h('p', { class: 'error', id: 'login-error' });
  const form = h('form', { class: 'login', id: 'login' },
    h('h1', {}, 'Postbox console'),
    h('p', { class: 'muted' }, 'Log in with an API key. It stays in this tab only.'),
    h('label', { for: 'key' }, 'API key'), input, message,
    h('button', { type: 'submit' }, 'Log in'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    session.key = input.value.trim();
    try {
      await api('GET', '/api/v1/queues');
      if (!location.hash || location.hash === '#/') location.hash = '#/queues';
      render();
    } catch (error) {
      session.key = '';
      message.textContent = error.status === 401 ? 'That key is not valid.' : error.message;
    }
  });
  main.replaceChildren(form);
  input.focus();
}

async function render() {
  const main = document.getElementById('main');
  const signal = stopPage();
  const loggedIn = Boolean(session.key);
  document.getElementById('nav').hidden = !loggedIn;
  document.getElementById('logout').hidden = !loggedIn;
  if (!loggedIn) return login(main);
  const hash = location.hash || '#/queues';
  for (const [pattern, show, name] of routes) {
    const m = hash.match(pattern);
    if (!m) continue;
    for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.page === name);
    main.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    try {
      await show(main, signal, ...m.slice(1).map((x) => (x === undefined ? undefined : decodeURIComponent(x))));
    } catch (error) {
      if (error.name === 'AbortError') return;
      if (error.status === 401) { session.key = ''; return render(); }
      main.replaceChildren(h('p', { class: 'error' }, error.message));
    }
    return;
  }
  location.hash = '#/queues';
}

window.addEventListener('hashchange', render);
document.getElementById('logout').addEventListener('click', () => { session.key = ''; render(); });
render();
