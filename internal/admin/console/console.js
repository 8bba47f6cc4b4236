// The webhook_idempotency console: it calls the admin API of the origin it
// was loaded from (api.js), and writes every value as text, never as HTML.
// It is a module script and its stylesheet is requested with crossorigin:
// Caddy's admin endpoint refuses the no-cors requests of plain <script>
// and <link> tags.
//
// What it shows is named by the page's URL, so that a reload or a shared
// link opens the same thing: ?source=<source>&tab=<archive|dead|refused|key>,
// &event=<id> for an archived event, the archive's filters (key, result,
// status, since, until), and the charts' &window=<24h|7d> (charts.js).
// Moving around pushes a new URL; the browser's back and forward buttons
// go back to what it named.

import { api, call } from './api.js';

const $ = (sel) => document.querySelector(sel);
const enc = encodeURIComponent;

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

const when = (t) => new Date(t).toLocaleString();
const count = (n, thing) => n + ' ' + thing + (n === 1 ? '' : 's');

// State: the sources of the last list, and what the URL names.

const sources = new Map();
const view = { source: '', tab: '', event: '' };
const tabs = ['archive', 'dead', 'refused', 'key'];
const filterNames = ['key', 'result', 'status', 'since', 'until'];
let cursor = '';
let refusedCursor = '';

// pageQuery is the page's query for the view and the archive's filters:
// the tab when it is not the source's first (an event's is the archive);
// the charts' window (charts.js) is kept as it is.
function pageQuery() {
	const q = new URLSearchParams();
	if (view.source) {
		q.set('source', view.source);
		const s = sources.get(view.source);
		if (view.tab && !view.event && !(s && available(s)[0] === view.tab)) q.set('tab', view.tab);
		if (view.event) q.set('event', view.event);
		for (const [k, v] of filters()) q.set(k, v);
	}
	const chartWindow = new URLSearchParams(location.search).get('window');
	if (chartWindow) q.set('window', chartWindow);
	const s = q.toString();
	return s ? '?' + s : '';
}

// go changes the view and records it as a new entry of the history: a
// URL relative to the document's, which keeps any login typed into it (a
// history entry differs from the document's URL in its path, query and
// fragment only). An event opened from the list leaves the list as it is.
async function go(next) {
	const eventOnly = Object.keys(next).length === 1 && next.event;
	Object.assign(view, next);
	const query = pageQuery();
	if (query !== location.search) history.pushState(null, '', query || location.pathname);
	return eventOnly ? showEvent(view.event) : show();
}

// fromURL takes the view and the filters from the page's URL.
function fromURL() {
	const q = new URLSearchParams(location.search);
	view.source = q.get('source') || '';
	view.tab = tabs.includes(q.get('tab')) ? q.get('tab') : '';
	view.event = q.get('event') || '';
	for (const name of filterNames) $('#filter-' + name).value = q.get(name) || '';
	if (view.event) view.tab = 'archive';
}

// Sources

// loadSources lists the sources, updating the rows in place: a row being
// clicked is never replaced under the pointer.
async function loadSources() {
	const list = await call('GET', '');
	sources.clear();
	const tbody = $('#sources tbody');
	const rows = new Map([...tbody.children].map((tr) => [tr.dataset.source, tr]));
	for (const s of list) {
		sources.set(s.source, s);
		let tr = rows.get(s.source);
		rows.delete(s.source);
		if (!tr) {
			tr = el('tr');
			tr.dataset.source = s.source;
			tr.addEventListener('click', () => openSource(s.source));
		}
		tbody.append(tr); // in the list's order
		const r = s.results || {};
		const other = Object.entries(r)
			.filter(([k]) => !['new', 'replayed', 'conflict', 'invalid_signature'].includes(k))
			.reduce((n, [, v]) => n + v, 0);
		tr.className = s.source === view.source ? 'selected' : '';
		// a source whose store did not answer is listed, marked, without
		// the counts its store keeps
		const down = s.unavailable ? 'unavailable' : null;
		const sick = storeTrouble(s);
		const cells = [s.source, sick ? s.store + ': unhealthy' : s.store, r.new, r.replayed, r.conflict, r.invalid_signature, other,
			s.inbox ? down || s.pending : '–', s.inbox ? down || s.scheduled : '–', s.inbox ? down || s.dead : '–',
			s.archive ? (s.archive.events ?? down) : '–'];
		while (tr.children.length < cells.length) tr.append(el('td'));
		cells.forEach((v, i) => {
			const td = tr.children[i];
			td.textContent = v === undefined || v === null ? '' : String(v);
			td.className = (v === down && down) || (i === 1 && sick) ? 'unavailable' : '';
		});
		if (down) tr.dataset.unavailable = 'true';
		else delete tr.dataset.unavailable;
		tr.title = [s.unavailable, sick && 'store unhealthy: ' + sick].filter(Boolean).join('; ');
	}
	for (const tr of rows.values()) tr.remove();
	if (sources.has(view.source)) {
		showStoreHealth(sources.get(view.source));
		showDelivery(sources.get(view.source));
	}
	$('#updated').textContent = 'updated ' + new Date().toLocaleTimeString();
}

