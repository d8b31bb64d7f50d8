# Sourced by the benches that run one cluster from scripts/cluster.sh (they set `root` first).
#
# bench_data_dir NAME: uses ROCKRAFT_DATA if it is set, else a new /tmp/rockraft-NAME.XXXXXX, and
# on exit stops the cluster there and removes a directory it made: each run preallocates its
# segment files, gigabytes, and left behind they fill the disk.
bench_data_dir() {
  bench_made_data=""
  if [ -z "${ROCKRAFT_DATA:-}" ]; then
    ROCKRAFT_DATA="$(mktemp -d "/tmp/rockraft-$1.XXXXXX")"
    bench_made_data=1
  fi
  export ROCKRAFT_DATA
  trap 'bash "$root/scripts/cluster.sh" stop > /dev/null 2>&1 || true; [ -z "$bench_made_data" ] || rm -rf "$ROCKRAFT_DATA"' EXIT
}
