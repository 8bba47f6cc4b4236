#!/usr/bin/env bash
# bench/load.sh - whole-Caddy load test of webhook_idempotency against reverse_proxy alone.
#
# Run it with `make bench` (or `bash bench/load.sh`) from the repository root. In one run it:
#   1. builds Caddy from ./cmd/caddy and the trivial upstream bench/upstream (standard library,
#      answers 200 with {"ok":true}) into bench/out/ (ignored by git);
#   2. starts the upstream, a private redis-server (--save '' --appendonly no) and one Caddy,
#      each on a free 127.0.0.1 port, with one Caddyfile holding one site per scenario
#      (admin on a free 127.0.0.1 port, logs discarded, auto_https off; every reverse_proxy with
#      `keepalive_idle_conns_per_host 256`, as the documentation recommends, unless a scenario
#      says otherwise):
#        A  reverse_proxy alone
#        B  webhook_idempotency (memory store) + reverse_proxy, a unique Idempotency-Key per request
#        C  the same on the Redis store
#        D  replays of one completed key, memory store
#        E  replays of one completed key, Redis store
#        F  new keys on the file store (the default store; `sync always`: each completion is on
#           disk, fdatasync'd, before its answer), in a file of its own in a fresh directory
#        G  replays of one completed key, file store (another file)
#        H  F with `sync 1s` (written at once, synced every second): F and H differ only by the
#           wait for the group commit's fsyncs, so their latencies show what that wait adds
#      and runs them in rounds (3 by default), each round A B A C A D A E A F A G A H: each ratio
#      X/A compares X with the A run just before it, and the median over the rounds is reported,
#      so that the machine drifting during the run does not decide the ratios;
#   3. drives each with wrk (-t2 -c32 --latency, POST bodies of 1 KiB, a warm-up first; every
#      scenario's wrk script formats each request anew, so wrk costs the same in each), prints
#      requests/s, p50 and p99 latency (medians over the rounds) and the ratios B/A … H/A;
#   4. counts Redis round trips per request for C and E from INFO commandstats deltas
#      (CONFIG RESETSTAT after the warm-up, calls divided by the requests wrk completed), and
#      Redis's CPU per request (INFO cpu);
#   5. counts system calls in one more run of A B C E F G H after the rounds (not in the
#      measured runs, so that counting never touches the ratios): Caddy's per request, Redis's
#      per request for C and E, and fdatasync/io_submit/fsync/pwrite64 per 1,000 deliveries for F and H,
#      with `perf stat` on the syscalls tracepoints (little overhead), else `strace -c -f`
#      (slows the process it traces: the counts are right, the batching may be larger);
#   6. runs the same comparison in front of a slow application, bench/app/app.js: one
#      single-threaded Node `http` server (node >= 18, standard library only) that parses and
#      stringifies the JSON body a few times per request, started twice: once with its own
#      in-app Redis guard (SET NX, then SET of the answer; GET on a duplicate) on the run's
#      redis-server, once without. In rounds (3 by default) of Q R M P Qr Rr Qd Rd, with wrk -c50:
#        Q   reverse_proxy alone -> the application with its own guard (the in-app design)
#        R   webhook_idempotency (Redis store) -> the application without the guard
#        M   the same with the memory store
#        P   reverse_proxy alone -> the application without the guard (no deduplication at all:
#            the ceiling R can approach, since R's application does exactly P's work)
#        Qr  replays of one completed key through Q (the application's guard answers them)
#        Rr  replays of one completed key through R (the module answers them)
#        Qd, Rd  Q and R with reverse_proxy's default keep-alive pool (at most 32 idle
#            connections per upstream; a request on a new connection to a single-threaded
#            application waits far longer, see BENCHMARKS.md)
#      and reports R/Q, M/Q, P/Q, R/P, Rr/Qr, Rd/Qd and the p99 ratios, with every round, and
#      how many connections Caddy opened to the application per 1000 requests (its GET /stats);
#   7. starts a second Caddy with one memory-store site (max_entries 2000000, ttl 1h; the next
#      handler is `respond {"ok":true}`, not reverse_proxy, so the fill takes less time), stores
#      1,000,000 unique keys with wrk -t2 -c64 and reports VmRSS (from /proc/<pid>/status) and
#      the live Go heap (after a forced GC, from the admin endpoint) before and after, per key, and
#      the heap per key beyond the recorded body (the issue's target: at most 256 bytes);
#   8. starts a third Caddy with one file-store site (`sync always`, ttl 30s, the same `respond`),
#      stores 1,000,000 unique keys with wrk -t2 -c64 while the keys expire and are swept, and
#      reports the file's size every 5 seconds and at the end: under a steady rate of new keys
#      and expiries it must level off, not grow with the keys stored.
#
# wrk, Caddy, the upstream and Redis share the machine's cores (2 on the reference machine):
# the numbers are of the whole loop on one host, not of Caddy alone; compare the ratios.
#
# Needs: go, curl, redis-server and redis-cli, wrk (Debian package `wrk`; installed with
# apt-get when missing and running as root, otherwise the script says so and stops); perf or
# strace for step 5 (skipped without either).
# Everything listens on 127.0.0.1 only; every wait is bounded; every process started here is
# stopped on exit. Takes about 14 minutes.
#
# Knobs (environment): BENCH_DURATION (seconds per scenario, default 3), BENCH_WARMUP
# (default 1), BENCH_ROUNDS (default 3), BENCH_CONNS (default 32), BENCH_FILL_KEYS (default
# 1000000; 0 skips step 7), BENCH_FILE_FILL_KEYS (default 1000000; 0 skips step 8),
# BENCH_COUNT=0 (skips step 5), BENCH_APP_DURATION (seconds per application scenario, default 5),
# BENCH_APP_CONNS (default 50), BENCH_APP_WORK (extra JSON rounds per request in the application,
# default 0; see bench/app/app.js), BENCH_APP=0 (skips step 6), BENCH_PROFILE=1 (also takes a CPU
# profile of Caddy during the first round's B and F and prints `go tool pprof -top` of each into
# bench/out/b-pprof.txt and bench/out/f-pprof.txt).
#
# BENCH_BASE=<commit> also builds Caddy from that commit of this repository (git archive, into
# bench/out/base-src) and runs it beside the first, with the sites of B, C and F only, as B0, C0
# and F0: in each round B0 runs next to B, C0 next to C and F0 next to F (after it in odd rounds,
# before it in even ones, so that neither build always goes first), and the report gives B/B0,
# C/C0 and F/F0 (the code under test against the older build, seconds apart in the same run)
# next to the ratios to A. It shows whether a change leaves the path of new keys as fast as it
# was; the older build must take the same Caddyfile.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/bench/out
ROUNDS=${BENCH_ROUNDS:-3}
THREADS=2
FILL_KEYS=${BENCH_FILL_KEYS:-1000000}
FILE_FILL_KEYS=${BENCH_FILE_FILL_KEYS:-1000000}
COUNT=${BENCH_COUNT:-1}
PROFILE=${BENCH_PROFILE:-0}
APP=${BENCH_APP:-1}
APP_DURATION=${BENCH_APP_DURATION:-5}
APP_CONNS=${BENCH_APP_CONNS:-50}
APP_WORK=${BENCH_APP_WORK:-0}
BASE=${BENCH_BASE:-}

