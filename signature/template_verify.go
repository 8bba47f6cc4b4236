package signature

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The template scheme's request path: the JSON fields read once, the
// algorithm, the timestamp, the signatures and the key, then the string
// built and checked.

// templateState is one request's working memory, pooled.
type templateState struct {
	spans   []jsonSpan // the values of the JSON paths
	item    [1]jsonSpan
	include []bool // per optional part, whether it is signed
	ts      string // the timestamp as sent, for {timestamp}
	msg     []byte // the message, the body left out at bodyAt
	bodyAt  []int
	vals    []byte // decoded JSON strings
	cands   [maxSignatures]string
	sigBuf  [maxRSABytes + 2]byte
	digest  [64]byte
	crc     struct {
		done bool
		v    uint32
	}
	sha struct {
		done bool
		v    [sha256.Size]byte
	}
}

// Verify implements Verifier.
func (v *templateVerifier) Verify(r *http.Request, body []byte) error {
	st := v.states.Get().(*templateState)
	defer v.release(st)
	if v.items != nil {
		return v.verifyItems(st, r, body)
	}
	if v.paths.leaves > 0 {
		if err := v.paths.readJSON(body, st.spans); err != nil {
			return err
		}
	}
	return v.verifyOne(st, r, body)
}

// release gives a state back to the pool, unless a long body or URL
// grew it.
func (v *templateVerifier) release(st *templateState) {
	if cap(st.msg) > 64<<10 || cap(st.vals) > 64<<10 {
		return
	}
	st.msg, st.vals, st.bodyAt = st.msg[:0], st.vals[:0], st.bodyAt[:0]
	st.crc.done, st.sha.done, st.ts = false, false, ""
	v.states.Put(st)
}

// verifyItems verifies every item of a delivery in Items mode.
func (v *templateVerifier) verifyItems(st *templateState, r *http.Request, body []byte) error {
	arr := st.item[:]
	if v.items.array != nil {
		if err := v.items.array.readJSON(body, arr); err != nil {
			return err
		}
	} else {
		// the body is the array: its end is checked after the last item
		sc := jsonScanner{b: body}
		if bytes.HasPrefix(body, utf8BOM) {
			sc.i = len(utf8BOM)
		}
		sc.space()
		arr[0] = jsonSpan{start: sc.i}
		if sc.i == len(body) {
			return ErrInvalid
		}
	}
	if arr[0].start < 0 {
		return ErrMissing
	}
	if body[arr[0].start] != '[' {
		return ErrInvalid
	}
	es := jsonScanner{b: body, i: arr[0].start + 1}
	es.space()
	if es.i < len(body) && body[es.i] == ']' {
		return ErrMissing
	}
	for n := 1; ; n++ {
		if n > v.maxItems {
			return ErrInvalid
		}
		item := jsonSpan{start: es.i}
		if v.items.inner != nil {
			if err := v.items.inner.readAt(&es, arr); err != nil {
				return err
			}
			item = arr[0]
		} else {
			if err := es.skipValue(); err != nil {
				return err
			}
			item.end = es.i
		}
		if item.start < 0 {
			return ErrMissing
		}
		is := jsonScanner{b: body, i: item.start}
		if err := v.paths.readAt(&is, st.spans); err != nil {
			return err
		}
		if err := v.verifyOne(st, r, body); err != nil {
			return err
		}
		done, err := es.next(']')
		if err != nil {
			return err
		}
		if done {
			if v.items.array == nil {
				if es.space(); es.i != len(body) {
					return ErrInvalid
				}
			}
			return nil
		}
	}
}

// verifyOne verifies one signed message (the delivery, or an item of it),
// its JSON fields read into st.spans, and its claims.
func (v *templateVerifier) verifyOne(st *templateState, r *http.Request, body []byte) error {
	if err := v.verifySignature(st, r, body); err != nil {
		return err
	}
	for _, c := range v.claims {
		val, ok, err := v.value(st, c.src, r, body)
		if err != nil {
			return err
		}
		if !ok || !slices.Contains(c.values, val) {
			return ErrInvalid
		}
	}
	return nil
}