// storeTrouble says why the source's store is unhealthy (a file store
// whose file was deleted or replaced under Caddy), '' when it is not.
function storeTrouble(s) {
	return s.store_health && !s.store_health.healthy ? s.store_health.error || 'unhealthy' : '';
}

// openSource opens a source's panel, as a click on its row does.
function openSource(name) {
	for (const n of filterNames) $('#filter-' + n).value = '';
	go({ source: name, tab: '', event: '' })
		.then(() => $('#source-panels').scrollIntoView({ block: 'nearest' }))
		.catch((e) => say(e.message));
}

// A source's panel

// available lists the tabs a source has: the archive with an archive, the
// dead letters with an inbox.
function available(s) {
	return tabs.filter((t) => (t !== 'archive' || s.archive) && (t !== 'dead' || s.inbox));
}

// show renders what the view names.
async function show() {
	const s = sources.get(view.source);
	for (const tr of document.querySelectorAll('#sources tbody tr')) {
		tr.className = tr.dataset.source === view.source ? 'selected' : '';
	}
	$('#source-panels').hidden = !s;
	// another source's reconciliation is not left showing while this
	// one's is read
	if ($('#source-name').textContent !== view.source) $('#reconcile-panel').hidden = true;
	if (!s) {
		if (view.source) say('no source ' + JSON.stringify(view.source) + ' in the running configuration');
		return;
	}
	const tabsOf = available(s);
	if (!tabsOf.includes(view.tab)) view.tab = tabsOf[0];
	$('#source-name').textContent = s.source;
	showStoreHealth(s);
	showDelivery(s);
	for (const b of document.querySelectorAll('#tabs button')) {
		b.hidden = !tabsOf.includes(b.dataset.tab);
		b.setAttribute('aria-selected', String(b.dataset.tab === view.tab));
	}
	for (const p of document.querySelectorAll('.tab-panel')) p.hidden = p.dataset.tab !== view.tab;
	$('#event-detail').hidden = true;
	loadReconcile().catch((e) => say(e.message));
	switch (view.tab) {
	case 'archive':
		await searchEvents(false);
		if (view.event) await showEvent(view.event);
		break;
	case 'dead':
		await loadDead();
		break;
	case 'refused':
		await loadRefused(false);
		break;
	case 'key':
		$('#key-state').replaceChildren();
		$('#key-attempts-section').hidden = true;
		break;
	}
}

// showStoreHealth says, above the source's tabs, when its store is
// unhealthy; the live counts refresh it.
function showStoreHealth(s) {
	const why = storeTrouble(s);
	$('#store-health').hidden = !why;
	$('#store-health').textContent = why ? 'The ' + s.store + ' store is unhealthy: ' + why + '.' : '';
}

// target tells whether the source has somewhere to redeliver archived
// events to: its inbox, else its archive's redeliver_to.
function target(s) {
	return s.inbox || !!(s.archive && s.archive.redeliver_to);
}

// Delivery: an inbox's destinations (deliver_to's first, then its
// routes'), each paused or not and its breaker, with pause and resume for
// each and for the whole source; the live counts refresh it.

