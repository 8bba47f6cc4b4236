# bench/lib.sh - what the whole-Caddy load scripts (load.sh, archive.sh) share: the knobs
# both take, messages, tools, processes stopped on exit, free ports on 127.0.0.1, the
# binaries, the 1 KiB body and the Caddyfile's global options. Source it from the repository
# root after setting OUT (the output folder); sourcing it sets the traps that stop every
# process in PIDS on exit.
# shellcheck shell=bash

# Knobs (environment): BENCH_DURATION (seconds per scenario, default 3), BENCH_WARMUP
# (default 1), BENCH_CONNS (wrk connections, default 32), GO (default go).
# shellcheck disable=SC2034 # the scripts that source this file use them
DURATION=${BENCH_DURATION:-3}
WARMUP=${BENCH_WARMUP:-1}
CONNS=${BENCH_CONNS:-32}
GO=${GO:-go}

say() { printf '%s\n' "$*" >&2; }
die() { say "${0##*/}: $*"; exit 1; }

need() { # hint tool...: stops, with the hint, at the first tool that is missing
	local hint=$1 t
	shift
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || die "$t is missing ($hint)"
	done
}

# ---- processes ---------------------------------------------------------------------------
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start() { # name command...: runs the command in the background, its output in $OUT/name.log;
	# its pid is STARTED, and it is stopped on exit
	local name=$1
	shift
	"$@" >"$OUT/$name.log" 2>&1 &
	STARTED=$!
	PIDS+=("$STARTED")
}

# ---- ports -------------------------------------------------------------------------------
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
TAKEN=" "
# Listening ports come from below the kernel's range of ephemeral ports
# (net.ipv4.ip_local_port_range), where outgoing connections on a busy machine
# would otherwise take a port between its check here and its bind.
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
PORT_LOW=10000 PORT_SPAN=$((EPHEMERAL_LOW - 10000))
if [ "$PORT_SPAN" -lt 2000 ]; then PORT_LOW=20000 PORT_SPAN=30000; fi
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((PORT_LOW + RANDOM % PORT_SPAN))
		case $TAKEN in *" $p "*) continue ;; esac
		if ! port_busy "$p"; then
			TAKEN="$TAKEN$p "
			echo "$p"
			return 0
		fi
	done
	die "no free port found in 200 tries"
}
wait_port() { # port name pid
	for _ in $(seq 1 100); do
		port_busy "$1" && return 0
		kill -0 "$3" 2>/dev/null || die "$2 exited before listening on 127.0.0.1:$1 (see $OUT/$2.log)"
		sleep 0.1
	done
	die "$2 did not listen on 127.0.0.1:$1 within 10 s (see $OUT/$2.log)"
}

# ---- what the scenarios run --------------------------------------------------------------
build() { # Caddy (./cmd/caddy) and the upstream (bench/upstream), into $OUT
	say "building Caddy (./cmd/caddy) and the upstream (bench/upstream) into ${OUT#"$PWD"/}/"
	"$GO" build -o "$OUT/caddy" ./cmd/caddy
	"$GO" build -o "$OUT/upstream" ./bench/upstream
}

write_body() { # file: a 1 KiB JSON body
	{ printf '{"pad":"'; head -c 1014 /dev/zero | tr '\0' x; printf '"}'; } >"$1"
	[ "$(wc -c <"$1")" -eq 1024 ] || die "body is not 1024 bytes"
}

caddy_globals() { # admin port: the global options block of a Caddyfile, logs discarded
	printf '{\n\tadmin 127.0.0.1:%s\n\tpersist_config off\n\tauto_https off\n\tlog {\n\t\toutput discard\n\t}\n}\n' "$1"
}

median() { # numbers -> their median
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
