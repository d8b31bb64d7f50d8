#!/usr/bin/env bash
# What a member that refuses the leader costs the leader: three release nodes from
# scripts/cluster.sh; a follower is stopped and a node with another cluster secret is started on
# its ports (as a node left over from an earlier cluster would be). Over SECONDS (default 60) the
# script reads the leader's CPU (utime + stime from /proc/<pid>/stat) and counts the lines its log
# gained, first with every member healthy, then with the impostor in place. A replicated write a
# second (a topic made) keeps the leader replicating throughout.
# Uses its own data directory under $WORK (default: a temp dir) and ports 2xx81-2xx83 (moved with
# ROCKRAFT_*_PORT_BASE as in scripts/cluster.sh). Not part of CI.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
seconds="${SECONDS_TO_MEASURE:-60}"
work="${WORK:-$(mktemp -d /tmp/rockraft-member-refusal.XXXXXX)}"
target="${CARGO_TARGET_DIR:-$root/target}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  cargo build --release --locked --quiet -p rockraft --bin rockraft
  export ROCKRAFT_BIN="$target/release/rockraft"
fi
bin="$ROCKRAFT_BIN"
export ROCKRAFT_DATA="$work/data"
export ROCKRAFT_CLIENT_PORT_BASE="${ROCKRAFT_CLIENT_PORT_BASE:-28080}"
export ROCKRAFT_RAFT_PORT_BASE="${ROCKRAFT_RAFT_PORT_BASE:-29080}"
export ROCKRAFT_ADMIN_PORT_BASE="${ROCKRAFT_ADMIN_PORT_BASE:-27080}"
export ROCKRAFT_HTTP_PORT_BASE="${ROCKRAFT_HTTP_PORT_BASE:-26080}"
admin() { echo "127.0.0.1:$((ROCKRAFT_ADMIN_PORT_BASE + $1))"; }

scripts/cluster.sh start > /dev/null
trap 'kill "${impostor:-0}" 2> /dev/null || true; scripts/cluster.sh stop; rm -rf "$ROCKRAFT_DATA" "$work/impostor"' EXIT
leader=$("$bin" --endpoint "$(admin 1)" cluster status | awk '$3 == "Leader" { print $1 }')
follower=$((leader % 3 + 1))
leader_pid=$(cat "$ROCKRAFT_DATA/node$leader/pid")
leader_log="$ROCKRAFT_DATA/node$leader/node.log"

cpu_ticks() { cut -d' ' -f14,15 "/proc/$1/stat" | awk '{ print $1 + $2 }'; }

# measure LABEL: the leader's CPU and new log lines over $seconds, a write a second meanwhile.
measure() {
  local ticks_before lines_before ticks lines hz=$(getconf CLK_TCK)
  ticks_before=$(cpu_ticks "$leader_pid")
  lines_before=$(wc -l < "$leader_log")
  for i in $(seq "$seconds"); do
    "$bin" --endpoint "$(admin "$leader")" topic create "$1-$i" --queues 1 > /dev/null 2>&1 || true
    sleep 1
  done
  ticks=$(($(cpu_ticks "$leader_pid") - ticks_before))
  lines=$(($(wc -l < "$leader_log") - lines_before))
  echo "$1: leader CPU $((ticks * 1000 / hz)) ms in ${seconds} s ($((ticks * 100 / hz / seconds)) % of a core), $lines log lines"
}

measure healthy
scripts/cluster.sh kill "$follower"
# The impostor: the follower's addresses, its own data, another secret.
mkdir -p "$work/impostor"
sed -e "s|^cluster_secret = .*|cluster_secret = \"$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')\"|" \
  -e "s|^data_dir = .*|data_dir = \"$work/impostor\"|" -e '/^\[\[members\]\]/,$d' \
  "$ROCKRAFT_DATA/node$follower/config.toml" > "$work/impostor/config.toml"
"$bin" node --config "$work/impostor/config.toml" >> "$work/impostor/node.log" 2>&1 &
impostor=$!
sleep 1
echo "node $follower's ports taken by a node with another cluster secret:"
measure refused
grep -iE 'refus|unauthenticated' "$leader_log" | tail -5 | cut -c1-240
