// The console's charts: each source's series over the last hour, day or
// week, as the admin API's /<source>/minutes?window=… answers them
// (docs/admin.md#minutes), drawn by plot.js. The window is the page
// URL's `window` (24h or 7d; absent, the hour), so that a reload or a link
// opens the same one; choosing another pushes a new URL, as moving around
// the console does (console.js).
//
// Empty steps: a count is drawn as zero (no bar), which is what the API
// answers for a step that counted nothing; a duration is a gap in its line
// (the API's null: a step without requests has no time to show, and 0 ms
// would claim an instant answer).

import { call } from './api.js';
import { label, plot } from './plot.js';

const windows = ['1h', '24h', '7d'];
const stepNames = { 60: 'minute', 300: '5 minutes', 3600: 'hour' };
const $ = (sel) => document.querySelector(sel);

// What each chart draws: its series (the key names its colour and its
// data-* attribute, from a field of the answer); counts as stacked bars,
// durations as lines in ms. The legend and the data-* attributes give
// each series' total over the window (summed), or its highest step. The
// last two are drawn for a source with an inbox only.
const charts = [
	{
		name: 'deliveries', title: 'Deliveries', bars: true, summed: true, series: [
			['new', 'new', 'new'], ['replayed', 'replayed', 'replayed'],
			['refused', 'refused', 'refused'], ['failed', 'failed', 'failed'],
		],
	},
	{
		name: 'latency', title: 'Handling and application time, ms', series: [
			['handling-p50', 'handling p50', 'handling_p50_ms'], ['handling-p99', 'handling p99', 'handling_p99_ms'],
			['app-p50', 'application p50', 'app_p50_ms'], ['app-p99', 'application p99', 'app_p99_ms'],
		],
	},
	{
		name: 'backlog', title: 'Inbox backlog, events (the most in each step)', bars: true, inbox: true,
		series: [['backlog', 'backlog', 'inbox_backlog']],
	},
	{
		name: 'lag', title: 'Delivery lag, ms (acceptance to 2xx)', inbox: true, series: [
			['lag-p50', 'lag p50', 'lag_p50_ms'], ['lag-p99', 'lag p99', 'lag_p99_ms'],
		],
	},
];

function el(tag, text, cls) {
	const e = document.createElement(tag);
	if (text !== undefined) e.textContent = text;
	if (cls) e.className = cls;
	return e;
}

// camel names a key as dataset does: handling-p99 is data-handling-p99.
const camel = (key) => key.replace(/-(\w)/g, (_, c) => c.toUpperCase());

const sum = (l) => l.reduce((a, b) => a + b, 0);

// highest is a list's highest value, null when every one is.
function highest(l) {
	let h = null;
	for (const v of l) if (v !== null && (h === null || v > h)) h = v;
	return h;
}

// The inbox's failed attempts, which failed counts, named in its legend:
// the answer's field, the attribute's name, the legend's word.
const inboxFailures = [['inbox_retried', 'inboxRetried', 'retried'], ['inbox_dead_lettered', 'inboxDeadLettered', 'dead-lettered']];

// legendText is a series' entry in the legend, with its total (or its
// highest step), which it also sets as the figure's data-<key>.
function legendText(fig, m, c, s) {
	const unit = c.bars ? '' : ' ms';
	const v = c.summed ? sum(s.values) : highest(s.values);
	fig.dataset[camel(s.key)] = v === null ? '' : label(v);
	if (!c.summed) return s.name + ' ' + (v === null ? '–' : 'max ' + label(v) + unit);
	let text = s.name + ' ' + v;
	// failed says how much of it is the inbox's failed attempts
	if (s.key === 'failed' && 'inbox_retried' in m) {
		text += ' (inbox: ' + inboxFailures.map(([field, attr, word]) => {
			fig.dataset[attr] = sum(m[field]);
			return sum(m[field]) + ' ' + word;
		}).join(', ') + ')';
	}
	return text;
}

