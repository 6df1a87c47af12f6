#!/bin/sh
# Run benches/concurrent.rs N times (default 3; about 7 minutes each on 2 cores), keep each
# run's criterion data in DIR/run1..runN (default target/concurrent-runs), and print the
# tables of bench/concurrent_table.py over them: each cell the median of the runs' rates,
# each ratio the median of the ratios computed within each run, with their range. One run's
# cells differ from the next by up to about 25% on a 2-core machine (some by 2x), so a
# ratio near its target is read from several runs, not one.
#
# usage: bench/concurrent-runs.sh [N] [DIR]     (KARY_BENCH_THREADS passes through)
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -eu
cd "$(dirname "$0")/.."
n=${1:-3}
dir=${2:-target/concurrent-runs}
mkdir -p "$dir"
runs=""
i=1
while [ "$i" -le "$n" ]; do
  cargo bench --bench concurrent >"$dir/run$i.log" 2>&1 || { tail -20 "$dir/run$i.log"; exit 1; }
  rm -rf "$dir/run$i"
  cp -r target/criterion "$dir/run$i"
  runs="$runs $dir/run$i"
  i=$((i + 1))
done
# shellcheck disable=SC2086 # one argument per run directory
python3 bench/concurrent_table.py $runs
