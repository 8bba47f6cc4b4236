package webhookidempotency

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/batch"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Batches (docs/caddyfile.md: Batches): a request that holds many events
// (SendGrid's array, Adyen's notificationItems, Graph's value) is
// verified whole, then split into its items (internal/batch), each
// deduplicated by its own key. All of a request's items are claimed in
// one store round trip; the application gets the provider's envelope
// holding the new items only, signed as the `forward` block says; in
// inbox mode each new item is an event of its own.

// BatchConfig splits a request that holds many events into its items,
// each deduplicated by its own key: a retried batch may be composed
// differently, so a key for the whole request deduplicates nothing.
type BatchConfig struct {
	// The array of items: `json:<path>` to it in the body (`json:value`),
	// `json:#` for a body that is the array, and `#` (or `[*]`) between
	// members for arrays within each element (`json:entry.#.changes`).
	// Required unless off.
	Path string `json:"path,omitempty"`

	// An item's key sources within the item, tried in order: `json:<path>`
	// or `body` (the SHA-256 of the item's bytes); `json:` paths joined
	// by `+` are one key together (`json:pspReference+json:eventCode`),
	// for an item known only by them all (an absent one counts as empty).
	// An item that none yields a value for is keyed by its bytes. Default:
	// the preset's, else `body`.
	Key []string `json:"key,omitempty"`

	// The most items one request may hold; more gets 413. At most 1000.
	// Default: 1000.
	MaxItems int `json:"max_items,omitempty"`

	// Off deduplicates whole requests on a route whose preset would split
	// them (`batch off`). Default: false.
	Off bool `json:"off,omitempty"`
}

// unmarshalCaddyfile parses the batch option; the dispenser is on
// `batch`:
//
//	batch off
//	batch json:<path> {
//		key       <source>...
//		max_items <n>
//	}
func (bc *BatchConfig) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("batch takes json:<path to the array of items> or off, got %d values", len(args))
	}
	if args[0] == "off" {
		bc.Off = true
		if d.NextBlock(d.Nesting()) {
			return d.Err("batch off takes no block")
		}
		return nil
	}
	bc.Path = args[0]
	if _, err := parseBatchPath(bc.Path); err != nil {
		return d.Errf("%v", err)
	}
	return cfparse.Block(d, "batch", map[string]cfparse.Arity{"key": cfparse.Some, "max_items": cfparse.One},
		func(name, v string, args []string) error {
			switch name {
			case "key":
				if _, err := parseItemKeys(args); err != nil {
					return err
				}
				bc.Key = append(bc.Key, args...)
			case "max_items":
				n, err := parseMaxItems(v)
				if err != nil {
					return err
				}
				bc.MaxItems = n
			}
			return nil
		})
}

// parseBatchPath returns the path of `json:<path>` as internal/batch
// takes it.
func parseBatchPath(s string) (string, error) {
	p, ok := strings.CutPrefix(s, "json:")
	if !ok {
		return "", fmt.Errorf("invalid batch %q: want json:<path to the array of items> or off", s)
	}
	return batch.ParsePath(p)
}

// parseMaxItems is the rule of max_items: 1 to store.MaxBatchKeys.
func parseMaxItems(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > store.MaxBatchKeys {
		return 0, fmt.Errorf("invalid max_items %q: want a number of items from 1 to %d", v, store.MaxBatchKeys)
	}
	return n, nil
}

// batchRule is a route's batch at run time.
type batchRule struct {
	path string       // as internal/batch takes it
	keys []itemSource // tried in order
	max  int
}

// itemSource is one entry of a batch's key list: JSON paths within an
// item that are one key together, or none for the item's bytes.
type itemSource struct {
	paths []string
}

// parseItemKeys parses a batch's key list.
func parseItemKeys(list []string) ([]itemSource, error) {
	out := make([]itemSource, 0, len(list))
	for _, s := range list {
		if s == "body" {
			out = append(out, itemSource{})
			continue
		}
		var src itemSource
		for _, part := range strings.Split(s, "+") {
			ks, err := parseKeySource(part)
			if err == nil && ks.kind != keyJSON {
				err = fmt.Errorf("%s is not within the item", part)
			}
			if err != nil {
				return nil, fmt.Errorf("invalid batch key %q: want json:<path within an item> (several joined by +) or body: %v", s, err)
			}
			src.paths = append(src.paths, ks.arg)
		}
		out = append(out, src)
	}
	return out, nil
}

