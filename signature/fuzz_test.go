package signature

import (
	"strings"
	"testing"
)

// The fuzz targets below check that the signature header parsers never
// panic, never take more than maxSignatures signatures, and return a
// timestamp that is part of the header. Their seed corpora live in
// testdata/fuzz. That they never allocate, however long the header, is
// TestVerifyParsersDoNotAllocate's job: measuring allocations stops the
// world, which would slow fuzzing a hundredfold.

// checkSigSet asserts the invariants of a parsed signature set.
func checkSigSet(t *testing.T, sigs *sigSet) {
	t.Helper()
	if sigs.n > maxSignatures || sigs.seen > maxSignatures || sigs.n > sigs.seen {
		t.Fatalf("%d signatures kept of %d seen, cap %d", sigs.n, sigs.seen, maxSignatures)
	}
	for i := 0; i < sigs.n; i++ {
		if sigs.size[i] == 0 || int(sigs.size[i]) > len(sigs.sig[i]) {
			t.Fatalf("signature %d has size %d", i, sigs.size[i])
		}
	}
}

func fuzzTimestamped(f *testing.F, seeds []string, parse func(string) (string, sigSet, error)) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		ts, sigs, err := parse(h)
		checkSigSet(t, &sigs)
		if err == nil {
			if ts == "" || !strings.Contains(h, ts) {
				t.Fatalf("timestamp %q not from header %q", ts, h)
			}
			if sigs.seen == 0 {
				t.Fatalf("accepted %q without a signature", h)
			}
		} else if err != ErrMissing && err != ErrInvalid {
			t.Fatalf("unexpected error %v", err)
		}
		if h == "" && err != ErrMissing {
			t.Fatalf("empty header: %v", err)
		}
	})
}

func FuzzParseStripeSignature(f *testing.F) {
	fuzzTimestamped(f, []string{
		"t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
		"t=1,v1=00,v1=11,v1=zz",
		",,,=,t=,v1=",
		"v1=ab, t=12",
	}, parseStripeSignature)
}

func FuzzParsePaddleSignature(f *testing.F) {
	fuzzTimestamped(f, []string{
		"ts=1710929255;h1=6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8",
		"ts=1;h1=00;h1=11",
		";;;ts;h1",
	}, parsePaddleSignature)
}

func FuzzParseMercadoPagoSignature(f *testing.F) {
	fuzzTimestamped(f, []string{
		"ts=1704908010,v1=618c85345248dd820d5fd456117c2ab2ef8eda45a0282ff693eac24131a5e839",
		" ts = 1704908010000 , v1 = 00 ",
		"v1=,ts=",
	}, parseMercadoPagoSignature)
}

func FuzzParseStandardSignatures(f *testing.F) {
	for _, s := range []string{
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		"v1a,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v2,x",
		",,, v1,not,base64  v1,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		symmetric, asymmetric := parseStandardSignatures(h)
		checkSigSet(t, &symmetric)
		checkSigSet(t, &asymmetric)
		if !strings.Contains(h, "v1,") && symmetric.seen != 0 {
			t.Fatalf("%q: took %d signatures without a v1", h, symmetric.seen)
		}
		if !strings.Contains(h, "v1a,") && asymmetric.seen != 0 {
			t.Fatalf("%q: took %d signatures without a v1a", h, asymmetric.seen)
		}
		if asymmetric.seen > maxAsymmetric {
			t.Fatalf("%q: took %d v1a signatures, cap %d", h, asymmetric.seen, maxAsymmetric)
		}
	})
}
