// The webhook_idempotency console: it calls the admin API of the origin it
// was loaded from, and writes every value as text, never as HTML. It is a
// module script and its stylesheet is requested with crossorigin: Caddy's
// admin endpoint refuses the no-cors requests of plain <script> and <link>
// tags.

const api = new URL('.', location.href); // .../webhook_idempotency/
let source = null;
let cursor = '';

const $ = (sel) => document.querySelector(sel);

function el(tag, text, cls) {
	const e = document.createElement(tag);
	if (text !== undefined && text !== null) e.textContent = String(text);
	if (cls) e.className = cls;
	return e;
}

function say(text, ok) {
	const m = $('#message');
	m.textContent = text;
	m.className = ok ? 'ok' : 'error';
}

async function call(method, path, query) {
	const url = new URL(path, api);
	if (query) url.search = query.toString();
	const resp = await fetch(url, { method, credentials: 'same-origin', cache: 'no-store' });
	if (resp.status === 204) return null;
	const body = await resp.json().catch(() => ({ error: resp.statusText }));
	if (!resp.ok) throw new Error(body.error || resp.statusText);
	return body;
}

const enc = encodeURIComponent;

// Sources

async function loadSources() {
	const list = await call('GET', '');
	const tbody = $('#sources tbody');
	tbody.replaceChildren();
	for (const s of list) {
		const r = s.results || {};
		const other = Object.entries(r)
			.filter(([k]) => !['new', 'replayed', 'conflict', 'invalid_signature'].includes(k))
			.reduce((n, [, v]) => n + v, 0);
		const tr = el('tr');
		tr.dataset.source = s.source;
		if (s.source === source) tr.className = 'selected';
		// a source whose store did not answer is listed, marked, without
		// the counts its store keeps
		const down = s.unavailable ? 'unavailable' : null;
		for (const v of [s.source, s.store, r.new, r.replayed, r.conflict, r.invalid_signature, other,
			s.inbox ? down || s.pending : '–', s.inbox ? down || s.scheduled : '–', s.inbox ? down || s.dead : '–',
			s.archive ? (s.archive.events ?? down) : '–']) {
			tr.append(el('td', v, v === down && down ? 'unavailable' : ''));
		}
		if (down) {
			tr.dataset.unavailable = 'true';
			tr.title = s.unavailable;
		}
		tr.addEventListener('click', () => select(s));
		tbody.append(tr);
	}
	$('#updated').textContent = 'updated ' + new Date().toLocaleTimeString();
}

function select(s) {
	source = s.source;
	$('#source-name').textContent = s.source;
	$('#source-panels').hidden = false;
	$('#archive-panel').hidden = !s.archive;
	$('#dead-panel').hidden = !s.inbox;
	$('#event-detail').hidden = true;
	$('#key-state').replaceChildren();
	for (const tr of document.querySelectorAll('#sources tbody tr')) {
		tr.className = tr.dataset.source === source ? 'selected' : '';
	}
	if (s.archive) searchEvents(false).catch((e) => say(e.message));
	if (s.inbox) loadDead().catch((e) => say(e.message));
}

// Archive

function filters() {
	const q = new URLSearchParams();
	for (const name of ['key', 'result', 'status', 'since', 'until']) {
		const v = $('#filter-' + name).value.trim();
		if (v) q.set(name, v);
	}
	return q;
}

async function searchEvents(more) {
	const q = filters();
	q.set('count', '50');
	if (more && cursor) q.set('cursor', cursor);
	const list = await call('GET', enc(source) + '/events', q);
	const tbody = $('#events tbody');
	if (!more) tbody.replaceChildren();
	for (const ev of list.events) {
		const tr = el('tr');
		tr.dataset.id = ev.id;
		tr.append(el('td', new Date(ev.received).toLocaleString()), el('td', ev.key),
			el('td', ev.result, 'result-' + ev.result), el('td', ev.status, ev.status >= 400 ? 'status-error' : ''),
			el('td', ev.method), el('td', ev.uri), el('td', ev.duration_ms));
		tr.addEventListener('click', () => showEvent(ev.id).catch((e) => say(e.message)));
		tbody.append(tr);
	}
	cursor = list.cursor;
	$('#more').hidden = !cursor;
	const ex = new URL(enc(source) + '/events/export', api);
	ex.search = filters().toString();
	$('#export').href = ex.toString();
}

