#!/usr/bin/env bash
# bench/cluster.sh - what a delivery costs Redis, standalone and as a three-master Redis
# Cluster: the measured point docs/scale.md checks its model against.
#
# Run it from the repository root: `bash bench/cluster.sh`. It builds Caddy and the upstream
# (bench/lib.sh), starts one standalone redis-server and three cluster-enabled ones joined as a
# Cluster of three masters (redis-cli --cluster create, no replicas), all with --save ''
# --appendonly no, and one Caddy in front of the upstream that serves one scenario's site at a
# time (each loaded through the admin API before its runs), each site a source of its own:
#   standalone-new, cluster-new   new keys (bench/unique.lua) on the standalone Redis, on the
#                                 Cluster (its three addresses);
#   standalone-archive-new,       the same with `archive 1d`: every new delivery also appended,
#   cluster-archive-new           with its attempt (the application's answer), to its source's
#                                 archive, two streams on one slot;
#   inbox-standalone,             `inbox` (concurrency 16): new keys accepted (202), then
#   inbox-cluster                 delivered to the upstream by the inbox's workers, each
#                                 attempt recorded in its event's history; the run ends when
#                                 the inbox has no event pending or scheduled (polled on the
#                                 admin API twice a second);
#   refused                       the `stripe` preset with a secret, and requests without a
#                                 signature: each refused (401) and listed in the source's
#                                 refusals list, at the list's bounded rate;
#   standalone-replay,            replays of one completed key (bench/replay.lua).
#   cluster-replay
# Each runs wrk -t2 -c$BENCH_CONNS with 1 KiB bodies, 2 s of warm-up and then BENCH_DURATION
# seconds, and reports per request:
#   - Redis's CPU (used_cpu_user + used_cpu_sys of INFO cpu, summed over the nodes), and the
#     commands' own time (usec of INFO commandstats, EVAL and EVALSHA left out: a script's
#     usec holds its commands', which are counted on their own), whose difference is the
#     system calls and event loop of each pipeline Redis reads and answers, and the scripts'
#     Lua;
#   - the commands (those a script runs included), the scripts, the keys added (DBSIZE) and
#     used_memory's growth (INFO memory); each command by name in bench/out/cluster/<scenario>.txt;
#   - apart: the series' flushes (not one per delivery: a script per source and Caddy instance
#     a second at most; its HINCRBY and HSETNX, HSETNX once a flush), the attempts recorded
#     (RPUSH, one per inbox attempt), the archive's appends and the refusals listed (EVAL);
#   - MEMORY USAGE of up to 100 of the run's idempotency keys and inbox histories, and per
#     entry of the archive's streams and of the refusals list;
#   - on the Cluster, each node's share of the keys, the commands and the CPU.
# Before Caddy starts it reads the idle servers' CPU for BENCH_DURATION seconds (their cron),
# which the refused scenario takes out of its CPU per refusal listed.
# Everything listens on 127.0.0.1; every process is stopped on exit. wrk, Caddy, the upstream
# and the Redis servers share the machine's cores: the absolute rates are this machine's, the
# per-request CPU and memory are what the model uses.
#
# Knobs (environment): BENCH_CONNS (wrk connections, default 32; fewer make smaller
# pipelines), BENCH_DURATION (seconds per run, default 10), BENCH_SCENARIOS (which of the
# scenarios above to run, in the order given; default all, in the order above), BENCH_CADDY (a Caddy binary built with the
# module to run instead of building ./cmd/caddy: an older commit's, for a comparison in the
# same conditions), GO (default go). Needs wrk, redis-server, redis-cli, curl, go.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/bench/out/cluster
mkdir -p "$OUT"
rm -rf "${OUT:?}"/*
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
DURATION=${BENCH_DURATION:-10}
CONNS=${BENCH_CONNS:-32}
ALL="standalone-new cluster-new standalone-archive-new cluster-archive-new inbox-standalone inbox-cluster refused standalone-replay cluster-replay"
SCENARIOS=${BENCH_SCENARIOS:-$ALL}
for sc in $SCENARIOS; do
	case " $ALL " in *" $sc "*) ;; *) die "unknown scenario '$sc' in BENCH_SCENARIOS (known: $ALL)" ;; esac
done
need "apt-get install wrk redis-server redis-tools" wrk redis-server redis-cli curl "$GO"

if [ -n "${BENCH_CADDY:-}" ]; then # another build of Caddy with the module (an older commit's)
	[ -x "$BENCH_CADDY" ] || die "BENCH_CADDY=$BENCH_CADDY is not an executable"
	cp "$BENCH_CADDY" "$OUT/caddy"
	"$GO" build -o "$OUT/upstream" ./bench/upstream
else
	build
fi
write_body "$OUT/body.json"
export XDG_CONFIG_HOME=$OUT/xdg-config XDG_DATA_HOME=$OUT/xdg-data

PU=$(free_port)
start upstream "$OUT/upstream" -addr "127.0.0.1:$PU"
wait_port "$PU" upstream "$STARTED"

redis() { # name port [args...]: a redis-server of its own directory
	local name=$1 port=$2
	shift 2
	mkdir -p "$OUT/$name"
	start "$name" redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$OUT/$name" "$@"
	wait_port "$port" "$name" "$STARTED"
}
PS=$(free_port)
redis standalone "$PS"
NODES=()
for i in 1 2 3; do
	p=$(free_port)
	redis "node$i" "$p" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 --cluster-port "$(free_port)"
	NODES+=("$p")
done
redis-cli --cluster create "${NODES[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"$OUT/cluster-create.txt" 2>&1 ||
	die "redis-cli --cluster create failed (see $OUT/cluster-create.txt)"
for p in "${NODES[@]}"; do
	for _ in $(seq 1 200); do
		info=$(redis-cli -p "$p" CLUSTER INFO | tr -d '\r')
		grep -q '^cluster_state:ok' <<<"$info" && grep -q '^cluster_known_nodes:3' <<<"$info" && break
		sleep 0.1
	done
	grep -q '^cluster_state:ok' <<<"$info" || die "the cluster did not become ready (node :$p)"
done

# ---- Caddy: a site per source ------------------------------------------------------------
# source of each scenario, and its store's nodes
declare -A SOURCE=(
	[standalone-new]=standalone [standalone-replay]=standalone
	[cluster-new]=cluster [cluster-replay]=cluster
	[standalone-archive-new]=standalone-archived [cluster-archive-new]=archived
	[inbox-standalone]=inbox-standalone [inbox-cluster]=inbox-cluster [refused]=refused
)
nodes_of() { case $1 in *cluster*) echo "${NODES[*]}" ;; *) echo "$PS" ;; esac; }
STANDALONE="redis redis://127.0.0.1:$PS"
CLUSTER="redis {
			address ${NODES[*]/#/127.0.0.1:}
		}"
INBOX="inbox {
			deliver_to http://127.0.0.1:$PU/delivered
			concurrency 16
		}"
site() { # port source store [options]: one site of the Caddyfile
	printf '\nhttp://127.0.0.1:%s {\n\twebhook_idempotency {\n\t\tsource %s\n\t\tstore %s\n\t\t%s\n\t}\n' "$1" "$2" "$3" "${4:-}"
	printf '\treverse_proxy 127.0.0.1:%s {\n\t\ttransport http {\n\t\t\tkeepalive_idle_conns_per_host 256\n\t\t}\n\t}\n}\n' "$PU"
}
PADMIN=$(free_port)
declare -A PORT
for sc in $SCENARIOS; do # a site per source, written to $OUT/<source>.Caddyfile
	src=${SOURCE[$sc]}
	[ -f "$OUT/$src.Caddyfile" ] && continue
	PORT[$src]=$(free_port)
	store=$STANDALONE
	case $sc in *cluster*) store=$CLUSTER ;; esac
	{
		caddy_globals "$PADMIN"
		case $sc in
		*archive*) site "${PORT[$src]}" "$src" "$store" "archive 1d" ;;
		inbox-*) site "${PORT[$src]}" "$src" "$store" "$INBOX" ;;
		refused) site "${PORT[$src]}" "$src" "$store" "provider stripe
		secret whsec_bench_never_sent" ;;
		*) site "${PORT[$src]}" "$src" "$store" ;;
		esac
	} >"$OUT/$src.Caddyfile"
done
# Caddy runs one source's site at a time (a scenario's), loaded through its admin API: no
# other source's inbox reads or series flush while a scenario runs
CURRENT=""
serve() { # source: Caddy serves its site
	[ "$CURRENT" = "$1" ] && return 0
	if [ -z "$CURRENT" ]; then
		start caddy "$OUT/caddy" run --adapter caddyfile --config "$OUT/$1.Caddyfile"
		CPID=$STARTED
		wait_port "$PADMIN" caddy "$CPID"
	else
		curl -fsS -o /dev/null -X POST "http://127.0.0.1:$PADMIN/load" -H "Content-Type: text/caddyfile" --data-binary "@$OUT/$1.Caddyfile" ||
			die "loading the site of $1 failed (see $OUT/caddy.log)"
	fi
	wait_port "${PORT[$1]}" caddy "$CPID"
	CURRENT=$1
}

# ---- what Redis did ----------------------------------------------------------------------
info() { # port section field: a field of INFO
	redis-cli -p "$1" INFO "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f { print $2 }'
}
cpu() { redis-cli -p "$1" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }
snapshot() { # name ports...: each node's CPU, memory and keys, and its commandstats
	local name=$1 p
	shift
	for p in "$@"; do
		redis-cli -p "$p" INFO commandstats | tr -d '\r' | grep '^cmdstat_' >"$OUT/$name.$p.cmd" || true
		echo "$(cpu "$p") $(info "$p" memory used_memory) $(redis-cli -p "$p" DBSIZE)" >"$OUT/$name.$p"
	done
	date +%s.%N >"$OUT/$name.t"
}
# the servers' own CPU, idle (their cron: expiry, statistics), before Caddy starts, in CPU
# seconds a second summed over the standalone server and over the Cluster's nodes
snapshot idle.0 "$PS" "${NODES[@]}"
sleep "$DURATION"
snapshot idle.1 "$PS" "${NODES[@]}"
idle_cpu() { # ports...: CPU seconds a second of the nodes while idle
	local p s=0
	for p in "$@"; do
		s=$(awk -v s="$s" -v a="$(cut -d' ' -f1 "$OUT/idle.0.$p")" -v b="$(cut -d' ' -f1 "$OUT/idle.1.$p")" 'BEGIN { print s + b - a }')
	done
	awk -v s="$s" -v a="$(cat "$OUT/idle.0.t")" -v b="$(cat "$OUT/idle.1.t")" 'BEGIN { printf "%.6f", s / (b - a) }'
}
IDLE_STANDALONE=$(idle_cpu "$PS") IDLE_CLUSTER=$(idle_cpu "${NODES[@]}")
idle_of() { case $1 in *cluster*) echo "$IDLE_CLUSTER" ;; *) echo "$IDLE_STANDALONE" ;; esac; }
drain() { # source: waits until its inbox has no event pending or scheduled
	local v=""
	for _ in $(seq 1 1200); do
		v=$(curl -fsS "http://127.0.0.1:$PADMIN/webhook_idempotency/$1/inbox" | sed -n 's/^{[^{]*"pending":\([0-9]*\),"scheduled":\([0-9]*\).*/\1 \2/p')
		[ "$v" = "0 0" ] && return 0
		sleep 0.5
	done
	die "the inbox of $1 did not drain within 10 minutes (pending and scheduled: $v)"
}
usage() { # pattern ports...: the mean MEMORY USAGE of up to 100 keys matching pattern
	local pat=$1 p
	shift
	for p in "$@"; do
		{ redis-cli -p "$p" --scan --pattern "$pat" 2>/dev/null || true; } | head -n 100 |
			awk '{ print "MEMORY USAGE " $0 " SAMPLES 0" }' | redis-cli -p "$p" 2>/dev/null || true
	done | awk '/^[0-9]+$/ && n < 100 { s += $1; n++ } END { if (n) printf "%.0f bytes (%d sampled)", s / n, n }'
}
stream() { # key ports...: "<MEMORY USAGE> <XLEN>" of a stream, from the node that holds it
	local key=$1 p u n
	shift
	for p in "$@"; do
		u=$(redis-cli -p "$p" MEMORY USAGE "$key" SAMPLES 0 2>/dev/null || true)
		n=$(redis-cli -p "$p" XLEN "$key" 2>/dev/null || true)
		if [[ $u =~ ^[0-9]+$ && $n =~ ^[0-9]+$ ]] && [ "$n" -gt 0 ]; then
			echo "$u $n"
			return 0
		fi
	done
	echo "0 0"
}
# report: the run's totals and the command breakdown, from the summed commandstats
# ($OUT/<label>.cmds: "<0 before|1 after> cmdstat_<name> calls usec"). Left out: the
# commands of this script and of the inbox's drain polls (INFO, DBSIZE, the admin API's
# reads), and the cluster client's CLUSTER calls.
REPORT='
$1 == 0 { c0[$2] = $3; u0[$2] = $4; next }
{
	name = substr($2, 9); dc = $3 - c0[$2]; du = $4 - u0[$2]
	if (dc <= 0 || name ~ /^(info|config|cluster|dbsize|ping|command|memory|scan|client|hello|select)/) next
	if (l ~ /^inbox/ && name ~ /^(xinfo|xpending|xlen|zcard|hgetall|hlen|xrange|xrevrange|zrange|zrangebyscore|zrangebylex|smembers|scard)/) next
	cmd[name] = dc; us[name] = du; tc += dc
	if (name ~ /^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/) scripts += dc; else tus += du
}
END {
	printf "%s: %d requests, %d req/s; Redis CPU %.1f us per request (commands %.1f us, the rest %.1f us), %.2f commands and %.2f scripts per request", l, n, rps, cpu * 1e6 / n, tus / n, (cpu * 1e6 - tus) / n, tc / n, scripts / n
	if (keys >= n / 100) printf ", %.2f keys and %.0f bytes of used_memory per request (%.0f per key)", keys / n, mem / n, mem / keys
	printf "\n"
	if ("hsetnx" in cmd) printf "  series: %d flushes, %.1f commands (HINCRBY, HSETNX) and %.0f us of them per flush; %.4f commands per request\n", cmd["hsetnx"], (cmd["hincrby"] + cmd["hsetnx"]) / cmd["hsetnx"], (us["hincrby"] + us["hsetnx"]) / cmd["hsetnx"], (cmd["hincrby"] + cmd["hsetnx"]) / n
	if ("rpush" in cmd) printf "  attempts: %d recorded (RPUSH), %.3f per request; LINDEX, RPUSH, LTRIM %.1f us of commands per attempt\n", cmd["rpush"], cmd["rpush"] / n, (us["lindex"] + us["rpush"] + us["ltrim"]) / cmd["rpush"]
	if (l ~ /archive/ && ("eval" in cmd)) printf "  archive: %d appends (EVAL), %.3f per request, %.1f us of the script per append (usec of EVAL, its commands included)\n", cmd["eval"], cmd["eval"] / n, us["eval"] / cmd["eval"]
	if (l == "refused" && ("eval" in cmd)) printf "  refusals listed: %d (EVAL), %.4f per request, %.1f us of the script per refusal (usec of EVAL, its commands included); Redis CPU per refusal listed %.0f us, or %.0f us without the idle server'"'"'s (%.2f ms a second), the series flushes included\n", cmd["eval"], cmd["eval"] / n, us["eval"] / cmd["eval"], cpu * 1e6 / cmd["eval"], (cpu - idle * secs) * 1e6 / cmd["eval"], idle * 1e3
	line = "  each command per request:"
	for (k in cmd) line = line sprintf(" %s %.3f", k, cmd[k] / n)
	print line
}'
measure() { # scenario: one wrk run on its site, and what each node did meanwhile
	local label=$1 src=${SOURCE[$1]} lua=unique.lua f=$OUT/$1.txt
	local port=${PORT[$src]}
	local ports
	read -r -a ports <<<"$(nodes_of "$label")"
	case $label in *-replay) lua=replay.lua ;; esac
	KEY_PREFIX="$label-warm-$$" BODY_FILE=$OUT/body.json REPLAY_KEY=replay-$$ wrk -t2 -c"$CONNS" -d2s -s "$ROOT/bench/$lua" "http://127.0.0.1:$port/webhook" >/dev/null
	case $label in inbox-*) drain "$src" ;; esac
	snapshot "$label.0" "${ports[@]}"
	KEY_PREFIX="$label-$$" BODY_FILE=$OUT/body.json REPLAY_KEY=replay-$$ wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s "$ROOT/bench/$lua" "http://127.0.0.1:$port/webhook" >"$f"
	case $label in inbox-*) drain "$src" ;; esac
	snapshot "$label.1" "${ports[@]}"
	local n rps p tcpu=0 tmem=0 tkeys=0 shares=""
	n=$(awk '/requests in/ { print $1 }' "$f")
	rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$f")
	: >"$OUT/$label.cmds"
	for p in "${ports[@]}"; do
		read -r c0 m0 k0 <"$OUT/$label.0.$p"
		read -r c1 m1 k1 <"$OUT/$label.1.$p"
		tcpu=$(awk -v a="$tcpu" -v x="$c0" -v y="$c1" 'BEGIN { print a + y - x }')
		tmem=$((tmem + m1 - m0)) tkeys=$((tkeys + k1 - k0))
		shares="$shares $(awk -F'[:,=]' -v p="$p" -v c0="$c0" -v c1="$c1" -v k=$((k1 - k0)) '
			FNR == NR { b[$1] = $3; next } { n += $3 - b[$1] }
			END { printf ":%s CPU %.2f s, %d keys, %d commands;", p, c1 - c0, k, n }' "$OUT/$label.0.$p.cmd" "$OUT/$label.1.$p.cmd")"
	done
	for s in 0 1; do
		for p in "${ports[@]}"; do cat "$OUT/$label.$s.$p.cmd"; done |
			awk -F'[:,=]' -v s=$s '{ c[$1] += $3; u[$1] += $5 } END { for (k in c) print s, k, c[k], u[k] }' >>"$OUT/$label.cmds"
	done
	{
		awk -v l="$label" -v n="$n" -v rps="$rps" -v cpu="$tcpu" -v mem="$tmem" -v keys="$tkeys" -v idle="$(idle_of "$label")" \
			-v secs="$(awk -v a="$(cat "$OUT/$label.0.t")" -v b="$(cat "$OUT/$label.1.t")" 'BEGIN { print b - a }')" "$REPORT" "$OUT/$label.cmds"
		[ "${#ports[@]}" -gt 1 ] && echo "  per node:$shares"
		# what the keys, histories, archive and refusals hold
		local sizes="" u ue ne ub
		case $label in
		*-new | inbox-*) u=$(usage "idem:$src:$label-$$-*" "${ports[@]}") && [ -n "$u" ] && sizes="$sizes idempotency key $u;" ;;
		esac
		case $label in
		inbox-*) u=$(usage "{idem:$src}:attempts:$label-$$-*" "${ports[@]}") && [ -n "$u" ] && sizes="$sizes inbox history $u;" ;;
		*archive*)
			read -r ue ne <<<"$(stream "{idem:$src}:archive" "${ports[@]}")"
			read -r ub _ <<<"$(stream "{idem:$src}:archive:body" "${ports[@]}")"
			[ "$ne" -gt 0 ] && sizes="$sizes$(awk -v e="$ue" -v b="$ub" -v n="$ne" 'BEGIN { printf " archive %.0f bytes per event (%.0f its entry, %.0f its body), %d events;", (e + b) / n, e / n, b / n, n }')"
			;;
		refused)
			read -r ue ne <<<"$(stream "{idem:$src}:refused" "${ports[@]}")"
			[ "$ne" -gt 0 ] && sizes="$sizes$(awk -v u="$ue" -v n="$ne" 'BEGIN { printf " refusals list %.0f bytes per refusal, %d listed;", u / n, n }')"
			;;
		esac
		[ -n "$sizes" ] && echo "  MEMORY USAGE:$sizes"
		echo "  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
	} | tee -a "$OUT/summary.txt" >>"$f"
	sed -n '/^'"$label"':/,$p' "$f"
}
complete() { # port: the key replays are sent for
	curl -fsS -o /dev/null -X POST "http://127.0.0.1:$1/webhook" -H "Idempotency-Key: replay-$$" --data-binary "@$OUT/body.json"
}
{
	echo "caddy: ${BENCH_CADDY:-./cmd/caddy of $(git rev-parse --short HEAD 2>/dev/null || echo "this tree")}"
	echo "machine: $(nproc) cores, $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), load average $(cut -d' ' -f1-3 /proc/loadavg) (at the start)"
	echo "wrk -t2 -c$CONNS, ${DURATION}s per run after 2 s of warm-up, POST 1 KiB; Redis $(redis-server --version | awk '{print $3}' | cut -d= -f2)"
	awk -v s="$IDLE_STANDALONE" -v c="$IDLE_CLUSTER" 'BEGIN { printf "Redis idle: %.2f ms of CPU a second standalone, %.2f ms the Cluster'"'"'s three nodes\n", s * 1e3, c * 1e3 }'
} | tee "$OUT/summary.txt"
for sc in $SCENARIOS; do
	serve "${SOURCE[$sc]}"
	case $sc in *-replay) complete "${PORT[${SOURCE[$sc]}]}" ;; esac
	measure "$sc"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