// figure draws one chart of a source's answer m.
function figure(m, c) {
	const fig = el('figure', undefined, 'chart chart-' + c.name);
	fig.dataset.source = m.source;
	fig.dataset.chart = c.name;
	fig.dataset.window = m.window;
	const series = c.series.map(([key, name, field]) => ({ key, name, values: m[field] }));
	const legend = el('ul', undefined, 'legend');
	const texts = series.map((s) => legendText(fig, m, c, s));
	texts.forEach((text, i) => legend.append(el('li', text, 'key-' + series[i].key)));
	const unit = c.bars ? '' : ' ms';
	const tip = (i, at) => {
		const parts = series.filter((s) => s.values[i]).map((s) => s.name + ' ' + label(s.values[i]) + unit);
		if (!parts.length) return null;
		const when = at.toLocaleString([], m.step_seconds >= 3600
			? { weekday: 'short', hour: '2-digit', minute: '2-digit' } : { hour: '2-digit', minute: '2-digit' });
		return when + ': ' + parts.join(', ');
	};
	const p = plot({
		w: m.window, from: m.from, stepSeconds: m.step_seconds, bars: !!c.bars, series, tip,
		title: m.source + ', ' + c.title + ': ' + texts.join(', '),
	});
	fig.dataset.peak = label(p.peak);
	fig.dataset.top = label(p.top);
	const per = c.summed ? ' per ' + (stepNames[m.step_seconds] || m.step_seconds + ' s') : '';
	fig.append(el('figcaption', c.title + per), p.svg, legend);
	return fig;
}

// The window shown, and the latest draw (an answer of an older one, or of
// another window, is not drawn over it).
let win = fromURL();
let started = 0, shown = 0;

function fromURL() {
	const w = new URLSearchParams(location.search).get('window');
	return windows.includes(w) ? w : windows[0];
}

// draw reads every source's series over the window and draws them; a
// source whose series cannot be read (its store is down) says why, in
// place of its charts.
async function draw() {
	const gen = ++started, w = win;
	const sources = await call('GET', '');
	const answers = await Promise.all(sources.map((s) =>
		call('GET', encodeURIComponent(s.source) + '/minutes', new URLSearchParams({ window: w }))
			.catch((e) => ({ source: s.source, error: e.message }))));
	if (w !== win || gen < shown) return;
	shown = gen;
	const groups = answers.map((m) => {
		const g = el('div', undefined, 'source-charts');
		g.dataset.source = m.source;
		g.append(el('h3', m.source));
		if (m.error) {
			g.append(el('p', 'Its series cannot be read: ' + m.error, 'charts-error'));
			return g;
		}
		for (const c of charts) {
			if (!c.inbox || 'inbox_backlog' in m) g.append(figure(m, c));
		}
		return g;
	});
	$('#charts').replaceChildren(...groups);
	$('#charts').dataset.window = w;
	$('#charts').dataset.drawn = String(Date.now());
	$('#charts-error').textContent = '';
}

function tick() {
	draw().catch((e) => { $('#charts-error').textContent = e.message; });
}

// showWindow marks the window's button and draws it.
function showWindow() {
	for (const b of document.querySelectorAll('#chart-window button')) {
		b.setAttribute('aria-pressed', String(b.dataset.window === win));
	}
	tick();
}

// choose switches to window w and records it in the page's URL: the
// hour, the default, is no parameter. The rest of the query (the source,
// tab, event and filters console.js keeps there) stays as it is.
function choose(w) {
	if (w === win) return;
	win = w;
	const q = new URLSearchParams(location.search);
	if (w === windows[0]) q.delete('window');
	else q.set('window', w);
	const s = q.toString();
	history.pushState(null, '', s ? '?' + s : location.pathname);
	showWindow();
}

{
	for (const b of document.querySelectorAll('#chart-window button')) {
		b.addEventListener('click', () => choose(b.dataset.window));
	}
	window.addEventListener('popstate', () => {
		if (fromURL() === win) return;
		win = fromURL();
		showWindow();
	});
	showWindow();
	setInterval(() => { if ($('#live').checked) tick(); }, 10000);
}
