#!/usr/bin/env bash
# RockRaft side by side with NATS JetStream (R3 file stream) and RabbitMQ (quorum queue), each a
# three-node cluster on this machine's loopback, measured by the same closed-loop drivers
# (bench/drivers, `peer-bench`): `window` senders, each waiting for the durable acknowledgement
# of one 1 KiB message before sending the next.
#
#   bash bench/compare.sh              # full run (about 15-25 minutes on 2 cores)
#   QUICK=1 bash bench/compare.sh      # smoke run with small counts (a few minutes)
#
# Run as root on Debian 12: nats-server and rabbitmq-server are installed with apt-get if missing.
# Prints a markdown table and writes it, with a header describing the machine, to $OUT.
#
# Environment:
#   ROCKRAFT_BIN     rockraft binary to run (default: build target/release/rockraft here)
#   CARGO_TARGET_DIR where peer-bench is built (default: $root/target/bench-drivers)
#   WORK             scratch dir for data and logs (default: a new /tmp/rockraft-compare.XXXXXX)
#   OUT              the report (default: $WORK/compare.md)
#   MESSAGES         messages per run at windows >= 64 (default 50000; QUICK: 2000)
#   MESSAGES_W1      messages per run at window 1 (default 5000; QUICK: 200)
#   CONSUME_MESSAGES messages consumed (default 100000; QUICK: 4000; at most what was produced)
#   KILLS            leader kills per failover run (default 3)
#   KILL_WAIT        seconds between killing the leader and restarting it (default 5; QUICK: 3)
#   RESTART_WAIT     seconds after the restart before the next kill (default 5; QUICK: 3)
#   GAP_WINDOW       sends in flight of the failover probe (default 4)
#   ROCKRAFT_CLIENT_PORT_BASE / ROCKRAFT_RAFT_PORT_BASE / ROCKRAFT_ADMIN_PORT_BASE /
#   ROCKRAFT_HTTP_PORT_BASE / ROCKRAFT_REMOTING_PORT_BASE  RockRaft ports, node N on BASE+N
#                    (default 18080 / 19080 / 17080 / 16080 / 19875, clear of a demo cluster's).
#                    JetStream uses 4222-4224 and 6222-6224, RabbitMQ 5672-5674 and 25672-25674;
#                    these must be free.
#   SYSTEMS          which systems to run (default "jetstream rabbitmq rockraft")
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
QUICK="${QUICK:-0}"
if [ "$QUICK" = 1 ]; then
  MESSAGES="${MESSAGES:-2000}"; MESSAGES_W1="${MESSAGES_W1:-200}"; CONSUME_MESSAGES="${CONSUME_MESSAGES:-4000}"
  KILL_WAIT="${KILL_WAIT:-3}"; RESTART_WAIT="${RESTART_WAIT:-3}"
else
  MESSAGES="${MESSAGES:-50000}"; MESSAGES_W1="${MESSAGES_W1:-5000}"; CONSUME_MESSAGES="${CONSUME_MESSAGES:-100000}"
  KILL_WAIT="${KILL_WAIT:-5}"; RESTART_WAIT="${RESTART_WAIT:-5}"
fi
KILLS="${KILLS:-3}"
GAP_WINDOW="${GAP_WINDOW:-4}"
SYSTEMS="${SYSTEMS:-jetstream rabbitmq rockraft}"
WINDOWS="1 64 512"
SIZE=1024
RUN_TIMEOUT=1200 # seconds any one measurement may take
export ROCKRAFT_CLIENT_PORT_BASE="${ROCKRAFT_CLIENT_PORT_BASE:-18080}"
export ROCKRAFT_RAFT_PORT_BASE="${ROCKRAFT_RAFT_PORT_BASE:-19080}"
export ROCKRAFT_ADMIN_PORT_BASE="${ROCKRAFT_ADMIN_PORT_BASE:-17080}"
export ROCKRAFT_HTTP_PORT_BASE="${ROCKRAFT_HTTP_PORT_BASE:-16080}"
export ROCKRAFT_REMOTING_PORT_BASE="${ROCKRAFT_REMOTING_PORT_BASE:-19875}"
WORK="${WORK:-$(mktemp -d /tmp/rockraft-compare.XXXXXX)}"
mkdir -p "$WORK/logs"
OUT="${OUT:-$WORK/compare.md}"
LOGS="$WORK/logs"

