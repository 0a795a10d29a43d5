// The feedsync admin console: plain DOM, no framework, no build step, nothing from another origin
// (the Content-Security-Policy allows only this file). Every text from the server — and much of
// it comes from upstream services or sink receivers — is put on the page as a text node or an
// attribute value, never parsed as HTML.

const app = document.getElementById('app');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const notice = document.getElementById('notice');
const logoutButton = document.getElementById('logout');
const confirmDialog = document.getElementById('confirm');

/** How often live pages read again (ms). */
const REFRESH_MS = 3000;
const SVG = 'http://www.w3.org/2000/svg';

let csrf = '';
let role = '';
/** The page shown: its render(), and refresh() for live pages. */
let page = null;
let timer = 0;

// --- DOM helpers --------------------------------------------------------------------------

/** An element with attributes (`on…` are listeners, `class` its class) and children (strings become text). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (key === 'checked' || key === 'disabled' || key === 'selected' || key === 'value')
      el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A link inside the console (hash routes only, built from names URL-encoded here). */
function link(path, params, ...children) {
  const query = params ? `?${new URLSearchParams(params)}` : '';
  return h('a', { href: `#${path}${query}` }, ...children);
}

function table(headers, rows, empty = 'none') {
  return h(
    'table',
    {},
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headers.map((x) => h('th', {}, x)),
      ),
    ),
    h(
      'tbody',
      {},
      rows.length ? rows : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, empty)),
    ),
  );
}

function stateBadge(state) {
  return h('span', { class: `state ${String(state).replace(/ /g, '-')}` }, state);
}

const num = (n) => h('td', { class: 'num' }, n === null || n === undefined ? '–' : String(n));
const when = (iso) => (iso ? new Date(iso).toLocaleString() : '–');

/** How long ago: the lag of a source is the age of the newest event its cursor has passed. */
function age(iso) {
  if (!iso) return '–';
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return s < 172800 ? `${Math.round(s / 3600)} h` : `${Math.round(s / 86400)} d`;
}

function say(text, kind = '') {
  notice.className = kind;
  notice.hidden = !text;
  notice.textContent = text;
}

/** A small line chart of per-minute counts over the last hour. */
function sparkline(counts, label) {
  const width = 120;
  const height = 24;
  const max = Math.max(1, ...counts);
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'rate');
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  const title = document.createElementNS(SVG, 'title');
  title.textContent = label;
  const base = document.createElementNS(SVG, 'line');
  for (const [k, v] of Object.entries({ x1: 0, y1: height - 1, x2: width, y2: height - 1 }))
    base.setAttribute(k, String(v));
  const line = document.createElementNS(SVG, 'polyline');
  const step = counts.length > 1 ? width / (counts.length - 1) : width;
  line.setAttribute(
    'points',
    counts
      .map((c, i) => `${(i * step).toFixed(1)},${(height - 2 - (c / max) * (height - 4)).toFixed(1)}`)
      .join(' '),
  );
  svg.append(title, base, line);
  return svg;
}

// --- the API ------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error ?? `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET') headers['x-csrf-token'] = csrf;
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
    cache: 'no-store',
  });
  const parsed = await res.json().catch(() => null);
  if (res.status === 401 && path !== '/login') {
    showLogin(role ? 'Your session has ended; log in again.' : '');
    throw new ApiError(401, parsed);
  }
  if (!res.ok) throw new ApiError(res.status, parsed);
  return parsed;
}

const dlqPath = (params) => `/api/v1/dead-letters?${new URLSearchParams(params)}`;

/** Asks before a change, stating what and how many; resolves true when confirmed. */
function confirmChange(text) {
  document.getElementById('confirm-text').textContent = text;
  confirmDialog.returnValue = '';
  confirmDialog.showModal();
  return new Promise((resolve) =>
    confirmDialog.addEventListener('close', () => resolve(confirmDialog.returnValue === 'ok'), {
      once: true,
    }),
  );
}

const canChange = () => role === 'write';
const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

// --- login --------------------------------------------------------------------------------

function showLogin(message = '') {
  clearInterval(timer);
  page = null;
  nav.hidden = true;
  logoutButton.hidden = true;
  who.textContent = '';
  say(message, message ? 'bad' : '');
  const input = h('input', {
    type: 'password',
    name: 'token',
    autocomplete: 'current-password',
    required: true,
  });
  const form = h(
    'form',
    {
      class: 'stacked',
      id: 'login',
      onsubmit: async (e) => {
        e.preventDefault();
        try {
          const answer = await api('POST', '/login', { token: input.value });
          input.value = '';
          startSession(answer);
        } catch (err) {
          say(err.status === 401 ? 'Wrong token.' : err.message, 'bad');
        }
      },
    },
    h('label', {}, 'Admin token (the write token, or the read-only one)', input),
    h('button', { type: 'submit', class: 'primary' }, 'Log in'),
  );
  replace(app, h('h1', {}, 'Log in'), form);
  input.focus();
}

