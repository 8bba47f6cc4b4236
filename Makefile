# `make help` lists the targets. Each target's `##` line is its help text.

GO ?= go

.PHONY: help test run build xcaddy lint bench redis-server chromium promtool stripe-mock

## help: list the targets
help:
	@echo 'make <target>:'
	@sed -n 's/^## \([a-z-]*\): /  \1\t/p' $(MAKEFILE_LIST) | expand -t 16

## test: install redis-server, chromium, promtool and stripe-mock when missing (and possible), then run every test
test: redis-server chromium promtool stripe-mock
	$(GO) test -race -count=1 -timeout 25m ./...
	@# allocation ceilings: the race detector makes sync.Pool drop items
	$(GO) test -count=1 -run 'Alloc' ./...

## run: run Caddy with Caddyfile.example (the demo, on the file store)
run:
	$(GO) run ./cmd/caddy run --config Caddyfile.example

## build: build ./caddy with the standard modules plus this one (no xcaddy needed)
build:
	$(GO) build -o caddy ./cmd/caddy

# xcaddy needs a version on the module path to use a local checkout:
# `--with <module>=./` alone makes it `go get` the path, which the module proxy
# does not know.
XCADDY ?= $(GO) run github.com/caddyserver/xcaddy/cmd/xcaddy@v0.4.5
MODULE := github.com/webhookguard/caddy-webhook-idempotency
MODULE_IDS := http.handlers.webhook_idempotency webhook_idempotency \
	http.webhook_idempotency.stores.file http.webhook_idempotency.stores.memory \
	http.webhook_idempotency.stores.redis \
	admin.api.webhook_idempotency http.handlers.webhook_idempotency_console

## xcaddy: build ./bin/caddy-xcaddy with xcaddy v0.4.5 from this checkout; check list-modules prints the seven ids
xcaddy:
	$(XCADDY) build --output ./bin/caddy-xcaddy --with $(MODULE)@v0.0.0=./
	@mods=$$(./bin/caddy-xcaddy list-modules) || { echo "./bin/caddy-xcaddy list-modules failed" >&2; exit 1; }; \
	missing=; \
	for id in $(MODULE_IDS); do \
		printf '%s\n' "$$mods" | grep -qxF "$$id" || missing="$$missing $$id"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "xcaddy build: ./bin/caddy-xcaddy list-modules does not print:$$missing" >&2; exit 1; \
	fi; \
	echo "xcaddy build: ./bin/caddy-xcaddy list-modules prints all seven module ids"

STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

## lint: gofmt, go vet and staticcheck (with its unused check)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

# The tests start their own redis-server processes (standalone, Cluster and
# Sentinel), so the binaries must be installed.
## redis-server: install redis-server and redis-tools with apt-get when missing
redis-server:
	@if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then \
		exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "redis-server is missing: installing redis-server and redis-tools with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null || { \
			echo "installing redis-server with apt-get failed: install Redis >= 7 (redis-server, redis-cli) and run make test again" >&2; exit 1; }; \
	else \
		echo "redis-server is missing and cannot be installed here (needs root and apt-get):" >&2; \
		echo "install Redis >= 7 (redis-server and redis-cli on PATH) and run make test again" >&2; \
		exit 1; \
	fi
# The console tests drive a real headless Chromium (Debian's chromium).
## chromium: install Debian's chromium with apt-get when missing (the console's browser tests)
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; then \
		exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "chromium is missing: installing Debian's chromium with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || { \
			echo "installing chromium with apt-get failed: install chromium and run make test again" >&2; exit 1; }; \
	else \
		echo "chromium is missing and cannot be installed here (needs root and apt-get):" >&2; \
		echo "install chromium (on PATH as chromium) and run make test again" >&2; \
		exit 1; \
	fi
# The alerting rules (dashboards/alerts.yml) are checked by Prometheus's own
# promtool, which Debian ships in its prometheus package.
## promtool: install promtool (Debian's prometheus package) with apt-get when missing
promtool:
	@if command -v promtool >/dev/null 2>&1; then \
		exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "promtool is missing: installing Debian's prometheus package (it has promtool) with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null || { \
			echo "installing prometheus with apt-get failed: install promtool (Debian's prometheus package) and run make test again" >&2; exit 1; }; \
	else \
		echo "promtool is missing and cannot be installed here (needs root and apt-get):" >&2; \
		echo "install promtool (Debian's prometheus package, or Prometheus's release) on PATH and run make test again" >&2; \
		exit 1; \
	fi
# The reconciliation tests check their requests to Stripe against Stripe's own
# API simulator, a Go program; `go install` puts it in GOBIN (else GOPATH/bin),
# where the tests look for it when it is not on PATH.
STRIPE_MOCK_VERSION := v0.203.0
## stripe-mock: install Stripe's API simulator (go install github.com/stripe/stripe-mock) when missing
stripe-mock:
	@if command -v stripe-mock >/dev/null 2>&1; then exit 0; fi; \
	gobin=$$($(GO) env GOBIN); [ -n "$$gobin" ] || gobin=$$($(GO) env GOPATH | cut -d: -f1)/bin; \
	if [ -x "$$gobin/stripe-mock" ]; then exit 0; fi; \
	echo "stripe-mock is missing: installing github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION) with go install"; \
	$(GO) install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION) || { \
		echo "installing stripe-mock failed: run go install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION) (it needs the Go module proxy) and run make test again" >&2; exit 1; }
## bench: the side-by-side load test (bench/load.sh): reverse_proxy alone vs. with the module
bench: redis-server ; @GO=$(GO) bash bench/load.sh