function showDelivery(s) {
	$('#delivery-panel').hidden = !s.inbox;
	if (!s.inbox) return;
	const toggle = $('#delivery-toggle');
	toggle.textContent = s.paused ? 'Resume all' : 'Pause all';
	toggle.dataset.pause = String(!s.paused);
	const tbody = $('#destinations tbody');
	tbody.replaceChildren();
	for (const d of s.destinations || []) {
		const tr = el('tr');
		tr.dataset.destination = d.id;
		const b = d.breaker;
		const breaker = !b ? '–' : b.state === 'closed' ? 'closed (' + b.failed + ' of ' + b.attempts + ' failed; ' + b.rule + ')'
			: b.state + (b.probe_at ? ', probe at ' + when(b.probe_at) : '') + ' (' + b.rule + ')';
		const state = (d.paused ? 'paused' : 'delivering') + (d.orphaned ? ', route removed' : '');
		for (const [v, cls] of [[d.url], [d.route || 'deliver_to'], [state, d.paused ? 'paused' : ''], [breaker, b ? 'breaker-' + b.state : ''],
			[d.pending ?? ''], [d.dead ?? '']]) {
			tr.append(el('td', v, cls));
		}
		const act = el('button', d.paused ? 'Resume' : 'Pause');
		act.type = 'button';
		act.addEventListener('click', guard(() => pauseDelivery(!d.paused, d.id, d.url)));
		const td = el('td');
		td.append(act);
		tr.append(td);
		tbody.append(tr);
	}
}

// pauseDelivery pauses (or resumes) one destination, or the whole source
// without one; a pause asks first: events are still accepted, but nothing
// is delivered until it is resumed.
async function pauseDelivery(pause, id, url) {
	const source = view.source;
	const what = id ? url : 'every destination of ' + source;
	if (pause && !await confirmAction('Pause deliveries to ' + what + '? Events are still accepted and wait until you resume.', 'Pause')) return;
	const q = id ? new URLSearchParams({ destination: id }) : undefined;
	await call('POST', enc(source) + (pause ? '/pause' : '/resume'), q);
	say((pause ? 'paused: ' : 'resumed: ') + what, true);
	await loadSources();
	if (sources.has(source)) showDelivery(sources.get(source));
}

// Reconciliation: shown when the source has a reconcile block (the API
// answers 409 when it has none).

async function loadReconcile() {
	const source = view.source;
	let st;
	try {
		st = await call('GET', enc(source) + '/reconcile');
	} catch (e) {
		if (e.status !== 409) throw e;
		st = null;
	}
	if (source !== view.source) return;
	$('#reconcile-panel').hidden = !st;
	if (!st) return;
	const dl = $('#reconcile-state');
	dl.replaceChildren();
	const last = st.running ? 'running now' : st.last_end ? when(st.last_end) : 'none yet';
	const result = st.last_result ? st.last_result + (st.last_error ? ': ' + st.last_error : '') : '–';
	for (const [k, v, cls] of [['provider', st.provider], ['last pass', last], ['result', result, 'reconcile-' + (st.last_result || 'none')],
		['recovered', st.recovered], ['next pass', when(st.next_pass) + (st.resuming ? ' (resumes the last)' : '')],
		['rate limited until', st.rate_limited_until ? when(st.rate_limited_until) : null],
		['every', st.every + ', looking back ' + st.lookback]]) {
		if (v === null || v === undefined) continue;
		dl.append(el('dt', k), el('dd', v, cls));
	}
}

// Archive

function filters() {
	const q = new URLSearchParams();
	for (const name of filterNames) {
		const v = $('#filter-' + name).value.trim();
		if (v) q.set(name, v);
	}
	return q;
}

async function searchEvents(more) {
	const source = view.source;
	const q = filters();
	q.set('count', '50');
	if (more && cursor) q.set('cursor', cursor);
	const list = await call('GET', enc(source) + '/events', q);
	if (source !== view.source) return;
	const tbody = $('#events tbody');
	if (!more) tbody.replaceChildren();
	for (const ev of list.events) {
		const tr = el('tr');
		tr.dataset.id = ev.id;
		if (ev.id === view.event) tr.className = 'selected';
		tr.append(el('td', when(ev.received)), el('td', ev.key),
			el('td', ev.result, 'result-' + ev.result), el('td', ev.status, ev.status >= 400 ? 'status-error' : ''),
			el('td', ev.method), el('td', ev.uri), el('td', ev.duration_ms));
		tr.addEventListener('click', () => go({ event: ev.id }).catch((e) => say(e.message)));
		tbody.append(tr);
	}
	cursor = list.cursor;
	$('#more').hidden = !cursor;
	const ex = new URL(enc(source) + '/events/export', api);
	ex.search = filters().toString();
	$('#export').href = ex.toString();
	$('#redeliver-matching').hidden = !target(sources.get(source) || {}) || [...filters()].length === 0;
}

