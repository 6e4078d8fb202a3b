// Arkvory operator console: plain ES module, no dependencies, no inline code (strict CSP).
// Every value from the server reaches the page through textContent or an attribute, never as HTML.
// The admin key is read from the sign-in field once, sent in the Authorization header of the
// sign-in request, and dropped; after that the HttpOnly session cookie and the CSRF token (kept in
// this module's memory only) authenticate the page.

const STATUS_EVERY_MS = 2000;
const SLOW_EVERY_MS = 10000;

let csrfToken = null;
let statusTimer = null;
let slowTimer = null;
let limiters = [];
let principals = [];

const $ = (id) => document.getElementById(id);

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') node.className = value;
    else if (name === 'text') node.textContent = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(
      typeof child === 'string' || typeof child === 'number' ? document.createTextNode(String(child)) : child,
    );
  }
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === 'text') node.textContent = value;
    else node.setAttribute(name, String(value));
  }
  return node;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message ?? `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

/**
 * A console path (`/console/api/status`) relative to this page (`api/status`): the page is at
 * `<prefix>/console/`, so behind a proxy that publishes the gateway under a path the browser asks
 * that proxy's path, not its root (which is not the gateway's).
 */
function consoleUrl(path) {
  return path.startsWith('/console/') ? path.slice('/console/'.length) : path;
}

/**
 * JSON call to the console API. State changes carry the session's CSRF token, and so do reads an
 * operator asked for (`asked`): the gateway counts exactly those as use of the session. The timers'
 * polls go without it, so an unattended console idles out (ARKVORY_CONSOLE_IDLE_TIMEOUT_SECONDS).
 */
async function api(method, path, body, asked = false) {
  const headers = { accept: 'application/json' };
  if (method !== 'GET' || asked) headers['x-csrf-token'] = csrfToken ?? '';
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(consoleUrl(path), {
    method,
    headers,
    credentials: 'same-origin',
    cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (res.status === 401) {
    signedOut('Your session ended (signed out, expired, or the key was revoked). Sign in again.');
    throw new ApiError(401, data);
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

function formatBytes(n) {
  if (!Number.isFinite(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}
const formatRate = (n) => (n > 0 ? `${formatBytes(n)}/s` : 'no ceiling');
const formatSeconds = (s) =>
  s >= 3600 ? `${(s / 3600).toFixed(1)} h` : s >= 60 ? `${(s / 60).toFixed(1)} min` : `${s.toFixed(1)} s`;

// ---------------------------------------------------------------- session

function signedIn(session) {
  csrfToken = session.csrfToken;
  $('sign-out-error').textContent = '';
  $('principal-name').textContent = session.principal.name;
  $('whoami').hidden = false;
  $('sign-in').hidden = true;
  $('app').hidden = false;
  $('banner').textContent = '';
  refreshStatus();
  refreshSlow();
  clearInterval(statusTimer);
  clearInterval(slowTimer);
  statusTimer = setInterval(refreshStatus, STATUS_EVERY_MS);
  slowTimer = setInterval(refreshSlow, SLOW_EVERY_MS);
}

function signedOut(message) {
  csrfToken = null;
  clearInterval(statusTimer);
  clearInterval(slowTimer);
  $('whoami').hidden = true;
  $('app').hidden = true;
  $('sign-in').hidden = false;
  $('sign-in-error').textContent = message ?? '';
  $('new-key').hidden = true;
  $('new-key-value').textContent = '';
}

async function signIn(event) {
  event.preventDefault();
  const field = $('admin-key');
  const key = field.value.trim();
  field.value = '';
  $('sign-in-error').textContent = '';
  // Every key is printable ASCII. Anything else pasted along with one (a zero-width space, a
  // character no header can carry) made fetch throw, and the page said nothing at all.
  if (!/^[\x21-\x7e]+$/.test(key)) {
    $('sign-in-error').textContent =
      'That is not a key as pasted: it holds a blank, a control or a non-ASCII character. Paste the key alone.';
    return;
  }
  let res;
  try {
    res = await fetch(consoleUrl('/console/session'), {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, accept: 'application/json' },
      credentials: 'same-origin',
      cache: 'no-store',
    });
  } catch {
    $('sign-in-error').textContent = 'Sign-in failed: the gateway could not be reached. Try again.';
    return;
  }
  const body = await res.json().catch(() => null);
  if (res.status === 201) signedIn(body);
  else if (res.status === 403) $('sign-in-error').textContent = 'That key has no admin scope.';
  else $('sign-in-error').textContent = body?.message ?? `Sign-in failed (HTTP ${res.status}).`;
}

async function signOut() {
  $('sign-out-error').textContent = '';
  try {
    await api('DELETE', '/console/api/session');
  } catch (err) {
    // A 401: the session had ended already. Anything else (a dropped connection, a 503) left it
    // open on the gateway, and a reload here would be signed in: say so rather than pretend.
    if (err.status !== 401) {
      $('sign-out-error').textContent = `Sign-out failed (${err.message}); the session is still open. Try again.`;
      return;
    }
  }
  signedOut('Signed out.');
}

// ---------------------------------------------------------------- status

async function refreshStatus() {
  let status;
  try {
    status = await api('GET', '/console/api/status');
  } catch (err) {
    if (err.status !== 401) $('banner').textContent = `Status unavailable: ${err.message}`;
    return;
  }
  $('banner').textContent = status.gateway.state === 'serving' ? '' : `This gateway is ${status.gateway.state}.`;
  renderGateways(status);
  renderTransfers(status.transfers);
  renderBandwidth(status.bandwidth);
  renderBlocks(status.rateLimits.blocks);
  renderSliceCache(status.sliceCache);
  renderQuotas(status.quotas, status.quotasNextCursor);
}

/**
 * One usage bar per quota: stored plus reserved of the limit; `high` marks the last tenth. The
 * status answer holds the first page of quotas; `more` (its cursor) says others are not shown.
 */
function renderQuotas(quotas, more) {
  const size = (b) => (b >= 1073741824 ? `${(b / 1073741824).toFixed(1)} GiB` : `${(b / 1048576).toFixed(1)} MiB`);
  $('quota-summary').textContent =
    quotas.length === 0
      ? 'No quota set (arkvory quota set, or PUT /api/v1/admin/quotas/…).'
      : 'Each blob counts once per repository; reserved bytes are uploads in progress.' +
        (more
          ? ` The first ${quotas.length} are shown; arkvory quota list or GET /api/v1/admin/quotas lists them all.`
          : '');
  const rows = quotas.map((q) =>
    el(
      'tr',
      { 'data-quota': `${q.scope}:${q.subject}` },
      el('td', { text: `${q.scope} ${q.subject}` }),
      el(
        'td',
        {},
        el('meter', {
          min: 0,
          max: Math.max(q.limitBytes, 1),
          value: Math.min(q.usageBytes, Math.max(q.limitBytes, 1)),
          high: Math.max(q.limitBytes, 1) * 0.9,
          title: `${((q.usageBytes / Math.max(q.limitBytes, 1)) * 100).toFixed(1)}% used`,
        }),
      ),
      el('td', { text: size(q.storedBytes) }),
      el('td', { text: size(q.reservedBytes) }),
      el('td', { text: size(q.limitBytes) }),
      el('td', { text: size(q.remainingBytes) }),
    ),
  );
  $('quota-rows').replaceChildren(...rows);
}

function renderSliceCache(cache) {
  const percent = (r) => (r === null ? 'none yet' : `${(r * 100).toFixed(1)}%`);
  const mib = (b) => `${(b / 1048576).toFixed(1)} MiB`;
  $('slice-cache-summary').textContent = cache
    ? `Hit ratio ${percent(cache.hitRatio)} of requests (${cache.requests.hit} hits, ${cache.requests.miss} misses, ` +
      `${cache.requests.bypass} relayed uncached), ${percent(cache.byteHitRatio)} of bytes; holds ` +
      `${mib(cache.heldBytes)} of ${mib(cache.maxBytes)} in ${cache.heldSlices} slices.`
    : 'Off (no ARKVORY_CACHE_DIR, or the directory store).';
}

function renderGateways(status) {
  const g = status.gateway;
  $('gateway-summary').textContent =
    g.profile === 'shared'
      ? `Shared profile: ${status.slots.filter((s) => s.live).length} of ${g.slots} slots held; this writer is slot ${g.slot}.`
      : 'Standalone: this writer is the only gateway (no slot leases).';
  const rows = status.slots.map((s) =>
    el(
      'tr',
      { 'data-slot': s.slot, 'data-health': s.health },
      el('td', { text: String(s.slot) }),
      el(
        'td',
        { text: s.role === 'api' ? 'writer (api)' : s.role },
        s.self ? el('span', { class: 'tag', text: 'this gateway' }) : null,
      ),
      el('td', { class: 'mono', text: s.advertiseUrl ?? '(not advertised)' }),
      el('td', { text: formatSeconds(s.leaseAgeSeconds) }),
      el('td', { text: formatSeconds(s.heldSeconds) }),
      el('td', { text: String(s.generation) }),
      el('td', {
        class: s.health === 'serving' ? 'health-serving' : 'health-bad',
        text: s.live ? s.health : `expired (${s.health})`,
      }),
    ),
  );
  if (rows.length === 0)
    rows.push(
      el(
        'tr',
        {},
        el('td', { colspan: 7, text: g.profile === 'shared' ? 'No lease rows.' : `Standalone writer, ${g.state}.` }),
      ),
    );
  $('slot-rows').replaceChildren(...rows);
}

function renderTransfers(t) {
  $('transfer-summary').textContent =
    `Downloads: ${t.downloads.active} active, ${t.downloads.queued} queued, ${t.downloads.rejected} refused busy. Uploads: ${t.uploads.active} active, ${t.uploads.queued} queued, ${t.uploads.rejected} refused busy.`;
  const rows = t.live.map((x) =>
    el(
      'tr',
      { 'data-transfer': x.id, 'data-state': x.state },
      el('td', { text: x.kind }),
      el('td', { text: x.state }),
      el('td', { text: x.principal }),
      el('td', { class: 'mono', text: x.route }),
      el('td', { text: x.repository ?? '' }),
      el('td', { text: x.seconds.toFixed(1) }),
      el('td', { text: formatBytes(x.bytes) }),
    ),
  );
  if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 7, text: 'No transfer right now.' })));
  // The status answer lists the oldest 100; the others are counted.
  if (t.liveNotShown > 0)
    rows.push(
      el(
        'tr',
        { 'data-transfers-not-shown': t.liveNotShown },
        el('td', { colspan: 7, text: `${t.liveNotShown} more not shown.` }),
      ),
    );
  $('transfer-rows').replaceChildren(...rows);
}

function renderBandwidth(b) {
  const samples = b.samples;
  const last = samples.at(-1) ?? { download: 0, upload: 0 };
  const c = b.ceilings;
  $('bandwidth-legend').replaceChildren(
    el('span', { class: 'legend-download', text: `download ${formatBytes(last.download)}/s` }),
    ` (ceiling ${formatRate(c.download.bytesPerSecond)}${c.sharedDownloadBytesPerSecond ? `, shared budget ${formatRate(c.sharedDownloadBytesPerSecond)} over all gateways` : ''}; per principal ${formatRate(c.download.bytesPerSecondPerPrincipal)})  `,
    el('span', { class: 'legend-upload', text: `upload ${formatBytes(last.upload)}/s` }),
    ` (ceiling ${formatRate(c.upload.bytesPerSecond)}; per principal ${formatRate(c.upload.bytesPerSecondPerPrincipal)})`,
  );
  for (const dir of ['download', 'upload']) drawChart($(`chart-${dir}`), dir, samples, c[dir].bytesPerSecond);
}

/** One direction against its ceiling (dashed), scaled to the larger of the ceiling and the peak. */
function drawChart(chart, dir, samples, ceiling) {
  const W = 600,
    H = 180,
    left = 56,
    bottom = 16,
    top = 8,
    span = 300;
  const peak = Math.max(1, ceiling, ...samples.map((s) => s[dir]));
  const yMax = peak * 1.1;
  const x = (i) => left + ((W - left - 4) * (span - (samples.length - 1 - i))) / span;
  const y = (v) => top + (H - top - bottom) * (1 - v / yMax);
  const nodes = [
    svg('line', { class: 'axis', x1: left, y1: H - bottom, x2: W, y2: H - bottom }),
    svg('line', { class: 'axis', x1: left, y1: top, x2: left, y2: H - bottom }),
    svg('text', { x: 2, y: top + 8, text: `${formatBytes(yMax)}/s` }),
    svg('text', { x: 2, y: H - bottom, text: '0' }),
    svg('text', { x: left, y: H - 2, text: '−5 min' }),
    svg('text', { x: W - 24, y: H - 2, text: 'now' }),
  ];
  if (ceiling > 0) {
    nodes.push(
      svg('line', { class: `ceiling-${dir}`, x1: left, x2: W, y1: y(ceiling), y2: y(ceiling), 'data-ceiling': dir }),
    );
    nodes.push(svg('text', { x: W - 150, y: y(ceiling) - 3, text: `ceiling ${formatBytes(ceiling)}/s` }));
  }
  if (samples.length > 1)
    nodes.push(
      svg('polyline', {
        class: dir,
        points: samples.map((s, i) => `${x(i).toFixed(1)},${y(s[dir]).toFixed(1)}`).join(' '),
      }),
    );
  chart.replaceChildren(...nodes);
}

function renderBlocks(blocks) {
  const rows = Object.entries(blocks).map(([limiter, n]) =>
    el('tr', { 'data-limiter': limiter }, el('td', { class: 'mono', text: limiter }), el('td', { text: String(n) })),
  );
  if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 2, text: 'No check yet.' })));
  $('block-rows').replaceChildren(...rows);
}

// ---------------------------------------------------------------- rules

async function refreshSlow() {
  await Promise.allSettled([refreshRules(), refreshAccess(true).then(() => refreshUsage())]);
}

async function refreshRules() {
  // Paged like every listing: a handful of limiters fit one page, but follow nextCursor all the same.
  const all = [];
  let cursor = null;
  do {
    const data = await api('GET', `/console/api/rate-limits${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''}`);
    all.push(...data.limiters);
    cursor = data.nextCursor;
  } while (cursor);
  limiters = all;
  const select = $('rule-limiter');
  const chosen = select.value;
  select.replaceChildren(...limiters.map((l) => el('option', { value: l.limiter, text: l.limiter })));
  if (chosen) select.value = chosen;
  showProperties();
  $('limiters').replaceChildren(...limiters.map(renderLimiter));
}

const TIER_LABEL = { file_rules: 'file', published_rules: 'published', default_rules: 'default' };

function describeMatch(match) {
  const parts = Object.entries(match ?? {}).map(([k, v]) =>
    typeof v === 'string' ? `${k}=${v}` : `${k}~/${v.regex}/`,
  );
  return parts.length ? parts.join(', ') : '(every request)';
}

function describeCount(r) {
  if (r.action === 'skip') return '';
  const by = r.characteristics?.length ? ` by ${r.characteristics.join(', ')}` : '';
  const ban = r.ban_for_s ? `, ban ${r.ban_for_s} s` : '';
  const distinct = r.count_distinct ? ` distinct ${r.count_distinct}` : '';
  return `${r.limit}${distinct} per ${r.period_s} s${by}${ban}`;
}

function renderLimiter(l) {
  const sections = [];
  for (const tier of ['file_rules', 'published_rules', 'default_rules']) {
    const rows = l.tiers[tier].map((a) => {
      const r = a.rule;
      const notes = [];
      if (a.overriddenBy)
        notes.push(
          el('span', {
            class: 'tag overridden',
            text: `overridden by the ${TIER_LABEL[a.overriddenBy]} rule of the same name`,
          }),
        );
      if (a.overrides.length)
        notes.push(
          el('span', {
            class: 'tag overrides',
            text: `overrides the ${a.overrides.map((t) => TIER_LABEL[t]).join(' and ')} rule`,
          }),
        );
      if (a.unreachableAfter)
        notes.push(
          el('span', {
            class: 'tag unreachable',
            text: `never reached: skip rule ${a.unreachableAfter} matches first`,
          }),
        );
      if (a.partlyAfter.length)
        notes.push(el('span', { class: 'tag partly', text: `partly shadowed by skip ${a.partlyAfter.join(', ')}` }));
      const actions =
        tier === 'published_rules'
          ? el(
              'td',
              {},
              el('button', {
                type: 'button',
                class: 'small',
                'data-edit': r.name,
                onclick: () => editRule(l.limiter, r),
                text: 'edit',
              }),
              ' ',
              el('button', {
                type: 'button',
                class: 'small',
                'data-delete': r.name,
                onclick: () => deleteRule(l.limiter, r.name),
                text: 'delete',
              }),
            )
          : el('td');
      return el(
        'tr',
        { class: a.overriddenBy || a.unreachableAfter ? 'shadowed' : '', 'data-rule': r.name, 'data-tier': tier },
        el('td', { text: a.order === undefined ? '–' : String(a.order + 1) }),
        el('td', { class: 'mono', text: r.name }),
        el('td', { text: r.action }),
        el('td', { class: 'mono', text: describeMatch(r.match) }),
        el('td', { text: describeCount(r) }),
        el('td', {}, notes),
        actions,
      );
    });
    if (rows.length === 0)
      rows.push(el('tr', {}, el('td', { colspan: 7, class: 'hint', text: 'no rules in this tier' })));
    sections.push(
      el('h4', { text: `${TIER_LABEL[tier]} tier` }),
      el(
        'table',
        { 'data-tier-table': tier },
        el(
          'thead',
          {},
          el(
            'tr',
            {},
            ...['order', 'name', 'action', 'match', 'count', 'shadowing', ''].map((h) => el('th', { text: h })),
          ),
        ),
        el('tbody', {}, rows),
      ),
    );
  }
  return el(
    'div',
    { class: 'limiter', 'data-limiter': l.limiter },
    el(
      'h3',
      {},
      el('span', { class: 'mono', text: l.limiter }),
      ` — ${l.description}`,
      l.source === 'compiled'
        ? el('span', { class: 'tag', text: 'no stored rule document: shipped defaults and the file' })
        : null,
    ),
    sections,
  );
}

function showProperties() {
  const l = limiters.find((x) => x.limiter === $('rule-limiter').value);
  $('rule-properties').textContent = l
    ? `Properties of ${l.limiter}: ${l.properties.join(', ')}. Match lines: property=value (equality) or property~regex.`
    : '';
}

function clearRuleErrors() {
  for (const node of document.querySelectorAll('#rule-form [data-error-for]')) node.textContent = '';
  $('rule-result').textContent = '';
}

function ruleError(field, message) {
  const node =
    document.querySelector(`#rule-form [data-error-for="${field}"]`) ??
    document.querySelector('#rule-form [data-error-for="form"]');
  node.textContent = node.textContent ? `${node.textContent}; ${message}` : message;
}