function startSession(session) {
  csrf = session.csrf ?? '';
  role = session.role;
  nav.hidden = false;
  logoutButton.hidden = false;
  who.textContent = role === 'write' ? 'signed in: may change' : 'signed in: read-only';
  say('');
  route();
}

logoutButton.addEventListener('click', async () => {
  await api('POST', '/logout').catch(() => undefined);
  csrf = '';
  role = '';
  showLogin('Logged out.');
});

// --- pages --------------------------------------------------------------------------------

const pages = {
  '/': overviewPage,
  '/sink': sinkPage,
  '/dead-letters': deadLettersPage,
  '/replay': replayPage,
  '/cursors': cursorsPage,
};

function route() {
  if (!role) return;
  const [path, query = ''] = location.hash.slice(1).split('?');
  const make = pages[path || '/'] ?? overviewPage;
  for (const a of nav.querySelectorAll('a'))
    a.classList.toggle('current', a.getAttribute('href') === `#${path || '/'}`);
  clearInterval(timer);
  say('');
  page = make(new URLSearchParams(query));
  app.replaceChildren(page.root);
  const refresh = async () => {
    if (document.hidden || !page?.refresh) return;
    try {
      await page.refresh();
    } catch (err) {
      if (err.status !== 401) say(`Could not refresh: ${err.message}`, 'bad');
    }
  };
  refresh();
  if (page.live) timer = setInterval(refresh, page.every ?? REFRESH_MS);
}

function sinkStates(positions, activity, sink) {
  const states = new Set(positions.filter((p) => p.sink === sink).map((p) => p.state));
  if (activity.find((a) => a.sink === sink)?.failing) states.add('failing');
  for (const s of ['failing', 'parked', 'catching_up', 'live']) if (states.has(s)) return s;
  return 'live';
}

function overviewPage() {
  const sources = h('div');
  const sinks = h('div');
  const root = h(
    'section',
    { id: 'overview' },
    h('h1', {}, 'Overview'),
    h('h2', {}, 'Sources'),
    sources,
    h('h2', {}, 'Sinks'),
    sinks,
  );
  return {
    root,
    live: true,
    async refresh() {
      const [src, snk] = await Promise.all([api('GET', '/api/v1/sources'), api('GET', '/api/v1/sinks')]);
      replace(
        sources,
        table(
          [
            'Source',
            'State',
            'Cursor',
            'Last event',
            'Cursor age',
            'Last successful poll',
            'Polled by',
            'Last error',
          ],
          src.sources.map((s) =>
            h(
              'tr',
              { 'data-source': s.source },
              h('td', {}, s.source),
              h('td', {}, stateBadge(s.state)),
              num(s.cursor),
              h('td', {}, when(s.last_event_at)),
              h('td', { class: 'num' }, age(s.last_event_at)),
              h('td', {}, when(s.last_successful_poll_at)),
              h('td', {}, s.polled_by ?? '–'),
              h('td', { class: 'error' }, s.last_error ?? ''),
            ),
          ),
        ),
      );
      replace(
        sinks,
        table(
          ['Sink', 'State', 'Queued', 'Retrying', 'Dead letters', 'Lag (events)', 'Delivered, last hour'],
          snk.sinks.map((s) => {
            const lag = Math.max(
              0,
              ...snk.positions.filter((p) => p.sink === s.sink).map((p) => p.lag_events ?? 0),
            );
            const activity = snk.activity.find((a) => a.sink === s.sink);
            const total = activity ? activity.delivered_per_minute.reduce((a, b) => a + b, 0) : null;
            return h(
              'tr',
              { 'data-sink': s.sink },
              h('td', {}, link('/sink', { name: s.sink }, s.sink)),
              h('td', {}, stateBadge(sinkStates(snk.positions, snk.activity, s.sink))),
              num(s.queued + s.in_flight + s.delayed),
              num(s.retrying),
              h(
                'td',
                { class: 'num' },
                s.dead ? link('/dead-letters', { sink: s.sink }, String(s.dead)) : '0',
              ),
              num(lag),
              h(
                'td',
                {},
                activity
                  ? [
                      sparkline(activity.delivered_per_minute, `${total} delivered in the last hour`),
                      h('span', { class: 'muted' }, `${total} in the last hour`),
                    ]
                  : h('span', { class: 'muted' }, 'not delivered by this process'),
              ),
            );
          }),
        ),
      );
    },
  };
}

