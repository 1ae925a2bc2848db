#!/usr/bin/env bash
# The serving-speed GPU run of docs/benchmarks.md ("Serving at engine speed"), detached on the
# H200 host (one GPU: steps 1-2; two GPUs: also step 3). Before it, on the host: the wheel bundle staged and installed (../shared/gpu/README.md,
# device scripts copied into .gpu-bundle/device), the tiny pair's tokenizer files in /tmp/persist/tok.
# Start from the repo root:
#   setsid nohup bash docs/gpu/serving_chain.sh "$PWD" > /tmp/persist/chain.log 2>&1 < /dev/null &
# and poll with `OUT=$OUT bash docs/gpu/serving_poll.sh SECONDS`. Steps (results in /tmp/persist/results):
#  1. client calibration against the null server (Locust 1/4/8 processes, SGLang's client);
#  2. SGLang's own server vs the app on one H200, speculation off and on, both data paths, with
#     py-spy profiles of every serving process at c=128;
#  3. (2-GPU hosts only) two replicas on both H200s (the faster data path of step 2) at c=256, against step 2's raw server.
set -u
cd "$1"
export PYTHONPATH=$PWD SPECFLIP_CONTROL_TOKEN=gpu-serving
source .gpu-bundle/device/env.sh
export PATH=/tmp/site/bin:$PATH
R=/tmp/persist/results
mkdir -p "$R"
log() { echo "[chain $(date +%H:%M:%S)] $*"; }
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv
nproc
[ -f models/shapes8b/target-8b/tokenizer.json ] ||
  python3 -m deployments models shapes --out models/shapes8b --tokenizer-from /tmp/persist/tok
log "calibration start"
python3 -m loadtests.calibrate --out "$R/calibration" --clients locust,sglang --processes 1,4,8 \
  --concurrency 256 --duration 10 --server-processes 4 --tokenizer models/shapes8b/target-8b > "$R/calibration.log" 2>&1
log "calibration rc=$?"
E=deployments/examples
log "rawvsapp start"
python3 -m loadtests.rawvsapp --config $E/h200-dummy8b-1replica.yaml \
  --app ingress=$E/h200-dummy8b-1replica.yaml --app direct=$E/h200-dummy8b-1replica-direct.yaml \
  --speculation off,on --concurrency 1,32,128,256 --concurrency-on 1,128 --stream yes \
  --duration 15 --warmup 3 --locust-processes 8 --calibration "$R/calibration/calibration.json" \
  --profile-at 128 --out "$R/rawvsapp" > "$R/rawvsapp.log" 2>&1
log "rawvsapp rc=$?"
/tmp/site/bin/ray stop --force >/dev/null 2>&1; pkill -f "[r]aylet"; sleep 3
gpus=$(nvidia-smi -L | wc -l)
if [ "$gpus" -lt 2 ]; then log "two replicas skipped: $gpus GPU on this host"; log "all done"; exit 0; fi
best=$(python3 - "$R/rawvsapp/results.json" <<'PY'
import json, sys
pts = json.load(open(sys.argv[1]))["points"]
tok = {p["target"]: p["output_tok_s"] for p in pts if p["speculation"] == "off" and p["concurrency"] == 256}
print(max(("ingress", "direct"), key=lambda t: tok.get(t, 0.0)))
PY
)
log "two replicas start (data path ${best:-direct})"
python3 -m loadtests.rawvsapp --config $E/h200-dummy8b-1replica.yaml --reuse-raw "$R/rawvsapp/results.json" \
  --app "two-$best=$E/h200-dummy8b-2replica-${best:-direct}.yaml" --speculation off,on --concurrency 256 \
  --concurrency-on 256 --stream yes --duration 20 --warmup 4 --locust-processes 8 \
  --calibration "$R/calibration/calibration.json" --out "$R/two" > "$R/two.log" 2>&1
log "two replicas rc=$?"
log "all done"