/** A number typed as digits becomes a number; anything else is sent as typed for the server to judge. */
function numberField(value) {
  const text = value.trim();
  if (text === '') return undefined;
  return /^-?\d+$/.test(text) ? Number(text) : text;
}

function ruleFromForm(form) {
  const f = new FormData(form);
  const rule = { name: String(f.get('name')).trim(), action: String(f.get('action')) };
  const description = String(f.get('description')).trim();
  if (description) rule.description = description;
  for (const key of ['limit', 'period_s', 'ban_for_s']) {
    const v = numberField(String(f.get(key)));
    if (v !== undefined) rule[key] = v;
  }
  const characteristics = String(f.get('characteristics'))
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (characteristics.length) rule.characteristics = characteristics;
  const distinct = String(f.get('count_distinct')).trim();
  if (distinct) rule.count_distinct = distinct;
  const match = {};
  for (const line of String(f.get('match'))
    .split('\n')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^([^=~\s]+)\s*([=~])\s*(.*)$/.exec(line);
    if (!m) return { error: ['match', `cannot read "${line}": write property=value or property~regex`] };
    match[m[1]] = m[2] === '=' ? m[3] : { regex: m[3] };
  }
  if (Object.keys(match).length) rule.match = match;
  return { rule };
}

async function publishRule(event) {
  event.preventDefault();
  clearRuleErrors();
  const form = event.target;
  const limiter = $('rule-limiter').value;
  const { rule, error } = ruleFromForm(form);
  if (error) return ruleError(...error);
  try {
    await api('PUT', '/console/api/rate-limits', { rate_limits: { [limiter]: [rule] } });
  } catch (err) {
    if (err.status === 400 && Array.isArray(err.body?.problems)) {
      // Paths are rate_limits.<limiter>[0].<field>…; a problem about the whole rule goes on top.
      for (const p of err.body.problems) ruleError(typeof p.path[3] === 'string' ? p.path[3] : 'form', p.message);
    } else if (err.status !== 401) ruleError('form', err.message);
    return;
  }
  $('rule-result').textContent = `Published ${rule.name} to ${limiter}.`;
  await refreshRules();
}