// notRedeliverable says why an archived event cannot be redelivered, as
// the API would answer 409; '' when it can.
function notRedeliverable(s, ev) {
	if (!target(s)) return 'the route has neither an inbox nor an archive redeliver_to: there is nowhere to redeliver to';
	if (!ev.body_stored || ev.body === undefined) {
		if (ev.result === 'replayed') return 'a replay\'s body is not archived: redeliver the original delivery of this key';
		if (ev.body_omitted) return 'its body is not archived: ' + ev.body_omitted;
		return 'its body is not archived (bodies off)';
	}
	if (ev.body_redacted) return 'its body was redacted: redelivering it would send the application "[redacted]" values';
	return '';
}

async function showEvent(id) {
	const source = view.source;
	let ev;
	try {
		ev = await call('GET', enc(source) + '/events/' + enc(id));
	} catch (e) {
		$('#event-detail').hidden = true;
		throw new Error('event ' + id + ': ' + e.message);
	}
	if (source !== view.source || id !== view.event) return;
	for (const tr of document.querySelectorAll('#events tbody tr')) {
		tr.className = tr.dataset.id === id ? 'selected' : '';
	}
	$('#event-id').textContent = ev.id;
	$('#event-link').href = location.pathname + pageQuery();
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
	if (ev.body !== undefined) body = formatBody(ev.body, ev.body_encoding);
	$('#event-body').textContent = body;
	showItems(ev.items || []);
	showHistory($('#event-attempts-section'), $('#event-attempts'), $('#event-attempts-count'), ev.history);
	// Redeliver is offered only where the API would do it
	const why = notRedeliverable(sources.get(source) || {}, ev);
	$('#event-redeliver').hidden = !!why;
	$('#event-redeliver').dataset.id = ev.id;
	$('#event-redeliver-note').hidden = !why;
	$('#event-redeliver-note').textContent = why ? 'Not redeliverable: ' + why + '.' : '';
	$('#event-detail').hidden = false;
}

// showItems lists a batch's items; a click searches the archive for one.
function showItems(items) {
	const tbody = $('#event-items tbody');
	tbody.replaceChildren();
	for (const it of items) {
		const tr = el('tr');
		tr.append(el('td', it.key), el('td', it.new ? 'yes' : 'no (seen before)'));
		tr.addEventListener('click', guard(() => {
			for (const n of filterNames) $('#filter-' + n).value = '';
			$('#filter-key').value = it.key;
			return go({ event: '', tab: 'archive' });
		}));
		tbody.append(tr);
	}
	$('#event-items-section').hidden = items.length === 0;
}

// formatBody writes a kept body for reading: JSON indented, base64 said.
function formatBody(body, encoding) {
	if (encoding === 'base64') return '(base64) ' + body;
	try { return JSON.stringify(JSON.parse(body), null, 2); } catch (e) { return body; }
}

// showHistory renders an event's attempts (the history shape) into box,
// oldest first, each with the application's answer as kept; section is
// hidden when there is none.
function showHistory(section, box, countEl, h) {
	box.replaceChildren();
	section.hidden = !h || !h.total;
	if (section.hidden) return;
	countEl.textContent = h.total > h.attempts.length
		? '(the last ' + h.attempts.length + ' of ' + h.total + ')'
		: '(' + h.total + ')';
	for (const a of h.attempts) {
		const ok = a.status >= 200 && a.status < 300;
		const div = el('div', null, 'attempt ' + (ok ? 'ok' : 'failed'));
		const outcome = a.status ? 'HTTP ' + a.status : 'no answer';
		div.append(el('div', '#' + a.attempt + ' · ' + when(a.at) + ' · ' + outcome + ' · ' + a.latency_ms + ' ms · ' +
			a.destination, 'attempt-line'));
		if (a.error) div.append(el('div', a.error, 'status-error'));
		const names = Object.keys(a.headers || {}).sort();
		if (names.length) {
			const table = el('table');
			const tbody = el('tbody');
			for (const name of names) {
				for (const v of a.headers[name]) {
					const tr = el('tr');
					tr.append(el('td', name), el('td', v));
					tbody.append(tr);
				}
			}
			table.append(tbody);
			div.append(table);
		}
		if (a.body !== undefined) div.append(el('pre', formatBody(a.body, a.body_encoding)));
		if (a.truncated) div.append(el('p', 'The answer was longer: keep_response kept this much.', 'hint'));
		box.append(div);
	}
}

