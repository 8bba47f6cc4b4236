package series

import (
	"math"
	"math/bits"
	"time"
)

// Durations are counted in buckets of a log scale, so that the buckets of
// any minutes and of any instances add up, and a percentile of a step of
// a chart is read from its buckets merged: bucket 0 holds what is under
// 8 µs; above, each doubling of the duration is cut into four buckets
// (a bucket is at most 25 % wider than its lower bound, and a percentile
// read at its middle is off by at most 12.5 %). Durations of 2^39 µs (six
// days and a bit) and over are counted in the last bucket.

// numBuckets is the number of buckets of a histogram.
const numBuckets = 1 + 4*(maxExp-minExp+1)

const (
	minExp = 3  // the first doubling cut into buckets: 8 µs
	maxExp = 38 // the last: 2^38 µs to 2^39 µs
)

// bucketOf returns the bucket of a duration.
func bucketOf(d time.Duration) int {
	us := d.Microseconds()
	if us < 1<<minExp {
		return 0
	}
	e := bits.Len64(uint64(us)) - 1
	if e > maxExp {
		return numBuckets - 1
	}
	sub := int(us>>(e-2)) & 3
	return 1 + 4*(e-minExp) + sub
}

// bucketMiddle returns the middle of a bucket, in milliseconds.
func bucketMiddle(b int) float64 {
	if b == 0 {
		return float64(1<<minExp) / 2 / 1000
	}
	e, sub := (b-1)/4+minExp, (b-1)%4
	lower := float64(int64(4+sub) << (e - 2))
	width := float64(int64(1) << (e - 2))
	return (lower + width/2) / 1000
}

// quantile returns the q-quantile of the durations counted in h, in
// milliseconds, or NaN when h counts none.
func quantile(h *[numBuckets]int64, q float64) float64 {
	var n int64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return math.NaN()
	}
	rank := max(int64(math.Ceil(q*float64(n))), 1)
	var seen int64
	for b, c := range h {
		seen += c
		if seen >= rank {
			return bucketMiddle(b)
		}
	}
	return bucketMiddle(numBuckets - 1)
}
