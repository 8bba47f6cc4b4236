#!/usr/bin/env bash
# bench/ab.sh - where a scenario's time goes, and two builds of Caddy on one Caddyfile.
#
# Run it from the repository root: `bash bench/ab.sh [caddy-binary...]`. It builds Caddy from
# ./cmd/caddy (and the upstream) into bench/out/ when no binary is given, then for each binary
# in turn (alternating, AB_REPEAT times):
#   1. starts the upstream, a private redis-server and that Caddy with one Caddyfile: A
#      (reverse_proxy alone), B (memory store), C (Redis store), F (file store, `sync always`),
#      H (file store, `sync 1s`), K and L (B and A with reverse_proxy's `request_buffers 64KiB`:
#      one write per forwarded delivery, docs/operating.md) and X (F with `archive 7d`), each
#      site as in bench/load.sh (256 idle connections per upstream), the file stores in a fresh
#      directory;
#   2. runs each scenario of AB_SCENARIOS (default "A B C F H") with wrk -t2 -c$BENCH_CONNS
#      (default 32) for BENCH_DURATION seconds (default 4) after a 1-s warm-up, unique keys,
#      POST bodies of 1 KiB, and prints its requests a second and the machine's CPU time by
#      kind (user, system, iowait, irq+softirq, idle: jiffies from /proc/stat) during the run;
#   3. with AB_PPROF=1, takes Caddy's CPU profile during each scenario into
#      bench/out/ab/<binary>-<round>-<i>-<scenario>.pprof and prints Caddy's CPU time per request;
#      with AB_PERF=1, records the whole machine with `perf record -a -g` into <same>.perf and
#      prints each process's share of the samples (the idle task is `swapper`); with AB_TRACE=1,
#      takes a 2-s execution trace of Caddy (<same>.trace) and prints the time its goroutines
#      spent blocked in the store's Complete (with an archive, its CompleteAndAppend), per
#      request (`go tool trace -pprof=sync`; the trace's `-pprof=syscall` shows the file
#      store's fdatasync and write times).
#
# With AB_REPLAY=1 every request of a scenario is a replay: one delivery completes a key first,
# and wrk sends that key again (bench/replay.lua): B is then D of bench/load.sh, C is E, F is G.
# Knobs: AB_REPEAT (default 1), AB_SCENARIOS, AB_PPROF, AB_PERF, AB_TRACE, AB_REPLAY,
# BENCH_DURATION, BENCH_CONNS.
# Compare runs of the same binary before reading a difference between two: on a shared 2-core
# machine one scenario's rate moves by several percent between runs.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/bench/out
BENCH_DURATION=${BENCH_DURATION:-4}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
REPEAT=${AB_REPEAT:-1}
SCENARIOS=${AB_SCENARIOS:-A B C F H}
PPROF=${AB_PPROF:-0}
PERF=${AB_PERF:-0}
TRACE=${AB_TRACE:-0}
REPLAY=${AB_REPLAY:-0}
need "apt-get install wrk redis-server curl" wrk redis-server curl "$GO"
[ "$PERF" = 0 ] || need "apt-get install linux-perf, or AB_PERF=0" perf
mkdir -p "$OUT/ab"