function editRule(limiter, r) {
  clearRuleErrors();
  const form = $('rule-form');
  $('rule-limiter').value = limiter;
  showProperties();
  form.elements.name.value = r.name;
  form.elements.description.value = r.description ?? '';
  form.elements.action.value = r.action;
  form.elements.limit.value = r.limit ?? '';
  form.elements.period_s.value = r.period_s ?? '';
  form.elements.ban_for_s.value = r.ban_for_s ?? '';
  form.elements.characteristics.value = (r.characteristics ?? []).join(', ');
  form.elements.count_distinct.value = r.count_distinct ?? '';
  form.elements.match.value = Object.entries(r.match ?? {})
    .map(([k, v]) => (typeof v === 'string' ? `${k}=${v}` : `${k}~${v.regex}`))
    .join('\n');
  form.elements.name.focus();
}

async function deleteRule(limiter, name) {
  if (!window.confirm(`Delete the published rule ${name} of ${limiter}?`)) return;
  clearRuleErrors();
  try {
    await api('DELETE', `/console/api/rate-limits/${encodeURIComponent(limiter)}/rules/${encodeURIComponent(name)}`);
    $('rule-result').textContent = `Deleted ${name}.`;
  } catch (err) {
    if (err.status !== 401) ruleError('form', err.message);
  }
  await refreshRules();
}