async function redeliverEvent() {
	const id = $('#event-redeliver').dataset.id;
	const out = await call('POST', enc(view.source) + '/events/' + enc(id) + '/redeliver');
	if (out.delivered) say('event ' + id + ' redelivered' + (out.inbox_id ? ' through the inbox' : ' (' + out.status + ')'), true);
	else say('event ' + id + ' not redelivered: ' + out.error);
}

async function redeliverMatching() {
	const source = view.source;
	const q = filters();
	const what = [...q].map(([k, v]) => k + ' ' + v).join(', ');
	if (!await confirmAction('Redeliver the archived events of ' + source + ' matching ' + what +
		' (up to 50, the newest of each key) to the application?', 'Redeliver')) return;
	q.set('count', '50');
	const out = await call('POST', enc(source) + '/events/redeliver', q);
	const failed = out.redelivered.filter((r) => !r.delivered);
	say(count(out.redelivered.length - failed.length, 'event') + ' redelivered, ' + failed.length + ' failed, ' +
		out.skipped.length + ' skipped' + (failed.length ? ': ' + failed[0].error : '') +
		(out.cursor ? '; more events match than were read: narrow the filters to redeliver them' : ''), failed.length === 0);
}

// Dead letters

async function loadDead() {
	const source = view.source;
	const list = await call('GET', enc(source) + '/dead');
	if (source !== view.source) return;
	const tbody = $('#dead tbody');
	tbody.replaceChildren();
	for (const d of list) {
		const tr = el('tr');
		tr.dataset.id = d.id;
		const redeliver = el('button', 'Redeliver', 'redeliver');
		redeliver.type = 'button';
		redeliver.addEventListener('click', guard(() => deadAction('POST', d.id + '/redeliver', 'redelivered')));
		const discard = el('button', 'Discard…', 'discard');
		discard.type = 'button';
		discard.addEventListener('click', guard(async () => {
			if (!await confirmAction('Discard dead letter ' + d.id + ' (key ' + d.key + ') of ' + source +
				'? Its event is deleted and never delivered.', 'Discard')) return;
			await deadAction('DELETE', d.id, 'discarded');
		}));
		const actions = el('td');
		actions.append(redeliver, ' ', discard);
		tr.append(el('td', d.id), el('td', d.key), el('td', d.uri), el('td', d.attempts), el('td', d.last_status),
			el('td', d.last_error), el('td', when(d.failed)), actions);
		tbody.append(tr, deadDetail(d, tr.children.length));
	}
	$('#dead-empty').hidden = list.length > 0;
	$('#dead-redeliver-all').hidden = list.length === 0;
}

// deadDetail is the row below a dead letter: its body and its attempts,
// folded.
function deadDetail(d, span) {
	const tr = el('tr', null, 'dead-detail');
	const td = el('td');
	td.colSpan = span;
	const details = el('details');
	details.append(el('summary', 'Body and attempts'));
	let body = d.body_omitted ? '(not shown: ' + d.body_omitted + ')' : '(none)';
	if (d.body !== undefined) body = formatBody(d.body, d.body_encoding);
	details.append(el('h5', 'Body' + (d.body_redacted ? ' (values redacted)' : '')), el('pre', body, 'dead-body'));
	const section = el('div');
	const count = el('span', null, 'muted');
	const heading = el('h5', 'Attempts ');
	heading.append(count);
	const box = el('div', null, 'attempts');
	section.append(heading, box);
	showHistory(section, box, count, d.history);
	details.append(section);
	td.append(details);
	tr.append(td);
	return tr;
}

async function deadAction(method, path, done) {
	await call(method, enc(view.source) + '/dead/' + path);
	say('dead letter ' + path.split('/')[0] + ' ' + done, true);
	await loadDead();
}

async function redeliverAllDead() {
	const source = view.source;
	const n = document.querySelectorAll('#dead tbody tr[data-id]').length;
	if (!await confirmAction('Redeliver every dead letter of ' + source + ' (' + n + ' listed) to the application, each with a fresh retry schedule?', 'Redeliver all')) return;
	const out = await call('POST', enc(source) + '/dead/redeliver');
	say(count(out.redelivered, 'dead letter') + ' redelivered', true);
	await loadDead();
}

