package providers

import (
	"errors"
	"strings"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// GitLab: `X-Gitlab-Token`, a constant-time token match; a `whsec_` secret
// is a GitLab signing token, checked as Standard Webhooks. No body is
// signed by the token.
func init() {
	register(&Preset{
		Name:    "gitlab",
		Timeout: 10 * time.Second, // GitLab.com; self-managed instances set their own
		Docs: []string{
			"https://docs.gitlab.com/user/project/integrations/webhooks/",
		},
		DefaultKey: []string{"header:Idempotency-Key", "body"},
		scheme: scheme{build: func(cfg VerifyConfig) (signature.Verifier, error) {
			return signature.NewGitLab(cfg.Secrets, time.Duration(cfg.Tolerance))
		}},
		Volatile:     []string{"webhook-signature", "webhook-timestamp"},
		BodyUnsigned: true,
		Credentials:  []string{"X-Gitlab-Token", "webhook-signature", "webhook-timestamp"},
		resigns:      signingTokens,
		signer: presetSigner{needs: needsSecret + " (a token, or a whsec_ signing token)", build: func(cfg SignConfig) (signature.Signer, error) {
			if cfg.Secret == "" {
				return nil, errors.New("gitlab signs with --secret")
			}
			return signature.NewGitLabSigner(cfg.Secret)
		}},
	})
}

// signingTokens is gitlab's resigns rule: GitLab's signing tokens (`whsec_`)
// are Standard Webhooks secrets and re-sign; a plain token is sent as it is.
func signingTokens(cfg VerifyConfig) bool {
	for _, s := range cfg.Secrets {
		if !strings.HasPrefix(s, "whsec_") {
			return false
		}
	}
	return true
}