mkdir -p "$OUT"
rm -f "$OUT"/*.txt "$OUT"/done.* "$OUT"/*.prof

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

# ---- tools -------------------------------------------------------------------------------
if ! command -v wrk >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		say "wrk is missing: installing the Debian package wrk with apt-get (apt-get update first)"
		apt-get update -qq >/dev/null &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null ||
			die "installing wrk with apt-get failed: install wrk (https://github.com/wg/wrk) and run make bench again"
	else
		die "wrk is missing and cannot be installed here (needs root and apt-get): install wrk and run make bench again"
	fi
fi
tools=(redis-server redis-cli curl "$GO")
[ "$APP" = 0 ] || tools+=(node)
need "redis-server/redis-cli: apt-get install redis-server redis-tools, or make redis-server; node: apt-get install nodejs, or BENCH_APP=0" "${tools[@]}"

# ---- memory of a process -----------------------------------------------------------------
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
heap_bytes() { # admin port: forces a GC, then reads the live heap from expvar
	curl -fsS "http://127.0.0.1:$1/debug/pprof/heap?gc=1" -o /dev/null
	curl -fsS "http://127.0.0.1:$1/debug/vars" | grep -o '"HeapAlloc": *[0-9]*' | grep -o '[0-9]*$'
}

build
if [ -n "$BASE" ]; then
	say "building Caddy from $BASE (the base, B0 C0 F0) into ${OUT#"$PWD"/}/caddy-base"
	rm -rf "$OUT/base-src"
	mkdir -p "$OUT/base-src"
	git archive "$BASE" | tar -x -C "$OUT/base-src" || die "git archive $BASE failed: BENCH_BASE must name a commit of this repository"
	(cd "$OUT/base-src" && "$GO" build -o "$OUT/caddy-base" ./cmd/caddy) || die "building Caddy at $BASE failed"
fi
BODY=$OUT/body.json
write_body "$BODY"

export XDG_CONFIG_HOME=$OUT/xdg-config XDG_DATA_HOME=$OUT/xdg-data

PU=$(free_port)
start upstream "$OUT/upstream" -addr "127.0.0.1:$PU"
wait_port "$PU" upstream "$STARTED"
PR=$(free_port)
start redis redis-server --bind 127.0.0.1 --port "$PR" --save '' --appendonly no --dir "$OUT"
wait_port "$PR" redis "$STARTED"
if [ "$APP" != 0 ]; then
	PQ=$(free_port) PP=$(free_port)
	start app-guard env APP_WORK="$APP_WORK" node "$ROOT/bench/app/app.js" "$PQ" "$PR"
	wait_port "$PQ" app-guard "$STARTED"
	start app env APP_WORK="$APP_WORK" node "$ROOT/bench/app/app.js" "$PP"
	wait_port "$PP" app "$STARTED"
fi

PADMIN=$(free_port) PA=$(free_port) PB=$(free_port) PC=$(free_port) PD=$(free_port) PE=$(free_port)
PF=$(free_port) PG=$(free_port) PH=$(free_port)
PQS=$(free_port) PRS=$(free_port) PMS=$(free_port) PPS=$(free_port) PQD=$(free_port) PRD=$(free_port)
# The file stores of F, G and H: a file each, in a directory made afresh for every run
FILES=$OUT/file-store
rm -rf "$FILES"
mkdir -p "$FILES"
site() { # comment port upstream [store [source [idle connections]]]: one site of the Caddyfile;
	# a store with a block is given with its lines separated by ';'. The keep-alive pool is 256
	# idle connections per upstream unless the sixth argument says otherwise ("default": none
	# set, reverse_proxy's default of 32)
	local idle=${6:-256}
	printf '\n# %s\nhttp://127.0.0.1:%s {\n' "$1" "$2"
	if [ -n "${4:-}" ]; then
		case $4 in
		*\;*) printf '\twebhook_idempotency {\n\t\tsource %s\n\t\tstore %s {\n\t\t\t%s\n\t\t}\n\t}\n' "$5" "${4%%;*}" "${4#*;}" ;;
		*) printf '\twebhook_idempotency {\n\t\tsource %s\n\t\tstore %s\n\t}\n' "$5" "$4" ;;
		esac
	fi
	if [ "$idle" != default ]; then
		printf '\treverse_proxy 127.0.0.1:%s {\n\t\ttransport http {\n\t\t\tkeepalive_idle_conns_per_host %s\n\t\t}\n\t}\n}\n' "$3" "$idle"
	else
		printf '\treverse_proxy 127.0.0.1:%s\n}\n' "$3"
	fi
}
REDIS="redis redis://127.0.0.1:$PR"
{
	caddy_globals "$PADMIN"
	site "A: reverse_proxy alone" "$PA" "$PU"
	site "B: new deliveries, memory store" "$PB" "$PU" memory bench-b
	site "C: new deliveries, Redis store" "$PC" "$PU" "$REDIS" bench-c
	site "D: replays of one completed key, memory store" "$PD" "$PU" memory bench-d
	site "E: replays of one completed key, Redis store" "$PE" "$PU" "$REDIS" bench-e
	site "F: new deliveries, file store (sync always)" "$PF" "$PU" "file $FILES/f.db;sync always" bench-f
	site "G: replays of one completed key, file store" "$PG" "$PU" "file $FILES/g.db;sync always" bench-g
	site "H: F with the file synced every second" "$PH" "$PU" "file $FILES/h.db;sync 1s" bench-h
	if [ "$APP" != 0 ]; then
		site "Q (and Qr): reverse_proxy alone, the application deduplicates by itself" "$PQS" "$PQ"
		site "R (and Rr): webhook_idempotency, Redis store, the application without its guard" "$PRS" "$PP" "$REDIS" bench-r
		site "M: webhook_idempotency, memory store, the application without its guard" "$PMS" "$PP" memory bench-m
		site "P: reverse_proxy alone, the application without its guard: no deduplication" "$PPS" "$PP"
		site "Qd: Q with reverse_proxy's default keep-alive pool (32 idle connections)" "$PQD" "$PQ" "" "" default
		site "Rd: R with reverse_proxy's default keep-alive pool" "$PRD" "$PP" "$REDIS" bench-rd default
	fi
} >"$OUT/Caddyfile"
start caddy "$OUT/caddy" run --adapter caddyfile --config "$OUT/Caddyfile"
CPID=$STARTED
for p in "$PADMIN" "$PA" "$PB" "$PC" "$PD" "$PE" "$PF" "$PG" "$PH"; do wait_port "$p" caddy "$CPID"; done
[ "$APP" = 0 ] || for p in "$PQS" "$PRS" "$PMS" "$PPS" "$PQD" "$PRD"; do wait_port "$p" caddy "$CPID"; done
PB0='' PC0='' PF0='' # set only with BENCH_BASE
if [ -n "$BASE" ]; then # the older build, beside the first: B0 C0 F0
	PADMIN0=$(free_port) PB0=$(free_port) PC0=$(free_port) PF0=$(free_port)
	{
		caddy_globals "$PADMIN0"
		site "B0: B on the base build" "$PB0" "$PU" memory bench-b0
		site "C0: C on the base build" "$PC0" "$PU" "$REDIS" bench-c0
		site "F0: F on the base build" "$PF0" "$PU" "file $FILES/f0.db;sync always" bench-f0
	} >"$OUT/Caddyfile.base"
	start caddy-base "$OUT/caddy-base" run --adapter caddyfile --config "$OUT/Caddyfile.base"
	for p in "$PADMIN0" "$PB0" "$PC0" "$PF0"; do wait_port "$p" caddy-base "$STARTED"; done
fi

# ---- scenarios ---------------------------------------------------------------------------
to_ms() { # wrk latency (850.00us, 1.23ms, 1.02s, 2.00m) -> milliseconds
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
		printf "%.2f", n }'
}
declare -A RPS P50 P99 REQS BAD
measure() { # name port lua [extra wrk args]
	local name=$1 port=$2 lua=$3 url="http://127.0.0.1:$2/webhook" f
	shift 3
	f=$OUT/$name.txt
	if [ "$WARMUP" != 0 ]; then
		KEY_PREFIX="$name-warm-$$" wrk -t"$THREADS" -c"$CONNS" -d"${WARMUP}s" -s "$ROOT/bench/$lua" "$url" >/dev/null
	fi
	if [ -n "${BEFORE_MEASURE:-}" ]; then $BEFORE_MEASURE; fi
	KEY_PREFIX="$name-$$" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -s "$ROOT/bench/$lua" "$url" >"$f"
	RPS[$name]=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$f")
	P50[$name]=$(to_ms "$(awk '$1 == "50%" {print $2}' "$f")")
	P99[$name]=$(to_ms "$(awk '$1 == "99%" {print $2}' "$f")")
	REQS[$name]=$(awk '/requests in/ {print $1}' "$f")
	BAD[$name]=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$f")
	BAD[$name]=$((${BAD[$name]:-0} + 0))
	say "  $name: ${RPS[$name]} req/s, p50 ${P50[$name]} ms, p99 ${P99[$name]} ms (${REQS[$name]} requests, ${BAD[$name]} non-2xx)"
}
complete_key() { # port key: one first delivery, then check that a duplicate is replayed
	local url="http://127.0.0.1:$1/webhook" code h
	code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$url" -H "Idempotency-Key: $2" \
		-H 'Content-Type: application/json' --data-binary "@$BODY")
	[ "$code" = 200 ] || die "first delivery of $2 on :$1 answered $code"
	h=$(curl -sS -D - -o /dev/null -X POST "$url" -H "Idempotency-Key: $2" \
		-H 'Content-Type: application/json' --data-binary "@$BODY")
	grep -qi '^Idempotent-Replayed: true' <<<"$h" || die "a duplicate of $2 on :$1 was not replayed"
}
redis_cpu() { # Redis's CPU seconds so far (user + system)
	redis-cli -p "$PR" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'
}
REDIS_CPU0=0
redis_reset() {
	redis-cli -p "$PR" CONFIG RESETSTAT >/dev/null
	REDIS_CPU0=$(redis_cpu)
}
declare -A RT
redis_trips() { # name: INFO commandstats since the reset, per request served
	local name=$1 cpu
	cpu=$(redis_cpu)
	redis-cli -p "$PR" INFO commandstats | tr -d '\r' >"$OUT/$name-commandstats.txt"
	# commandstats also counts the commands a script runs (redis.call inside EVALSHA). Every
	# one of the store's scripts starts with one GET and then runs at most one SET, DEL,
	# PEXPIRE or PTTL; a claim is a SET of its own (SET NX GET). So the round trips are the
	# scripts (EVALSHA, EVAL) plus the SETs beyond one per script, plus any other command
	# (PING, ...); GET, DEL, PEXPIRE and PTTL are listed as run inside the scripts.
	RT[$name]=$(awk -F'[:,=]' -v n="${REQS[$name]}" -v cpu="$(awk -v a="$REDIS_CPU0" -v b="$cpu" 'BEGIN { print b - a }')" '
		/^cmdstat_/ { c = substr($1, 9); if (c ~ /^config/ || c == "info") next
			calls[c] = $3; us[c] = $7 }
		END {
			scripts = calls["evalsha"] + calls["eval"]
			top = calls["set"] - scripts; if (top < 0) top = 0
			total = scripts + top
			per = sprintf("evalsha %.3f (%.1f us each), eval %.3f, SET NX GET %.3f", calls["evalsha"] / n, us["evalsha"], calls["eval"] / n, top / n)
			for (c in calls) if (c !~ /^(get|set|del|pexpire|pttl|evalsha|eval)$/) { total += calls[c]; per = per sprintf(", %s %.3f", c, calls[c] / n) }
			inner = sprintf("get %.3f, set %.3f", calls["get"] / n, (calls["set"] - top) / n)
			for (c in calls) if (c ~ /^(del|pexpire|pttl)$/) inner = inner sprintf(", %s %.3f", c, calls[c] / n)
			printf "%.3f round trips per request (%s; inside the scripts: %s); Redis CPU %.1f us per request", total / n, per, inner, cpu * 1e6 / n }' "$OUT/$name-commandstats.txt")
	say "  $name: ${RT[$name]}"
}

declare -A CONN1K CONNS_BY
app_conns() { # application port: the connections it has accepted so far
	curl -fsS "http://127.0.0.1:$1/stats" | grep -o '"connections":[0-9]*' | grep -o '[0-9]*$'
}
APP_C0=0
app_before() { # the application's connections before the measured run, then the caller's hook
	APP_C0=$(app_conns "$APP_PORT")
	if [ -n "${APP_HOOK:-}" ]; then $APP_HOOK; fi
}
measure_app() { # name caddy-port lua application-port [hook]: measure, and count the application's new connections
	local c1
	APP_PORT=$4 APP_HOOK=${5:-} BEFORE_MEASURE=app_before CONNS=$APP_CONNS DURATION=$APP_DURATION measure "$1" "$2" "$3"
	c1=$(app_conns "$4")
	CONN1K[$1]=$(awk -v c=$((c1 - APP_C0)) -v n="${REQS[$1]}" 'BEGIN { printf "%.1f", c * 1000 / n }')
	say "  $1: the application accepted $((c1 - APP_C0)) connections (${CONN1K[$1]} per 1000 requests)"
}

say "wrk -t$THREADS -c$CONNS, $ROUNDS rounds of A B A C A D A E A F A G A H$([ -z "$BASE" ] || echo " (B0 C0 F0, the base build, next to B C F)"), ${WARMUP}s warm-up + ${DURATION}s per scenario, POST bodies of 1 KiB"
export BODY_FILE=$BODY
export REPLAY_KEY=replay-$$

complete_key "$PD" "$REPLAY_KEY"
complete_key "$PE" "$REPLAY_KEY"
complete_key "$PG" "$REPLAY_KEY"
profiled() { # name port lua letter: measure, with a CPU profile of Caddy when BENCH_PROFILE=1
	if [ "$PROFILE" = 1 ]; then
		PROF_FILE=$OUT/$4.prof
		profile_start() {
			curl -fsS -o "$PROF_FILE" "http://127.0.0.1:$PADMIN/debug/pprof/profile?seconds=$DURATION" &
			PROF_PID=$!
		}
		BEFORE_MEASURE=profile_start measure "$1" "$2" "$3"
		wait "$PROF_PID" || say "the CPU profile failed"
		"$GO" tool pprof -top -nodecount=40 "$OUT/caddy" "$PROF_FILE" >"$OUT/$4-pprof.txt" &&
			say "  CPU profile of Caddy during $1: $OUT/$4-pprof.txt"
	else
		measure "$1" "$2" "$3"
	fi
}
based() { # base-name base-port command: runs the command (a scenario on the build under test) and,
	# with BENCH_BASE, the same scenario on the base build: after it in odd rounds, before it in even
	# ones, so that neither build always runs first
	local n0=$1 p0=$2
	shift 2
	if [ -z "$BASE" ]; then
		"$@"
	elif [ $((r % 2)) = 1 ]; then
		"$@"
		measure "$n0" "$p0" unique.lua
	else
		measure "$n0" "$p0" unique.lua
		"$@"
	fi
}
for r in $(seq 1 "$ROUNDS"); do
	say "round $r of $ROUNDS"
	# A runs again just before each scenario, so that each ratio compares runs a few seconds
	# apart; A uses unique.lua too (the key is ignored by reverse_proxy), so wrk does the same
	# work per request in every scenario
	measure "A.$r.B" "$PA" unique.lua
	run_b() { if [ "$r" = 1 ]; then profiled "B.$r" "$PB" unique.lua b; else measure "B.$r" "$PB" unique.lua; fi; }
	based "B0.$r" "$PB0" run_b
	WARMUP=0 measure "A.$r.C" "$PA" unique.lua # A is warm: it ran moments ago
	run_c() { BEFORE_MEASURE=redis_reset measure "C.$r" "$PC" unique.lua && redis_trips "C.$r"; }
	based "C0.$r" "$PC0" run_c
	WARMUP=0 measure "A.$r.D" "$PA" unique.lua # A is warm: it ran moments ago
	measure "D.$r" "$PD" replay.lua
	WARMUP=0 measure "A.$r.E" "$PA" unique.lua # A is warm: it ran moments ago
	BEFORE_MEASURE=redis_reset measure "E.$r" "$PE" replay.lua
	redis_trips "E.$r"
	WARMUP=0 measure "A.$r.F" "$PA" unique.lua # A is warm: it ran moments ago
	run_f() { if [ "$r" = 1 ]; then profiled "F.$r" "$PF" unique.lua f; else measure "F.$r" "$PF" unique.lua; fi; }
	based "F0.$r" "$PF0" run_f
	WARMUP=0 measure "A.$r.G" "$PA" unique.lua # A is warm: it ran moments ago
	measure "G.$r" "$PG" replay.lua
	WARMUP=0 measure "A.$r.H" "$PA" unique.lua # A is warm: it ran moments ago
	measure "H.$r" "$PH" unique.lua
done

# ---- system calls ------------------------------------------------------------------------
# One more run of each scenario, with the system calls of Caddy (and Redis) counted while wrk
# runs: perf stat on the syscalls tracepoints costs the traced process little; strace stops it
# at every call, so with strace the process runs slower and batches may grow.
COUNTER=none
if [ "$COUNT" != 0 ]; then
	if command -v perf >/dev/null 2>&1 && perf stat -x, -o /dev/null -e raw_syscalls:sys_enter -- true 2>/dev/null; then
		COUNTER=perf
	elif command -v strace >/dev/null 2>&1; then
		COUNTER=strace
	else
		say "neither perf nor strace works here: the system calls are not counted (apt-get install linux-perf or strace)"
	fi
fi
COUNTED=(read write recvfrom epoll_pwait epoll_wait futex pwrite64 fdatasync fsync io_submit)
count_start() { # counts the system calls of COUNT_PIDS (name:pid ...) for DURATION, into $OUT/COUNT_NAME.<name>.calls
	local np name pid f ev c
	COUNT_JOBS=()
	for np in $COUNT_PIDS; do
		name=${np%%:*} pid=${np#*:} f=$OUT/$COUNT_NAME.$name.calls
		if [ "$COUNTER" = perf ]; then
			ev=raw_syscalls:sys_enter
			for c in "${COUNTED[@]}"; do ev=$ev,syscalls:sys_enter_$c; done
			perf stat -x, -o "$f" -e "$ev" -p "$pid" -- sleep "$DURATION" 2>/dev/null &
		else
			timeout -s INT "$DURATION" strace -f -c -p "$pid" -o "$f" 2>/dev/null &
		fi
		COUNT_JOBS+=($!)
	done
}
calls() { # file syscall|total: how many calls the count in file holds
	if [ "$COUNTER" = perf ]; then
		awk -F, -v e="$([ "$2" = total ] && echo raw_syscalls:sys_enter || echo "syscalls:sys_enter_$2")" '$3 == e { print $1 + 0; found = 1 } END { if (!found) print 0 }' "$1"
	else
		awk -v e="$2" '$NF == e { print $4 + 0; found = 1 } END { if (!found) print 0 }' "$1"
	fi
}
declare -A SYS
counted() { # name port lua pids...: one run with the system calls of pids (name:pid) counted
	local name=$1 port=$2 lua=$3 j np who per
	shift 3
	COUNT_NAME=$name COUNT_PIDS="$*" BEFORE_MEASURE=count_start measure "$name" "$port" "$lua"
	for j in "${COUNT_JOBS[@]}"; do wait "$j" || true; done
	for np in "$@"; do
		who=${np%%:*}
		per=$(awk -v c="$(calls "$OUT/$name.$who.calls" total)" -v n="${REQS[$name]}" 'BEGIN { printf "%.1f", c / n }')
		SYS[$name.$who]=$per
		for c in "${COUNTED[@]}"; do
			SYS[$name.$who.$c]=$(awk -v c="$(calls "$OUT/$name.$who.calls" "$c")" -v n="${REQS[$name]}" 'BEGIN { printf "%.3f", c / n }')
		done
		say "  $name: $who made $per system calls per request ($(for c in "${COUNTED[@]}"; do printf '%s %s, ' "$c" "${SYS[$name.$who.$c]}"; done | sed 's/, $//'))"
	done
}
if [ "$COUNTER" != none ]; then
	say "system calls, counted with $COUNTER: one more run of A B C E F G H"
	REDIS_PID=$(redis-cli -p "$PR" INFO server | tr -d '\r' | awk -F: '/^process_id:/ { print $2 }')
	counted A.count "$PA" unique.lua "caddy:$CPID"
	counted B.count "$PB" unique.lua "caddy:$CPID"
	counted C.count "$PC" unique.lua "caddy:$CPID" "redis:$REDIS_PID"
	counted E.count "$PE" replay.lua "caddy:$CPID" "redis:$REDIS_PID"
	counted F.count "$PF" unique.lua "caddy:$CPID"
	counted G.count "$PG" replay.lua "caddy:$CPID"
	counted H.count "$PH" unique.lua "caddy:$CPID"
fi

# ---- in front of a slow application ------------------------------------------------------
if [ "$APP" != 0 ]; then
	say "the application (bench/app/app.js, APP_WORK=$APP_WORK): wrk -t$THREADS -c$APP_CONNS, $ROUNDS rounds of Q R M P Qr Rr Qd Rd, ${WARMUP}s warm-up + ${APP_DURATION}s per scenario"
	complete_key "$PQS" "$REPLAY_KEY"
	complete_key "$PRS" "$REPLAY_KEY"
	for r in $(seq 1 "$ROUNDS"); do
		say "round $r of $ROUNDS (the application)"
		# R and M follow Q at once, so R/Q and M/Q compare runs seconds apart
		measure_app "Q.$r" "$PQS" unique.lua "$PQ"
		measure_app "R.$r" "$PRS" unique.lua "$PP" redis_reset
		redis_trips "R.$r"
		measure_app "M.$r" "$PMS" unique.lua "$PP"
		measure_app "P.$r" "$PPS" unique.lua "$PP"
		measure_app "Qr.$r" "$PQS" replay.lua "$PQ"
		measure_app "Rr.$r" "$PRS" replay.lua "$PP"
		measure_app "Qd.$r" "$PQD" unique.lua "$PQ"
		measure_app "Rd.$r" "$PRD" unique.lua "$PP"
	done
fi

# ---- memory: 1,000,000 keys --------------------------------------------------------------
if [ "$FILL_KEYS" -gt 0 ]; then
	kill "$CPID" 2>/dev/null || true
	wait "$CPID" 2>/dev/null || true
	PADMIN2=$(free_port) PM=$(free_port)
	{
		caddy_globals "$PADMIN2"
		cat <<EOF

# route: respond is ordered before webhook_idempotency by default
http://127.0.0.1:$PM {
	route {
		webhook_idempotency {
			source bench-m
			ttl 1h
			store memory {
				max_entries 2000000
			}
		}
		header Content-Type application/json
		respond \`{"ok":true}\` 200
	}
}
EOF
	} >"$OUT/Caddyfile.memory"
	FILL_BODY_LEN=11 # the recorded body, {"ok":true}
	start caddy-memory "$OUT/caddy" run --adapter caddyfile --config "$OUT/Caddyfile.memory"
	MPID=$STARTED
	wait_port "$PADMIN2" caddy-memory "$MPID"
	wait_port "$PM" caddy-memory "$MPID"
	complete_key "$PM" warm-$$ # the table, its janitor and the proxy's connection exist
	HEAP0=$(heap_bytes "$PADMIN2")
	RSS0=$(rss_kb "$MPID")
	per_thread=$(((FILL_KEYS + THREADS - 1) / THREADS))
	say "storing $((per_thread * THREADS)) unique keys (wrk -t$THREADS -c64, $per_thread responses per thread)"
	rm -f "$OUT"/done.*
	printf '{"id":1}' >"$OUT/small.json" # a small body: the keys, not the bodies, are measured
	BODY_FILE=$OUT/small.json KEY_PREFIX=fill-$$ WRK_LIMIT=$per_thread DONE_FILE=$OUT/done \
		wrk -t"$THREADS" -c64 -d100s -s "$ROOT/bench/unique.lua" "http://127.0.0.1:$PM/webhook" >"$OUT/fill.txt" &
	WPID=$!
	PIDS+=("$WPID")
	for i in $(seq 1 1000); do # at most 100 s, like wrk's own -d; a slower machine stores fewer keys
		[ "$(ls "$OUT"/done.* 2>/dev/null | wc -l)" -ge "$THREADS" ] && break
		kill -0 "$WPID" 2>/dev/null || break
		sleep 0.1
	done
	kill -INT "$WPID" 2>/dev/null || true # wrk otherwise sleeps out -d after its threads stop
	wait "$WPID" || true
	FILLED=$(awk '/requests in/ {print $1}' "$OUT/fill.txt")
	FILL_BAD=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$OUT/fill.txt")
	FILL_RPS=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$OUT/fill.txt")
	sleep 1
	HEAP1=$(heap_bytes "$PADMIN2")
	RSS1=$(rss_kb "$MPID")
	kill "$MPID" 2>/dev/null || true
	wait "$MPID" 2>/dev/null || true
fi

# ---- file store: 1,000,000 keys that expire ----------------------------------------------
if [ "$FILE_FILL_KEYS" -gt 0 ]; then
	kill "$CPID" 2>/dev/null || true
	wait "$CPID" 2>/dev/null || true
	PADMIN3=$(free_port) PFF=$(free_port)
	FILL_TTL=30s
	rm -rf "$OUT/file-fill"
	{
		caddy_globals "$PADMIN3"
		cat <<EOF

# route: respond is ordered before webhook_idempotency by default
http://127.0.0.1:$PFF {
	route {
		webhook_idempotency {
			source bench-ff
			ttl $FILL_TTL
			store file $OUT/file-fill/store.db
		}
		header Content-Type application/json
		respond \`{"ok":true}\` 200
	}
}
EOF
	} >"$OUT/Caddyfile.file"
	start caddy-file "$OUT/caddy" run --adapter caddyfile --config "$OUT/Caddyfile.file"
	FPID=$STARTED
	wait_port "$PADMIN3" caddy-file "$FPID"
	wait_port "$PFF" caddy-file "$FPID"
	complete_key "$PFF" warm-$$
	FF_SIZE0=$(stat -c %s "$OUT/file-fill/store.db")
	FF_RSS0=$(rss_kb "$FPID")
	per_thread=$(((FILE_FILL_KEYS + THREADS - 1) / THREADS))
	say "file store: storing $((per_thread * THREADS)) unique keys with ttl $FILL_TTL (wrk -t$THREADS -c64, $per_thread responses per thread), the file's size every 5 s"
	rm -f "$OUT"/done.*
	printf '{"id":1}' >"$OUT/small.json"
	BODY_FILE=$OUT/small.json KEY_PREFIX=ffill-$$ WRK_LIMIT=$per_thread DONE_FILE=$OUT/done \
		wrk -t"$THREADS" -c64 -d900s -s "$ROOT/bench/unique.lua" "http://127.0.0.1:$PFF/webhook" >"$OUT/file-fill.txt" &
	WPID=$!
	PIDS+=("$WPID")
	FF_SIZES=()
	FF_T0=$SECONDS
	for i in $(seq 1 9000); do # at most 900 s, like wrk's -d
		[ "$(ls "$OUT"/done.* 2>/dev/null | wc -l)" -ge "$THREADS" ] && break
		kill -0 "$WPID" 2>/dev/null || break
		if [ $((i % 50)) = 0 ]; then
			FF_SIZES+=("$((SECONDS - FF_T0))s:$(($(stat -c %s "$OUT/file-fill/store.db") / 1048576))")
		fi
		sleep 0.1
	done
	kill -INT "$WPID" 2>/dev/null || true
	wait "$WPID" || true
	FF_SECONDS=$((SECONDS - FF_T0))
	FF_SIZE1=$(stat -c %s "$OUT/file-fill/store.db")
	FF_RSS1=$(rss_kb "$FPID")
	FF_FILLED=$(awk '/requests in/ {print $1}' "$OUT/file-fill.txt")
	FF_BAD=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$OUT/file-fill.txt")
	FF_RPS=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$OUT/file-fill.txt")
	say "  $FF_FILLED requests in about ${FF_SECONDS}s ($FF_RPS req/s), the file $FF_SIZE0 -> $FF_SIZE1 bytes"
fi

# ---- report ------------------------------------------------------------------------------
declare -A DESC=(
	[A]='reverse_proxy alone' [B]='+ webhook_idempotency, memory, new keys'
	[C]='+ webhook_idempotency, Redis, new keys' [D]='replay of one completed key, memory'
	[E]='replay of one completed key, Redis'
	[F]='+ webhook_idempotency, file, new keys' [G]='replay of one completed key, file'
	[H]='= F, sync 1s'
	[B0]='= B on the base build' [C0]='= C on the base build' [F0]='= F on the base build'
	[Q]='reverse_proxy -> app with its own guard, new keys' [R]='webhook_idempotency, Redis -> app, new keys'
	[M]='webhook_idempotency, memory -> app, new keys' [P]='reverse_proxy -> app, no deduplication'
	[Qr]='replays, answered by the app guard' [Rr]='replays, answered by webhook_idempotency (Redis)'
	[Qd]="= Q, reverse_proxy's default keep-alive pool" [Rd]="= R, reverse_proxy's default keep-alive pool"
)
SCEN=(A B C D E F G H)
[ -z "$BASE" ] || SCEN+=(B0 C0 F0)
dashes() { printf -- '-%.0s' $(seq 1 "$1"); }
table_head() { # width of the scenario column, then the names of the columns after p99
	local w=$1 c
	shift
	printf "| %-${w}s | %8s | %8s | %8s |" scenario 'req/s' 'p50 ms' 'p99 ms'
	for c in "$@"; do printf ' %-24s |' "$c"; done
	printf '\n|%s|%s:|%s:|%s:|' "$(dashes $((w + 2)))" "$(dashes 9)" "$(dashes 9)" "$(dashes 9)"
	for c in "$@"; do printf '%s|' "$(dashes 26)"; done
	echo
}
{
	echo
	echo "machine: $(nproc) cores, $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), load average $(cut -d' ' -f1-3 /proc/loadavg) (at the end)"
	echo "wrk -t$THREADS -c$CONNS --latency, $ROUNDS rounds of A B A C A D A E A F A G A H, ${WARMUP}s warm-up + ${DURATION}s per scenario, POST 1 KiB; wrk, Caddy, upstream and Redis share the cores"
	echo
	echo "per scenario: the median of its runs (req/s, p50, p99; A ran before each scenario in each round) and every run's req/s"
	echo
	table_head 42 'req/s by run'
	for s in "${SCEN[@]}"; do
		d="$s ${DESC[$s]}"
		rps=() p50=() p99=() bad=0
		for r in $(seq 1 "$ROUNDS"); do
			runs=("$s.$r")
			[ "$s" = A ] && runs=("A.$r.B" "A.$r.C" "A.$r.D" "A.$r.E" "A.$r.F" "A.$r.G" "A.$r.H")
			for n in "${runs[@]}"; do
				rps+=("${RPS[$n]}") p50+=("${P50[$n]}") p99+=("${P99[$n]}")
				bad=$((bad + BAD[$n]))
			done
		done
		printf '| %-42s | %8s | %8s | %8s | %-24s |\n' "$d" "$(median "${rps[@]}")" "$(median "${p50[@]}")" "$(median "${p99[@]}")" "${rps[*]}$([ "$bad" -gt 0 ] && echo " ($bad non-2xx)")"
	done
	echo
	echo "ratios: the median over the rounds of X/A, A measured just before X:"
	for s in B C D E F G H; do
		case $s in B) t=0.95 ;; C) t=0.85 ;; D) t=3.00 ;; E) t=2.50 ;; F) t=0.85 ;; G) t=3.00 ;; H) t=0 ;; esac
		ratios=()
		for r in $(seq 1 "$ROUNDS"); do
			ratios+=("$(awk -v x="${RPS[$s.$r]}" -v a="${RPS[A.$r.$s]}" 'BEGIN { printf "%.3f", x / a }')")
		done
		awk -v s="$s" -v r="$(median "${ratios[@]}")" -v t="$t" -v all="${ratios[*]}" 'BEGIN {
			if (t > 0) printf "%s/A = %.2f (target >= %.2f: %s; rounds: %s)\n", s, r, t, (r >= t ? "met" : sprintf("missed by %.0f%%", (t - r) / t * 100)), all
			else printf "%s/A = %.2f (rounds: %s)\n", s, r, all }'
	done
	f50=() f99=()
	for r in $(seq 1 "$ROUNDS"); do
		f50+=("$(awk -v f="${P50[F.$r]}" -v h="${P50[H.$r]}" 'BEGIN { printf "%.2f", f - h }')")
		f99+=("$(awk -v f="${P99[F.$r]}" -v h="${P99[H.$r]}" 'BEGIN { printf "%.2f", f - h }')")
	done
	echo "the wait for the group commit's fsyncs, F (sync always) - H (sync 1s) in each round: p50 $(median "${f50[@]}") ms (rounds: ${f50[*]}), p99 $(median "${f99[@]}") ms (rounds: ${f99[*]})"
	if [ -n "$BASE" ]; then
		echo "against the base build ($BASE, B0 C0 F0 run next to B C F in each round): the median over the rounds of X/X0"
		for s in B C F; do
			ratios=()
			for r in $(seq 1 "$ROUNDS"); do
				ratios+=("$(awk -v x="${RPS[$s.$r]}" -v b="${RPS[${s}0.$r]}" 'BEGIN { printf "%.3f", x / b }')")
			done
			awk -v n="$s/${s}0" -v r="$(median "${ratios[@]}")" -v all="${ratios[*]}" 'BEGIN { printf "%s = %.2f (rounds: %s)\n", n, r, all }'
		done
	fi
	echo
	echo "Redis, new deliveries (C, last round): ${RT[C.$ROUNDS]}"
	echo "Redis, replays (E, last round):        ${RT[E.$ROUNDS]}"
	if [ "$COUNTER" != none ]; then
		echo
		echo "system calls per request, counted with $COUNTER in one more run of each scenario (req/s of that run; Caddy's calls; Redis's for C and E):"
		for s in A B C E F G H; do
			n=$s.count
			line="  $s: ${RPS[$n]} req/s; Caddy ${SYS[$n.caddy]} (read ${SYS[$n.caddy.read]}, write ${SYS[$n.caddy.write]}, recvfrom ${SYS[$n.caddy.recvfrom]}, epoll_pwait ${SYS[$n.caddy.epoll_pwait]}, futex ${SYS[$n.caddy.futex]})"
			[ -n "${SYS[$n.redis]:-}" ] && line="$line; Redis ${SYS[$n.redis]} (read ${SYS[$n.redis.read]}, write ${SYS[$n.redis.write]}, epoll_wait ${SYS[$n.redis.epoll_wait]})"
			echo "$line"
		done
		for s in F H; do
			n=$s.count
			# on Linux the log syncs through aio (io_submit); fdatasync is then the
			# file's commits alone, else the log's syncs and the file's together
			awk -v s="$s" -v d="${SYS[$n.caddy.fdatasync]}" -v a="${SYS[$n.caddy.io_submit]}" -v f="${SYS[$n.caddy.fsync]}" -v w="${SYS[$n.caddy.pwrite64]}" 'BEGIN {
				printf "  %s, per 1,000 deliveries: %.0f fdatasync, %.0f io_submit (the log'"'"'s syncs through aio), %.1f fsync (the file grown), %.0f pwrite64 (pages written); %.1f deliveries per sync of the log\n", s, d * 1000, a * 1000, f * 1000, w * 1000, (a > 0 ? 1 / a : (d > 0 ? 2 / d : 0)) }'
		done
	fi
	if [ "$APP" != 0 ]; then
		echo
		echo "in front of the application (bench/app/app.js, single-threaded Node, APP_WORK=$APP_WORK): wrk -t$THREADS -c$APP_CONNS --latency, $ROUNDS rounds of Q R M P Qr Rr Qd Rd, ${WARMUP}s warm-up + ${APP_DURATION}s each"
		echo
		table_head 52 'req/s by run' 'p99 ms by run'
		for s in Q R M P Qr Rr Qd Rd; do
			d="$s ${DESC[$s]}"
			rps=() p50=() p99=() conns=() bad=0
			for r in $(seq 1 "$ROUNDS"); do
				rps+=("${RPS[$s.$r]}") p50+=("${P50[$s.$r]}") p99+=("${P99[$s.$r]}") conns+=("${CONN1K[$s.$r]}")
				bad=$((bad + BAD[$s.$r]))
			done
			printf '| %-52s | %8s | %8s | %8s | %-24s | %-24s |\n' "$d" "$(median "${rps[@]}")" "$(median "${p50[@]}")" "$(median "${p99[@]}")" "${rps[*]}$([ "$bad" -gt 0 ] && echo " ($bad non-2xx)")" "${p99[*]}"
			CONNS_BY[$s]="${conns[*]}"
		done
		echo
		echo "ratios: the median over the rounds of X/Y, measured in the same round:"
		for pair in R/Q:1.10 M/Q:0 P/Q:0 R/P:0.90 Rr/Qr:5.00 Rd/Qd:0; do
			x=${pair%%/*} rest=${pair#*/} y=${rest%%:*} t=${pair##*:}
			ratios=()
			for r in $(seq 1 "$ROUNDS"); do
				ratios+=("$(awk -v x="${RPS[$x.$r]}" -v y="${RPS[$y.$r]}" 'BEGIN { printf "%.3f", x / y }')")
			done
			awk -v n="$x/$y" -v r="$(median "${ratios[@]}")" -v t="$t" -v all="${ratios[*]}" 'BEGIN {
				if (t > 0) printf "%s = %.2f (target >= %.2f: %s; rounds: %s)\n", n, r, t, (r >= t ? "met" : sprintf("missed by %.0f%%", (t - r) / t * 100)), all
				else printf "%s = %.2f (rounds: %s)\n", n, r, all }'
		done
		for pair in R/Q M/Q P/Q R/P Rd/Qd; do
			x=${pair%/*} y=${pair#*/}
			ratios=()
			for r in $(seq 1 "$ROUNDS"); do
				ratios+=("$(awk -v x="${P99[$x.$r]}" -v y="${P99[$y.$r]}" 'BEGIN { printf "%.3f", x / y }')")
			done
			awk -v x="$x" -v y="$y" -v r="$(median "${ratios[@]}")" -v all="${ratios[*]}" 'BEGIN {
				if (x == "R" && y == "Q") printf "p99(%s)/p99(%s) = %.2f (target <= 1.00: %s; rounds: %s)\n", x, y, r, (r <= 1 ? "met" : sprintf("missed by %.0f%%", (r - 1) * 100)), all
				else printf "p99(%s)/p99(%s) = %.2f (rounds: %s)\n", x, y, r, all }'
		done
		echo "connections the application accepted per 1000 requests (every proxy keeps up to 256 idle per upstream, Qd and Rd reverse_proxy's default 32), by round:"
		for s in Q R M P Qd Rd; do echo "  $s: ${CONNS_BY[$s]}"; done
		echo "Redis, new deliveries (R, last round): ${RT[R.$ROUNDS]}"
	fi
	if [ "$FILL_KEYS" -gt 0 ]; then
		echo
		echo "memory store, $FILLED requests with unique keys ($FILL_RPS req/s, ${FILL_BAD:-0} non-2xx), ttl 1h, max_entries 2000000:"
		awk -v r0="$RSS0" -v r1="$RSS1" -v h0="$HEAP0" -v h1="$HEAP1" -v n="$FILLED" -v b="$FILL_BODY_LEN" 'BEGIN {
			printf "  VmRSS %.1f MiB -> %.1f MiB: %.0f bytes per key\n", r0 / 1024, r1 / 1024, (r1 - r0) * 1024 / n
			printf "  live heap after GC %.1f MiB -> %.1f MiB: %.0f bytes per key, %.0f beyond the %d-byte recorded body (target: 256)\n", h0 / 1048576, h1 / 1048576, (h1 - h0) / n, (h1 - h0) / n - b, b }'
	fi
	if [ "$FILE_FILL_KEYS" -gt 0 ]; then
		echo
		echo "file store, $FF_FILLED requests with unique keys in ${FF_SECONDS} s ($FF_RPS req/s, ${FF_BAD:-0} non-2xx), ttl $FILL_TTL (swept every 10 s), sync always:"
		awk -v s0="$FF_SIZE0" -v s1="$FF_SIZE1" -v r0="$FF_RSS0" -v r1="$FF_RSS1" 'BEGIN {
			printf "  the file: %.1f MiB -> %.1f MiB; VmRSS %.1f MiB -> %.1f MiB\n", s0 / 1048576, s1 / 1048576, r0 / 1024, r1 / 1024 }'
		echo "  the file's size in MiB every 5 s: ${FF_SIZES[*]}"
	fi
} | tee "$OUT/summary.txt"
