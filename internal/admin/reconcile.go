package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/reconcile"
)

// A source's reconciliation (docs/reconcile.md: Watching it): its status,
// and a pass asked for now.

// reconciler returns the source's reconciler, or a 409 error.
func (s *adminSource) reconciler() (*reconcile.Reconciler, error) {
	for _, rt := range s.routes {
		if r := rt.Reconciler(); r != nil {
			return r, nil
		}
	}
	return nil, apiError(http.StatusConflict, fmt.Errorf("source %q has no reconcile block", s.name))
}

// handleReconcileStatus answers the source's reconciliation status.
func handleReconcileStatus(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	rec, err := src.reconciler()
	if err != nil {
		return err
	}
	st, err := rec.Status(r.Context())
	if err != nil {
		return storeError(src.name, err)
	}
	return writeJSON(w, st)
}

// handleReconcileRun asks for a pass now: 202 with the status. With
// ?wait=true the pass runs in the request, and its summary is answered
// (409 while another pass runs; 503 when the pass fails, the provider's
// API or the store refusing it: an error status of the admin API's, which
// an operator retries, docs/admin.md).
func handleReconcileRun(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	rec, err := src.reconciler()
	if err != nil {
		return err
	}
	if r.URL.Query().Get("wait") == "true" {
		sum, err := rec.Run(r.Context())
		switch {
		case errors.Is(err, reconcile.ErrBusy):
			return apiError(http.StatusConflict, err)
		case err != nil:
			return apiError(http.StatusServiceUnavailable, fmt.Errorf("reconciliation pass of source %q failed: %v", src.name, err))
		}
		return writeJSON(w, sum)
	}
	if !rec.Trigger() {
		return apiError(http.StatusConflict, fmt.Errorf("reconciliation of source %q is not running", src.name))
	}
	st, err := rec.Status(r.Context())
	if err != nil {
		return storeError(src.name, err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	return json.NewEncoder(w).Encode(st)
}

// newReconcileCommand is `caddy webhook-idempotency reconcile <source>`.
func newReconcileCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "reconcile <source> [--wait]",
		Short: "Runs a reconciliation pass of a source now, and shows its status",
		Long: `
Asks the route of a source for a reconciliation pass now through the admin
API (POST /webhook_idempotency/<source>/reconcile): events its provider
failed to deliver are recovered through the route's dedup
(docs/reconcile.md). Without --wait the pass runs in the background and the
status is printed; with --wait the command waits for the pass and prints
what it recovered.
`,
		RunE: commandFunc(cmdReconcile),
	}
	c.Flags().Bool("wait", false, "Wait for the pass and print its summary")
	adminFlags(c)
	return c
}

// cmdReconcile asks for a pass.
func cmdReconcile(fl caddycmd.Flags) (int, error) {
	if fl.NArg() != 1 || fl.Arg(0) == "" {
		return caddy.ExitCodeFailedStartup, errors.New("want <source>: the route's source")
	}
	path := adminPrefix + url.PathEscape(fl.Arg(0)) + "/reconcile"
	if fl.Bool("wait") {
		path += "?wait=true"
	}
	body, err := adminRequest(fl, http.MethodPost, path)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, body, "", "  "); err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("the admin API answered %q: %v", body, err)
	}
	fmt.Println(out.String())
	return caddy.ExitCodeSuccess, nil
}
