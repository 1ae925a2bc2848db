#!/usr/bin/env bash
# usage: poll.sh SECONDS: wait, then show progress and pack what the chain has written into $OUT
sleep "${1:-0}"
R=/tmp/persist/results
cat /tmp/persist/chain.log 2>/dev/null
for f in "$R"/*.log; do [ -f "$f" ] && { echo "== $f"; grep -v "^\s*$" "$f" | tail -n 12; }; done
cd "$R" 2>/dev/null || exit 0
[ -d offcost ] && tar czf "$OUT/offcost.tgz" --exclude=shapes offcost.log offcost 2>/dev/null
for d in sweep-acc2 sweep-acc3; do [ -d $d ] && tar czf "$OUT/$d.tgz" --exclude='*.jsonl' $d $d.log 2>/dev/null; done
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
true