// verifySignature verifies the signature of one signed message.
func (v *templateVerifier) verifySignature(st *templateState, r *http.Request, body []byte) error {
	st.vals = st.vals[:0]
	a := v.alg
	if a == nil {
		val, ok, err := v.value(st, v.algField, r, body)
		if err != nil {
			return err
		}
		if !ok {
			return ErrMissing
		}
		if a = v.algValues[val]; a == nil {
			return ErrInvalid
		}
	}
	if v.sets == "" {
		return v.verifySet(st, r, body, a, "", false)
	}
	return v.verifySets(st, r, body, a)
}

// verifySets verifies the sets of the signature header's values one by
// one (SignatureLocation.Sets), up to maxSets: the delivery is authentic
// when one is. A failure is ErrInvalid when some set was checked and
// did not match, else ErrTimestamp when a set's timestamp was outside
// the tolerance, else ErrMissing.
func (v *templateVerifier) verifySets(st *templateState, r *http.Request, body []byte, a *algorithm) error {
	values, err := headerValues(r.Header, v.sig.name)
	if err != nil {
		return err
	}
	result, n := error(ErrMissing), 0
	for _, val := range values {
		for val != "" && n < maxSets {
			var set string
			set, val, _ = strings.Cut(val, v.sets)
			if set = strings.TrimSpace(set); set == "" {
				continue
			}
			n++
			switch err := v.verifySet(st, r, body, a, set, true); err {
			case nil:
				return nil
			case ErrInvalid:
				result = ErrInvalid
			case ErrTimestamp:
				if result != ErrInvalid {
					result = ErrTimestamp
				}
			case ErrMissing:
			default:
				return err
			}
		}
	}
	return result
}

// verifySet verifies the message under the signatures of the delivery,
// or of one set of its signature header when inSet.
func (v *templateVerifier) verifySet(st *templateState, r *http.Request, body []byte, a *algorithm, set string, inSet bool) error {
	if v.ts.kind != 0 {
		if err := v.checkTimestamp(st, r, body, set, inSet); err != nil {
			return err
		}
	}
	limit := maxAsymmetric
	if a.family == familyHMAC || a.family == familyToken {
		limit = maxSignatures
	}
	n, err := v.candidates(st, r, body, limit, set, inSet)
	if err != nil {
		return err
	}
	if a.family == familyToken {
		ok := false
		for _, c := range st.cands[:n] {
			ok = v.tokens.match(c) || ok
		}
		if !ok {
			return ErrInvalid
		}
		return nil
	}
	if a.family == familyHMAC {
		var sigs sigSet
		for _, c := range st.cands[:n] {
			sigs.add(v.encoding, c)
		}
		if err := v.build(st, r, body, false); err != nil {
			return err
		}
		if !v.keyrings[a].matchFunc(&sigs, func(h hash.Hash) { st.writeTo(h, body) }) {
			return ErrInvalid
		}
		return nil
	}
	keys := v.keys
	if v.certs != nil {
		k, err := v.certKey(st, r, body)
		if err != nil {
			return err
		}
		keys = []crypto.PublicKey{k}
	}
	if err := v.build(st, r, body, a.family == familyEd25519); err != nil {
		return err
	}
	var digest []byte
	if a.family != familyEd25519 {
		h := digests[a.hash].Get().(hash.Hash)
		h.Reset()
		st.writeTo(h, body)
		digest = h.Sum(st.digest[:0])
		digests[a.hash].Put(h)
	}
	for _, c := range st.cands[:n] {
		sig, ok := decodeRSASignature(st.sigBuf[:], v.encoding, c)
		if !ok {
			continue
		}
		for _, k := range keys {
			if verifyPublic(a, k, st.msg, digest, sig, v.rawECDSA) {
				return nil
			}
		}
	}
	return ErrInvalid
}

