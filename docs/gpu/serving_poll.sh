#!/usr/bin/env bash
# usage: serving_poll.sh SECONDS — wait, show progress, pack what serving_chain.sh wrote into $OUT.
# The wait ends early once no chain holds the results folder's lock (it ended, or never started).
# The packs are refreshed every POLL_EVERY seconds (default 60) while it waits, so a device command
# that runs past its limit, or a host taken back mid-wait, still brings back the latest results.
R=${CHAIN_RESULTS:-/tmp/persist/results/serving}
# one NAME TAR_ARGS...: written beside, then renamed, so a command cut off mid-pack leaves the last pack whole
one() { local name=$1; shift; tar czf "$OUT/.$name.tmp" -C "$R" "$@" 2> /dev/null; mv "$OUT/.$name.tmp" "$OUT/$name"; }
pack() {
  [ -n "${OUT:-}" ] || return 0
  [ -d "$R/rawvsapp" ] && one rawvsapp.tgz --exclude='*.jsonl' --exclude='locust_*' rawvsapp rawvsapp.log progress.log
  for d in fit sweep before before2 transition_closed transition_open gpu_tests; do
    [ -d "$R/$d" ] && one "$d.tgz" --exclude='*.jsonl' "$d" "$d.log" progress.log $([ "$d" = fit ] && echo fitted.yaml) \
      $([ "$d" = sweep ] && [ -f "$R/top.log" ] && echo top.log) \
      $(w=${d#transition_} && [ "$w" != "$d" ] && [ -f "$R/${w}_plan.json" ] && echo "${w}_plan.json ${w}_plan.log")
  done
  # the profiles' traces apart: a pack over $OUT's 16 MiB per file would not come back, results and all
  [ -d "$R/arrivals" ] && one arrivals.tgz --exclude='arrivals/profiles' arrivals arrivals.log
  [ -d "$R/arrivals/profiles" ] && one arrivals-profiles.tgz arrivals/profiles
  [ -d "$R/jit" ] && cp -u "$R"/jit/*.tgz "$OUT"/ 2> /dev/null  # the kernel caches once, not every minute
  return 0
}
# a chain runs while it holds its lock (serving_chain.sh); once none does, the wait is over
chain_running() { [ -f "$R/chain.lock" ] && ! flock -n "$R/chain.lock" true 2> /dev/null; }
end=$((SECONDS + ${1:-0}))
while [ $SECONDS -lt $end ]; do
  left=$((end - SECONDS))
  sleep $((left < ${POLL_EVERY:-60} ? left : ${POLL_EVERY:-60}))
  pack
  chain_running || { echo "[poll] no chain holds $R/chain.lock: done waiting"; break; }
done
cat "$R/progress.log" 2>/dev/null
for f in "$R"/*.log; do
  [ -f "$f" ] && [ "$(basename "$f")" != progress.log ] && { echo "== $f"; grep -v "^\s*$" "$f" | grep -v "waiting for" | tail -n 12; }
done
pack
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
# every process holding a CUDA context on the GPU: an engine's scheduler should be alone there
command -v nvidia-smi > /dev/null && nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader |
  while IFS=, read -r pid mem; do echo "[gpu-process] $pid,$mem $(ps -o args= -p "$pid" | cut -c1-100)"; done
true
