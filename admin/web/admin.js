// chatgate admin page: calls /admin/api/ with the bearer token kept in
// this tab's sessionStorage. Everything is written with textContent, never
// as HTML: transcripts hold what users typed.
'use strict';

const TOKEN_KEY = 'chatgate-admin-token';
const PAGE_SIZE = 25;
const STATS_EVERY_MS = 3000;

const USAGE_PAGE_SIZE = 100;
const USAGE_DAYS = 30; // the usage view starts with the last 30 days
const USAGE_SUMS = ['prompt_tokens', 'completion_tokens', 'cost', 'turns', 'estimated_tokens'];
const USAGE_HEADINGS = {
  user: 'user', day: 'day', model: 'model', channel: 'channel',
  prompt_tokens: 'prompt tokens', completion_tokens: 'completion tokens', cost: 'cost', turns: 'turns',
  estimated_tokens: 'estimated tokens',
};

const $ = (id) => document.getElementById(id);
let offset = 0;
let current = null; // the conversation shown
let statsTimer = null;
let draining = false;
// The usage view's order and page: sort is a column ('' is the server's
// default, by the groups) and order 'asc' or 'desc'.
const usage = { sort: '', order: '', offset: 0, loaded: false };

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

function showError(msg) {
  const el = $('error');
  el.textContent = msg;
  el.hidden = !msg;
}

class AuthError extends Error {}