log() { echo "[$(date +%T)] $*" >&2; }
die() { log "error: $*"; exit 1; }
messages_for() { if [ "$1" = 1 ]; then echo "$MESSAGES_W1"; else echo "$MESSAGES"; fi; }
# Consumption reads what the produce runs left behind; every system consumes the same count.
consume_count() {
  local produced=$((MESSAGES_W1 + 2 * MESSAGES))
  echo $((CONSUME_MESSAGES < produced ? CONSUME_MESSAGES : produced))
}
port_in_use() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }
require_free_ports() {
  for p in "$@"; do
    if port_in_use "$p"; then die "port $p is in use; stop whatever listens there first"; fi
  done
}
wait_until() {
  # wait_until SECONDS COMMAND...: retry until the command succeeds.
  local deadline=$((SECONDS + $1)); shift
  until "$@" > /dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}
now_ms() { date +%s%3N; }
# Peak resident set of a live process, in MiB (VmHWM), or "?".
peak_rss_mib() {
  local kb
  kb=$(awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2> /dev/null || true)
  if [ -n "$kb" ]; then echo $((kb / 1024)); else echo "?"; fi
}

# ---------------------------------------------------------------------------------------------
# CPU: the brokers' (utime + stime of the running system's server processes, from /proc) and the
# load driver's, per message, for every measured run.
CLK_TCK=$(getconf CLK_TCK)
BROKERS=() # PIDs of the system under test, set once its cluster is up
cpu_ticks() {
  local t=0 p v
  for p in "$@"; do
    v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2> /dev/null || echo 0)
    t=$((t + v))
  done
  echo "$t"
}
# run_measured LOG CMD...: runs CMD with its output in LOG, then appends the CPU the brokers
# (BROKER_TICKS) and CMD itself (CLIENT_TICKS: the waiting shell's reaped children) spent.
run_measured() {
  local f=$1 b0 b1 rc=0
  shift
  b0=$(cpu_ticks "${BROKERS[@]}")
  timeout "$RUN_TIMEOUT" bash -c '"$@"; rc=$?; read -r -a s < /proc/$$/stat; echo "CLIENT_TICKS $((s[15] + s[16]))"; exit $rc' \
    _ "$@" > "$f" 2>&1 || rc=$?
  b1=$(cpu_ticks "${BROKERS[@]}")
  echo "BROKER_TICKS $((b1 - b0))" >> "$f"
  return $rc
}
# record_cpu KEY LOG MESSAGES: CPU[KEY]="broker_us client_us" per message.
record_cpu() {
  local b c
  b=$(sed -n 's/^BROKER_TICKS //p' "$2" | tail -1)
  c=$(sed -n 's/^CLIENT_TICKS //p' "$2" | tail -1)
  [ -n "$b" ] && [ -n "$c" ] && [ "${3:-0}" -gt 0 ] || return 0
  CPU[$1]=$(awk -v b="$b" -v c="$c" -v n="$3" -v hz="$CLK_TCK" 'BEGIN { printf "%.1f %.1f", b * 1e6 / hz / n, c * 1e6 / hz / n }')
}
# messages_arg ARGS...: the value after --messages.
messages_arg() {
  while [ $# -gt 1 ]; do
    if [ "$1" = --messages ]; then echo "$2"; return; fi
    shift
  done
  echo 0
}

# ---------------------------------------------------------------------------------------------
# Results: RES[key]="rate p50 p99 failed"; cells are rendered at the end.
declare -A RES=()
declare -A CPU=()
declare -A RSS=()
declare -A FAILOVER=()

# kv LINE KEY: the value of KEY=... in a RESULT line.
kv() { tr ' ' '\n' <<< "$1" | sed -n "s/^$2=//p" | head -1; }

# run_peer KEY LOGNAME peer-bench args...: run a driver, keep its RESULT.
run_peer() {
  local key=$1 name=$2 line; shift 2
  if ! run_measured "$LOGS/$name.log" "$PEER_BENCH" "$@"; then
    log "$name failed; last lines of $LOGS/$name.log:"; tail -5 "$LOGS/$name.log" >&2
  fi
  # The official client's log lines can run into the driver's output: match RESULT anywhere.
  line=$(grep -o 'RESULT .*' "$LOGS/$name.log" | tail -1 || true)
  if [ -z "$line" ]; then RES[$key]="error"; return; fi
  RES[$key]="$(kv "$line" rate) $(kv "$line" p50_ms) $(kv "$line" p99_ms) $(kv "$line" failed)"
  record_cpu "$key" "$LOGS/$name.log" "$(messages_arg "$@")"
  log "$name: $line; CPU µs/msg brokers, client: ${CPU[$key]:-?}"
}

# run_rockraft_bench KEY LOGNAME rockraft-args...: `rockraft bench produce|consume`, whose summary
# is "... in S s: R messages/s, ..." and "... latency ...: p50 X ms, p99 Y ms, ...".
run_rockraft_bench() {
  local key=$1 name=$2 f rate p50 p99 failed; shift 2
  f="$LOGS/$name.log"
  if ! run_measured "$f" "$ROCKRAFT" "$@"; then
    log "$name failed; last lines of $f:"; tail -5 "$f" >&2
  fi
  rate=$(sed -n 's/.* s: \([0-9.]*\) messages\/s.*/\1/p' "$f" | tail -1)
  p50=$(sed -n 's/.*p50 \([0-9.]*\) ms.*/\1/p' "$f" | tail -1)
  p99=$(sed -n 's/.*p99 \([0-9.]*\) ms.*/\1/p' "$f" | tail -1)
  failed=$(sed -n 's/.*(\([0-9]*\) failed.*/\1/p' "$f" | tail -1)
  if [ -z "$rate" ]; then RES[$key]="error"; return; fi
  RES[$key]="$rate ${p50:-?} ${p99:-?} ${failed:-0}"
  record_cpu "$key" "$f" "$(messages_arg "$@")"
  log "$name: $rate msg/s, p50 ${p50:-?} ms, p99 ${p99:-?} ms, failed ${failed:-0}; CPU µs/msg brokers, client: ${CPU[$key]:-?}"
}

# ---------------------------------------------------------------------------------------------
# Processes this script started, stopped by the trap whatever happens.
NATS_PIDS=()
RABBIT_NODES=()
RR_DATA=""
BG_PIDS=()
EPMD_WAS_RUNNING=1

cleanup() {
  set +e
  for p in "${BG_PIDS[@]}"; do kill "$p" 2> /dev/null; done
  stop_nats
  stop_rabbit
  stop_rockraft
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
install_missing() {
  local pkgs=() rabbit_new=0
  command -v nats-server > /dev/null || pkgs+=(nats-server)
  if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then pkgs+=(rabbitmq-server); rabbit_new=1; fi
  [ ${#pkgs[@]} -eq 0 ] && return
  log "installing ${pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" > "$LOGS/apt.log" 2>&1 ||
    { tail -20 "$LOGS/apt.log" >&2; die "apt-get install ${pkgs[*]} failed"; }
  if [ "$rabbit_new" = 1 ]; then
    # The package's postinst may have started the system-wide broker (rabbit@host on 5672) and
    # epmd; the clusters here need those ports.
    { systemctl stop rabbitmq-server || service rabbitmq-server stop; } > /dev/null 2>&1 || true
    epmd -kill > /dev/null 2>&1 || true
  fi
  if command -v nats-server > /dev/null && [[ " ${pkgs[*]} " == *" nats-server "* ]]; then
    { systemctl stop nats-server || service nats-server stop; } > /dev/null 2>&1 || true
  fi
}

build() {
  local target="${CARGO_TARGET_DIR:-$root/target/bench-drivers}"
  log "building peer-bench (target dir $target)"
  (cd "$root/bench/drivers" && CARGO_TARGET_DIR="$target" cargo build --release --locked --quiet)
  PEER_BENCH="$target/release/peer-bench"
  if [ -n "${ROCKRAFT_BIN:-}" ]; then
    ROCKRAFT="$ROCKRAFT_BIN"
  else
    log "building rockraft"
    (cd "$root" && env -u CARGO_TARGET_DIR cargo build --release --locked --quiet -p rockraft --bin rockraft)
    ROCKRAFT="$root/target/release/rockraft"
  fi
  [ -x "$ROCKRAFT" ] || die "no rockraft binary at $ROCKRAFT"
}

# ---------------------------------------------------------------------------------------------
# NATS JetStream: three servers, routes between them, a file store each.
NATS_URLS="nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"

start_nats() {
  require_free_ports 4222 4223 4224 6222 6223 6224
  local n dir
  for n in 1 2 3; do
    dir="$WORK/nats/n$n"
    mkdir -p "$dir/store"
    cat > "$dir/nats.conf" << EOF
server_name: n$n
listen: 127.0.0.1:$((4221 + n))
jetstream {
  store_dir: "$dir/store"
}
cluster {
  name: bench
  listen: 127.0.0.1:$((6221 + n))
  routes: [nats-route://127.0.0.1:6222, nats-route://127.0.0.1:6223, nats-route://127.0.0.1:6224]
}
EOF
    nats-server -c "$dir/nats.conf" > "$dir/server.log" 2>&1 &
    NATS_PIDS+=($!)
  done
  log "JetStream: waiting for the meta group, then creating stream BENCH (R3, file)"
  if command -v nats > /dev/null; then
    wait_until 60 nats --server "$NATS_URLS" stream add BENCH --subjects bench.msgs --storage file \
      --replicas 3 --defaults || die "could not create the stream; see $WORK/nats/n*/server.log"
    nats --server "$NATS_URLS" consumer add BENCH readers --pull --ack explicit --defaults > /dev/null
  else
    wait_until 60 "$PEER_BENCH" jetstream-setup --servers "$NATS_URLS" --stream BENCH --subject bench.msgs \
      --consumer readers --replicas 3 || die "could not create the stream; see $WORK/nats/n*/server.log"
  fi
}

stop_nats() {
  local i p
  for i in "${!NATS_PIDS[@]}"; do
    p=${NATS_PIDS[$i]}
    if kill -0 "$p" 2> /dev/null; then
      RSS[jetstream]+="$(peak_rss_mib "$p") "
      kill -TERM "$p"
      wait "$p" 2> /dev/null || true
    fi
  done
  NATS_PIDS=()
}

bench_jetstream() {
  start_nats
  BROKERS=("${NATS_PIDS[@]}")
  for w in $WINDOWS; do
    run_peer "js:produce:$w" "jetstream-produce-w$w" jetstream-produce --servers "$NATS_URLS" --stream BENCH \
      --subject bench.msgs --messages "$(messages_for "$w")" --size $SIZE --window "$w"
  done
  run_peer "js:consume" jetstream-consume jetstream-consume --servers "$NATS_URLS" --stream BENCH \
    --consumer readers --messages "$(consume_count)" --fetchers 16 --batch 32
  stop_nats
}

# ---------------------------------------------------------------------------------------------
# RabbitMQ: nodes rabbit1..3@localhost, each with its own data, logs and config, one cookie.
# The scripts under /usr/lib/rabbitmq/bin run as the caller (the /usr/sbin wrappers switch to the
# rabbitmq user, who could not write here).
RABBIT_BIN=/usr/lib/rabbitmq/bin

rabbit() {
  # rabbit N COMMAND ARGS...: run a RabbitMQ script with node N's environment.
  local n=$1 dir="$WORK/rabbit/rabbit$1"; shift
  env HOME="$WORK/rabbit/home" \
    RABBITMQ_NODENAME="rabbit$n@localhost" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT=$((5671 + n)) \
    RABBITMQ_DIST_PORT=$((25671 + n)) \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" \
    RABBITMQ_LOG_BASE="$dir/log" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
    RABBITMQ_PID_FILE="$dir/pid" \
    RABBITMQ_CONF_ENV_FILE=/dev/null \
    ERL_CRASH_DUMP="$dir/erl_crash.dump" \
    "$RABBIT_BIN/$1" "${@:2}"
}

rabbit_pid() { cat "$WORK/rabbit/rabbit$1/pid" 2> /dev/null || true; }

start_rabbit() {
  require_free_ports 5672 5673 5674 25672 25673 25674
  if pgrep -x epmd > /dev/null; then EPMD_WAS_RUNNING=1; else EPMD_WAS_RUNNING=0; fi
  local n dir
  mkdir -p "$WORK/rabbit/home"
  # One Erlang cookie for the nodes and the CLI: that is what lets them talk to each other.
  if [ ! -f "$WORK/rabbit/home/.erlang.cookie" ]; then
    head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/rabbit/home/.erlang.cookie"
    chmod 400 "$WORK/rabbit/home/.erlang.cookie"
  fi
  for n in 1 2 3; do
    dir="$WORK/rabbit/rabbit$n"
    mkdir -p "$dir/mnesia" "$dir/log"
    echo "[]." > "$dir/enabled_plugins"
    cat > "$dir/rabbitmq.conf" << EOF
listeners.tcp.default = 127.0.0.1:$((5671 + n))
EOF
    RABBIT_NODES+=("$n")
    rabbit "$n" rabbitmq-server -detached > "$dir/start.log" 2>&1
  done
  for n in 1 2 3; do
    rabbit "$n" rabbitmqctl -n "rabbit$n@localhost" wait "$WORK/rabbit/rabbit$n/pid" --timeout 120 \
      > "$LOGS/rabbit$n-wait.log" 2>&1 || die "rabbit$n did not start; see $WORK/rabbit/rabbit$n/log"
  done
  for n in 2 3; do
    log "RabbitMQ: rabbit$n joins rabbit1"
    {
      rabbit "$n" rabbitmqctl -n "rabbit$n@localhost" stop_app
      rabbit "$n" rabbitmqctl -n "rabbit$n@localhost" join_cluster rabbit1@localhost
      rabbit "$n" rabbitmqctl -n "rabbit$n@localhost" start_app
    } >> "$LOGS/rabbit-cluster.log" 2>&1 || die "rabbit$n could not join; see $LOGS/rabbit-cluster.log"
  done
  rabbit 1 rabbitmqctl -n rabbit1@localhost cluster_status > "$LOGS/rabbit-cluster-status.log" 2>&1
}

stop_rabbit() {
  local n p ctl
  for n in "${RABBIT_NODES[@]}"; do
    p=$(rabbit_pid "$n")
    if [ -n "$p" ] && kill -0 "$p" 2> /dev/null; then
      RSS[rabbitmq]+="$(peak_rss_mib "$p") "
      rabbit "$n" rabbitmqctl -n "rabbit$n@localhost" stop > /dev/null 2>&1 &
      ctl=$!
      for _ in $(seq 120); do kill -0 "$p" 2> /dev/null || break; sleep 0.5; done
      if kill -0 "$p" 2> /dev/null; then kill -KILL "$p"; fi
      wait "$ctl" 2> /dev/null || true
    fi
  done
  RABBIT_NODES=()
  # epmd outlives the nodes; stop it if these nodes started it (it refuses while nodes live).
  if [ "$EPMD_WAS_RUNNING" = 0 ]; then epmd -kill > /dev/null 2>&1 || true; EPMD_WAS_RUNNING=1; fi
}

bench_rabbitmq() {
  start_rabbit
  BROKERS=("$(rabbit_pid 1)" "$(rabbit_pid 2)" "$(rabbit_pid 3)")
  for w in $WINDOWS; do
    run_peer "rb:produce:$w" "rabbitmq-produce-w$w" rabbit-produce \
      --uri "amqp://guest:guest@127.0.0.1:5672/%2f" --queue bench --messages "$(messages_for "$w")" \
      --size $SIZE --window "$w"
  done
  # The queue's type, replicas and length, for the record (the length is refreshed every 5 s).
  sleep 6
  rabbit 1 rabbitmqctl -n rabbit1@localhost list_queues name type members messages > "$LOGS/rabbit-queues.log" 2>&1 || true
  stop_rabbit
}

# ---------------------------------------------------------------------------------------------
# RockRaft: scripts/cluster.sh, on its own ports and data dir, with the binary given.
RR_EP=()
for n in 1 2 3; do RR_EP+=("127.0.0.1:$((ROCKRAFT_CLIENT_PORT_BASE + n))"); done
RR_COMMA="${RR_EP[0]},${RR_EP[1]},${RR_EP[2]}"
RR_SEMI="${RR_EP[0]};${RR_EP[1]};${RR_EP[2]}"
# The operator ports the CLI talks to.
RR_ADMIN=()
for n in 1 2 3; do RR_ADMIN+=("127.0.0.1:$((ROCKRAFT_ADMIN_PORT_BASE + n))"); done

cluster() { ROCKRAFT_DATA="$RR_DATA" ROCKRAFT_BIN="$ROCKRAFT" "$root/scripts/cluster.sh" "$@"; }
rr_pid() { cat "$RR_DATA/node$1/pid" 2> /dev/null || true; }
# leader_via N: the leader of data group 1 (which holds BenchTopic) as node N sees it, from the
# groups table of `cluster status` (the node table's roles are the metadata group's).
leader_via() {
  { "$ROCKRAFT" --endpoint "${RR_ADMIN[$(($1 - 1))]}" cluster status 2> /dev/null || true; } |
    awk '/^group/ { t = 1; next } t && $1 == "1" && $2 ~ /^[0-9]+$/ { print $2 }'
}
leader_is() { [ "$(leader_via 1)" = "$1" ]; }

start_rockraft() {
  local durability=$1
  require_free_ports "${RR_EP[@]##*:}" "${RR_ADMIN[@]##*:}" $((ROCKRAFT_RAFT_PORT_BASE + 1)) $((ROCKRAFT_RAFT_PORT_BASE + 2)) $((ROCKRAFT_RAFT_PORT_BASE + 3)) \
    $((ROCKRAFT_HTTP_PORT_BASE + 1)) $((ROCKRAFT_HTTP_PORT_BASE + 2)) $((ROCKRAFT_HTTP_PORT_BASE + 3))
  RR_DATA="$WORK/rockraft-$durability"
  ROCKRAFT_DURABILITY="$durability" cluster start > "$LOGS/rockraft-$durability-start.log" 2>&1 ||
    { tail -5 "$LOGS/rockraft-$durability-start.log" >&2; die "RockRaft ($durability) did not start"; }
  grep -q "durability = \"$durability\"" "$RR_DATA/node1/config.toml" || die "config without durability"
  "$ROCKRAFT" --endpoint "${RR_ADMIN[0]}" topic create BenchTopic --queues 8 > /dev/null
  "$ROCKRAFT" --endpoint "${RR_ADMIN[0]}" group create bench-readers > /dev/null
}

# record_rockraft_rss KEY: peak RSS of the running nodes.
record_rockraft_rss() {
  local n p
  RSS[$1]=""
  for n in 1 2 3; do
    p=$(rr_pid "$n")
    if [ -n "$p" ]; then RSS[$1]+="$(peak_rss_mib "$p") "; fi
  done
}

stop_rockraft() {
  [ -n "$RR_DATA" ] || return 0
  cluster stop > /dev/null 2>&1 || true
  # The node logs stay with the report; the data (preallocated segments, gigabytes) does not.
  local n
  for n in 1 2 3; do cp "$RR_DATA/node$n/node.log" "$LOGS/$(basename "$RR_DATA")-node$n.log" 2> /dev/null || true; done
  rm -rf "$RR_DATA"
  RR_DATA=""
}

# failover LABEL: the probe sends through node 1; KILLS times the leader (moved off node 1 first
# if need be) is SIGKILLed and restarted. Each kill's gap is the longest pause between
# acknowledged sends that starts near it.
failover() {
  local label=$1
  local gap_log="$LOGS/failover-$label.log" gap_pid kills=() k l t gaps=() g
  timeout "$RUN_TIMEOUT" "$PEER_BENCH" rockraft-gap --endpoints "${RR_EP[0]}" --topic BenchTopic \
    --secs 3600 --window "$GAP_WINDOW" --size $SIZE --report-ms 50 > "$gap_log" 2>&1 &
  gap_pid=$!
  BG_PIDS+=("$gap_pid")
  sleep 3
  for k in $(seq "$KILLS"); do
    l=$(leader_via 1)
    if [ "$l" = 1 ]; then
      "$ROCKRAFT" --endpoint "${RR_ADMIN[0]}" cluster transfer-leader --group 1 --to 2 > /dev/null 2>&1 || true
      wait_until 15 leader_is 2 || true
      sleep 2
      l=$(leader_via 1)
    fi
    if [ -z "$l" ] || [ "$l" = 1 ]; then log "failover $label: no leader other than node 1; skipping kill $k"; continue; fi
    t=$(now_ms)
    kills+=("$t")
    log "failover $label: kill $k: SIGKILL leader node $l"
    cluster kill "$l"
    sleep "$KILL_WAIT"
    cluster restart "$l" > /dev/null || log "failover $label: node $l did not come back"
    sleep "$RESTART_WAIT"
  done
  kill -TERM "$gap_pid" 2> /dev/null || true
  wait "$gap_pid" 2> /dev/null || true
  grep -o 'RESULT .*' "$gap_log" | tail -1 >&2 || log "failover $label: the probe reported nothing; see $gap_log"
  for t in "${kills[@]}"; do
    # A gap starts at the last acknowledged send before the kill and lasts until the first after.
    g=$(awk -v lo=$((t - 2000)) -v hi=$((t + KILL_WAIT * 1000)) -F'[ =]' \
      '{ sub(/.*GAP /, "GAP ") } /^GAP/ && $3 >= lo && $3 <= hi && $5 > max {max = $5} END {print max + 0}' "$gap_log")
    gaps+=("$g")
  done
  local failed
  failed=$(sed -n 's/.*RESULT.* failed=\([0-9]*\).*/\1/p' "$gap_log" | tail -1)
  FAILOVER[$label]="${gaps[*]:-}|${failed:-?}"
  log "failover $label: gaps ${gaps[*]:-none} ms, ${failed:-?} failed sends"
}

bench_rockraft() {
  local d w
  for d in sync async; do
    start_rockraft "$d"
    BROKERS=("$(rr_pid 1)" "$(rr_pid 2)" "$(rr_pid 3)")
    for w in $WINDOWS; do
      run_rockraft_bench "rr-$d:bench:$w" "rockraft-$d-bench-w$w" bench produce --endpoints "$RR_COMMA" \
        --topic BenchTopic --messages "$(messages_for "$w")" --size $SIZE --concurrency "$w" --batch 1
    done
    for w in $WINDOWS; do
      run_peer "rr-$d:client:$w" "rockraft-$d-client-w$w" rocketmq-produce --endpoints "$RR_SEMI" \
        --topic BenchTopic --messages "$(messages_for "$w")" --size $SIZE --window "$w"
    done
    run_rockraft_bench "rr-$d:batch16" "rockraft-$d-bench-batch16" bench produce --endpoints "$RR_COMMA" \
      --topic BenchTopic --messages "$MESSAGES" --size $SIZE --concurrency 64 --batch 16
    if [ "$d" = sync ]; then
      run_rockraft_bench "rr-sync:consume" rockraft-sync-consume bench consume --endpoints "$RR_COMMA" \
        --topic BenchTopic --group bench-readers --messages "$(consume_count)" --concurrency 16 --batch 32
      # Before the kills: a restarted process's peak would cover only its own short life.
      record_rockraft_rss "rockraft-$d"
      failover idle
      "$ROCKRAFT" bench produce --endpoints "$RR_COMMA" --topic BenchTopic --messages 1000000000 \
        --size $SIZE --concurrency 64 --batch 1 > "$LOGS/failover-load-producer.log" 2>&1 &
      local load_pid=$!
      BG_PIDS+=("$load_pid")
      sleep 2
      failover loaded
      kill -TERM "$load_pid" 2> /dev/null || true
      wait "$load_pid" 2> /dev/null || true
    else
      record_rockraft_rss "rockraft-$d"
    fi
    stop_rockraft
  done
}

# ---------------------------------------------------------------------------------------------
# The table.
cell() {
  # cell KEY: "RATE/s (p50 X / p99 Y ms); CPU/msg B + C µs" or "—".
  local v=${RES[$1]:-}
  if [ -z "$v" ]; then echo "—"; return; fi
  if [ "$v" = error ]; then echo "error"; return; fi
  local rate p50 p99 failed s
  read -r rate p50 p99 failed <<< "$v"
  s=$(printf "%.0f/s (p50 %s / p99 %s ms)" "$rate" "$p50" "$p99")
  if [ "${failed:-0}" != 0 ]; then s+=", $failed failed"; fi
  if [ -n "${CPU[$1]:-}" ]; then s+="; CPU/msg $(awk '{printf "%s + %s", $1, $2}' <<< "${CPU[$1]}") µs"; fi
  echo "$s"
}
ratio() {
  # ratio KEY_A KEY_B: rate A / rate B.
  local a=${RES[$1]:-} b=${RES[$2]:-}
  if [ -z "$a" ] || [ -z "$b" ] || [ "$a" = error ] || [ "$b" = error ]; then echo "—"; return; fi
  awk -v a="${a%% *}" -v b="${b%% *}" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "—" }'
}
cpu_ratio() {
  # cpu_ratio KEY_A KEY_B: brokers' CPU per message of A / that of B.
  local a=${CPU[$1]:-} b=${CPU[$2]:-}
  if [ -z "$a" ] || [ -z "$b" ]; then echo "—"; return; fi
  awk -v a="${a%% *}" -v b="${b%% *}" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "—" }'
}
# both KEY_A KEY_B: the two ratios of A to B, messages/s and brokers' CPU per message.
both() { echo "$(ratio "$1" "$2") msg/s, $(cpu_ratio "$1" "$2") CPU"; }
rss_cell() {
  local v=${RSS[$1]:-}
  if [ -z "$v" ]; then echo "—"; return; fi
  # shellcheck disable=SC2086
  echo "max $(printf '%s\n' $v | sort -n | tail -1) MiB ($(echo $v | tr ' ' '/'))"
}
failover_cell() {
  local v=${FAILOVER[$1]:-}
  if [ -z "$v" ]; then echo "—"; return; fi
  local list=${v%|*} failed=${v#*|}
  if [ -z "$list" ]; then echo "no kill done"; return; fi
  # shellcheck disable=SC2086
  printf '%s\n' $list | sort -n | awk -v all="$list" -v failed="$failed" '
    { g[NR] = $1 } END { printf "p50 %d ms, max %d ms (gaps: %s ms; %s sends failed)", g[int((NR + 1) / 2)], g[NR], all, failed }'
}

report() {
  local w
  {
    echo "| measure | JetStream R3 | RabbitMQ quorum | RockRaft sync | RockRaft async | RockRaft sync / JetStream (msg/s; brokers' CPU per message) | RockRaft sync / RabbitMQ |"
    echo "|---|---|---|---|---|---|---|"
    for w in $WINDOWS; do
      echo "| produce, window $w (peer-bench; RockRaft: official RocketMQ client) | $(cell "js:produce:$w") | $(cell "rb:produce:$w") | $(cell "rr-sync:client:$w") | $(cell "rr-async:client:$w") | $(both "rr-sync:client:$w" "js:produce:$w") | $(both "rr-sync:client:$w" "rb:produce:$w") |"
    done
    for w in $WINDOWS; do
      echo "| produce, window $w (RockRaft: \`rockraft bench produce --batch 1\`) | — | — | $(cell "rr-sync:bench:$w") | $(cell "rr-async:bench:$w") | $(both "rr-sync:bench:$w" "js:produce:$w") | $(both "rr-sync:bench:$w" "rb:produce:$w") |"
    done
    echo "| produce, 64 requests of 16 messages (\`rockraft bench produce --batch 16\`) | — | — | $(cell rr-sync:batch16) | $(cell rr-async:batch16) | — | — |"
    echo "| consume $(consume_count), 16 × 32 (JetStream: pull + double_ack; RockRaft: POP receive + ack) | $(cell js:consume) | — | $(cell rr-sync:consume) | — | $(both rr-sync:consume js:consume) | — |"
    echo "| failover: pause in acknowledged sends per leader SIGKILL, idle | — | — | $(failover_cell idle) | — | — | — |"
    echo "| failover, under \`rockraft bench produce --concurrency 64\` | — | — | $(failover_cell loaded) | — | — | — |"
    echo "| peak RSS per node (VmHWM) | $(rss_cell jetstream) | $(rss_cell rabbitmq) | $(rss_cell rockraft-sync) | $(rss_cell rockraft-async) | — | — |"
  } > "$WORK/table.md"
  local nats_v rabbit_v rr_v
  nats_v=$(nats-server --version 2> /dev/null || echo "?")
  rabbit_v=$(dpkg-query -W -f='${Version}' rabbitmq-server 2> /dev/null || echo "?")
  rr_v=$("$ROCKRAFT" --version 2> /dev/null || echo "?")
  {
    echo "# RockRaft, NATS JetStream and RabbitMQ on one machine"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) memory, Linux $(uname -r)"
    echo "- versions: $nats_v; rabbitmq-server $rabbit_v; $rr_v ($ROCKRAFT; work tree at git $(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo '?'))"
    echo "- each system: three nodes on 127.0.0.1, three replicas, 1 KiB bodies; RockRaft topic of 8 queues"
    echo "- messages per run: $MESSAGES_W1 at window 1, $MESSAGES otherwise$([ "$QUICK" = 1 ] && echo " (QUICK smoke run: too few for steady-state figures)")"
    echo "- cells: messages/s (latency from send to durable acknowledgement, p50 / p99); window = messages in flight"
    echo "- CPU/msg: the three brokers' CPU + the load driver's CPU per message, in µs (utime + stime from /proc; $(nproc) CPUs shared by all four processes)"
    echo "- failover: \`peer-bench rockraft-gap\` sends through node 1 with $GAP_WINDOW in flight; the leader of the topic's data group (never node 1) is SIGKILLed $KILLS times, restarted after ${KILL_WAIT} s"
    echo "- the \`rockraft bench\` rows are divided by the peer-bench figures of the same window"
    echo
    cat "$WORK/table.md"
  } > "$OUT"
  echo
  cat "$WORK/table.md"
  echo
  log "report: $OUT (logs: $LOGS)"
}

# ---------------------------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || die "run as root (apt-get, and RabbitMQ nodes run as the caller)"
install_missing
build
log "work dir $WORK; $MESSAGES_W1 messages at window 1, $MESSAGES at windows 64 and 512"
for s in $SYSTEMS; do
  case "$s" in
    jetstream) bench_jetstream ;;
    rabbitmq) bench_rabbitmq ;;
    rockraft) bench_rockraft ;;
    *) die "unknown system $s" ;;
  esac
done
report
