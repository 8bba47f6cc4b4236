// The console's charts: for each source, the last hour of deliveries a
// minute at a time (new, replayed, invalid signature, failed), read from
// the admin API's /<source>/minutes and drawn as SVG built with DOM calls:
// no library, no network but the page's own origin, nothing inline.

import { api } from './api.js';

const svgNS = 'http://www.w3.org/2000/svg';
const series = [
	['new', 'new'],
	['replayed', 'replayed'],
	['invalid', 'invalid signature'],
	['failed', 'failed'],
];
const width = 360, height = 72, pad = 2;

async function getJSON(path) {
	const resp = await fetch(new URL(path, api), { credentials: 'same-origin', cache: 'no-store' });
	const body = await resp.json().catch(() => ({ error: resp.statusText }));
	if (!resp.ok) throw new Error(body.error || resp.statusText);
	return body;
}

function svg(tag, attrs) {
	const e = document.createElementNS(svgNS, tag);
	for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
	return e;
}

// chart draws one source's hour: a column per minute, its series stacked.
function chart(m) {
	const fig = document.createElement('figure');
	fig.className = 'chart';
	fig.dataset.source = m.source;
	const n = m.new.length;
	const totals = {};
	let peak = 1;
	for (let i = 0; i < n; i++) {
		let sum = 0;
		for (const [key] of series) sum += m[key][i];
		peak = Math.max(peak, sum);
	}
	for (const [key] of series) {
		totals[key] = m[key].reduce((a, b) => a + b, 0);
		fig.dataset[key] = totals[key];
	}
	const cap = document.createElement('figcaption');
	const name = document.createElement('strong');
	name.textContent = m.source;
	cap.append(name, ' ', document.createTextNode('last hour, per minute (peak ' + peak + ')'));
	const plot = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img' });
	const title = svg('title', {});
	title.textContent = m.source + ': ' + series.map(([key, label]) => totals[key] + ' ' + label).join(', ') + ' in the last hour';
	plot.append(title, svg('line', { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: 'axis' }));
	const step = width / n;
	const scale = (height - pad) / peak;
	for (let i = 0; i < n; i++) {
		let y = height;
		for (const [key, label] of series) {
			const v = m[key][i];
			if (!v) continue;
			const h = Math.max(v * scale, 1);
			y -= h;
			const bar = svg('rect', { x: (i * step + 0.5).toFixed(1), y: y.toFixed(1), width: Math.max(step - 1, 1).toFixed(1), height: h.toFixed(1), class: 'bar-' + key });
			const at = new Date(Date.parse(m.from) + i * m.step_seconds * 1000);
			const tip = svg('title', {});
			tip.textContent = at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) + ': ' + v + ' ' + label;
			bar.append(tip);
			plot.append(bar);
		}
	}
	const legend = document.createElement('ul');
	legend.className = 'legend';
	for (const [key, label] of series) {
		const li = document.createElement('li');
		li.className = 'key-' + key;
		li.textContent = label + ' ' + totals[key];
		legend.append(li);
	}
	const axis = document.createElement('div');
	axis.className = 'time-axis';
	const from = document.createElement('span');
	from.textContent = '−60 min';
	const to = document.createElement('span');
	to.textContent = 'now';
	axis.append(from, to);
	fig.append(cap, plot, axis, legend);
	return fig;
}

async function draw() {
	const sources = await getJSON('');
	const figs = [];
	for (const s of sources) {
		figs.push(chart(await getJSON(encodeURIComponent(s.source) + '/minutes')));
	}
	document.querySelector('#charts').replaceChildren(...figs);
	document.querySelector('#charts').dataset.drawn = String(Date.now());
}

{
	const tick = () => draw().catch((e) => { document.querySelector('#charts-error').textContent = e.message; });
	tick();
	setInterval(() => { if (document.querySelector('#live').checked) tick(); }, 10000);
}