// provisionBatch builds the route's batch from its batch option or its
// preset's, and checks what a batch cannot go with.
func (h *Handler) provisionBatch() error {
	bc := BatchConfig{}
	switch p, _ := providers.Lookup(h.Provider); {
	case h.Batch != nil && h.Batch.Off:
		return nil
	case h.Batch != nil:
		bc = *h.Batch
	case p != nil && p.Batch != nil:
		bc = BatchConfig{Path: p.Batch.Path, Key: p.Batch.Key}
	default:
		return nil
	}
	if len(bc.Key) == 0 {
		if p, ok := providers.Lookup(h.Provider); ok && p.Batch != nil {
			bc.Key = p.Batch.Key
		}
	}
	if bc.MaxItems == 0 {
		bc.MaxItems = store.MaxBatchKeys
	}
	rule := &batchRule{max: bc.MaxItems}
	var err error
	if rule.path, err = parseBatchPath(bc.Path); err != nil {
		return err
	}
	if rule.keys, err = parseItemKeys(bc.Key); err != nil {
		return err
	}
	if _, err := parseMaxItems(strconv.Itoa(bc.MaxItems)); err != nil {
		return err
	}
	if h.inFlight == inFlightProceed {
		return errors.New("in_flight proceed cannot be used with batch: an item in flight answers 409 for its request (use batch off to deduplicate whole requests)")
	}
	if h.nonce != nil {
		return fmt.Errorf("batch cannot be used with the %s preset: its deliveries carry a nonce, claimed with the request's key", h.Provider)
	}
	if h.Forward != nil && h.Forward.Signature == forward.Keep.String() {
		return errors.New("forward signature keep cannot be used with batch: the application gets the envelope with the new items only, which the provider's signature does not match (use resign, edge or strip)")
	}
	h.batch = rule
	return nil
}

// checkBatchStore checks that the route's store can claim a batch's keys
// at once: inbox mode accepts each item as an event of its own.
func (h *Handler) checkBatchStore() error {
	if h.batch == nil || h.inbox != nil || h.Inbox != nil || h.store.batch != nil {
		return nil
	}
	return fmt.Errorf("batch: store %s cannot claim many keys at once (store.BatchStore); use the file, memory or redis store, or batch off", moduleName(h.store.backend))
}

// itemKey returns an item's key value: the first of the rule's sources
// that yields one, else the item's bytes' SHA-256 (sum). A value is
// sanitized as a request's key is (keys.go).
func (br *batchRule) itemKey(item []byte, sum *[32]byte) (string, error) {
	for _, src := range br.keys {
		if src.paths == nil {
			break
		}
		v, err := src.value(item)
		if err != nil {
			return "", err
		}
		if v != "" {
			if s := sanitizeKeyValue(v, sum); s != v {
				return s, nil
			}
			return strings.Clone(v), nil
		}
	}
	return hashKey(sum), nil
}