if [ $# = 0 ]; then
	build
	set -- "$OUT/caddy"
else
	"$GO" build -o "$OUT/upstream" ./bench/upstream
fi
BODY=$OUT/body.json
write_body "$BODY"
export BODY_FILE=$BODY
export XDG_CONFIG_HOME=$OUT/xdg-config XDG_DATA_HOME=$OUT/xdg-data

proxy() { # upstream port [reverse_proxy line]: the reverse_proxy of every site
	printf '\treverse_proxy 127.0.0.1:%s {\n' "$1"
	[ -z "${2:-}" ] || printf '\t\t%s\n' "$2"
	printf '\t\ttransport http {\n\t\t\tkeepalive_idle_conns_per_host 256\n\t\t}\n\t}\n'
}
site() { # port upstream [store block lines] [reverse_proxy line]
	printf 'http://127.0.0.1:%s {\n' "$1"
	[ -z "${3:-}" ] || printf '\twebhook_idempotency {\n%s\n\t}\n' "$3"
	proxy "$2" "${4:-}"
	printf '}\n'
}
cpu() { # user system iowait irq+softirq idle, in jiffies since boot
	awk '/^cpu / { print $2 + $3, $4, $6, $7 + $8, $5 }' /proc/stat
}

SITES="A B C F H K L X" # the sites of the Caddyfile below, each a scenario
declare -A PORT
run_binary() { # binary round
	local bin=$1 round=$2 name s p c0 c1 rps f pid
	name=$(basename "$bin")
	PIDS=()
	local PU PR PADMIN
	PU=$(free_port) PR=$(free_port) PADMIN=$(free_port)
	for s in $SITES; do PORT[$s]=$(free_port); done
	start ab-upstream "$OUT/upstream" -addr "127.0.0.1:$PU"
	wait_port "$PU" ab-upstream "$STARTED"
	start ab-redis redis-server --bind 127.0.0.1 --port "$PR" --save '' --appendonly no --dir "$OUT/ab"
	wait_port "$PR" ab-redis "$STARTED"
	rm -rf "$OUT/ab/files"
	mkdir -p "$OUT/ab/files"
	{
		caddy_globals "$PADMIN"
		site "${PORT[A]}" "$PU"
		site "${PORT[B]}" "$PU" $'\t\tsource b\n\t\tstore memory'
		site "${PORT[C]}" "$PU" $'\t\tsource c\n\t\tstore redis redis://127.0.0.1:'"$PR"
		site "${PORT[F]}" "$PU" $'\t\tsource f\n\t\tstore file '"$OUT/ab/files/f.db"$' {\n\t\t\tsync always\n\t\t}'
		site "${PORT[H]}" "$PU" $'\t\tsource h\n\t\tstore file '"$OUT/ab/files/h.db"$' {\n\t\t\tsync 1s\n\t\t}'
		site "${PORT[K]}" "$PU" $'\t\tsource k\n\t\tstore memory' 'request_buffers 64KiB'
		site "${PORT[L]}" "$PU" '' 'request_buffers 64KiB'
		site "${PORT[X]}" "$PU" $'\t\tsource x\n\t\tarchive 7d\n\t\tstore file '"$OUT/ab/files/x.db"$' {\n\t\t\tsync always\n\t\t}'
	} >"$OUT/ab/Caddyfile"
	start ab-caddy "$bin" run --adapter caddyfile --config "$OUT/ab/Caddyfile"
	pid=$STARTED
	for s in $SITES; do wait_port "${PORT[$s]}" ab-caddy "$pid"; done
	wait_port "$PADMIN" ab-caddy "$pid"
	local i=0
	for s in $SCENARIOS; do
		i=$((i + 1)) # a scenario named twice gets new keys the second time
		p=${PORT[$s]:-}
		[ -n "$p" ] || die "no scenario $s ($SITES)"
		KEY_PREFIX="w$s-$round-$i-$$" wrk -t2 -c"$CONNS" -d1s -s "$ROOT/bench/unique.lua" "http://127.0.0.1:$p/webhook" >/dev/null
		f=$OUT/ab/$name-$round-$i-$s
		local jobs=()
		if [ "$PPROF" = 1 ]; then
			curl -fsS -o "$f.pprof" "http://127.0.0.1:$PADMIN/debug/pprof/profile?seconds=$DURATION" &
			jobs+=($!)
		fi
		if [ "$TRACE" = 1 ]; then
			curl -fsS -o "$f.trace" "http://127.0.0.1:$PADMIN/debug/pprof/trace?seconds=2" &
			jobs+=($!)
		fi
		if [ "$PERF" = 1 ]; then
			perf record -a -g -o "$f.perf" -- sleep "$DURATION" >/dev/null 2>&1 &
			jobs+=($!)
		fi
		local script=unique.lua
		if [ "$REPLAY" = 1 ]; then
			script=replay.lua
			export REPLAY_KEY="r$s-$round-$i-$$"
			curl -fsS -o /dev/null -X POST -H "Idempotency-Key: $REPLAY_KEY" -H 'Content-Type: application/json' \
				--data-binary "@$BODY" "http://127.0.0.1:$p/webhook" || die "completing the replayed key of $s failed"
		fi
		c0=$(cpu)
		KEY_PREFIX="m$s-$round-$i-$$" wrk -t2 -c"$CONNS" -d"${DURATION}s" -s "$ROOT/bench/$script" "http://127.0.0.1:$p/webhook" >"$f.wrk"
		c1=$(cpu)
		for j in "${jobs[@]}"; do wait "$j" || say "a profile of $s failed"; done
		rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$f.wrk")
		printf '%s run %s: %s %s req/s; CPU jiffies user %s, system %s, iowait %s, irq %s, idle %s\n' "$name" "$round" "$s" "$rps" \
			$(paste -d' ' <(tr ' ' '\n' <<<"$c0") <(tr ' ' '\n' <<<"$c1") | awk '{ print $2 - $1 }')
		if [ "$PPROF" = 1 ]; then
			"$GO" tool pprof -top -nodecount=1 "$bin" "$f.pprof" 2>/dev/null |
				awk -v n="$(awk '/requests in/ { print $1 }' "$f.wrk")" '/Total samples/ { v = $(NF - 1); sub(/=/, "", v); s = v + 0; if (v ~ /ms$/) s /= 1000; printf "  Caddy CPU %.1f us per request (%s over %d requests)\n", s * 1e6 / n, v, n }'
		fi
		if [ "$TRACE" = 1 ]; then
			"$GO" tool trace -pprof=sync "$f.trace" >"$f.sync.pprof" 2>/dev/null
			"$GO" tool pprof -top -cum -nodecount=400 "$bin" "$f.sync.pprof" 2>/dev/null |
				awk -v r="$rps" '/\(\*meteredStore\)\.complete$|\(\*Archive\)\.CompleteAndAppend$/ { v = $4; s = v + 0; if (v ~ /ms$/) s /= 1000
					printf "  blocked in the store'"'"'s Complete: %s over 2 s, %.2f ms per request\n", v, s * 1000 / (r * 2) }'
		fi
		if [ "$PERF" = 1 ]; then
			perf report -i "$f.perf" --sort comm --stdio -g none 2>/dev/null | awk '/%/ && NR < 40 { printf "  %s %s\n", $1, $3 }' | head -8
		fi
	done
	cleanup
}

for round in $(seq 1 "$REPEAT"); do
	for bin in "$@"; do run_binary "$bin" "$round"; done
done
