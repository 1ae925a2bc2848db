#!/usr/bin/env bash
# How the 2026-11-30 H200 numbers were taken (docs/benchmarks.md). On the device host, after
# staging the wheel bundle (../shared/gpu/README.md) and the Locust wheels, copying this file,
# poll.sh and the tiny pair's tokenizer files (to /tmp/persist/tok) to /tmp/persist, from the repo root:
#   setsid nohup bash /tmp/persist/chain.sh "$PWD" > /tmp/persist/chain.log 2>&1 < /dev/null &
# then, call after call, `OUT=$OUT bash /tmp/persist/poll.sh 240` packs what it wrote into $OUT.
# Detached on the GPU host (setsid), from the repo root: OFF-cost bench on GPU 0, then the
# H200 sweep at simulated acceptance 2 and 3 on both GPUs. Results under /tmp/persist/results.
set -u
cd "$1"  # the repo root
export PYTHONPATH=$PWD
source .gpu-bundle/device/env.sh
R=/tmp/persist/results
mkdir -p "$R"
log() { echo "[chain $(date +%H:%M:%S)] $*"; }
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv
log "offcost start"
CUDA_VISIBLE_DEVICES=0 python3 -m loadtests.bench.off_cost --out "$R/offcost" > "$R/offcost.log" 2>&1
log "offcost rc=$?"
for acc in 2 3; do
  log "sweep acc=$acc start"
  TOKENIZER_FROM=/tmp/persist/tok bash loadtests/sweep/h200_sweep.sh "$acc" "$R/sweep-acc$acc" > "$R/sweep-acc$acc.log" 2>&1
  log "sweep acc=$acc rc=$?"
  /tmp/site/bin/ray stop --force >/dev/null 2>&1; pkill -f "[r]aylet"; sleep 3
done
log "all done"
