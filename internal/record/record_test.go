package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"reflect"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	hash := sha256.Sum256([]byte(`{"id":"evt_1"}`))
	for _, tc := range []struct {
		name       string
		status     int
		header     http.Header
		body       []byte
		noBody     bool
		wantHeader http.Header
		wantBody   []byte
	}{
		{
			name:   "status, multi-value headers and body",
			status: 201,
			header: http.Header{
				"Content-Type": {"application/json"},
				"Set-Cookie":   {"a=1", "b=2", "c=3"},
				"X-Empty":      {""},
				"Location":     {"/orders/42"},
			},
			body: []byte(`{"ok":true}`),
			wantHeader: http.Header{
				"Content-Type": {"application/json"},
				"Set-Cookie":   {"a=1", "b=2", "c=3"},
				"X-Empty":      {""},
				"Location":     {"/orders/42"},
			},
			wantBody: []byte(`{"ok":true}`),
		},
		{
			name:   "hop-by-hop, Date and the replay marker left out",
			status: 200,
			header: http.Header{
				"Connection":          {"close"},
				"Keep-Alive":          {"timeout=5"},
				"Transfer-Encoding":   {"chunked"},
				"Upgrade":             {"h2c"},
				"Te":                  {"trailers"},
				"Trailer":             {"X-Checksum"},
				"Proxy-Connection":    {"keep-alive"},
				"Date":                {"Mon, 02 Jan 2006 15:04:05 GMT"},
				"Alt-Svc":             {`h3=":443"`},
				"Idempotent-Replayed": {"true"},
				"Trailer:X-Checksum":  {"abc"},
				"Cache-Control":       {"no-store"},
			},
			body:       []byte("ok"),
			wantHeader: http.Header{"Cache-Control": {"no-store"}},
			wantBody:   []byte("ok"),
		},
		{
			name:   "headers the Connection header names left out, in any case",
			status: 200,
			header: http.Header{
				"Connection":   {"X-Conn-One, close", " x-conn-two "},
				"X-Conn-One":   {"1"},
				"X-Conn-Two":   {"2"},
				"X-Conn-Three": {"3"},
			},
			body:       []byte("ok"),
			wantHeader: http.Header{"X-Conn-Three": {"3"}},
			wantBody:   []byte("ok"),
		},
		{
			name:       "no headers, empty body",
			status:     204,
			header:     http.Header{},
			wantHeader: http.Header{},
		},
		{
			name:       "nil header",
			status:     404,
			body:       []byte("not found"),
			wantHeader: http.Header{},
			wantBody:   []byte("not found"),
		},
		{
			name:       "no-body flag drops the body",
			status:     200,
			header:     http.Header{"Content-Length": {"2000000"}},
			body:       []byte("would be too large"),
			noBody:     true,
			wantHeader: http.Header{"Content-Length": {"2000000"}},
		},
		{
			name:       "binary body and a long header value",
			status:     599,
			header:     http.Header{"X-Long": {string(bytes.Repeat([]byte("v"), 300))}},
			body:       []byte{0, 1, 2, 0xff, 0xfe},
			wantHeader: http.Header{"X-Long": {string(bytes.Repeat([]byte("v"), 300))}},
			wantBody:   []byte{0, 1, 2, 0xff, 0xfe},
		},
		{
			name:       "lowest status",
			status:     100,
			header:     http.Header{},
			wantHeader: http.Header{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := encodeTestRecord(nil, tc.status, tc.header, tc.body, tc.noBody, &hash)
			rec, err := Decode(enc)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if rec.Status != tc.status {
				t.Errorf("status = %d, want %d", rec.Status, tc.status)
			}
			if rec.NoBody != tc.noBody {
				t.Errorf("noBody = %v, want %v", rec.NoBody, tc.noBody)
			}
			if !bytes.Equal(rec.BodyHash, hash[:]) {
				t.Errorf("bodyHash = %x, want %x", rec.BodyHash, hash)
			}
			if !bytes.Equal(rec.Body, tc.wantBody) {
				t.Errorf("body = %q, want %q", rec.Body, tc.wantBody)
			}
			got := http.Header{}
			rec.writeTestHeaders(got)
			if !reflect.DeepEqual(got, tc.wantHeader) {
				t.Errorf("headers = %v, want %v", got, tc.wantHeader)
			}
		})
	}
}

func TestRecordEncodeAppends(t *testing.T) {
	t.Parallel()
	hash := sha256.Sum256(nil)
	prefix := []byte("keep")
	enc := encodeTestRecord(append([]byte(nil), prefix...), 200, http.Header{"A": {"1"}}, []byte("b"), false, &hash)
	if !bytes.HasPrefix(enc, prefix) {
		t.Fatalf("Encode overwrote dst: %q", enc[:4])
	}
	rec, err := Decode(enc[len(prefix):])
	if err != nil || rec.Status != 200 || string(rec.Body) != "b" {
		t.Fatalf("decode of appended record = %+v, %v", rec, err)
	}
}

