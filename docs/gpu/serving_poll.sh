#!/usr/bin/env bash
# usage: serving_poll.sh SECONDS — wait, show progress, pack what serving_chain.sh wrote into $OUT
sleep "${1:-0}"
R=${CHAIN_RESULTS:-/tmp/persist/results/serving}
cat "$R/progress.log" 2>/dev/null
for f in "$R"/*.log; do
  [ -f "$f" ] && [ "$(basename "$f")" != progress.log ] && { echo "== $f"; grep -v "^\s*$" "$f" | grep -v "waiting for" | tail -n 12; }
done
if [ -d "$R/rawvsapp" ] && [ -n "${OUT:-}" ]; then
  tar czf "$OUT/rawvsapp.tgz" -C "$R" --exclude='*.jsonl' --exclude='locust_*' rawvsapp rawvsapp.log progress.log 2>/dev/null
fi
for d in fit sweep transition_closed transition_open; do
  if [ -d "$R/$d" ] && [ -n "${OUT:-}" ]; then
    tar czf "$OUT/$d.tgz" -C "$R" --exclude='*.jsonl' "$d" "$d.log" progress.log $([ "$d" = fit ] && echo fitted.yaml) 2> /dev/null
  fi
done
if [ -d "$R/arrivals" ] && [ -n "${OUT:-}" ]; then tar czf "$OUT/arrivals.tgz" -C "$R" arrivals arrivals.log 2> /dev/null; fi
if [ -d "$R/jit" ] && [ -n "${OUT:-}" ]; then cp "$R"/jit/*.tgz "$OUT"/ 2> /dev/null; fi
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
true