function sinkPage(params) {
  const name = params.get('name') ?? '';
  const body = h('div');
  const root = h(
    'section',
    { id: 'sink' },
    h('h1', {}, 'Sink ', h('span', { class: 'sink-name' }, name)),
    body,
  );
  return {
    root,
    live: true,
    async refresh() {
      const snk = await api('GET', '/api/v1/sinks');
      const counts = snk.sinks.find((s) => s.sink === name);
      if (!counts)
        return replace(body, h('p', { class: 'error-text' }, 'No sink of that name is configured.'));
      const activity = snk.activity.find((a) => a.sink === name);
      const positions = snk.positions.filter((p) => p.sink === name);
      replace(
        body,
        h(
          'p',
          {},
          'State: ',
          stateBadge(sinkStates(snk.positions, snk.activity, name)),
          ` · queued ${counts.queued} · in flight ${counts.in_flight} · delayed ${counts.delayed} · retrying ${counts.retrying} · `,
          counts.dead
            ? link('/dead-letters', { sink: name }, plural(counts.dead, 'dead letter'))
            : 'no dead letters',
        ),
        h('h2', {}, 'Position per source'),
        table(
          [
            'Source',
            'State',
            'Position',
            'Lag (events)',
            'Lag (s)',
            'Why off the shared stream',
            'Since',
            'Lost upstream',
          ],
          positions.map((p) =>
            h(
              'tr',
              {},
              h('td', {}, p.source),
              h('td', {}, stateBadge(p.state)),
              num(p.position),
              num(p.lag_events),
              num(p.lag_seconds),
              h(
                'td',
                {},
                p.reason ?? (p.state === 'failing' ? 'deliveries failing, waiting for a retry' : ''),
              ),
              h('td', {}, when(p.since)),
              num(p.lost_upstream?.count ?? 0),
            ),
          ),
          'this sink receives no source',
        ),
        h('h2', {}, 'Recent errors'),
        activity
          ? table(
              ['When', 'Outcome', 'Error'],
              [...activity.recent_errors]
                .reverse()
                .map((e) =>
                  h(
                    'tr',
                    {},
                    h('td', {}, when(e.at)),
                    h('td', {}, e.outcome),
                    h('td', { class: 'error' }, e.error),
                  ),
                ),
              'none seen by this process',
            )
          : h('p', { class: 'muted' }, 'This process does not deliver; each worker sees its own errors.'),
        activity && activity.failing
          ? h(
              'p',
              { class: 'error-text' },
              'Failing: only one probe at a time reaches it until it answers again.',
            )
          : null,
      );
    },
  };
}

