package signature

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestVerifyParsersDoNotAllocate(t *testing.T) {
	sig := strings.Repeat("ab", 32)
	stripeHeader := "t=1700000000,v1=" + sig + ",v1=" + sig
	paddleHeader := "ts=1700000000;h1=" + sig
	mpHeader := "ts=1700000000,v1=" + sig
	stdHeader := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	cases := map[string]func(){
		"stripe":      func() { parseStripeSignature(stripeHeader) },
		"paddle":      func() { parsePaddleSignature(paddleHeader) },
		"mercadopago": func() { parseMercadoPagoSignature(mpHeader) },
		"standard":    func() { parseStandardSignatures(stdHeader) },
	}
	// a megabyte of signatures costs no allocation either
	huge := strings.Repeat(",v1="+sig+";h1="+sig+" v1,"+base64.StdEncoding.EncodeToString([]byte(sig)), 1<<20/200)
	hugeStripe, hugePaddle, hugeMP := "t=1"+huge, "ts=1;"+huge, "ts=1"+huge
	cases["stripe huge"] = func() { parseStripeSignature(hugeStripe) }
	cases["paddle huge"] = func() { parsePaddleSignature(hugePaddle) }
	cases["mercadopago huge"] = func() { parseMercadoPagoSignature(hugeMP) }
	cases["standard huge"] = func() { parseStandardSignatures(huge) }
	for name, fn := range cases {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations per parse", name, n)
		}
	}
}

func TestVerifySignatureSetBounds(t *testing.T) {
	for n := 0; n <= 3*len(sigSet{}.sig[0]); n++ {
		for _, v := range []string{strings.Repeat("A", n), strings.Repeat("f", n), strings.Repeat("QUJD", n/4+1)[:n]} {
			var s sigSet
			s.add(Base64, v)
			s.add(Hex, v)
			for i := 0; i < s.n; i++ {
				if s.size[i] == 0 || int(s.size[i]) > len(s.sig[i]) {
					t.Fatalf("length %d: size %d", n, s.size[i])
				}
			}
		}
	}
	// a 64-byte signature is the largest kept, in either encoding
	var s sigSet
	s.add(Hex, strings.Repeat("ab", 64))
	s.add(Base64, base64.StdEncoding.EncodeToString(make([]byte, 64)))
	s.add(Base64, base64.StdEncoding.EncodeToString(make([]byte, 65)))
	if s.n != 2 {
		t.Fatalf("kept %d signatures, want 2", s.n)
	}
}
