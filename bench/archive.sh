#!/usr/bin/env bash
# bench/archive.sh - the archive's cost in the whole-Caddy Redis load scenario: new deliveries
# with a unique Idempotency-Key each (load.sh's scenario C), with the archive off (C) and on (F),
# and replays of one completed key with the archive off (E) and on (G).
#
# Builds Caddy (./cmd/caddy) and bench/upstream into bench/out/archive/, starts them and a
# private redis-server on free 127.0.0.1 ports, and drives each site with
# `wrk -t2 -c32 --latency` and POST bodies of 1 KiB (bench/unique.lua, bench/replay.lua), in
# rounds of C F E G (the order alternates every round), 3 s each after 1 s of warm-up; prints
# requests/s per run and the ratios F/C and G/E of each round, and their medians.
#
# Knobs (environment): BENCH_DURATION (default 3), BENCH_WARMUP (default 1), BENCH_ROUNDS
# (default 4), BENCH_CONNS (default 32). Needs wrk, redis-server, redis-cli, curl, go.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/bench/out/archive
ROUNDS=${BENCH_ROUNDS:-4}
mkdir -p "$OUT"

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
need "make bench installs wrk; make redis-server installs Redis" wrk redis-server redis-cli curl "$GO"

build
BODY=$OUT/body.json
write_body "$BODY"
export BODY_FILE=$BODY XDG_CONFIG_HOME=$OUT/xdg-config XDG_DATA_HOME=$OUT/xdg-data

PU=$(free_port) PR=$(free_port) PADMIN=$(free_port) PC=$(free_port) PF=$(free_port) PE=$(free_port) PG=$(free_port)
start upstream "$OUT/upstream" -addr "127.0.0.1:$PU"
wait_port "$PU" upstream "$STARTED"
start redis redis-server --bind 127.0.0.1 --port "$PR" --save '' --appendonly no --dir "$OUT"
wait_port "$PR" redis "$STARTED"

site() { # port source archive-line
	printf 'http://127.0.0.1:%s {\n\twebhook_idempotency {\n\t\tsource %s\n\t\tstore redis redis://127.0.0.1:%s\n\t\t%s\n\t}\n\treverse_proxy 127.0.0.1:%s\n}\n' \
		"$1" "$2" "$PR" "$3" "$PU"
}
{
	caddy_globals "$PADMIN"
	site "$PC" bench-c ""
	site "$PF" bench-f "archive"
	site "$PE" bench-e ""
	site "$PG" bench-g "archive"
} >"$OUT/Caddyfile"
start caddy "$OUT/caddy" run --adapter caddyfile --config "$OUT/Caddyfile"
for p in "$PADMIN" "$PC" "$PF" "$PE" "$PG"; do wait_port "$p" caddy "$STARTED"; done

export REPLAY_KEY=replay-$$
for p in "$PE" "$PG"; do
	curl -fsS -o /dev/null -X POST "http://127.0.0.1:$p/webhook" -H "Idempotency-Key: $REPLAY_KEY" --data-binary "@$BODY"
done

declare -A RPS
measure() { # name port lua
	local f=$OUT/$1.txt
	KEY_PREFIX="$1-warm-$$" wrk -t2 -c"$CONNS" -d"${WARMUP}s" -s "$ROOT/bench/$3" "http://127.0.0.1:$2/webhook" >/dev/null
	KEY_PREFIX="$1-$$" wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s "$ROOT/bench/$3" "http://127.0.0.1:$2/webhook" >"$f"
	RPS[$1]=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$f")
	local bad; bad=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$f")
	[ -z "$bad" ] || die "$1: $bad non-2xx answers"
	say "  $1: ${RPS[$1]} req/s, p50 $(awk '$1 == "50%" {print $2}' "$f"), p99 $(awk '$1 == "99%" {print $2}' "$f")"
}
NEW=() REPLAY=()
for r in $(seq 1 "$ROUNDS"); do
	say "round $r of $ROUNDS (load average $(cut -d' ' -f1 /proc/loadavg))"
	if [ $((r % 2)) = 1 ]; then
		measure "C.$r" "$PC" unique.lua; measure "F.$r" "$PF" unique.lua
		measure "E.$r" "$PE" replay.lua; measure "G.$r" "$PG" replay.lua
	else
		measure "F.$r" "$PF" unique.lua; measure "C.$r" "$PC" unique.lua
		measure "G.$r" "$PG" replay.lua; measure "E.$r" "$PE" replay.lua
	fi
	NEW+=("$(awk -v f="${RPS[F.$r]}" -v c="${RPS[C.$r]}" 'BEGIN { printf "%.3f", f / c }')")
	REPLAY+=("$(awk -v g="${RPS[G.$r]}" -v e="${RPS[E.$r]}" 'BEGIN { printf "%.3f", g / e }')")
done
echo "archive on/off, req/s ratio per round: new deliveries (F/C) ${NEW[*]}; replays (G/E) ${REPLAY[*]}"
echo "medians: new deliveries F/C $(median "${NEW[@]}"), replays G/E $(median "${REPLAY[@]}")"
echo "archived events: $(redis-cli -p "$PR" XLEN '{idem:bench-f}:archive') (new), $(redis-cli -p "$PR" XLEN '{idem:bench-g}:archive') (replays)"