async function showEvent(id) {
	const ev = await call('GET', enc(source) + '/events/' + enc(id));
	$('#event-id').textContent = ev.id;
	const meta = $('#event-meta');
	meta.replaceChildren();
	for (const [k, v] of [['received', ev.received], ['key', ev.key], ['result', ev.result], ['status', ev.status],
		['request', ev.method + ' ' + ev.uri], ['host', ev.host], ['client', ev.remote],
		['handling', ev.duration_ms + ' ms'], ['body SHA-256', ev.body_sha256]]) {
		meta.append(el('dt', k), el('dd', v));
	}
	// the trace of the request, linked to the trace viewer when the
	// global option trace_url names one (an http(s) URL, checked by Caddy)
	if (ev.trace_id) {
		const dd = el('dd');
		dd.id = 'event-trace';
		if (ev.trace_url) {
			const a = el('a', ev.trace_id);
			a.href = ev.trace_url;
			a.target = '_blank';
			a.rel = 'noopener noreferrer';
			dd.append(a);
		} else {
			dd.textContent = ev.trace_id;
		}
		meta.append(el('dt', 'trace'), dd);
	}
	const tbody = $('#event-headers tbody');
	tbody.replaceChildren();
	for (const name of Object.keys(ev.headers || {}).sort()) {
		for (const v of ev.headers[name]) {
			const tr = el('tr');
			tr.append(el('td', name), el('td', v));
			tbody.append(tr);
		}
	}
	let body = ev.body_omitted ? '(not archived: ' + ev.body_omitted + ')' : '(not archived)';
	if (ev.body !== undefined) {
		body = ev.body;
		if (ev.body_encoding === 'base64') body = '(base64) ' + body;
		else try { body = JSON.stringify(JSON.parse(body), null, 2); } catch (e) { /* not JSON */ }
	}
	$('#event-body').textContent = body;
	// the API refuses to redeliver an event whose body is not archived (a
	// replay's, or bodies off) or was redacted: not offered
	$('#event-redeliver').hidden = ev.body === undefined || !!ev.body_redacted;
	$('#event-redeliver').dataset.id = ev.id;
	$('#event-detail').hidden = false;
}

async function redeliverEvent() {
	const id = $('#event-redeliver').dataset.id;
	const out = await call('POST', enc(source) + '/events/' + enc(id) + '/redeliver');
	if (out.delivered) say('event ' + id + ' redelivered' + (out.inbox_id ? ' through the inbox' : ' (' + out.status + ')'), true);
	else say('event ' + id + ' not redelivered: ' + out.error);
}

// Dead letters

async function loadDead() {
	const list = await call('GET', enc(source) + '/dead');
	const tbody = $('#dead tbody');
	tbody.replaceChildren();
	for (const d of list) {
		const tr = el('tr');
		tr.dataset.id = d.id;
		const redeliver = el('button', 'Redeliver', 'redeliver');
		redeliver.type = 'button';
		redeliver.addEventListener('click', () => deadAction('POST', d.id + '/redeliver', 'redelivered'));
		const discard = el('button', 'Discard', 'discard');
		discard.type = 'button';
		discard.addEventListener('click', () => deadAction('DELETE', d.id, 'discarded'));
		const actions = el('td');
		actions.append(redeliver, ' ', discard);
		tr.append(el('td', d.id), el('td', d.key), el('td', d.uri), el('td', d.attempts), el('td', d.last_status),
			el('td', d.last_error), el('td', new Date(d.failed).toLocaleString()), actions);
		tbody.append(tr);
	}
}

async function deadAction(method, path, done) {
	try {
		await call(method, enc(source) + '/dead/' + path);
		say('dead letter ' + path.split('/')[0] + ' ' + done, true);
		await loadDead();
	} catch (e) {
		say(e.message);
	}
}

// Keys

// The key goes in the query: a browser removes a path segment `.` or `..`,
// even percent-encoded, before sending the request.
const keyQuery = (key) => new URLSearchParams({ key });

async function lookUpKey() {
	const key = $('#key-input').value;
	const st = await call('GET', enc(source) + '/keys', keyQuery(key));
	const dl = $('#key-state');
	dl.replaceChildren();
	for (const k of ['state', 'store_key', 'lease_left_ms', 'status', 'recorded_at', 'expires_at']) {
		if (st[k] !== undefined) dl.append(el('dt', k), el('dd', st[k]));
	}
}

async function forgetKey() {
	const key = $('#key-input').value;
	await call('DELETE', enc(source) + '/keys', keyQuery(key));
	say('key ' + key + ' forgotten: the next delivery is processed', true);
	await lookUpKey();
}

function guard(fn) {
	return (e) => {
		if (e) e.preventDefault();
		fn().catch((err) => say(err.message));
	};
}

{
	$('#filters').addEventListener('submit', guard(() => searchEvents(false)));
	$('#more').addEventListener('click', guard(() => searchEvents(true)));
	$('#event-redeliver').addEventListener('click', guard(redeliverEvent));
	$('#dead-redeliver-all').addEventListener('click', guard(async () => {
		const out = await call('POST', enc(source) + '/dead/redeliver');
		say(out.redelivered + ' dead letters redelivered', true);
		await loadDead();
	}));
	$('#key-form').addEventListener('submit', guard(lookUpKey));
	$('#key-forget').addEventListener('click', guard(forgetKey));
	const tick = () => loadSources().catch((e) => say(e.message));
	tick();
	setInterval(() => { if ($('#live').checked) tick(); }, 2000);
}
