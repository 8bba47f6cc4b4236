// Drawing one chart of a window's steps as SVG, built with DOM calls:
// a y-axis of round values, a time axis labelled for the window (−60 min
// … now), counts as stacked bars, durations as lines. What is charted is
// charts.js's; colours are charts.css's, by class.

const svgNS = 'http://www.w3.org/2000/svg';

// The chart's size, and the margins that hold the axes' labels.
const width = 480, height = 150;
const left = 46, right = 8, top = 8, bottom = 20;
const plotW = width - left - right, plotH = height - top - bottom;

// The labels of each window's time axis, evenly spaced from the start of
// its first step to the end of its last (the step now is in).
const timeLabels = {
	'1h': ['−60 min', '−45 min', '−30 min', '−15 min', 'now'],
	'24h': ['−24 h', '−18 h', '−12 h', '−6 h', 'now'],
	'7d': ['−7 d', '−6 d', '−5 d', '−4 d', '−3 d', '−2 d', '−1 d', 'now'],
};

function svg(tag, attrs, text) {
	const e = document.createElementNS(svgNS, tag);
	for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
	if (text !== undefined) e.textContent = text;
	return e;
}

// label writes a value for reading: whole numbers as they are, others to
// three significant digits.
export function label(v) {
	return String(Number.isInteger(v) ? v : Number(v.toPrecision(3)));
}

// ticks are the y-axis's values: from 0 to the first round value at or
// above peak, 1, 2 or 5 times a power of ten apart, at most four steps;
// whole numbers only for counts. An empty chart gets 0 and 1.
export function ticks(peak, whole) {
	const high = peak > 0 ? peak : 1;
	const base = 10 ** Math.floor(Math.log10(high / 4));
	let step = base * 10;
	for (const m of [1, 2, 5]) {
		if (Math.ceil(high / (base * m) - 1e-9) <= 4) {
			step = base * m;
			break;
		}
	}
	step = Number(step.toPrecision(1));
	if (whole) step = Math.max(1, step);
	const n = Math.ceil(high / step - 1e-9);
	return Array.from({ length: n + 1 }, (_, i) => Number((i * step).toPrecision(12)));
}

// plot draws a chart of the steps of a window (w: 1h, 24h or 7d) from
// `from`, stepSeconds apart, titled title. Each series is { key, values }:
// counts as stacked bars (a 0 draws nothing) with whole numbers on the
// y-axis, or durations as lines broken where a value is null (a step alone
// between gaps is a dot). tip(i, start) is the text shown over step i,
// null for none. It returns the SVG, its highest step and its y-axis's
// top.
export function plot({ w, from, stepSeconds, bars, series, tip, title }) {
	const n = series[0].values.length;
	let peak = 0;
	for (let i = 0; i < n; i++) {
		let stack = 0;
		for (const s of series) {
			const v = s.values[i] || 0;
			stack = bars ? stack + v : Math.max(stack, v);
		}
		peak = Math.max(peak, stack);
	}
	const ys = ticks(peak, bars);
	const yTop = ys[ys.length - 1];
	const y = (v) => top + plotH - (v / yTop) * plotH;
	const stepW = plotW / n;
	const x = (i) => left + i * stepW;

	const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img' });
	root.append(svg('title', {}, title));
	for (const v of ys) {
		root.append(svg('line', { x1: left, y1: y(v).toFixed(1), x2: width - right, y2: y(v).toFixed(1), class: v ? 'grid' : 'axis' }));
		root.append(svg('text', { x: left - 5, y: (y(v) + 3.5).toFixed(1), class: 'tick', 'text-anchor': 'end' }, label(v)));
	}
	const times = timeLabels[w] || [];
	times.forEach((t, i) => {
		const anchor = i === 0 ? 'start' : i === times.length - 1 ? 'end' : 'middle';
		root.append(svg('text', { x: (left + (i / (times.length - 1)) * plotW).toFixed(1), y: height - 5, class: 'time', 'text-anchor': anchor }, t));
	});

	if (bars) {
		const barW = Math.max(stepW - (stepW > 3 ? 1 : 0), 0.8);
		for (let i = 0; i < n; i++) {
			let base = top + plotH;
			for (const s of series) {
				const v = s.values[i];
				if (!v) continue;
				const h = Math.max((v / yTop) * plotH, 1);
				base -= h;
				root.append(svg('rect', { x: x(i).toFixed(2), y: base.toFixed(2), width: barW.toFixed(2), height: h.toFixed(2), class: 'bar-' + s.key }));
			}
		}
	} else {
		for (const s of series) {
			const has = (i) => (s.values[i] ?? null) !== null; // false outside the window too
			let d = '';
			for (let i = 0; i < n; i++) {
				if (!has(i)) continue;
				const cx = (x(i) + stepW / 2).toFixed(2), cy = y(s.values[i]).toFixed(2);
				d += (has(i - 1) ? 'L' : 'M') + cx + ' ' + cy;
				if (!has(i - 1) && !has(i + 1)) root.append(svg('circle', { cx, cy, r: 2.5, class: 'point-' + s.key }));
			}
			if (d) root.append(svg('path', { d, class: 'line-' + s.key }));
		}
	}

	// a column over each step with something to say, its text shown on
	// hover
	for (let i = 0; i < n; i++) {
		const text = tip(i, new Date(Date.parse(from) + i * stepSeconds * 1000));
		if (!text) continue;
		const col = svg('rect', { x: x(i).toFixed(2), y: top, width: stepW.toFixed(2), height: plotH, class: 'hover' });
		col.append(svg('title', {}, text));
		root.append(col);
	}
	return { svg: root, peak, top: yTop };
}
