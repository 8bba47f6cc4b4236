// Package admin holds the end-to-end tests of the operator surface
// (internal/admin): a real Caddy with the module, driven through its admin
// API, its console in a real headless Chromium, and its metrics.
package admin

import (
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// redeliveryOutcome is the JSON of one redelivered archived event, as
// docs/admin.md documents it.
type redeliveryOutcome struct {
	ID        string `json:"id"`
	Key       string `json:"key"`
	InboxID   string `json:"inbox_id,omitempty"`
	Status    int    `json:"status,omitempty"`
	Delivered bool   `json:"delivered"`
	Error     string `json:"error,omitempty"`
}

// minutesAnswer is the JSON of a source's series, as docs/admin.md
// documents it.
type minutesAnswer struct {
	Source            string             `json:"source"`
	Window            string             `json:"window"`
	From              time.Time          `json:"from"`
	StepSeconds       int                `json:"step_seconds"`
	New               []int64            `json:"new"`
	Replayed          []int64            `json:"replayed"`
	Refused           []int64            `json:"refused"`
	Failed            []int64            `json:"failed"`
	Results           map[string][]int64 `json:"results"`
	HandlingP50       []*float64         `json:"handling_p50_ms"`
	HandlingP99       []*float64         `json:"handling_p99_ms"`
	AppP50            []*float64         `json:"app_p50_ms"`
	AppP99            []*float64         `json:"app_p99_ms"`
	InboxDelivered    []int64            `json:"inbox_delivered"`
	InboxRetried      []int64            `json:"inbox_retried"`
	InboxDeadLettered []int64            `json:"inbox_dead_lettered"`
	InboxBacklog      []int64            `json:"inbox_backlog"`
	LagP50            []*float64         `json:"lag_p50_ms"`
}