// api calls an endpoint, with body as JSON if given, and returns the
// parsed JSON, or the raw response when raw is set. A 401 forgets the token and shows the login again.
async function api(method, path, raw, body) {
  const headers = { Authorization: 'Bearer ' + token() };
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin('That token was refused.');
    throw new AuthError('unauthorized');
  }
  if (!res.ok) {
    let msg = res.status + ' ' + res.statusText;
    try { msg = (await res.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return raw ? res : res.json();
}

function report(err) {
  if (!(err instanceof AuthError)) showError(err.message);
}

function showLogin(msg) {
  $('login').hidden = false;
  $('app').hidden = true;
  $('logout').hidden = true;
  $('who').textContent = '';
  if (statsTimer) { clearInterval(statsTimer); statsTimer = null; }
  showError(msg || '');
  $('token').focus();
}

async function start() {
  $('login').hidden = true;
  $('app').hidden = false;
  $('logout').hidden = false;
  showError('');
  try {
    await refreshStats();
  } catch (err) {
    report(err);
    return;
  }
  if (!statsTimer) statsTimer = setInterval(() => refreshStats().catch(report), STATS_EVERY_MS);
  showTab({ '#usage': 'usage', '#schedules': 'schedules', '#memory': 'memory' }[location.hash] || 'sessions');
  await loadSessions().catch(report);
}

// showTab shows the sessions, usage, schedules or memory view; the usage
// report is loaded the first time its view is shown, the schedules every
// time, a user's notes when one is asked for.
function showTab(name) {
  for (const v of ['sessions', 'usage', 'schedules', 'memory']) {
    $(v + '-view').hidden = v !== name;
    $('tab-' + v).setAttribute('aria-selected', String(v === name));
  }
  history.replaceState(null, '', name === 'sessions' ? location.pathname + location.search : '#' + name);
  if (name === 'usage' && !usage.loaded) loadUsage().catch(report);
  if (name === 'schedules') loadSchedules().catch(report);
}

// fireText is one fire on a line: due time, state, lag, delivery, reason.
function fireText(f) {
  let text = fmtTime(f.due) + ' ' + f.state;
  if (f.lag_ms >= 1000) text += ' · ' + Math.round(f.lag_ms / 1000) + ' s late';
  if (f.session_key) text += ' · ' + f.session_key;
  if (f.delivery_ref) text += ' · ref ' + f.delivery_ref;
  if (f.reason) text += ' · ' + f.reason;
  return text;
}

// loadSchedules shows the schedules in force with their next and last
// fires, and the reminders users keep.
async function loadSchedules() {
  const rep = await api('GET', '/admin/api/schedules');
  const body = $('schedules-rows');
  body.replaceChildren();
  for (const s of rep.schedules) {
    const tr = document.createElement('tr');
    cell(tr, s.name);
    cell(tr, s.when + ' (' + s.timezone + ')');
    cell(tr, s.target || s.channel);
    cell(tr, s.misfire + (s.max_late ? ', max_late ' + s.max_late : ''));
    cell(tr, s.quiet ? 'yes' : 'no');
    cell(tr, s.next.map(fmtTime).join('\n'));
    cell(tr, s.last.length ? s.last.map(fireText).join('\n') : 'none yet');
    body.appendChild(tr);
  }
  if (!rep.schedules.length) {
    const tr = document.createElement('tr');
    cell(tr, 'No schedules in the configuration.');
    tr.firstChild.colSpan = 7;
    body.appendChild(tr);
  }
  const r = rep.reminders;
  $('reminders-line').textContent = r.due ? 'Reminders: ' + r.due + ' due, kept by ' + r.sessions + (r.sessions === 1 ? ' session' : ' sessions') + '; the next ' + fmtTime(r.next) : 'Reminders: none due.';
}

// loadConvSchedules shows a session's reminders, opt-ins and latest fires
// under its conversation's heading.
async function loadConvSchedules(key) {
  const s = await api('GET', '/admin/api/sessions/' + encodeURIComponent(key) + '/schedules?limit=5');
  const parts = [];
  if (s.reminders.length) parts.push('Reminders: ' + s.reminders.map((r) => r.text + ' (' + r.spec + (r.next_due_at ? ', next ' + fmtTime(r.next_due_at) : '') + ')').join('; '));
  if (s.opt_ins.length) parts.push('Opted in to: ' + s.opt_ins.join(', '));
  if (s.fires.length) parts.push('Latest fires: ' + s.fires.map((f) => f.schedule_key + ' ' + fireText(f)).join('; '));
  $('conv-schedules').textContent = parts.join(' · ');
}

// Memory: the notes kept about the user whose key is in the form (a
// session key without its Telegram topic; in a group chat its members
// share, a member's own). noteUser is the user shown. Notes are the
// model's or a user's words: shown as text.
let noteUser = '';
const NOTE_AUTHORS = { model: 'model', user: 'user', operator: 'operator', reset: 'reset (extracted)' };

function notesPath(user) { return '/admin/api/users/' + encodeURIComponent(user) + '/notes'; }

// showNotes opens the memory view on user's notes.
function showNotes(user) {
  $('m-user').value = user;
  showTab('memory');
  loadNotes().catch(report);
}

async function loadNotes() {
  const user = $('m-user').value.trim();
  if (!user) return;
  const r = await api('GET', notesPath(user));
  noteUser = r.user;
  const body = $('notes-rows');
  body.replaceChildren();
  for (const n of r.notes) {
    const tr = document.createElement('tr');
    tr.dataset.id = String(n.id);
    cell(tr, n.text);
    tr.lastChild.className = 'note-text';
    cell(tr, NOTE_AUTHORS[n.author] || n.author);
    cell(tr, fmtTime(n.created_at));
    cell(tr, n.conversation_id || '');
    const td = document.createElement('td');
    const forget = document.createElement('button');
    forget.type = 'button';
    forget.className = 'forget danger';
    forget.textContent = 'Forget';
    forget.addEventListener('click', () => forgetNote(n).catch(report));
    td.appendChild(forget);
    tr.appendChild(td);
    body.appendChild(tr);
  }
  if (!r.notes.length) {
    const tr = document.createElement('tr');
    cell(tr, 'No notes.');
    tr.lastChild.colSpan = 5;
    body.appendChild(tr);
  }
  $('memory-line').textContent = r.user + ': ' + (r.notes.length ? r.notes.length + (r.notes.length === 1 ? ' note' : ' notes') : 'no notes') +
    '; memory is ' + (r.enabled ? 'on' : 'off (the notes are kept, not used; notes the operator adds are kept all the same)') + '.';
  $('forget-all').disabled = r.notes.length === 0;
  $('memory-box').hidden = false;
}

async function forgetNote(n) {
  if (!confirm('Forget this note of ' + noteUser + '? It is deleted; the bot no longer reads it.\n\n' + n.text)) return;
  await api('DELETE', notesPath(noteUser) + '/' + n.id);
  await loadNotes();
}

async function refreshStats() {
  const s = await api('GET', '/admin/api/stats');
  $('replica').textContent = s.replica;
  $('s-rate').textContent = s.turns_per_second.toFixed(2) + ' (' + s.turns_last_minute + ')';
  $('s-running').textContent = s.running_turns;
  $('s-waiting').textContent = s.waiting_messages + (s.waiting_sessions ? ' in ' + s.waiting_sessions + ' sessions' : '');
  $('s-conns').textContent = s.websocket_connections;
  $('s-replicas').textContent = s.replicas_alive.length;
  $('s-replicas').title = s.replicas_alive.join('\n');
  draining = s.draining;
  $('s-ready').textContent = s.draining ? 'drained by ' + s.drained_by : 'serving';
  $('drain').textContent = s.draining ? 'Undrain' : 'Drain';
}

function fmtTime(t) {
  if (!t) return '';
  const d = new Date(t);
  return isNaN(d) ? t : d.toLocaleString();
}

function cell(tr, text) {
  const td = document.createElement('td');
  td.textContent = text;
  tr.appendChild(td);
}

async function loadSessions() {
  const p = new URLSearchParams({ limit: String(PAGE_SIZE), offset: String(offset) });
  for (const [id, name] of [['q', 'q'], ['user', 'user'], ['channel', 'channel'], ['status', 'status']]) {
    const v = $(id).value.trim();
    if (v) p.set(name, v);
  }
  const list = await api('GET', '/admin/api/sessions?' + p);
  const body = $('sessions');
  body.replaceChildren();
  for (const c of list.conversations) {
    const tr = document.createElement('tr');
    tr.dataset.id = c.id;
    if (current && current.id === c.id) tr.classList.add('selected');
    cell(tr, c.session_key);
    cell(tr, c.channel);
    cell(tr, c.status + (c.reset_reason ? ' (' + c.reset_reason + ')' : ''));
    cell(tr, String(c.last_seq));
    cell(tr, fmtTime(c.last_activity_at));
    tr.addEventListener('click', () => openConversation(c.id).catch(report));
    body.appendChild(tr);
  }
  if (list.conversations.length === 0) {
    const tr = document.createElement('tr');
    cell(tr, 'no conversations match');
    body.appendChild(tr);
  }
  const last = list.offset + list.conversations.length;
  $('page').textContent = list.total ? (list.offset + 1) + '–' + last + ' of ' + list.total : '';
  $('prev').disabled = list.offset === 0;
  $('next').disabled = list.next_offset === undefined;
}

async function openConversation(id) {
  const t = await api('GET', '/admin/api/conversations/' + encodeURIComponent(id));
  current = t.conversation;
  for (const tr of $('sessions').children) tr.classList.toggle('selected', tr.dataset.id === id);
  $('conv').hidden = false;
  $('conv-id').textContent = current.id;
  $('conv-meta').textContent = current.session_key + ' · ' + current.channel + ' · ' + current.status +
    (current.reset_reason ? ' (' + current.reset_reason + ')' : '') +
    ' · started ' + fmtTime(current.started_at) + ' · ' + current.total_tokens + ' tokens';
  $('reset').disabled = current.status !== 'active';
  $('conv-schedules').textContent = '';
  loadConvSchedules(current.session_key).catch(report);
  // The notes its turns read: its user's (none named for a group chat its
  // members share: each member's own).
  const convMemory = $('conv-memory');
  convMemory.hidden = !t.memory_user;
  convMemory.dataset.user = t.memory_user || '';
  const notes = (t.notes || []).length;
  convMemory.textContent = 'Memory (' + (notes === 1 ? '1 note' : notes + ' notes') + ')';
  const fires = new Map((t.fires || []).map((f) => [f.turn_seq, f]));
  $('purge').disabled = current.status !== 'archived';
  const ol = $('transcript');
  ol.replaceChildren();
  for (const m of t.messages) {
    const li = document.createElement('li');
    li.classList.add(m.role);
    if (m.status !== 'ok') li.classList.add(m.status);
    const head = document.createElement('div');
    head.className = 'msg-head';
    const who = document.createElement('span');
    who.textContent = '#' + m.seq + ' ' + m.role;
    if (m.covers) who.textContent += ' of messages ' + m.covers[0] + '–' + m.covers[1];
    head.appendChild(who);
    if (m.turn_state) {
      const turn = document.createElement('span');
      turn.className = 'turn ' + m.turn_state;
      let text = 'turn ' + m.turn_state;
      if (m.turn_owner) text += ' · owner ' + m.turn_owner;
      if (m.turn_attempt) text += ' · attempt ' + m.turn_attempt;
      turn.textContent = text;
      head.appendChild(turn);
    }
    const fire = fires.get(m.seq);
    if (fire) {
      // The message a schedule or reminder fired, and how the fire ended.
      const sch = document.createElement('span');
      sch.className = 'fire ' + fire.state;
      sch.textContent = '⏰ ' + fire.schedule_key + ' · ' + fire.state;
      head.appendChild(sch);
    }
    if (m.status !== 'ok') {
      const st = document.createElement('span');
      st.textContent = m.status + (m.error ? ': ' + m.error : '');
      head.appendChild(st);
    }
    const when = document.createElement('span');
    when.textContent = fmtTime(m.created_at);
    head.appendChild(when);
    li.appendChild(head);
    if (m.quote) {
      // The text the message replies to or quotes, as stored with it.
      const quote = document.createElement('blockquote');
      quote.className = 'msg-quote';
      quote.textContent = m.quote;
      li.appendChild(quote);
    }
    const text = document.createElement('div');
    text.className = 'msg-text';
    text.textContent = m.content;
    li.appendChild(text);
    for (const c of m.calls || []) {
      // A tool call and where it stands; its name, arguments and result
      // are untrusted text.
      const call = document.createElement('div');
      call.className = 'msg-call ' + c.state;
      let line = '🔧 ' + c.name + ' ' + c.arguments + ' → ' + c.state + ' · ' + c.runs + (c.runs === 1 ? ' run' : ' runs');
      if (c.duration_ms) line += ' · ' + c.duration_ms + ' ms';
      if (c.decided_by) line += ' · decided by ' + c.decided_by;
      call.textContent = line;
      li.appendChild(call);
      for (const md of c.media || []) {
        // What the call returned and the gateway kept: a download (the
        // name and type are the tool's, untrusted text).
        const item = document.createElement('div');
        item.className = 'msg-media';
        item.textContent = '📎 ' + md.kind + ' ' + (md.name || '') + ' ' + (md.mime || '') + ' · ' + md.size + ' bytes' +
          (md.delivered_at ? ' · delivered' : '') + ' ';
        const btn = document.createElement('button');
        btn.type = 'button';
        btn.textContent = 'Download';
        btn.addEventListener('click', () => downloadMedia(md).catch(report));
        item.appendChild(btn);
        li.appendChild(item);
      }
    }
    ol.appendChild(li);
  }
}

// isoDay is a local date as YYYY-MM-DD.
function isoDay(d) {
  return d.getFullYear() + '-' + String(d.getMonth() + 1).padStart(2, '0') + '-' + String(d.getDate()).padStart(2, '0');
}

function fmtCost(c) {
  const s = c.toFixed(6).replace(/\.?0+$/, '');
  return s === '0' && c > 0 ? '< 0.000001' : s;
}

function fmtUsage(col, v) {
  if (col === 'cost') return fmtCost(v);
  if (USAGE_SUMS.includes(col)) return v.toLocaleString('en-US');
  return v || '';
}

// usageQuery is the report's parameters as the form and the order say.
function usageQuery() {
  const by = Array.from(document.querySelectorAll('#usage-by input:checked'), (el) => el.value);
  const p = new URLSearchParams({ by: by.join(',') });
  for (const [id, name] of [['u-since', 'since'], ['u-until', 'until'], ['u-user', 'user']]) {
    const v = $(id).value.trim();
    if (v) p.set(name, v);
  }
  if (usage.sort && (USAGE_SUMS.includes(usage.sort) || by.includes(usage.sort))) {
    p.set('sort', usage.sort);
    p.set('order', usage.order);
  }
  return p;
}

async function loadUsage() {
  const p = usageQuery();
  p.set('limit', String(USAGE_PAGE_SIZE));
  p.set('offset', String(usage.offset));
  const r = await api('GET', '/admin/api/usage?' + p);
  usage.loaded = true;
  usage.sort = r.sort || '';
  usage.order = r.order;
  const cols = r.by.concat(USAGE_SUMS);
  const sorted = r.sort || r.by[0]; // without a sort the rows are in the groups' order

  const head = $('usage-head');
  head.replaceChildren();
  for (const c of cols) {
    const th = document.createElement('th');
    th.dataset.col = c;
    if (USAGE_SUMS.includes(c)) th.className = 'num';
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'sort';
    b.textContent = USAGE_HEADINGS[c];
    if (c === sorted) {
      th.setAttribute('aria-sort', r.order === 'desc' ? 'descending' : 'ascending');
      b.textContent += r.order === 'desc' ? ' ▼' : ' ▲';
    }
    b.title = 'Sort by ' + USAGE_HEADINGS[c];
    b.addEventListener('click', () => sortUsage(c, sorted));
    th.appendChild(b);
    head.appendChild(th);
  }

  const body = $('usage-rows');
  body.replaceChildren();
  for (const row of r.rows) {
    const tr = document.createElement('tr');
    for (const c of cols) {
      cell(tr, fmtUsage(c, row[c]));
      if (USAGE_SUMS.includes(c)) tr.lastChild.className = 'num';
      tr.lastChild.dataset.col = c;
    }
    body.appendChild(tr);
  }
  if (r.rows.length === 0) {
    const tr = document.createElement('tr');
    cell(tr, 'no usage in this period');
    tr.lastChild.colSpan = cols.length;
    body.appendChild(tr);
  }

  // The totals of the whole report, every page; with no groups the one
  // row is the total.
  const foot = $('usage-totals');
  foot.replaceChildren();
  if (r.by.length > 0) {
    const tr = document.createElement('tr');
    cell(tr, 'total · ' + r.total_rows + (r.total_rows === 1 ? ' row' : ' rows'));
    tr.lastChild.colSpan = r.by.length;
    for (const c of USAGE_SUMS) {
      cell(tr, fmtUsage(c, r.totals[c]));
      tr.lastChild.className = 'num';
      tr.lastChild.dataset.col = c;
    }
    foot.appendChild(tr);
  }

  const last = r.offset + r.rows.length;
  $('u-page').textContent = r.total_rows > r.rows.length ? (r.offset + 1) + '–' + last + ' of ' + r.total_rows : '';
  $('u-prev').disabled = r.offset === 0;
  $('u-next').disabled = r.next_offset === undefined;
}

// sortUsage orders the report by col: a click on the column it is sorted
// by turns the order round; another column starts with the biggest sums
// or the first keys.
function sortUsage(col, sorted) {
  if (col === sorted) {
    usage.sort = col;
    usage.order = usage.order === 'desc' ? 'asc' : 'desc';
  } else {
    usage.sort = col;
    usage.order = USAGE_SUMS.includes(col) ? 'desc' : 'asc';
  }
  usage.offset = 0;
  loadUsage().catch(report);
}

// saveBlob offers a response's body as a download named as the server
// names it (Content-Disposition), else fallback.
async function saveBlob(res, fallback) {
  const m = /filename="([^"]+)"/.exec(res.headers.get('Content-Disposition') || '');
  const blob = await res.blob();
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = m ? m[1] : fallback;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

async function downloadUsage() {
  const p = usageQuery();
  p.set('format', 'csv');
  const res = await api('GET', '/admin/api/usage?' + p, true);
  await saveBlob(res, 'usage.csv');
}

async function downloadMedia(md) {
  const res = await api('GET', '/admin/api/media/' + encodeURIComponent(md.id), true);
  await saveBlob(res, md.name || md.kind + '-' + md.id);
}

async function download(format) {
  if (!current) return;
  const res = await api('GET', '/admin/api/conversations/' + encodeURIComponent(current.id) + '/export?format=' + format, true);
  await saveBlob(res, 'conversation-' + current.id + (format === 'markdown' ? '.md' : '.json'));
}

$('login').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
  $('token').value = '';
  start();
});
$('logout').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin();
});
$('search').addEventListener('submit', (ev) => {
  ev.preventDefault();
  offset = 0;
  loadSessions().catch(report);
});
$('prev').addEventListener('click', () => { offset = Math.max(0, offset - PAGE_SIZE); loadSessions().catch(report); });
$('next').addEventListener('click', () => { offset += PAGE_SIZE; loadSessions().catch(report); });
$('reset').addEventListener('click', async () => {
  if (!current || !confirm('Reset session ' + current.session_key + '? Its active conversation is archived; its next message starts a new one.')) return;
  try {
    const r = await api('POST', '/admin/api/sessions/' + encodeURIComponent(current.session_key) + '/reset');
    await openConversation(r.archived);
    await loadSessions();
  } catch (err) { report(err); }
});
$('purge').addEventListener('click', async () => {
  if (!current || !confirm('Delete conversation ' + current.id + ' and all its messages? This cannot be undone.')) return;
  try {
    await api('DELETE', '/admin/api/conversations/' + encodeURIComponent(current.id));
    current = null;
    $('conv').hidden = true;
    await loadSessions();
  } catch (err) { report(err); }
});
$('export-json').addEventListener('click', () => download('json').catch(report));
$('export-md').addEventListener('click', () => download('markdown').catch(report));
$('drain').addEventListener('click', async () => {
  const what = draining ? 'undrain' : 'drain';
  const msg = draining
    ? 'Undrain this replica? /readyz answers 200 again and it takes new connections.'
    : 'Drain this replica? /readyz answers 503 and new WebSocket connections and webhook calls are refused until you undrain it.';
  if (!confirm(msg)) return;
  try {
    await api('POST', '/admin/api/' + what);
    await refreshStats();
  } catch (err) { report(err); }
});

