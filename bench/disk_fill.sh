#!/usr/bin/env bash
# A full disk as a state: three nodes from scripts/cluster.sh with their data on one small ext4
# filesystem (a loop device), 8 MiB segments (marks: soft 32 MiB, hard 16 MiB per node, three
# times that for the filesystem the three share):
#   1. `bench produce` of far more 1 KiB messages than fit: how many are acknowledged before the
#      cluster refuses, how many are refused, and the free space and alarm then;
#   2. `bench consume` drains every acknowledged message while sends are refused;
#   3. a ballast file written on the filesystem before the start is removed (space freed outside
#      the cluster, as when other data is cleaned up): how long until sends are accepted again,
#      with no node restarted; then `cluster verify` (the replicas agree).
#
#   sudo bash bench/disk_fill.sh        (needs root: losetup, mount)
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), DISK_MB (300),
# BALLAST_MB (60), MESSAGES (200000), CONCURRENCY (64).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
DISK_MB="${DISK_MB:-300}"
BALLAST_MB="${BALLAST_MB:-60}"
MESSAGES="${MESSAGES:-200000}"
CONCURRENCY="${CONCURRENCY:-64}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
B="$ROCKRAFT_BIN"
work="$(mktemp -d /tmp/rockraft-disk-fill.XXXXXX)"
image="$work/disk.img"
mnt="$work/disk"
mkdir -p "$mnt"
truncate -s "${DISK_MB}M" "$image"
mkfs.ext4 -q -m 0 "$image"
loop="$(losetup --find --show "$image")"
mount "$loop" "$mnt"
dd if=/dev/zero of="$mnt/ballast" bs=1M count="$BALLAST_MB" status=none
export ROCKRAFT_DATA="$mnt/data" ROCKRAFT_SEGMENT_SIZE=$((8 << 20)) ROCKRAFT_BIN
cleanup() {
  bash "$root/scripts/cluster.sh" stop > /dev/null 2>&1 || true
  umount "$mnt" 2> /dev/null || true
  losetup -d "$loop" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_mib() { df -m --output=avail "$mnt" | tail -1 | tr -d ' '; }

bash "$root/scripts/cluster.sh" start > /dev/null
endpoints=127.0.0.1:8081,127.0.0.1:8082,127.0.0.1:8083
"$B" topic create Fill --queues 8 > /dev/null
"$B" group create drainers > /dev/null
pids="$(cat "$ROCKRAFT_DATA"/node*/pid | tr '\n' ' ')"
echo "filesystem: ${DISK_MB} MB ext4 with a ${BALLAST_MB} MB ballast file, $(free_mib) MiB free after start; 8 MiB segments"

echo "== 1. $MESSAGES sends of 1 KiB, concurrency $CONCURRENCY"
"$B" bench produce --endpoints "$endpoints" --topic Fill --messages "$MESSAGES" --concurrency "$CONCURRENCY" || true
echo "free now: $(free_mib) MiB"
"$B" cluster status

echo "== 2. drain while sends are refused"
"$B" topic list
acked="$("$B" topic list | sed -n 's/^Fill\t.*messages=\([0-9]*\).*/\1/p')"
"$B" bench consume --endpoints "$endpoints" --topic Fill --group drainers --messages "${acked:-1}" --idle-secs 5 || true
"$B" group list

echo "== 3. remove the ${BALLAST_MB} MB ballast file"
freed_at=$(date +%s.%N)
rm "$mnt/ballast"
echo "free now: $(free_mib) MiB"
until "$B" bench produce --endpoints "$endpoints" --topic Fill --messages 64 --concurrency 4 > /dev/null 2>&1; do
  sleep 0.1
done
echo "sends accepted again $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $freed_at}") s after the ballast was removed"
"$B" bench produce --endpoints "$endpoints" --topic Fill --messages 20000 --concurrency "$CONCURRENCY" || true
"$B" cluster status
"$B" cluster verify
[ "$(cat "$ROCKRAFT_DATA"/node*/pid | tr '\n' ' ')" = "$pids" ] && echo "no node restarted (pids $pids)"
echo "== what the nodes logged of it"
grep -h "disk alarm\|disk low\|disk critical\|disk space on this node\|filesystem: its free-space marks" "$ROCKRAFT_DATA"/node*/node.log | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-220
