package webhookidempotency

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestVerifyProvisionWarnsOnVolatileKey(t *testing.T) {
	cases := []struct {
		h    Handler
		warn bool
	}{
		{Handler{Source: "stripe", Key: []string{"header:stripe-signature", "body"}}, true},
		{Handler{Provider: "stripe", Key: []string{"header:Stripe-Signature"}}, true},
		{Handler{Provider: "svix", Key: []string{"header:svix-timestamp"}}, true},
		{Handler{Provider: "stripe", Key: []string{"json:id", "body"}}, false},
		{Handler{Provider: "github", Key: []string{"header:X-GitHub-Delivery", "body"}}, false},
	}
	for _, c := range cases {
		core, logs := observer.New(zapcore.WarnLevel)
		h := c.h
		h.logger = zap.New(core)
		h.warnVerifyConfig()
		if got := logs.Len() > 0; got != c.warn {
			t.Errorf("%v: warned %v, want %v", h.Key, got, c.warn)
			continue
		}
		if c.warn {
			e := logs.All()[0]
			if !strings.Contains(e.Message, "retries will not be deduplicated") {
				t.Errorf("message %q", e.Message)
			}
			if _, ok := e.ContextMap()["use_instead"]; !ok {
				t.Errorf("no use_instead field: %v", e.ContextMap())
			}
		}
	}
}