function deadLettersPage(params) {
  const filter = Object.fromEntries(
    ['sink', 'source', 'event_type', 'q'].map((k) => [k, params.get(k) ?? '']).filter(([, v]) => v),
  );
  const cursor = params.get('cursor') ?? '0';
  const selected = new Set();
  const list = h('div');
  const detail = h('div', { id: 'detail' });
  const field = (key, label) => h('label', {}, label, h('input', { name: key, value: filter[key] ?? '' }));
  const form = h(
    'form',
    {
      class: 'inline',
      id: 'dlq-filter',
      onsubmit: (e) => {
        e.preventDefault();
        const data = Object.fromEntries([...new FormData(form)].filter(([, v]) => v !== ''));
        location.hash = `#/dead-letters?${new URLSearchParams(data)}`;
      },
    },
    field('sink', 'Sink'),
    field('source', 'Source'),
    field('event_type', 'Event type'),
    field('q', 'Error contains'),
    h('button', { type: 'submit' }, 'Filter'),
  );
  const described = Object.entries(filter)
    .map(([k, v]) => `${k} ${JSON.stringify(v)}`)
    .join(', ');

  async function act(action, selection) {
    const verb = action === 'retry' ? 'Re-queue' : 'Delete for good';
    try {
      const dry = await api('POST', `/api/v1/dead-letters/${action}`, { ...selection, dry_run: true });
      if (dry.count === 0) return say('Nothing matches any more.', '');
      const what = selection.ids
        ? 'the selected'
        : described
          ? `every dead letter matching ${described}:`
          : 'EVERY dead letter:';
      if (!(await confirmChange(`${verb} ${what} ${plural(dry.count, 'dead letter')}?`))) return;
      const done = await api('POST', `/api/v1/dead-letters/${action}`, selection);
      selected.clear();
      say(`${action === 'retry' ? 'Re-queued' : 'Dropped'} ${plural(done.count, 'dead letter')}.`, 'good');
      await refresh();
    } catch (err) {
      if (err.status !== 401) say(err.message, 'bad');
    }
  }

  const actions = h(
    'div',
    { class: 'actions' },
    h(
      'button',
      {
        type: 'button',
        id: 'retry-selected',
        class: 'primary',
        onclick: () => act('retry', { ids: [...selected] }),
      },
      'Retry selected',
    ),
    h(
      'button',
      { type: 'button', id: 'drop-selected', onclick: () => act('drop', { ids: [...selected] }) },
      'Drop selected',
    ),
    h(
      'button',
      { type: 'button', id: 'retry-all', onclick: () => act('retry', { filter }) },
      'Retry all matching',
    ),
    h(
      'button',
      { type: 'button', id: 'drop-all', class: 'danger', onclick: () => act('drop', { filter }) },
      'Drop all matching',
    ),
  );
  const updateButtons = () => {
    for (const b of actions.querySelectorAll('button'))
      b.disabled = !canChange() || (b.id.endsWith('selected') && selected.size === 0);
  };

  async function inspect(d) {
    const id = `${d.sink}/${d.key}`;
    const one = await api('GET', `/api/v1/dead-letters/${encodeURIComponent(id)}`);
    replace(
      detail,
      h('h2', {}, 'Dead letter ', h('code', {}, id)),
      h('p', {}, `Attempts ${one.attempts}, failed at ${when(one.failed_at)}`),
      h('p', { class: 'error-text' }, one.error),
      h('pre', { class: 'change' }, JSON.stringify(one.change, null, 2)),
    );
  }

  async function refresh() {
    const page = await api('GET', dlqPath({ ...filter, cursor, limit: 50 }));
    const shown = new Set(page.dead_letters.map((d) => `${d.sink}/${d.key}`));
    for (const id of selected) if (!shown.has(id)) selected.delete(id);
    replace(
      list,
      table(
        ['', 'Sink', 'Key', 'Event type', 'Attempts', 'Failed at', 'Error', ''],
        page.dead_letters.map((d) => {
          const id = `${d.sink}/${d.key}`;
          return h(
            'tr',
            { 'data-id': id },
            h(
              'td',
              {},
              h('input', {
                type: 'checkbox',
                'aria-label': `select ${id}`,
                checked: selected.has(id),
                onchange: (e) => {
                  if (e.target.checked) selected.add(id);
                  else selected.delete(id);
                  updateButtons();
                },
              }),
            ),
            h('td', {}, d.sink),
            h('td', {}, d.key),
            h('td', { class: 'event-type' }, d.event_type),
            num(d.attempts),
            h('td', {}, when(d.failed_at)),
            h('td', { class: 'error' }, d.error),
            h(
              'td',
              {},
              h(
                'button',
                { type: 'button', onclick: () => inspect(d).catch((err) => say(err.message, 'bad')) },
                'Inspect',
              ),
            ),
          );
        }),
        'no dead letters',
      ),
      page.scan_truncated
        ? h(
            'p',
            { class: 'muted' },
            'Only the oldest 10 000 dead letters were searched; narrow the filter by sink.',
          )
        : null,
      h(
        'p',
        {},
        cursor !== '0'
          ? link(
              '/dead-letters',
              { ...filter, cursor: String(Math.max(0, Number(cursor) - 50)) },
              '← previous',
            )
          : null,
        ' ',
        page.next_cursor ? link('/dead-letters', { ...filter, cursor: page.next_cursor }, 'next →') : null,
      ),
    );
    updateButtons();
  }

  const root = h(
    'section',
    { id: 'dead-letters' },
    h('h1', {}, 'Dead letters'),
    form,
    canChange()
      ? null
      : h('p', { class: 'muted' }, 'Read-only: log in with the write token to retry or drop.'),
    actions,
    detail,
    list,
  );
  // Less often: a filter on source, type or text reads up to 10 000 dead letters each time.
  return { root, live: true, every: 10_000, refresh };
}