// certKey returns the key of the certificate the delivery names.
func (v *templateVerifier) certKey(st *templateState, r *http.Request, body []byte) (crypto.PublicKey, error) {
	u, ok, err := v.value(st, v.certURL, r, body)
	if err != nil {
		return nil, err
	}
	if !ok || u == "" {
		return nil, ErrMissing
	}
	return v.certs.key(r.Context(), u)
}

// checkTimestamp reads the signed time into st.ts and checks it against
// the tolerance; a timestamp in the signature's header is read within
// the set when inSet.
func (v *templateVerifier) checkTimestamp(st *templateState, r *http.Request, body []byte, set string, inSet bool) error {
	val, ok := set, true
	if !inSet || !v.tsInSet {
		var err error
		if val, ok, err = v.value(st, v.ts, r, body); err != nil {
			return err
		}
	}
	if val = strings.TrimSpace(val); !ok || val == "" {
		return ErrMissing
	}
	if v.tsSep != "" || v.tsPrefix != "" {
		if val, ok = v.timestampItem(val); !ok {
			return ErrInvalid
		}
	}
	st.ts = val
	var t time.Time
	switch v.unit {
	case unitRFC3339:
		var err error
		if t, err = time.Parse(time.RFC3339Nano, val); err != nil {
			return ErrInvalid
		}
	default:
		n, ok := parseUint(val)
		if !ok {
			return ErrInvalid
		}
		if v.unit == unitMillis {
			t = time.UnixMilli(int64(n))
		} else {
			t = time.Unix(int64(n), 0)
		}
	}
	return withinTolerance(t, v.tolerance)
}

// timestampItem takes the timestamp out of a value that holds more
// (TimestampLocation's Separator and Prefix): the first item with the
// prefix, the prefix removed.
func (v *templateVerifier) timestampItem(val string) (string, bool) {
	for i := 0; val != "" && i < maxHeaderItems; i++ {
		item := val
		if v.tsSep != "" {
			item, val, _ = strings.Cut(val, v.tsSep)
		} else {
			val = ""
		}
		if ts, ok := strings.CutPrefix(strings.TrimSpace(item), v.tsPrefix); ok {
			return strings.TrimSpace(ts), true
		}
	}
	return "", false
}

// candidates puts the delivery's signatures (or those of one set, when
// inSet), as written (prefix removed), in st.cands, at most limit of
// them; ErrMissing when there is no value, ErrInvalid when no value
// holds a signature.
func (v *templateVerifier) candidates(st *templateState, r *http.Request, body []byte, limit int, set string, inSet bool) (int, error) {
	n, seen := 0, 0
	switch {
	case inSet:
		n, _ = v.split(st, set, n, seen, limit)
	case v.sig.kind == fromHeader:
		values, err := headerValues(r.Header, v.sig.name)
		if err != nil {
			return 0, err
		}
		for _, val := range values {
			n, seen = v.split(st, val, n, seen, limit)
		}
	default:
		val, ok, err := v.value(st, v.sig, r, body)
		if err != nil {
			return 0, err
		}
		if !ok || strings.TrimSpace(val) == "" {
			return 0, ErrMissing
		}
		n, _ = v.split(st, val, n, seen, limit)
	}
	if n == 0 {
		return 0, ErrInvalid
	}
	return n, nil
}

// split adds the signatures of one value to st.cands.
func (v *templateVerifier) split(st *templateState, val string, n, seen, limit int) (int, int) {
	for i := 0; val != "" && n < limit && seen < maxHeaderItems; i++ {
		item := val
		if v.separator != "" {
			item, val, _ = strings.Cut(val, v.separator)
		} else {
			val = ""
		}
		seen++
		if i < v.skip {
			// not a signature (Recurly's timestamp)
			continue
		}
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		if v.prefix != "" {
			var ok bool
			if item, ok = strings.CutPrefix(item, v.prefix); !ok {
				continue
			}
		}
		st.cands[n] = item
		n++
	}
	return n, seen
}