// TestRecordWriteHeadersIndependentValues checks that the values written for
// one header cannot be grown into another header's values (they share one
// backing slice).
func TestRecordWriteHeadersIndependentValues(t *testing.T) {
	t.Parallel()
	hash := sha256.Sum256(nil)
	enc := encodeTestRecord(nil, 200, http.Header{"A": {"1", "2"}, "B": {"3"}}, nil, false, &hash)
	rec, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	rec.WriteReplayHeaders(h, "")
	delete(h, ReplayedHeader)
	h.Add("A", "added")
	h.Add("B", "added")
	want := http.Header{"A": {"1", "2", "added"}, "B": {"3", "added"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("headers after Add = %v, want %v", h, want)
	}
	// merging into a header that already has the name adds to it
	h2 := http.Header{"A": {"0"}}
	rec.WriteReplayHeaders(h2, "")
	delete(h2, ReplayedHeader)
	if got := h2["A"]; !reflect.DeepEqual(got, []string{"1", "2"}) && !reflect.DeepEqual(got, []string{"0", "1", "2"}) {
		t.Errorf("A after WriteReplayHeaders over an existing value = %q", got)
	}
}

func TestRecordCorrupt(t *testing.T) {
	t.Parallel()
	hash := sha256.Sum256([]byte("x"))
	valid := encodeTestRecord(nil, 200, http.Header{"Content-Type": {"text/plain"}, "X-Multi": {"1", "2"}}, []byte("body"), false, &hash)
	if _, err := Decode(valid); err != nil {
		t.Fatalf("valid record: %v", err)
	}
	// The header block ends where the body starts, so cutting into the
	// body yields a valid record with a shorter body; every cut before
	// the body must be refused.
	bodyStart := len(valid) - len("body")
	for n := 0; n < bodyStart; n++ {
		if rec, err := Decode(valid[:n]); err == nil {
			t.Errorf("truncation to %d of %d bytes decoded as %+v, want an error", n, len(valid), rec)
		}
	}
	for n := bodyStart; n <= len(valid); n++ {
		rec, err := Decode(valid[:n])
		if err != nil {
			t.Errorf("truncation to %d bytes (in the body): %v", n, err)
			continue
		}
		if string(rec.Body) != "body"[:n-bodyStart] {
			t.Errorf("truncation to %d bytes: body %q", n, rec.Body)
		}
	}

	mutate := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), valid...))
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"wrong version", mutate(func(b []byte) []byte { b[0] = 2; return b })},
		{"version zero", mutate(func(b []byte) []byte { b[0] = 0; return b })},
		{"status zero", mutate(func(b []byte) []byte { b[2], b[3] = 0, 0; return b })},
		{"status 99", mutate(func(b []byte) []byte { b[2], b[3] = 0, 99; return b })},
		{"status 1000", mutate(func(b []byte) []byte { b[2], b[3] = 0x03, 0xe8; return b })},
		{"header length past the end", mutate(func(b []byte) []byte {
			return append(binary.AppendUvarint(b[:FixedLen], uint64(len(b))), b[FixedLen+1:]...)
		})},
		{"header length over the limit", mutate(func(b []byte) []byte {
			return binary.AppendUvarint(b[:FixedLen], maxHeaderLen+1)
		})},
		{"header length overflowing uvarint", mutate(func(b []byte) []byte {
			return append(b[:FixedLen], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)
		})},
		{"name length past the header block", mutate(func(b []byte) []byte {
			b[FixedLen+1] = 0x7f
			return b
		})},
		{"value missing in the header block", func() []byte {
			b := append([]byte(nil), valid[:FixedLen]...)
			b = binary.AppendUvarint(b, 2)
			return append(b, 1, 'A') // a name with no value
		}()},
		{"huge name length", func() []byte {
			b := append([]byte(nil), valid[:FixedLen]...)
			hdr := binary.AppendUvarint(nil, 1<<62)
			b = binary.AppendUvarint(b, uint64(len(hdr)))
			return append(b, hdr...)
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := Decode(tc.b)
			if err == nil {
				t.Fatalf("Decode(%x) = %+v, want an error", tc.b, rec)
			}
			if err != ErrCorrupt {
				t.Errorf("error = %v, want ErrCorrupt", err)
			}
		})
	}
}

// FuzzRecordDecode checks that no input makes Decode or
// WriteReplayHeaders panic, and that whatever decodes re-encodes to the
// same record.
func FuzzRecordDecode(f *testing.F) {
	hash := sha256.Sum256([]byte("seed"))
	f.Add(encodeTestRecord(nil, 200, http.Header{"A": {"1", "2"}, "B": {""}}, []byte("body"), false, &hash))
	f.Add(encodeTestRecord(nil, 500, nil, nil, true, &hash))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := Decode(b)
		if err != nil {
			return
		}
		rec.WriteReplayHeaders(http.Header{}, "1")
		h := http.Header{}
		rec.writeTestHeaders(h)
		var sum [32]byte
		copy(sum[:], rec.BodyHash)
		again, err := Decode(encodeTestRecord(nil, rec.Status, h, rec.Body, rec.NoBody, &sum))
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		h2 := http.Header{}
		again.writeTestHeaders(h2)
		if again.Status != rec.Status || !bytes.Equal(again.Body, rec.Body) && !rec.NoBody {
			t.Fatalf("re-encoded record differs: %+v vs %+v", again, rec)
		}
	})
}

// encodeTestRecord encodes a whole record: what the recorder builds from
// a response's status, headers and body, or without the body when it
// outgrew max_response (noBody).
func encodeTestRecord(dst []byte, status int, header http.Header, body []byte, noBody bool, bodyHash *[32]byte) []byte {
	rec := Encode(dst, status, header, bodyHash)
	if noBody {
		MarkNoBody(rec[len(dst):])
		return rec
	}
	return append(rec, body...)
}

// writeTestHeaders adds the recorded headers to dst, as they were
// recorded, without what a replay adds (WriteReplayHeaders).
func (rec Record) writeTestHeaders(dst http.Header) {
	for h := rec.Headers; len(h) > 0; {
		var fields [2]string
		for i := range fields {
			l, n := binary.Uvarint(h)
			fields[i] = string(h[n : n+int(l)])
			h = h[n+int(l):]
		}
		dst[fields[0]] = append(dst[fields[0]], fields[1])
	}
}
