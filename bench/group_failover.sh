#!/usr/bin/env bash
# How long the data groups a SIGKILLed node led go without a leader, and whether the groups it
# did not lead kept theirs: a fresh three-node cluster with three data groups (each node leads
# one), then ROUNDS times: kill the node leading group 2, wait until node 1 logs group 2's new
# leader (the time is that line's, against the kill's), check that groups 1 and 3 kept theirs,
# restart the node, wait until the leaderships are back where they were.
#
#   bash bench/group_failover.sh            # 5 rounds
#   ROUNDS=10 bash bench/group_failover.sh
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), ROUNDS,
# ROCKRAFT_DATA (default a new /tmp/rockraft-group-failover.XXXXXX; removed on exit; the
# cluster is stopped on exit).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${ROUNDS:-5}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
export ROCKRAFT_BIN ROCKRAFT_DATA_GROUPS=3
# shellcheck source=bench/data_dir.sh
source "$root/bench/data_dir.sh"
bench_data_dir group-failover
B="$ROCKRAFT_BIN"
bash "$root/scripts/cluster.sh" start > /dev/null

# "group:leader " pairs of the data groups from the groups table of `cluster status` asked at
# admin endpoint $1 (the metadata group's row is left out).
leaders() { "$B" --endpoint "$1" cluster status 2>/dev/null | awk '/^group/ { t = 1; next } t && NF >= 5 && $2 != "metadata" { printf "%s:%s ", $1, $2 }'; }
spread="1:1 2:2 3:3 "
wait_spread() {
  local deadline=$((SECONDS + 60))
  until [ "$(leaders 127.0.0.1:7081)" = "$spread" ]; do
    [ $SECONDS -lt $deadline ] || { echo "leaders not spread: $(leaders 127.0.0.1:7081)" >&2; exit 1; }
    sleep 0.2
  done
}
now_ms() { date +%s%3N; }
# The time (epoch ms) of node 1's last "leader changed" line for group 2 naming a leader other
# than node 2, or nothing.
new_leader_at() {
  sed 's/\x1b\[[0-9;]*m//g' "$ROCKRAFT_DATA/node1/node.log" |
    awk '/leader changed/ && / group=2 / && !/ leader=2 / { t = $1 } END { if (t) print t }' |
    { read -r t && date -d "$t" +%s%3N || true; }
}
wait_spread
for round in $(seq "$ROUNDS"); do
  before="$(new_leader_at)"
  t0=$(now_ms)
  bash "$root/scripts/cluster.sh" kill 2 > /dev/null
  deadline=$((SECONDS + 30))
  until t1="$(new_leader_at)"; [ -n "$t1" ] && [ "$t1" != "$before" ]; do
    [ $SECONDS -lt $deadline ] || { echo "group 2 elected no leader within 30 s" >&2; exit 1; }
    sleep 0.05
  done
  seen="$(leaders 127.0.0.1:7081)"
  others="kept"
  case "$seen" in "1:1 "*"3:3 ") ;; *) others="moved ($seen)" ;; esac
  echo "round $round: group 2 led again after $((t1 - t0)) ms ($seen); groups 1 and 3: $others"
  bash "$root/scripts/cluster.sh" restart 2 > /dev/null
  wait_spread
done