// value returns the value of a source and whether it is there. A JSON
// string is decoded (into st.vals); other JSON values are as written.
func (v *templateVerifier) value(st *templateState, src source, r *http.Request, body []byte) (string, bool, error) {
	switch src.kind {
	case fromHeader:
		if len(r.Header[src.name]) == 0 {
			return "", false, nil
		}
		return headerValue(r.Header, src.name), true, nil
	case fromQuery:
		val, ok := queryParam(r.URL.RawQuery, src.name)
		return val, ok, nil
	}
	sp := st.spans[src.leaf]
	if sp.start < 0 {
		return "", false, nil
	}
	lit := body[sp.start:sp.end]
	if lit[0] != '"' {
		return bytesView(lit), true, nil
	}
	if !hasEscape(lit) {
		return bytesView(lit[1 : len(lit)-1]), true, nil
	}
	start := len(st.vals)
	var ok bool
	if st.vals, ok = appendJSONString(st.vals, lit); !ok {
		return "", false, ErrInvalid
	}
	return bytesView(st.vals[start:]), true, nil
}

// hasEscape reports whether a JSON string literal has a backslash.
func hasEscape(lit []byte) bool {
	for _, c := range lit {
		if c == '\\' {
			return true
		}
	}
	return false
}

// build writes the message into st.msg: the body itself when inline is
// set, else its places in st.bodyAt (the body is written to the hash
// where it is, not copied).
func (v *templateVerifier) build(st *templateState, r *http.Request, body []byte, inline bool) error {
	t := v.tmpl
	for g, rng := range t.groups {
		st.include[g] = v.present(st, t.parts[rng.from:rng.to], r)
	}
	msg := st.msg[:0]
	st.bodyAt = st.bodyAt[:0]
	for i := range t.parts {
		p := &t.parts[i]
		if p.group >= 0 && !st.include[p.group] {
			continue
		}
		switch p.kind {
		case partText:
			msg = append(msg, p.text...)
		case partBody:
			if inline {
				msg = append(msg, body...)
			} else {
				st.bodyAt = append(st.bodyAt, len(msg))
			}
		case partMethod:
			msg = append(msg, r.Method...)
		case partURL:
			msg = v.publicURL(msg, r)
		case partCRC32:
			if !st.crc.done {
				st.crc.v, st.crc.done = crc32.ChecksumIEEE(body), true
			}
			msg = strconv.AppendUint(msg, uint64(st.crc.v), 10)
		case partSHA256:
			if !st.sha.done {
				st.sha.v, st.sha.done = sha256.Sum256(body), true
			}
			msg = hex.AppendEncode(msg, st.sha.v[:])
		case partTimestamp:
			msg = append(msg, st.ts...)
		case partHeader:
			msg = append(msg, headerValue(r.Header, p.text)...)
		case partQuery:
			val, _ := queryParam(r.URL.RawQuery, p.text)
			msg = append(msg, val...)
		case partJSON:
			sp := st.spans[p.leaf]
			if sp.start < 0 {
				continue
			}
			lit := body[sp.start:sp.end]
			if lit[0] != '"' {
				msg = append(msg, lit...)
				continue
			}
			var ok bool
			if msg, ok = appendJSONString(msg, lit); !ok {
				st.msg = msg
				return ErrInvalid
			}
		}
	}
	st.msg = msg
	return nil
}

// present reports whether every field of an optional part is there.
func (v *templateVerifier) present(st *templateState, parts []part, r *http.Request) bool {
	for i := range parts {
		p := &parts[i]
		switch p.kind {
		case partHeader:
			if len(r.Header[p.text]) == 0 {
				return false
			}
		case partQuery:
			if _, ok := queryParam(r.URL.RawQuery, p.text); !ok {
				return false
			}
		case partJSON:
			if st.spans[p.leaf].start < 0 {
				return false
			}
		}
	}
	return true
}

// writeTo writes the message to h, the body at its places.
func (st *templateState) writeTo(h hash.Hash, body []byte) {
	prev := 0
	for _, at := range st.bodyAt {
		h.Write(st.msg[prev:at])
		h.Write(body)
		prev = at
	}
	h.Write(st.msg[prev:])
}

var _ Verifier = (*templateVerifier)(nil)
