package series

import (
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
)

// What a bucket holds, by field name, in every store: a count per result
// (`new`, `replayed`, …, the names of internal/results), a count per
// inbox outcome (`delivered`, `retried`, `dead_lettered`), the highest
// inbox backlog seen (`backlog`), and the non-empty buckets of three
// histograms (`h<n>` the handling time, `a<n>` the application's, `l<n>`
// the inbox's delivery lag; hist.go). The totals hold the counts, and
// when they began (`since`, Unix seconds) and were last added to (`at`).

// The inbox outcomes.
const (
	Delivered    = "delivered"     // answered 2xx by deliver_to
	Retried      = "retried"       // failed, a retry scheduled
	DeadLettered = "dead_lettered" // failed for good, dead-lettered
)

// The counters: every result, then every inbox outcome.
var counterNames = func() []string {
	names := append([]string(nil), results.All[:]...)
	return append(names, Delivered, Retried, DeadLettered)
}()

const (
	numCounters = len(results.All) + 3
	delivered   = len(results.All) // the index of Delivered among the counters
	retried     = delivered + 1
	deadLetter  = delivered + 2
)

// The histograms.
const (
	histHandled = iota // from a request's arrival to its answer
	histApp            // the application's answer to the handler or to the inbox
	histLag            // from an inbox event's acceptance to its delivery
	numHists
)

// histPrefix names each histogram's buckets.
var histPrefix = [numHists]string{"h", "a", "l"}

// bucketNames are the field names of every histogram's buckets.
var bucketNames = func() (out [numHists][numBuckets]string) {
	for h := range numHists {
		for b := range numBuckets {
			out[h][b] = histPrefix[h] + strconv.Itoa(b)
		}
	}
	return out
}()

// The other fields.
const (
	fieldBacklog = "backlog"
	fieldSince   = "since"
	fieldAt      = "at"
)

// parseBucket returns the histogram and bucket a field name is, if it is
// one.
func parseBucket(name string) (hist, bucket int, ok bool) {
	if len(name) < 2 {
		return 0, 0, false
	}
	hist = strings.Index("hal", name[:1])
	if hist < 0 {
		return 0, 0, false
	}
	b, err := strconv.Atoi(name[1:])
	if err != nil || b < 0 || b >= numBuckets {
		return 0, 0, false
	}
	return hist, b, true
}

// field is a name and a number.
type field struct {
	name string
	n    int64
}

// write is one flush of a source: what its counters and histogram buckets
// gained since the last one, and the highest backlog seen meanwhile, added
// in one store write to the buckets of the minute and of the hour of at,
// and the counters to the totals.
type write struct {
	at      time.Time
	counts  []field // into the minute, the hour and the totals
	buckets []field // into the minute and the hour
	highs   []field // the minute's and the hour's highest
}

func (w *write) empty() bool { return len(w.counts)+len(w.buckets)+len(w.highs) == 0 }

// fields is a bucket as read: each field's number.
type fields map[string]int64

// apply adds w to f: the counts, with buckets the histograms' buckets
// too, and the highs.
func (f fields) apply(w *write, buckets bool) {
	for _, c := range w.counts {
		f[c.name] += c.n
	}
	if buckets {
		for _, c := range w.buckets {
			f[c.name] += c.n
		}
		for _, c := range w.highs {
			f[c.name] = max(f[c.name], c.n)
		}
	}
}

// The codec of a bucket in the file and memory stores: each field as its
// name's length (uvarint), its name and its number (varint), by name.

func encodeFields(f fields) []byte {
	names := make([]string, 0, len(f))
	for name := range f {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]byte, 0, len(f)*8)
	for _, name := range names {
		out = binary.AppendUvarint(out, uint64(len(name)))
		out = append(out, name...)
		out = binary.AppendVarint(out, f[name])
	}
	return out
}

var errBadBucket = errors.New("malformed series bucket")

func decodeFields(b []byte) (fields, error) {
	f := fields{}
	for len(b) > 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return nil, errBadBucket
		}
		name := string(b[n : n+int(l)])
		b = b[n+int(l):]
		v, n := binary.Varint(b)
		if n <= 0 {
			return nil, errBadBucket
		}
		b = b[n:]
		f[name] = v
	}
	return f, nil
}