// ---------------------------------------------------------------- principals, keys, grants

/** The cursor of the next page of principals (null: all shown). The view is paged by the server. */
let principalsCursor = null;
/**
 * A view the operator can read past its first page ("more" buttons). Once they have, the timer's
 * refresh leaves it alone, since reading it again would drop what was asked for; so it does while a
 * "more" read is on its way, and when one was asked for while the timer's read was (whichever answer
 * comes last). A change made on the page reads the view afresh, and a "more" answer for the view as
 * it was before is dropped (its button is drawn again).
 */
class PagedView {
  expanded = false;
  #reading = 0;
  #version = 0;

  /** Whether the timer may read the view afresh now. */
  get timerMay() {
    return !this.expanded && this.#reading === 0;
  }

  /** Applies a first page read afresh, unless the timer read it and the operator asked for more since. */
  fresh(fromTimer, apply) {
    if (fromTimer && !this.timerMay) return;
    this.#version++;
    this.expanded = false;
    apply();
  }

  /** Reads a next page and applies it, if the view is still the one it continues. */
  async more(read, apply) {
    const version = this.#version;
    this.#reading++;
    try {
      const data = await read();
      if (version !== this.#version) return;
      this.expanded = true;
      apply(data);
    } finally {
      this.#reading--;
    }
  }
}

/** The access view (principals, their keys and grants). */
const accessView = new PagedView();

/**
 * The repositories the selects offer (grant, repository ceilings): the view's first page, or those
 * the operator found by the start of their name, with the cursor where that listing continues
 * ("more repositories"). Thousands of repositories are found by prefix, not scrolled to.
 */
let pickerRepositories = [];
let pickerCursor = null;
/** The prefix the repositories were found by; null while the selects show the view's own page. */
let repositoryPrefix = null;
/** Repositories per page the picker reads: one largest page of the admin listing. */
const REPOSITORY_PAGE = 1000;

/** `fromTimer`: the periodic refresh, which leaves a view read past its first page as it is. */
async function refreshAccess(fromTimer = false) {
  if (!fromTimer || accessView.timerMay) {
    const data = await api('GET', '/console/api/access');
    accessView.fresh(fromTimer, () => {
      principals = data.principals;
      principalsCursor = data.nextCursor;
      if (repositoryPrefix === null) {
        pickerRepositories = data.repositories;
        pickerCursor = data.repositoriesNextCursor;
        renderRepositories();
      }
      renderPrincipals();
    });
  }
  await refreshCeilings(fromTimer);
}

async function morePrincipals() {
  if (!principalsCursor) return;
  const cursor = principalsCursor;
  await accessView.more(
    () => api('GET', `/console/api/access?cursor=${encodeURIComponent(cursor)}`, undefined, true),
    (data) => {
      principals = principals.concat(data.principals);
      principalsCursor = data.nextCursor;
      renderPrincipals();
    },
  );
}

/** The next page of a principal's keys (GET /console/api/principals/{principal}/keys). */
async function moreKeys(p) {
  if (!p.keysNextCursor) return;
  const path = `/console/api/principals/${enc(p.id)}/keys?cursor=${enc(p.keysNextCursor)}`;
  await accessView.more(
    () => api('GET', path, undefined, true),
    (data) => {
      p.keys = p.keys.concat(data.keys);
      p.keysNextCursor = data.nextCursor;
      renderPrincipals();
    },
  );
}

/** The next page of a principal's grants (GET /console/api/grants?principal=). */
async function moreGrants(p) {
  if (!p.grantsNextCursor) return;
  const path = `/console/api/grants?principal=${enc(p.id)}&cursor=${enc(p.grantsNextCursor)}`;
  await accessView.more(
    () => api('GET', path, undefined, true),
    (data) => {
      p.grants = p.grants.concat(data.grants.map((g) => ({ repository: g.repository, permission: g.permission })));
      p.grantsNextCursor = data.nextCursor;
      renderPrincipals();
    },
  );
}

/** Reads the repositories starting with the prefix asked for (all when it is empty). */
async function findRepositories(event) {
  event.preventDefault();
  const form = event.target;
  const errorField = form.querySelector('[data-error-for]');
  errorField.textContent = '';
  const prefix = String(new FormData(form).get('prefix')).trim().toLowerCase();
  const query = new URLSearchParams({ limit: String(REPOSITORY_PAGE) });
  if (prefix) query.set('prefix', prefix);
  try {
    const data = await api('GET', `/console/api/repositories?${query}`, undefined, true);
    pickerRepositories = data.repositories;
    pickerCursor = data.nextCursor;
    // An empty prefix is the view's own first page again: refreshes keep it current.
    repositoryPrefix = prefix || null;
  } catch (err) {
    if (err.status !== 401) errorField.textContent = err.message;
    return;
  }
  renderRepositories();
}

async function moreRepositories() {
  if (!pickerCursor) return;
  const query = new URLSearchParams({ limit: String(REPOSITORY_PAGE), cursor: pickerCursor });
  if (repositoryPrefix) query.set('prefix', repositoryPrefix);
  const data = await api('GET', `/console/api/repositories?${query}`, undefined, true);
  pickerRepositories = pickerRepositories.concat(data.repositories);
  pickerCursor = data.nextCursor;
  // The list is no longer the view's first page: refreshes leave it as read.
  repositoryPrefix ??= '';
  renderRepositories();
}

function renderRepositories() {
  for (const repoSelect of document.querySelectorAll('.repository-select')) {
    const chosenRepo = repoSelect.value;
    repoSelect.replaceChildren(...pickerRepositories.map((r) => el('option', { value: r.name, text: r.name })));
    if (chosenRepo) repoSelect.value = chosenRepo;
  }
  $('repository-count').textContent =
    `${pickerRepositories.length} ${pickerRepositories.length === 1 ? 'repository' : 'repositories'}` +
    (repositoryPrefix ? ` starting with ${repositoryPrefix}` : '') +
    (pickerCursor ? ', more remain' : '');
  $('more-repositories').hidden = !pickerCursor;
}

function renderPrincipals() {
  for (const select of document.querySelectorAll('.principal-select')) {
    const chosen = select.value;
    select.replaceChildren(...principals.map((p) => el('option', { value: p.id, text: p.name })));
    if (chosen) select.value = chosen;
  }
  const rows = principals.map((p) =>
    el(
      'tr',
      { 'data-principal': p.name },
      el(
        'td',
        {},
        el('strong', { text: p.name }),
        p.disabled ? el('span', { class: 'tag overridden', text: 'disabled' }) : null,
        el('div', { class: 'mono hint', text: p.id }),
      ),
      el('td', {}, renderWeight(p)),
      el(
        'td',
        {},
        p.keys.length ? el('ul', {}, p.keys.map(renderKey)) : 'no keys',
        p.keysNextCursor
          ? el('button', {
              type: 'button',
              class: 'small',
              'data-more-keys': p.name,
              text: 'more keys',
              onclick: () => void moreKeys(p),
            })
          : null,
      ),
      el(
        'td',
        {},
        p.grants.map((g) => `${g.repository} (${g.permission})`).join(', ') || 'none',
        p.grantsNextCursor
          ? el('button', {
              type: 'button',
              class: 'small',
              'data-more-grants': p.name,
              text: 'more grants',
              onclick: () => void moreGrants(p),
            })
          : null,
      ),
    ),
  );
  $('principal-rows').replaceChildren(...rows);
  $('more-principals').hidden = !principalsCursor;
}

// Share of a contended bandwidth ceiling relative to the others (1..1000).
function renderWeight(p) {
  const form = el(
    'form',
    { class: 'inline', 'data-weight-for': p.name, onsubmit: (event) => setWeight(event, p.id) },
    el('input', {
      type: 'number',
      name: 'bandwidthWeight',
      min: '1',
      max: '1000',
      required: '',
      value: String(p.bandwidthWeight),
      'aria-label': `bandwidth weight of ${p.name}`,
    }),
    el('button', { type: 'submit', class: 'small', text: 'set' }),
    el('span', { class: 'error', 'data-error-for': 'bandwidthWeight', role: 'alert' }),
  );
  return form;
}

async function setWeight(event, principalId) {
  await submitting(event, async (f) => {
    await api('PUT', `/console/api/principals/${encodeURIComponent(principalId)}/bandwidth-weight`, {
      bandwidthWeight: Number(f.get('bandwidthWeight')),
    });
  });
}

function renderKey(k) {
  const state = k.revokedAt ? 'revoked' : k.expiresAt && Date.parse(k.expiresAt) <= Date.now() ? 'expired' : 'active';
  return el(
    'li',
    { 'data-key': k.keyId, 'data-state': state },
    el('span', { class: 'mono', text: k.keyId }),
    ` ${k.scopes.join('+')} `,
    el('span', { class: state === 'active' ? 'tag overrides' : 'tag overridden', text: state }),
    k.description ? ` ${k.description}` : '',
    k.lastUsedAt ? ` (last used ${new Date(k.lastUsedAt).toLocaleString()})` : '',
    state === 'active'
      ? el('button', {
          type: 'button',
          class: 'small',
          'data-revoke': k.keyId,
          onclick: () => revokeKey(k.keyId),
          text: 'revoke',
        })
      : null,
  );
}

function formError(form, message) {
  form.querySelector('[data-error-for]').textContent = message;
}

async function submitting(event, work) {
  event.preventDefault();
  const form = event.target;
  form.querySelector('[data-error-for]').textContent = '';
  try {
    await work(new FormData(form), form);
  } catch (err) {
    if (err.status !== 401) formError(form, err.message);
    return;
  }
  await refreshAccess();
}

async function createPrincipal(event) {
  await submitting(event, async (f, form) => {
    await api('POST', '/console/api/principals', { name: String(f.get('name')).trim() });
    form.reset();
  });
}

async function createKey(event) {
  await submitting(event, async (f) => {
    const principal = principals.find((p) => p.id === f.get('principal'));
    const scopes = f.getAll('scope').map(String);
    const description = String(f.get('description')).trim();
    const created = await api(
      'POST',
      `/console/api/principals/${encodeURIComponent(String(f.get('principal')))}/keys`,
      { scopes, ...(description ? { description } : {}) },
    );
    $('new-key-principal').textContent = principal?.name ?? created.principalId;
    $('new-key-value').textContent = created.key;
    $('new-key').hidden = false;
  });
}

async function grant(event) {
  await submitting(event, async (f) => {
    await api(
      'PUT',
      `/console/api/grants/${encodeURIComponent(String(f.get('principal')))}/${encodeURIComponent(String(f.get('repository')))}`,
      { permission: String(f.get('permission')) },
    );
  });
}

async function revokeKey(keyId) {
  if (!window.confirm(`Revoke key ${keyId}? Requests with it are refused within 2 seconds on every gateway.`)) return;
  try {
    await api('POST', `/console/api/keys/${encodeURIComponent(keyId)}/revoke`);
  } catch (err) {
    if (err.status !== 401) $('banner').textContent = `Revoking failed: ${err.message}`;
  }
  await refreshAccess();
}

// ---------------------------------------------------------------- usage statistics

/** Days of the "not downloaded for" listing, as last asked for in its form. */
let idleDays = '90';
let idleRepository = '';

const artifactLabel = (a) => [a.name, a.version, a.asset].filter((part) => part !== '').join(' ');
const when = (iso) => (iso ? `${iso.slice(0, 16).replace('T', ' ')} UTC` : 'never');
/** A principal's name where the access view knows it, else its id. */
const principalLabel = (id) => (id === null ? 'anonymous' : (principals.find((p) => p.id === id)?.name ?? id));

/** `asked`: an operator's submit of the listing's form, not the timer (see `api`). */
async function refreshUsage(asked = false) {
  const idleQuery = new URLSearchParams({ view: 'idle', days: idleDays });
  if (idleRepository) idleQuery.set('repository', idleRepository);
  const [top, idle, days] = await Promise.all([
    api('GET', '/console/api/stats/artifacts?view=top&limit=20', undefined, asked),
    api('GET', `/console/api/stats/artifacts?${idleQuery}&limit=100`, undefined, asked),
    api('GET', '/console/api/stats/principals?limit=50', undefined, asked),
  ]);
  $('top-rows').replaceChildren(
    ...top.artifacts.map((a) =>
      el(
        'tr',
        { 'data-artifact': `${a.repository}/${artifactLabel(a)}` },
        el('td', { text: a.repository }),
        el('td', { class: 'mono', text: artifactLabel(a) }),
        el('td', { class: 'num', text: String(a.downloads) }),
        el('td', { class: 'num', text: formatBytes(a.bytes) }),
        el('td', { text: when(a.lastDownloadedAt) }),
        el('td', { text: principalLabel(a.lastDownloader) }),
      ),
    ),
  );
  $('idle-days-shown').textContent = String(idle.days);
  $('idle-rows').replaceChildren(
    ...idle.artifacts.map((a) =>
      el(
        'tr',
        { 'data-artifact': `${a.repository}/${artifactLabel(a)}` },
        el('td', { text: a.repository }),
        el('td', { class: 'mono', text: artifactLabel(a) }),
        el('td', { text: when(a.publishedAt) }),
        el('td', { class: 'num', text: String(a.downloads) }),
        el('td', { text: when(a.lastDownloadedAt) }),
      ),
    ),
  );
  $('principal-day-rows').replaceChildren(
    ...days.days.map((d) =>
      el(
        'tr',
        { 'data-principal-day': `${d.principalName ?? d.principalId} ${d.day}` },
        el('td', { text: d.day }),
        el('td', { text: d.principalName ?? d.principalId }),
        el('td', { class: 'num', text: String(d.requests) }),
        el('td', { class: 'num', text: formatBytes(d.bytesDown) }),
        el('td', { class: 'num', text: formatBytes(d.bytesUp) }),
      ),
    ),
  );
}

async function showIdle(event) {
  event.preventDefault();
  const form = event.target;
  const before = { idleDays, idleRepository };
  idleDays = String(new FormData(form).get('days')).trim();
  idleRepository = String(new FormData(form).get('repository')).trim();
  formError(form, '');
  try {
    await refreshUsage(true);
  } catch (err) {
    ({ idleDays, idleRepository } = before);
    if (err.status !== 401) formError(form, err.message);
  }
}

// ---------------------------------------------------------------- groups and repository ceilings

/** A ceiling in bytes/s as the tables show it: "none" for 0, else with its unit. */
function rateText(bytesPerSec) {
  if (bytesPerSec === 0) return 'none';
  return bytesPerSec >= 1048576 ? `${(bytesPerSec / 1048576).toFixed(1)} MiB/s` : `${bytesPerSec} B/s`;
}

/**
 * The ceilings view is paged by the server like the access view: the groups and the repositories
 * with ceilings shown so far, each group with the members read so far, and the cursor where each
 * listing continues (null: all shown); the "more" buttons read the next page.
 */
let ceilingGroups = [];
let groupsCursor = null;
let ceilingRepositories = [];
let repositoriesCursor = null;
/** The ceilings view, paged as the access view is. */
const ceilingsView = new PagedView();

/** `fromTimer`: the periodic refresh, which leaves a view read past its first page as it is. */
async function refreshCeilings(fromTimer = false) {
  if (fromTimer && !ceilingsView.timerMay) return;
  const data = await api('GET', '/console/api/ceilings');
  ceilingsView.fresh(fromTimer, () => {
    ceilingGroups = data.groups;
    groupsCursor = data.groupsNextCursor;
    ceilingRepositories = data.repositories;
    repositoriesCursor = data.repositoriesNextCursor;
    renderGroups();
    renderRepositoryCeilings();
  });
}

async function moreGroups() {
  if (!groupsCursor) return;
  const cursor = groupsCursor;
  await ceilingsView.more(
    () => api('GET', `/console/api/groups?cursor=${enc(cursor)}`, undefined, true),
    (data) => {
      ceilingGroups = ceilingGroups.concat(data.groups);
      groupsCursor = data.nextCursor;
      renderGroups();
    },
  );
}

async function moreMembers(group) {
  if (!group.membersNextCursor) return;
  const path = `/console/api/groups/${enc(group.name)}/members?cursor=${enc(group.membersNextCursor)}`;
  await ceilingsView.more(
    () => api('GET', path, undefined, true),
    (data) => {
      group.members = group.members.concat(data.members);
      group.membersNextCursor = data.nextCursor;
      renderGroups();
    },
  );
}

async function moreRepositoryCeilings() {
  if (!repositoriesCursor) return;
  const cursor = repositoriesCursor;
  await ceilingsView.more(
    () => api('GET', `/console/api/repository-ceilings?cursor=${enc(cursor)}`, undefined, true),
    (data) => {
      ceilingRepositories = ceilingRepositories.concat(data.repositories);
      repositoriesCursor = data.nextCursor;
      renderRepositoryCeilings();
    },
  );
}

function renderGroups() {
  const groupSelect = $('group-select');
  const chosen = groupSelect.value;
  groupSelect.replaceChildren(...ceilingGroups.map((g) => el('option', { value: g.name, text: g.name })));
  if (chosen) groupSelect.value = chosen;
  $('group-rows').replaceChildren(
    ...ceilingGroups.map((g) =>
      el(
        'tr',
        { 'data-group': g.name },
        el('td', {}, el('strong', { text: g.name })),
        el('td', { text: rateText(g.downloadBytesPerSec) }),
        el('td', { text: rateText(g.uploadBytesPerSec) }),
        el(
          'td',
          {},
          g.members.length
            ? el(
                'ul',
                {},
                g.members.map((m) =>
                  el(
                    'li',
                    { 'data-member': m },
                    `${m} `,
                    el('button', {
                      type: 'button',
                      class: 'small',
                      text: 'remove',
                      onclick: () => groupChange('DELETE', `${enc(g.name)}/members/${enc(m)}`),
                    }),
                  ),
                ),
              )
            : 'no members',
          g.membersNextCursor
            ? el('button', {
                type: 'button',
                class: 'small',
                'data-more-members': g.name,
                text: 'more members',
                onclick: () => void moreMembers(g),
              })
            : null,
        ),
        el(
          'td',
          {},
          el('button', {
            type: 'button',
            class: 'small',
            'data-delete-group': g.name,
            text: 'delete',
            onclick: () => {
              if (window.confirm(`Delete group ${g.name}? Its members leave its ceilings within 2 seconds.`))
                void groupChange('DELETE', enc(g.name));
            },
          }),
        ),
      ),
    ),
  );
  $('more-groups').hidden = !groupsCursor;
}

function renderRepositoryCeilings() {
  $('repository-ceiling-rows').replaceChildren(
    ...ceilingRepositories.map((r) =>
      el(
        'tr',
        { 'data-repository-ceiling': r.name },
        el('td', { text: r.name }),
        el('td', { text: rateText(r.downloadBytesPerSec) }),
        el('td', { text: rateText(r.uploadBytesPerSec) }),
        el('td', { text: r.maxTransfers === 0 ? 'no bound' : String(r.maxTransfers) }),
      ),
    ),
  );
  $('more-repository-ceilings').hidden = !repositoriesCursor;
}

const enc = encodeURIComponent;

async function groupChange(method, path) {
  try {
    await api(method, `/console/api/groups/${path}`);
  } catch (err) {
    if (err.status !== 401) $('banner').textContent = `Changing the group failed: ${err.message}`;
  }
  await refreshCeilings();
}

async function setGroup(event) {
  await submitting(event, async (f) => {
    await api('PUT', `/console/api/groups/${enc(String(f.get('group')).trim())}`, {
      downloadBytesPerSec: Number(f.get('downloadBytesPerSec')),
      uploadBytesPerSec: Number(f.get('uploadBytesPerSec')),
    });
  });
}

async function addMember(event) {
  await submitting(event, async (f) => {
    await api('PUT', `/console/api/groups/${enc(String(f.get('group')))}/members/${enc(String(f.get('principal')))}`);
  });
}

async function setRepositoryCeilings(event) {
  await submitting(event, async (f) => {
    await api('PUT', `/console/api/repositories/${enc(String(f.get('repository')))}/ceilings`, {
      downloadBytesPerSec: Number(f.get('downloadBytesPerSec')),
      uploadBytesPerSec: Number(f.get('uploadBytesPerSec')),
      maxTransfers: Number(f.get('maxTransfers')),
    });
  });
}

// ---------------------------------------------------------------- start

async function start() {
  $('sign-in-form').addEventListener('submit', (e) => void signIn(e));
  $('sign-out').addEventListener('click', () => void signOut());
  $('rule-form').addEventListener('submit', (e) => void publishRule(e));
  $('rule-limiter').addEventListener('change', showProperties);
  $('principal-form').addEventListener('submit', (e) => void createPrincipal(e));
  $('key-form').addEventListener('submit', (e) => void createKey(e));
  $('grant-form').addEventListener('submit', (e) => void grant(e));
  $('group-form').addEventListener('submit', (e) => void setGroup(e));
  $('member-form').addEventListener('submit', (e) => void addMember(e));
  $('repository-ceiling-form').addEventListener('submit', (e) => void setRepositoryCeilings(e));
  $('more-principals').addEventListener('click', () => void morePrincipals());
  $('repository-find').addEventListener('submit', (e) => void findRepositories(e));
  $('more-repositories').addEventListener('click', () => void moreRepositories());
  $('more-groups').addEventListener('click', () => void moreGroups());
  $('more-repository-ceilings').addEventListener('click', () => void moreRepositoryCeilings());
  $('idle-form').addEventListener('submit', (e) => void showIdle(e));
  $('new-key-dismiss').addEventListener('click', () => {
    $('new-key').hidden = true;
    $('new-key-value').textContent = '';
  });
  // The back button can bring this page back from the browser's memory (back/forward cache) as it
  // was left, key shown once included, whatever became of its session meanwhile (signed out, idled
  // out, the gateway unreachable). So leaving it conceals everything, and coming back asks first.
  window.addEventListener('pagehide', conceal);
  window.addEventListener('pageshow', (e) => {
    if (e.persisted) void resume();
  });
  await resume();
}

/** Whether this browser's cookie still names a session: a reload keeps the cookie but loses the CSRF token. */
async function resume() {
  let session = { signedIn: false };
  try {
    const res = await fetch(consoleUrl('/console/session'), { credentials: 'same-origin', cache: 'no-store' });
    if (res.ok) session = await res.json();
  } catch {
    signedOut('The gateway could not be reached; reload to try again.');
    return;
  }
  if (session.signedIn) signedIn(session);
  else signedOut();
}

/** The page left: nothing of the session (nor a key typed to sign in) stays on it, no timer polls. */
function conceal() {
  signedOut();
  $('sign-in').hidden = true;
  $('admin-key').value = '';
}

void start();
