// Command upstream is the trivial application behind Caddy in bench/load.sh:
// it reads and discards the request body and answers 200 with a small JSON body.
//
//	go run ./bench/upstream -addr 127.0.0.1:9000
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	flag.Parse()
	body := []byte(`{"ok":true}` + "\n")
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, nil))
}