// value is the source's value in item: one path's, or several paths'
// joined by `+` (a `+` or `\` in a value escaped by `\`), "" when no path
// has one. It may be a view of item.
func (src itemSource) value(item []byte) (string, error) {
	if len(src.paths) == 1 {
		return jsonKeyValue(item, src.paths[0])
	}
	var b strings.Builder
	found := false
	for i, p := range src.paths {
		v, err := jsonKeyValue(item, p)
		if err != nil {
			return "", err
		}
		found = found || v != ""
		if i > 0 {
			b.WriteByte('+')
		}
		for j := 0; j < len(v); j++ {
			if v[j] == '+' || v[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
	}
	if !found {
		return "", nil
	}
	return b.String(), nil
}

// batchState is a batch request's items on their way.
type batchState struct {
	split  *batch.Batch
	values []string // each item's key value
	keys   []string // the store keys of the items, each once, in order
	item   []int    // the item of each of keys: an item whose key an earlier one has is the same event, and not claimed
	isNew  []bool   // per item: handed on by this request
	owner  string
	body   []byte // what the application gets: the envelope with the new items, nil for the whole body
}

// splitBatch splits a verified request into its items and resolves their
// keys; it reports whether it answered: 413 for more items than
// max_items, 400 for an ambiguous item. A body with no array at the path,
// or an empty one, is no batch: it is deduplicated as one delivery, by the
// route's key.
func (rs *requestState) splitBatch() (answered bool, err error) {
	h := rs.h
	if rs.event != nil && !h.verification.Decrypt() {
		// the application gets the sealed envelope, which is not split
		return false, nil
	}
	content := rs.content()
	b, serr := batch.Split(content, h.batch.path, h.batch.max)
	switch {
	case errors.Is(serr, batch.ErrTooManyItems):
		rs.setResult(results.TooLarge)
		reason := fmt.Sprintf("too many items: more than max_items %d", h.batch.max)
		rs.warnTooLarge(reason, "refused a batch over max_items (413): a provider that does not retry it loses its events; raise max_items (up to 1000) or split the provider's batches",
			zap.Int("max_items", h.batch.max))
		return true, writeError(rs.w, http.StatusRequestEntityTooLarge, reason, "")
	case serr != nil || len(b.Items) == 0:
		if ce := h.logger.Check(zap.DebugLevel, "request holds no batch; deduplicating it as one delivery"); ce != nil {
			ce.Write(zap.String("key", rs.claim.Key), zap.NamedError("reason", serr))
		}
		return false, nil
	}
	bs := &batchState{split: b, values: make([]string, len(b.Items)), isNew: make([]bool, len(b.Items)), owner: rs.claim.Owner}
	seen := make(map[string]struct{}, len(b.Items))
	for i, it := range b.Items {
		raw := it.Raw(content)
		sum := sha256.Sum256(raw)
		v, err := h.batch.itemKey(raw, &sum)
		if err != nil {
			return true, rs.ambiguous(err)
		}
		bs.values[i] = v
		key := h.keyPrefix + v
		if _, dup := seen[key]; dup {
			continue
		}
		seen[key] = struct{}{}
		bs.keys = append(bs.keys, key)
		bs.item = append(bs.item, i)
	}
	rs.batch = bs
	return false, nil
}

// serveBatch claims a batch's items in one round trip and answers as
// what they are says: 409 when one is in flight (nothing is claimed); the
// preset's success answer, marked replayed, when none is new; else the
// application's answer to the envelope of the new ones, which completes
// them all (a 2xx the route records) or releases them all.
func (rs *requestState) serveBatch() error {
	h := rs.h
	if h.inbox != nil {
		return rs.acceptBatch()
	}
	bs := rs.batch
	lease := time.Duration(h.Lease)
	res, err := h.store.claimBatch(rs.r.Context(), bs.keys, bs.owner, lease)
	if err == nil && res.InFlight > 0 && h.inFlight == inFlightWait {
		err = rs.poll(func() (bool, error) {
			var err error
			res, err = h.store.claimBatch(rs.r.Context(), bs.keys, bs.owner, lease)
			return err == nil && res.InFlight > 0, err
		})
	}
	if err != nil {
		return rs.storeFailed(opClaim, err)
	}
	switch {
	case res.InFlight > 0:
		return rs.conflict(firstInFlight(res.Items))
	case res.Claimed == 0:
		return rs.replayBatch()
	}
	claimed := make([]string, 0, res.Claimed)
	for i, it := range res.Items {
		if it.State == store.StateClaimed {
			claimed = append(claimed, bs.keys[i])
			bs.isNew[bs.item[i]] = true
		}
	}
	if len(claimed) < len(bs.split.Items) {
		bs.body = bs.split.Envelope(rs.content(), func(i int) bool { return bs.isNew[i] })
	}
	rs.setResult(results.New)
	return rs.serve(&batchClaim{rs: rs, keys: claimed})
}

// batchClaim is the claim of a batch's new items, which serve hands on.
type batchClaim struct {
	rs   *requestState
	keys []string
}

func (c *batchClaim) name() string { return c.keys[0] }

func (c *batchClaim) renew(ctx context.Context, lease time.Duration) error {
	return c.rs.h.store.renewBatch(ctx, c.keys, c.rs.batch.owner, lease)
}

// completes: a batch is recorded on a 2xx only (a 4xx the route would
// record for one delivery releases the items, for the provider's retry to
// hand them on again).
func (c *batchClaim) completes(status int) bool {
	return status/100 == 2 && c.rs.h.cacheable.has(status)
}

// complete records the status of the answer for every item; the body is
// not kept (a batch with no new item gets the preset's success answer).
func (c *batchClaim) complete(_ []byte, status int) error {
	h := c.rs.h
	rec := record.Encode(nil, status, nil, &c.rs.bodyHash)
	return h.store.completeBatch(completionCtx, c.keys, c.rs.batch.owner, rec, time.Duration(h.TTL))
}

func (c *batchClaim) release() { c.rs.releaseBatch(c.keys) }

// firstInFlight is the result of the first item in flight.
func firstInFlight(items []store.ClaimResult) store.ClaimResult {
	for _, it := range items {
		if it.State == store.StateInFlight {
			return it
		}
	}
	return store.ClaimResult{}
}

// releaseBatch gives back the items this request claimed.
func (rs *requestState) releaseBatch(keys []string) {
	err := rs.h.store.releaseBatch(completionCtx, keys, rs.batch.owner)
	if err != nil && !errors.Is(err, store.ErrNotOwner) {
		rs.h.logger.Warn("releasing a batch's idempotency keys failed; its retry gets 409 until their lease expires",
			zap.String("key", keys[0]), zap.Int("items", len(keys)), zap.Error(err))
	}
}

// acceptBatch accepts each new item into the inbox as an event of its
// own, in the provider's envelope holding that one item: all of them in
// one round trip where the store allows it (inbox.AcceptBatch). A store
// failure answers as the fail policy says (an item stored all the same
// stays accepted: the provider's retry finds it so).
func (rs *requestState) acceptBatch() error {
	h, bs := rs.h, rs.batch
	base := rs.inboxEvent()
	content := rs.content()
	items := make([]inbox.BatchItem, len(bs.keys))
	evs := make([]event.Request, len(bs.keys))
	sums := make([][32]byte, len(bs.keys))
	for k, key := range bs.keys {
		i := bs.item[k]
		ev := &evs[k]
		*ev = *base // a copy per item, each with its own body and key
		ev.Body = bs.split.Envelope(content, func(j int) bool { return j == i })
		ev.Key, ev.StoreKey = bs.values[i], key
		sums[k] = sha256.Sum256(ev.Body)
		items[k] = inbox.BatchItem{Claim: store.Claim{Key: key, Owner: bs.owner}, BodyHash: &sums[k], Event: ev}
	}
	res, err := h.store.acceptBatch(rs.r.Context(), h.inbox, items)
	accepted := 0
	for k, r := range res {
		if r.State == store.StateClaimed {
			bs.isNew[bs.item[k]] = true
			accepted++
		}
	}
	if err != nil {
		return rs.storeFailed(opClaim, err)
	}
	switch {
	case accepted > 0:
		return rs.accepted()
	case firstInFlight(res).State == store.StateInFlight:
		return rs.conflict(firstInFlight(res))
	}
	return rs.replayBatch()
}

// replayBatch answers a batch with no new item: the provider's success
// answer (the inbox's `respond` in inbox mode), marked replayed.
func (rs *requestState) replayBatch() error {
	rs.setResult(results.Replayed)
	status, body, contentType := http.StatusOK, "", ""
	if ib := rs.h.inbox; ib != nil {
		status, body, contentType = ib.Respond()
	} else if p, ok := providers.Lookup(rs.h.Provider); ok && p.Success != nil {
		status, body, contentType = p.Success.Status, p.Success.Body, p.Success.ContentType
	}
	hdr := rs.w.Header()
	hdr.Set(record.ReplayedHeader, "true")
	if contentType != "" {
		hdr.Set("Content-Type", contentType)
	}
	if bodyAllowed(status) {
		hdr.Set("Content-Length", strconv.Itoa(len(body)))
	}
	rs.w.WriteHeader(status)
	if body != "" && bodyAllowed(status) && rs.r.Method != http.MethodHead {
		_, _ = io.WriteString(rs.w, body)
	}
	return nil
}
