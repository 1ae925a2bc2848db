#!/usr/bin/env bash
# Two-class run on two H200s: interactive + batch Locust users against four setups,
# per class SLO attainment, TTFT/TPOT and tok/s, written to docs/benchmarks.md ("two-class routing").
# Acceptance is simulated (SGLANG_SIMULATE_ACC_LEN=3 in the configs; random 8B-shaped weights).
# Before it: the GPU bundle installed (../shared/gpu/README.md) and models/shapes8b built
# (`specflip models shapes --out models/shapes8b --tokenizer-from models/tiny/target`). From the repo root:
#   bash docs/gpu/two_class.sh [OUT] [USERS] [SECONDS]
# Setups: always-on and always-off (override '*' on/off, Serve's power-of-two router), dynamic
# (goodput rule, power of two), dynamic+classes (goodput rule, specflip's class router).
set -u
OUT=${1:-/tmp/persist/two_class}; USERS=${2:-128}; SECS=${3:-60}
export PYTHONPATH=$PWD SPECFLIP_CONTROL_TOKEN=two-class
export SPECFLIP_LT_INTERACTIVE_WEIGHT=${INTERACTIVE_WEIGHT:-1} SPECFLIP_LT_BATCH_WEIGHT=${BATCH_WEIGHT:-7}
E=deployments/examples
mkdir -p "$OUT"
run() {  # name config override(on|off|auto)
  local name=$1 cfg=$2 ov=$3 pid
  python3 -m deployments serve --config "$cfg" > "$OUT/$name.serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do  # up = both replicas registered with the policy
    n=$(curl -sf localhost:8000/specflip/status | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["replicas"]))' 2>/dev/null)
    [ "${n:-0}" -ge 2 ] && break; sleep 1
  done
  curl -sf -X POST localhost:8000/specflip/override -H "Authorization: Bearer two-class" \
    -d "{\"replica_id\": \"*\", \"mode\": \"$ov\"}" > /dev/null
  sleep 5
  python3 -m locust -f loadtests/locust/two_class.py --headless --host http://127.0.0.1:8000 \
    --csv "$OUT/$name/locust" --only-summary --exit-code-on-error 0 --loglevel WARNING --processes 8 \
    --lt-shape "fixed:users=$USERS,duration=$SECS" --lt-api chat --lt-input-len 128 --lt-output-len 256 \
    --lt-out-dir "$OUT/$name" > "$OUT/$name.locust.log" 2>&1
  curl -sf localhost:8000/specflip/status > "$OUT/$name.status.json"
  curl -sf localhost:8000/metrics > "$OUT/$name.metrics.txt"
  kill -INT $pid; wait $pid
}
run always-on  $E/h200-dummy8b-2replica.yaml on
run always-off $E/h200-dummy8b-2replica.yaml off
run dynamic    $E/h200-dummy8b-2replica.yaml auto
run dynamic+classes $E/h200-dummy8b-2replica-classes.yaml auto
python3 -m loadtests.locust.two_class_report --ttft-slo-ms 1000 --tpot-slo-ms 30 --out "$OUT/report" \
  --run always-on="$OUT/always-on" --run always-off="$OUT/always-off" --run dynamic="$OUT/dynamic" \
  --run dynamic+classes="$OUT/dynamic+classes" --doc docs/benchmarks.md --heading "## two-class routing (H200)" \
  --command "bash docs/gpu/two_class.sh $OUT $USERS $SECS"