// Refused requests

async function loadRefused(more) {
	const source = view.source;
	const q = new URLSearchParams({ count: '50' });
	if (more && refusedCursor) q.set('cursor', refusedCursor);
	const list = await call('GET', enc(source) + '/refused', q);
	if (source !== view.source) return;
	const tbody = $('#refused tbody');
	if (!more) tbody.replaceChildren();
	for (const ev of list.refused) {
		const tr = el('tr');
		tr.dataset.id = ev.id;
		tr.append(el('td', when(ev.received)), el('td', ev.result, 'result-' + ev.result), el('td', ev.status, 'status-error'),
			el('td', ev.reason), el('td', ev.remote), el('td', ev.method + ' ' + ev.uri), el('td', ev.key));
		tbody.append(tr);
	}
	refusedCursor = list.cursor || '';
	$('#refused-more').hidden = !refusedCursor;
	$('#refused-empty').hidden = tbody.children.length > 0;
}

// Keys

// The key goes in the query: a browser removes a path segment `.` or `..`,
// even percent-encoded, before sending the request.
const keyQuery = (key) => new URLSearchParams({ key });

async function lookUpKey() {
	const key = $('#key-input').value;
	const st = await call('GET', enc(view.source) + '/keys', keyQuery(key));
	const dl = $('#key-state');
	dl.replaceChildren();
	for (const k of ['state', 'store_key', 'lease_left_ms', 'status', 'recorded_at', 'expires_at']) {
		if (st[k] !== undefined) dl.append(el('dt', k), el('dd', st[k]));
	}
	showHistory($('#key-attempts-section'), $('#key-attempts'), $('#key-attempts-count'), st.history);
}

async function forgetKey() {
	const key = $('#key-input').value;
	if (!await confirmAction('Forget key ' + JSON.stringify(key) + ' of ' + view.source +
		'? The provider\'s next delivery of it is processed again by the application.', 'Forget')) return;
	await call('DELETE', enc(view.source) + '/keys', keyQuery(key));
	say('key ' + key + ' forgotten: the next delivery is processed', true);
	await lookUpKey();
}

// Confirmation: a modal dialog; Cancel, Escape or closing it answers no.

function confirmAction(text, ok) {
	const d = $('#confirm');
	$('#confirm-text').textContent = text;
	$('#confirm-ok').textContent = ok;
	d.returnValue = '';
	d.showModal();
	return new Promise((resolve) => {
		d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
	});
}

function guard(fn) {
	return (e) => {
		if (e) e.preventDefault();
		fn().catch((err) => say(err.message));
	};
}

{
	$('#confirm-ok').addEventListener('click', () => $('#confirm').close('ok'));
	$('#confirm-cancel').addEventListener('click', () => $('#confirm').close('cancel'));
	for (const b of document.querySelectorAll('#tabs button')) {
		b.addEventListener('click', guard(() => go({ tab: b.dataset.tab, event: '' })));
	}
	$('#filters').addEventListener('submit', guard(() => go({ event: '' })));
	$('#more').addEventListener('click', guard(() => searchEvents(true)));
	$('#redeliver-matching').addEventListener('click', guard(redeliverMatching));
	$('#event-redeliver').addEventListener('click', guard(redeliverEvent));
	$('#dead-redeliver-all').addEventListener('click', guard(redeliverAllDead));
	$('#refused-more').addEventListener('click', guard(() => loadRefused(true)));
	$('#key-form').addEventListener('submit', guard(lookUpKey));
	$('#key-forget').addEventListener('click', guard(forgetKey));
	$('#delivery-toggle').addEventListener('click', guard(() => pauseDelivery($('#delivery-toggle').dataset.pause === 'true')));
	window.addEventListener('popstate', guard(() => { fromURL(); return show(); }));
	const tick = () => loadSources().catch((e) => say(e.message));
	// the first list, then what the URL names
	fromURL();
	loadSources().then(show).catch((e) => say(e.message));
	setInterval(() => {
		if (!$('#live').checked) return;
		tick();
		if (view.source && sources.has(view.source)) loadReconcile().catch((e) => say(e.message));
	}, 2000);
}