function replayPage() {
  const sinkSelect = h('select', { name: 'sink', required: true });
  const sourceSelect = h(
    'select',
    { name: 'source' },
    h('option', { value: '' }, 'every source it receives'),
  );
  const from = h('input', {
    name: 'from',
    required: true,
    placeholder: 'an event id, or earliest',
    value: 'earliest',
  });
  const result = h('div');
  const form = h(
    'form',
    {
      class: 'stacked',
      id: 'replay',
      onsubmit: async (e) => {
        e.preventDefault();
        const body = {
          sink: sinkSelect.value,
          from: from.value.trim() === 'earliest' ? 'earliest' : Number(from.value),
        };
        if (sourceSelect.value) body.source = sourceSelect.value;
        const where = body.source ? `from ${body.source}` : 'from every source it receives';
        if (!(await confirmChange(`Re-deliver sink ${body.sink} ${where} after event ${body.from}?`))) return;
        try {
          const answer = await api('POST', '/api/v1/replay', body);
          replace(
            result,
            answer.replays.map((r) =>
              h(
                'p',
                { class: 'good' },
                `${r.sink} from ${r.source}: replaying after event ${r.from} (it was at ${r.before ?? 'none'})`,
              ),
            ),
          );
        } catch (err) {
          replace(result, h('p', { class: 'error-text' }, `Refused: ${err.message}`));
        }
      },
    },
    h('label', {}, 'Sink', sinkSelect),
    h('label', {}, 'Source', sourceSelect),
    h('label', {}, 'From', from),
    h('button', { type: 'submit', class: 'primary', disabled: !canChange() }, 'Replay'),
  );
  const root = h(
    'section',
    {},
    h('h1', {}, 'Replay a sink'),
    h(
      'p',
      { class: 'muted' },
      'Puts the sink back at a point of the feed; the other sinks are untouched. Refused while another replay of it runs.',
    ),
    form,
    result,
  );
  return {
    root,
    live: false,
    async refresh() {
      const status = await api('GET', '/api/v1/status');
      append(
        sinkSelect,
        status.sinks.map((s) => h('option', { value: s.sink }, s.sink)),
      );
      append(
        sourceSelect,
        status.sources.map((s) => h('option', { value: s.source }, s.source)),
      );
    },
  };
}

function cursorsPage() {
  const list = h('div');
  const sourceSelect = h('select', { name: 'source', required: true });
  const value = h('input', { name: 'cursor', type: 'number', min: '0', placeholder: 'event id' });
  const reset = h('input', { type: 'checkbox', name: 'reset' });
  const result = h('div');
  const form = h(
    'form',
    {
      class: 'stacked',
      id: 'cursor',
      onsubmit: async (e) => {
        e.preventDefault();
        const body = reset.checked ? { reset: true } : { cursor: Number(value.value) };
        const target = reset.checked
          ? 'the start of the feed (everything is delivered again)'
          : `event ${body.cursor}`;
        if (!(await confirmChange(`Move the cursor of ${sourceSelect.value} to ${target}?`))) return;
        try {
          const moved = await api(
            'PUT',
            `/api/v1/sources/${encodeURIComponent(sourceSelect.value)}/cursor`,
            body,
          );
          replace(result, h('p', {}, `${moved.source}: cursor ${moved.before ?? 'none'} → ${moved.cursor}`));
        } catch (err) {
          replace(result, h('p', { class: 'error-text' }, `Refused: ${err.message}`));
        }
      },
    },
    h('label', {}, 'Source', sourceSelect),
    h('label', {}, 'Continue after event', value),
    h('label', {}, h('span', {}, reset, ' reset to the start of the feed instead')),
    h('button', { type: 'submit', class: 'primary', disabled: !canChange() }, 'Move the cursor'),
  );
  let filled = false;
  const root = h(
    'section',
    {},
    h('h1', {}, 'Cursors'),
    list,
    h('h2', {}, 'Move a cursor'),
    h('p', { class: 'muted' }, 'Refused while a poller holds the source, naming it: stop its pollers first.'),
    form,
    result,
  );
  return {
    root,
    live: true,
    async refresh() {
      const sources = (await api('GET', '/api/v1/sources')).sources;
      replace(
        list,
        table(
          ['Source', 'Cursor', 'Polled by'],
          sources.map((s) =>
            h('tr', {}, h('td', {}, s.source), num(s.cursor), h('td', {}, s.polled_by ?? '–')),
          ),
        ),
      );
      if (!filled)
        append(
          sourceSelect,
          sources.map((s) => h('option', { value: s.source }, s.source)),
        );
      filled = true;
    },
  };
}

// --- start --------------------------------------------------------------------------------

window.addEventListener('hashchange', route);
api('GET', '/api/v1/session')
  .then(startSession)
  .catch((err) => {
    if (err.status !== 401) showLogin(err.message);
  });
