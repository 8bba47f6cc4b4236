package signature

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
)

// Fuzz targets of the public-key parsers and of the header decoders of
// the schemes verified with public keys and of HubSpot.

func FuzzParsePublicKeys(f *testing.F) {
	for _, s := range []string{
		"whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 32)),
		"whsk_AAAA",
		WooviPublicKey,
		base64.StdEncoding.EncodeToString([]byte(WooviPublicKey)),
		"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----",
		"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----",
		strings.Repeat("ab", 32),
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if k, err := ParseEd25519PublicKey(s); err == nil && len(k) != ed25519.PublicKeySize {
			t.Fatalf("%q: accepted a key of %d bytes", s, len(k))
		}
		if k, err := ParseRSAPublicKey(s); err == nil && (k.N.BitLen() < minRSABits || k.E < 2) {
			t.Fatalf("%q: accepted a %d-bit key, e=%d", s, k.N.BitLen(), k.E)
		}
	})
}

// hubSpotReference is HubSpot's decoding table as a replacer, in both
// cases of the hex digits.
var hubSpotReference = func() *strings.Replacer {
	var pairs []string
	for _, code := range []string{"3A", "2F", "3F", "40", "21", "24", "27", "28", "29", "2A", "2C", "3B"} {
		var c byte
		for _, d := range []byte(code) {
			c = c<<4 | unhex(d)
		}
		pairs = append(pairs, "%"+code, string(c))
		if lower := strings.ToLower(code); lower != code {
			pairs = append(pairs, "%"+lower, string(c))
		}
	}
	return strings.NewReplacer(pairs...)
}()

func FuzzDecodeHubSpotURL(f *testing.F) {
	for _, s := range []string{
		"https://hooks.example.com/hubspot?return=a%3Ab%2Fc%20d",
		"%3a%3A%2f%ZZ%2",
		"%%3A%",
		"https://x/%E2%82%AC?q=%3F",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := append([]byte("POST"), s...)
		got := string(decodeHubSpotURL(b, len("POST")))
		if want := "POST" + hubSpotReference.Replace(s); got != want {
			t.Fatalf("%q: got %q, want %q", s, got, want)
		}
	})
}

func FuzzDecodeRSASignature(f *testing.F) {
	for _, s := range []string{
		"lL2nnXgmLFGgxJ8+jCDguqouU4ucrIxYJcU5SPrJFaNcJajTJHYVldqc/z4YFIjAjtPEALe699WosgPY08W7CLpidvtm06Qwa4YMB0l/DcTS93O91NdSH/adjugEKiOb76Zj/0jB8mqOmWCFYbweOBa17bssuEkd5Lw7Q5L314Y=",
		strings.Repeat("ab", maxRSABytes),
		strings.Repeat("A", 1368),
		"===",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf [maxRSABytes + 2]byte
		for _, enc := range []Encoding{Hex, Base64} {
			sig, ok := decodeRSASignature(buf[:], enc, s)
			if ok && (len(sig) == 0 || len(sig) > len(buf)) {
				t.Fatalf("%q: decoded %d bytes", s, len(sig))
			}
		}
	})
}

func TestVerifyNewParsersDoNotAllocate(t *testing.T) {
	stdHeader := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1a," + base64.StdEncoding.EncodeToString(make([]byte, 64))
	hugeStd := strings.Repeat(stdHeader+" ", 1<<20/len(stdHeader))
	url := []byte("POSThttps://hooks.example.com/hubspot?return=a%3Ab%2Fc%20d")
	rsaSig := strings.Repeat("QUJD", 256)
	var buf [maxRSABytes + 2]byte
	for name, fn := range map[string]func(){
		"standard v1a":       func() { parseStandardSignatures(stdHeader) },
		"standard v1a huge":  func() { parseStandardSignatures(hugeStd) },
		"hubspot url":        func() { decodeHubSpotURL(url[:len(url):len(url)], 4) },
		"rsa signature":      func() { decodeRSASignature(buf[:], Base64, rsaSig) },
		"rsa signature huge": func() { decodeRSASignature(buf[:], Base64, hugeStd) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}
