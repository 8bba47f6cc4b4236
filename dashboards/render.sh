#!/usr/bin/env bash
# dashboards/render.sh — regenerate docs/dashboard.png from real metrics.
#
# What it does, all on loopback:
#   1. builds ./cmd/caddy and ./dashboards/gen into a temporary directory;
#   2. starts the demo Caddy (Caddyfile.example: site :8080, app :9081,
#      admin localhost:2019, console localhost:2020) — the ports must be free;
#   3. runs dashboards/gen, which drives a mix of webhook traffic for
#      DURATION (new deliveries, redeliveries → replays, concurrent identical
#      deliveries → conflicts, bodies over max_body → too_large, GETs →
#      skipped), scrapes http://localhost:2019/metrics every INTERVAL, and
#      writes dashboards/out/scrapes.json and dashboards/out/index.html, a
#      static page drawing the panels of dashboards/webhook-idempotency.json
#      from those samples (inline SVG, no network);
#   4. screenshots the page with headless Chromium into docs/dashboard.png
#      (installs the Debian package `chromium` with apt-get when it is
#      missing and the script runs as root);
#   5. stops everything it started.
#
# Usage:   bash dashboards/render.sh
# Options (environment):
#   DURATION=75s     how long to drive traffic (Go duration, at most 15m)
#   INTERVAL=3s      scrape interval
#   WINDOW=30s       rate() window used for the charts
#   OUT=docs/dashboard.png
#   FROM=dashboards/out/scrapes.json   skip Caddy and traffic; redraw and
#                                      screenshot from a saved run
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
DURATION=${DURATION:-75s}
INTERVAL=${INTERVAL:-3s}
WINDOW=${WINDOW:-30s}
OUT=${OUT:-docs/dashboard.png}
FROM=${FROM:-}
OUTDIR=$ROOT/dashboards/out
[[ $OUT = /* ]] || OUT=$ROOT/$OUT

TMP=$(mktemp -d)
CADDY_PID=
cleanup() {
	if [[ -n $CADDY_PID ]] && kill -0 "$CADDY_PID" 2>/dev/null; then
		kill "$CADDY_PID" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$CADDY_PID" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$CADDY_PID" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf 'render.sh: %s\n' "$*" >&2; }

find_chromium() {
	local c
	for c in chromium chromium-browser google-chrome; do
		if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
	done
	return 1
}

CHROMIUM=$(find_chromium || true)
if [[ -z $CHROMIUM ]]; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		log "installing chromium with apt-get"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
		CHROMIUM=$(find_chromium)
	else
		log "chromium is missing; install it (Debian: apt-get install chromium) and retry"
		exit 1
	fi
fi

mkdir -p "$OUTDIR" "$(dirname "$OUT")"
log "building dashboards/gen"
go build -o "$TMP/gen" ./dashboards/gen

if [[ -z $FROM ]]; then
	for port in 8080 9081 2019 2020; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			log "port $port is in use; stop whatever listens there first"
			exit 1
		fi
	done
	log "building ./cmd/caddy"
	go build -o "$TMP/caddy" ./cmd/caddy
	log "starting the demo (Caddyfile.example)"
	"$TMP/caddy" run --config Caddyfile.example --adapter caddyfile >"$TMP/caddy.log" 2>&1 &
	CADDY_PID=$!
	ready=
	for _ in $(seq 1 100); do
		if curl -fsS -o /dev/null http://localhost:2019/metrics 2>/dev/null &&
			curl -sS -o /dev/null http://localhost:9081/ 2>/dev/null; then
			ready=1
			break
		fi
		kill -0 "$CADDY_PID" 2>/dev/null || break
		sleep 0.2
	done
	if [[ -z $ready ]]; then
		log "the demo did not come up; its log:"
		cat "$TMP/caddy.log" >&2
		exit 1
	fi
	log "driving traffic for $DURATION (scraping every $INTERVAL)"
	"$TMP/gen" -target http://localhost:8080 -metrics http://localhost:2019/metrics \
		-duration "$DURATION" -interval "$INTERVAL" -window "$WINDOW" \
		-raw "$OUTDIR/scrapes.json" -html "$OUTDIR/index.html"
	kill "$CADDY_PID" 2>/dev/null || true
	wait "$CADDY_PID" 2>/dev/null || true
	CADDY_PID=
else
	"$TMP/gen" -from "$FROM" -window "$WINDOW" -html "$OUTDIR/index.html"
fi

log "screenshotting with $CHROMIUM"
PROFILE=$TMP/chromium-profile
mkdir -p "$PROFILE"
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync \
	--disable-extensions --disable-default-apps --hide-scrollbars \
	--user-data-dir="$PROFILE" --window-size=1400,900 \
	--screenshot="$OUT" "file://$OUTDIR/index.html" >"$TMP/chromium.log" 2>&1 || {
	log "chromium failed:"
	cat "$TMP/chromium.log" >&2
	exit 1
}
log "wrote $OUT ($(wc -c <"$OUT") bytes)"
