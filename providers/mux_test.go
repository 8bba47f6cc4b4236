package providers

import (
	"strings"
	"testing"
)

// Mux's deliveries as @mux/mux-node signs and judges them
// (testdata/mux.json, at 2026-01-01T00:00:00Z): the second attempt of an
// event lists the first in `attempts`, other bytes under the same id.
func TestMux(t *testing.T) {
	vec := checkHeaderVectors(t, "mux", "Mux-Signature")
	first, second := vec.Vectors[0].Body, vec.Vectors[1].Body
	if first == second || !strings.Contains(second, `"attempts":[{`) {
		t.Fatal("the vectors do not hold two attempts of one event")
	}
	if k := keyOf(t, "mux", post(), []byte(first)); k == "" || k != keyOf(t, "mux", post(), []byte(second)) {
		t.Fatal("the two attempts of one event are not keyed alike")
	}
}
