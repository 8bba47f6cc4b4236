package providers

import (
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// CircleCI publishes test vectors in its outbound webhooks documentation
// (circleci/circleci-docs, outbound-webhooks.adoc, "Validate webhooks"):
// body, secret and the v1 signature each must give.
func TestCircleCI(t *testing.T) {
	for _, v := range []struct{ body, secret, header string }{
		{"hello world", "secret", "v1=734cc62f32841568f45715aeb9f4d7891324e6d948e4c6c60c0621cdac48623a"},
		{"lalala", "another-secret", "v1=daa220016c8f29a8b214fbfc3671aeec2145cfb1e6790184ffb38b6d0425fa00"},
		{"an-important-request-payload", "hunter123", "v1=9be2242094a9a8c00c64306f382a7f9d691de910b4a266f67bd314ef18ac49fa"},
		{"foo", "secret", "v1=773ba44693c7553d6ee20f61ea5d2757a9a4f4a44d2841ae4e95b52e4cd62db4"},
	} {
		rt := route{secrets: []string{v.secret}}
		rt.check(t, "circleci", post("circleci-signature", v.header), []byte(v.body), nil)
		// a later version beside v1 is ignored; v1 alone counts
		rt.check(t, "circleci", post("circleci-signature", v.header+",v2=0123abcd"), []byte(v.body), nil)
		rt.check(t, "circleci", post("circleci-signature", "v2="+v.header[3:]), []byte(v.body), signature.ErrInvalid)
		rt.check(t, "circleci", post("circleci-signature", v.header), changeByte([]byte(v.body)), signature.ErrInvalid)
		route{secrets: []string{v.secret + "x"}}.check(t, "circleci", post("circleci-signature", v.header), []byte(v.body), signature.ErrInvalid)
	}
}
