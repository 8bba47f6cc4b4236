package main

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// series is one parsed sample key.
type series struct {
	name   string
	labels map[string]string
}

func parseSeries(s string) series {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return series{name: s, labels: map[string]string{}}
	}
	out := series{name: s[:i], labels: map[string]string{}}
	rest := strings.TrimSuffix(s[i+1:], "}")
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq < 0 {
			break
		}
		k := rest[:eq]
		rest = rest[eq+1:]
		v, err := strconv.QuotedPrefix(rest)
		if err != nil {
			break
		}
		rest = strings.TrimPrefix(rest[len(v):], ",")
		out.labels[k], _ = strconv.Unquote(v)
	}
	return out
}

// sum adds up the samples of name whose labels match every filter (a filter
// value of "" matches anything) and groups them by the label by ("" = one group).
func sum(s Scrape, name string, filter map[string]string, by string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s.Samples {
		p := parseSeries(k)
		if p.name != name {
			continue
		}
		ok := true
		for fk, fv := range filter {
			if fv != "" && p.labels[fk] != fv {
				ok = false
				break
			}
		}
		if ok {
			out[p.labels[by]] += v
		}
	}
	return out
}

// at returns the index of the last scrape at or before t.
func at(run Run, t float64) int {
	j := 0
	for i, s := range run.Scrapes {
		if s.T <= t+1e-9 {
			j = i
		}
	}
	return j
}

// windowStart returns the index of the scrape a rate at scrape i starts
// from: the last one a window or more before it (the first scrape while
// less than a window has passed), or the one just before i when the
// window is shorter than the scrape interval.
func windowStart(run Run, i int) int {
	j := at(run, run.Scrapes[i].T-run.Window)
	if j == i {
		j = i - 1
	}
	return j
}

// Point is one chart point; NaN values are gaps.
type Point struct{ T, V float64 }

// rateBy is rate(name[window]) summed by a label, at every scrape once a
// full window (or, before that, at least two scrapes) is available.
func rateBy(run Run, name string, filter map[string]string, by string) map[string][]Point {
	out := map[string][]Point{}
	for i := 1; i < len(run.Scrapes); i++ {
		s, start := run.Scrapes[i], run.Scrapes[windowStart(run, i)]
		dt := s.T - start.T
		cur, prev := sum(s, name, filter, by), sum(start, name, filter, by)
		for k, v := range cur {
			d := v - prev[k]
			if d < 0 { // counter reset
				d = v
			}
			out[k] = append(out[k], Point{s.T, d / dt})
		}
	}
	return out
}

// quantile follows Prometheus' histogram_quantile over the windowed
// increase of the buckets of one op.
func quantiles(run Run, op string, qs []float64) [][]Point {
	out := make([][]Point, len(qs))
	name := prefix + "store_duration_seconds_bucket"
	for i := 1; i < len(run.Scrapes); i++ {
		s, start := run.Scrapes[i], run.Scrapes[windowStart(run, i)]
		cur := sum(s, name, map[string]string{"op": op}, "le")
		prev := sum(start, name, map[string]string{"op": op}, "le")
		type bucket struct{ le, n float64 }
		var bs []bucket
		for le, v := range cur {
			f, err := strconv.ParseFloat(le, 64)
			if le == "+Inf" {
				f, err = math.Inf(1), nil
			}
			if err != nil {
				continue
			}
			bs = append(bs, bucket{f, v - prev[le]})
		}
		sort.Slice(bs, func(a, b int) bool { return bs[a].le < bs[b].le })
		for qi, q := range qs {
			v := math.NaN()
			if len(bs) > 1 && bs[len(bs)-1].n > 0 {
				total := bs[len(bs)-1].n
				rank := q * total
				k := sort.Search(len(bs), func(x int) bool { return bs[x].n >= rank })
				switch {
				case k == len(bs)-1:
					v = bs[len(bs)-2].le
				default:
					lo, below := 0.0, 0.0
					if k > 0 {
						lo, below = bs[k-1].le, bs[k-1].n
					}
					inBucket := bs[k].n - below
					if inBucket > 0 {
						v = lo + (bs[k].le-lo)*((rank-below)/inBucket)
					} else {
						v = bs[k].le
					}
				}
			}
			out[qi] = append(out[qi], Point{s.T, v})
		}
	}
	return out
}
