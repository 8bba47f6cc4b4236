package testkit

import (
	"runtime"
	"time"
)

// SettledGoroutines waits up to within for the process's goroutine count
// to drop to at most limit, and returns the last count. Keep-alive
// connections, of Client to Caddy and from old configurations' proxies to
// up (nil for none), are closed first: they are not the module's to count.
func SettledGoroutines(up *Upstream, limit int, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		Client.CloseIdleConnections()
		if up != nil {
			up.CloseClientConnections()
		}
		runtime.GC()
		n := runtime.NumGoroutine()
		if n <= limit || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}
