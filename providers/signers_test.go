package providers

import (
	"strings"
	"testing"
)

// TestEveryPresetSigns: every preset has a signer (the send command's and
// the tests'), which says what it signs with and refuses to build without
// key material, or says why none can sign it (Pix); a preset without one
// is refused with a clear message, not sent unsigned.
func TestEveryPresetSigns(t *testing.T) {
	for _, p := range All() {
		ps := p.signer
		if ps.build == nil {
			if ps.none == "" {
				t.Errorf("preset %s has no signer: declare one, built on package signature, or say why none can sign it", p.Name)
			}
			if _, err := NewSigner(p.Name, SignConfig{Secret: "x"}); err == nil || !strings.Contains(err.Error(), "the "+p.Name+" preset cannot be signed by this command") {
				t.Errorf("%s: %v", p.Name, err)
			}
			continue
		}
		if ps.needs == "" || SignerNeeds(p.Name) != ps.needs {
			t.Errorf("preset %s: signer without what it needs", p.Name)
		}
		if _, err := ps.build(SignConfig{}); err == nil {
			t.Errorf("preset %s signs with no key material at all", p.Name)
		}
	}
	if _, err := NewSigner("nope", SignConfig{Secret: "x"}); err == nil || !strings.Contains(err.Error(), "unknown preset") {
		t.Errorf("unknown preset: %v", err)
	}
}
