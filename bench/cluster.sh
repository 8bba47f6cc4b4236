#!/usr/bin/env bash
# bench/cluster.sh - what a delivery costs Redis, standalone and as a three-master Redis
# Cluster: the measured point docs/scale.md checks its model against.
#
# Run it from the repository root: `bash bench/cluster.sh`. It builds Caddy and the upstream
# (bench/lib.sh), starts one standalone redis-server and three cluster-enabled ones joined as a
# Cluster of three masters (redis-cli --cluster create, no replicas), all with --save ''
# --appendonly no, and one Caddy with three sites in front of the upstream: webhook_idempotency
# on the standalone Redis, on the Cluster (its three addresses), and on the Cluster with
# `archive` (every new delivery also appended to its source's archive, on one slot). It runs,
# with wrk -t2 -c$BENCH_CONNS (default 32; fewer connections make smaller pipelines) and 1 KiB
# bodies, new keys (bench/unique.lua) on each for BENCH_DURATION seconds (default 10), then
# replays of one completed key (bench/replay.lua) on the first two, and reports per request:
#   - Redis's CPU (used_cpu_user + used_cpu_sys of INFO cpu, summed over the nodes), and the
#     commands' own time (usec of INFO commandstats), whose difference is the system calls and
#     event loop of each pipeline Redis reads and answers;
#   - commands, keys stored and used_memory per key (INFO memory, after minus before, over the
#     keys added: DBSIZE);
#   - on the Cluster, each node's share of the keys, the commands and the CPU.
# Everything listens on 127.0.0.1; every process is stopped on exit. wrk, Caddy, the upstream
# and the Redis servers share the machine's cores: the absolute rates are this machine's, the
# per-request CPU and memory are what the model uses.
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
need "apt-get install wrk redis-server redis-tools" wrk redis-server redis-cli curl "$GO"

build
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

PADMIN=$(free_port) PSA=$(free_port) PCL=$(free_port) PAR=$(free_port)
site() { # port source store [option]: one site of the Caddyfile
	cat <<EOF

http://127.0.0.1:$1 {
	webhook_idempotency {
		source $2
		store $3
		${4:-}
	}
	reverse_proxy 127.0.0.1:$PU {
		transport http {
			keepalive_idle_conns_per_host 256
		}
	}
}
EOF
}
{
	caddy_globals "$PADMIN"
	site "$PSA" standalone "redis redis://127.0.0.1:$PS"
	site "$PCL" cluster "redis {
			address ${NODES[*]/#/127.0.0.1:}
		}"
	site "$PAR" archived "redis {
			address ${NODES[*]/#/127.0.0.1:}
		}" "archive 1d"
} >"$OUT/Caddyfile"
start caddy "$OUT/caddy" run --adapter caddyfile --config "$OUT/Caddyfile"
CPID=$STARTED
for p in "$PADMIN" "$PSA" "$PCL" "$PAR"; do wait_port "$p" caddy "$CPID"; done

info() { # port section field: a field of INFO
	redis-cli -p "$1" INFO "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f { print $2 }'
}
cpu() { redis-cli -p "$1" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }
snapshot() { # name ports...: CPU, memory, keys, commands and their time of each node
	local name=$1 p
	shift
	for p in "$@"; do
		redis-cli -p "$p" INFO commandstats | tr -d '\r' | awk -F'[:,=]' '/^cmdstat_/ && $1 !~ /cmdstat_(info|config|cluster|dbsize|ping|command)/ { c += $3; u += $5 } END { print c + 0, u + 0 }' >"$OUT/$name.$p.cmd"
		echo "$(cpu "$p") $(info "$p" memory used_memory) $(redis-cli -p "$p" DBSIZE) $(cat "$OUT/$name.$p.cmd")" >"$OUT/$name.$p"
	done
}
measure() { # label port lua ports...: one wrk run, and what each node did meanwhile
	local label=$1 port=$2 lua=$3 f
	shift 3
	f=$OUT/$label.txt
	KEY_PREFIX="$label-warm-$$" BODY_FILE=$OUT/body.json REPLAY_KEY=replay-$$ wrk -t2 -c"$CONNS" -d2s -s "$ROOT/bench/$lua" "http://127.0.0.1:$port/webhook" >/dev/null
	snapshot "$label.0" "$@"
	KEY_PREFIX="$label-$$" BODY_FILE=$OUT/body.json REPLAY_KEY=replay-$$ wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s "$ROOT/bench/$lua" "http://127.0.0.1:$port/webhook" >"$f"
	snapshot "$label.1" "$@"
	local n rps
	n=$(awk '/requests in/ { print $1 }' "$f")
	rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$f")
	local p tcpu=0 tmem=0 tkeys=0 tcmd=0 tus=0 shares=""
	for p in "$@"; do
		read -r c0 m0 k0 n0 u0 <"$OUT/$label.0.$p"
		read -r c1 m1 k1 n1 u1 <"$OUT/$label.1.$p"
		tcpu=$(awk -v a="$tcpu" -v d="$(awk -v x="$c0" -v y="$c1" 'BEGIN { print y - x }')" 'BEGIN { print a + d }')
		tmem=$((tmem + m1 - m0)) tkeys=$((tkeys + k1 - k0)) tcmd=$((tcmd + n1 - n0)) tus=$((tus + u1 - u0))
		shares="$shares $(awk -v p="$p" -v c0="$c0" -v c1="$c1" -v k=$((k1 - k0)) -v n=$((n1 - n0)) 'BEGIN { printf ":%s CPU %.2f s, %d keys, %d commands;", p, c1 - c0, k, n }')"
	done
	awk -v l="$label" -v n="$n" -v rps="$rps" -v cpu="$tcpu" -v mem="$tmem" -v keys="$tkeys" -v cmd="$tcmd" -v us="$tus" 'BEGIN {
		printf "%s: %d requests, %d req/s; Redis CPU %.1f us per request (commands %.1f us, the rest %.1f us), %.2f commands per request", l, n, rps, cpu * 1e6 / n, us / n, (cpu * 1e6 - us) / n, cmd / n
		if (keys > 0) printf ", %d keys, %.0f bytes of used_memory per key", keys, mem / keys
		printf "\n" }' | tee -a "$OUT/summary.txt"
	[ "$#" -gt 1 ] && echo "  per node:$shares" | tee -a "$OUT/summary.txt"
	return 0
}
complete() { # port: the key replays are sent for
	curl -fsS -o /dev/null -X POST "http://127.0.0.1:$1/webhook" -H "Idempotency-Key: replay-$$" --data-binary "@$OUT/body.json"
}
{
	echo "machine: $(nproc) cores, $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), load average $(cut -d' ' -f1-3 /proc/loadavg) (at the start)"
	echo "wrk -t2 -c$CONNS, ${DURATION}s per run after 2 s of warm-up, POST 1 KiB; Redis $(redis-server --version | awk '{print $3}' | cut -d= -f2)"
} | tee "$OUT/summary.txt"
complete "$PSA"
complete "$PCL"
measure standalone-new "$PSA" unique.lua "$PS"
measure cluster-new "$PCL" unique.lua "${NODES[@]}"
measure cluster-archive-new "$PAR" unique.lua "${NODES[@]}"
measure standalone-replay "$PSA" replay.lua "$PS"
measure cluster-replay "$PCL" replay.lua "${NODES[@]}"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