$('tab-sessions').addEventListener('click', () => showTab('sessions'));
$('tab-usage').addEventListener('click', () => showTab('usage'));
$('tab-schedules').addEventListener('click', () => showTab('schedules'));
$('schedules-refresh').addEventListener('click', () => loadSchedules().catch(report));
$('tab-memory').addEventListener('click', () => showTab('memory'));
$('conv-memory').addEventListener('click', () => showNotes($('conv-memory').dataset.user));
$('memory-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  loadNotes().catch(report);
});
$('note-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  if (!noteUser) return;
  try {
    await api('POST', notesPath(noteUser), false, { text: $('note-text').value });
    $('note-text').value = '';
    await loadNotes();
  } catch (err) { report(err); }
});
$('forget-all').addEventListener('click', async () => {
  const n = $('notes-rows').querySelectorAll('tr[data-id]').length;
  if (!noteUser || !confirm('Forget all ' + n + ' notes of ' + noteUser + '? They are deleted; this cannot be undone.')) return;
  try {
    await api('DELETE', notesPath(noteUser));
    await loadNotes();
  } catch (err) { report(err); }
});
$('usage-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  usage.offset = 0;
  loadUsage().catch(report);
});
$('usage-by').addEventListener('change', () => { usage.offset = 0; loadUsage().catch(report); });
$('usage-csv').addEventListener('click', () => downloadUsage().catch(report));
$('u-prev').addEventListener('click', () => { usage.offset = Math.max(0, usage.offset - USAGE_PAGE_SIZE); loadUsage().catch(report); });
$('u-next').addEventListener('click', () => { usage.offset += USAGE_PAGE_SIZE; loadUsage().catch(report); });
{
  const since = new Date();
  since.setDate(since.getDate() - (USAGE_DAYS - 1));
  $('u-since').value = isoDay(since);
}

if (token()) start(); else showLogin();
