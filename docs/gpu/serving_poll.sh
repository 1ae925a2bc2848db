#!/usr/bin/env bash
# usage: serving_poll.sh SECONDS — wait, show progress, pack what serving_chain.sh wrote into $OUT
sleep "${1:-0}"
R=/tmp/persist/results
cat /tmp/persist/chain.log 2>/dev/null | grep -v "^\s*$" | tail -n 30
for f in "$R"/*.log; do [ -f "$f" ] && { echo "== $f"; grep -v "^\s*$" "$f" | grep -v "waiting for" | tail -n 8; }; done
cd "$R" 2>/dev/null || exit 0
for d in calibration rawvsapp two; do
  [ -d $d ] && tar czf "$OUT/$d.tgz" --exclude='*.jsonl' --exclude='locust_*' $d $d.log 2>/dev/null
done
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
true
