// Package results names what became of a request the handler saw: the
// values of the `{http.webhook_idempotency.result}` placeholder, of the
// `result` label of caddy_webhook_idempotency_requests_total, and of an
// archived event's result (docs/caddyfile.md: Placeholders). The request
// path sets them; the archive, the metrics and the operator surface read
// them.
package results

// The results.
const (
	New              = "new"               // processed: passed on, or accepted by the inbox
	Replayed         = "replayed"          // a duplicate answered with the recorded answer
	Conflict         = "conflict"          // a duplicate of a delivery in flight: 409
	Mismatch         = "mismatch"          // a known key with another body: 422
	InvalidSignature = "invalid_signature" // 401
	TooLarge         = "too_large"         // 413
	Bypassed         = "bypassed"          // the store failed, fail open: passed on undeduplicated
	Unavailable      = "unavailable"       // the store or the keys failed, fail closed: 503
	Skipped          = "skipped"           // a method not processed
	Handshake        = "handshake"         // a provider's handshake, answered at the edge
	Ambiguous        = "ambiguous"         // a JSON member the handler reads given twice: 400
	Loop             = "loop"              // sent back by this route's own inbox or archive: 508
	OverBudget       = "over_budget"       // the process's body budget is spent: 503
	Forbidden        = "forbidden"         // an address or client certificate refused: 403
	Filtered         = "filtered"          // an inbox's drop rule matched: answered, never delivered
)

// Results of events that are no request of a provider's: an event a
// reconciliation pass recovered (docs/reconcile.md), an inbox event ended
// without delivery because its group had delivered a newer one
// (newer_than, docs/inbox.md#newer-than). The archive keeps them;
// caddy_webhook_idempotency_requests_total does not count them.
const (
	Reconciled = "reconciled"
	Stale      = "stale"
)

// Events lists the results of events that are no request, as the archive
// keeps them.
var Events = [...]string{Reconciled, Stale}

// Known reports whether r is a result an archived event may have.
func Known(r string) bool { return Index(r) >= 0 || r == Reconciled || r == Stale }

// All lists every result, in the order the handler resolves its counters.
var All = [...]string{
	New, Replayed, Conflict, Mismatch, InvalidSignature,
	TooLarge, Bypassed, Unavailable, Skipped, Handshake,
	Ambiguous, Loop, OverBudget, Forbidden, Filtered,
}

// Index returns the position of r in All, -1 when r is no result.
func Index(r string) int {
	for i, v := range All {
		if v == r {
			return i
		}
	}
	return -1
}
