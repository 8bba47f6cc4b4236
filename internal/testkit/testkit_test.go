package testkit

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestUpstreamCallIsItsOwnRecord: an upstream's handler finds its own
// request at Requests()[call-1] however many arrive at once, as the
// handlers of the end-to-end tests read it.
func TestUpstreamCallIsItsOwnRecord(t *testing.T) {
	var mu sync.Mutex
	var wrong []string
	var up *Upstream
	up = NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		got := up.Requests()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case int64(len(got)) < call:
			wrong = append(wrong, fmt.Sprintf("call %d with %d records", call, len(got)))
		case got[call-1].Header.Get("X-N") != r.Header.Get("X-N"):
			wrong = append(wrong, fmt.Sprintf("call %d: record of request %s, not %s", call, got[call-1].Header.Get("X-N"), r.Header.Get("X-N")))
		}
	})
	const n = 400
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, up.URL, strings.NewReader("{}"))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("X-N", fmt.Sprint(i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	if got := up.Calls.Load(); got != n {
		t.Fatalf("%d calls, want %d", got, n)
	}
	if len(wrong) > 0 {
		t.Fatalf("%d of %d handlers did not find their own request, such as %s", len(wrong), n, wrong[0])
	}
}
