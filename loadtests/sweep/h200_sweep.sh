#!/usr/bin/env bash
# The H200 load-test sweep of docs/benchmarks.md, one simulated acceptance per call:
#   loadtests/sweep/h200_sweep.sh ACC_LEN OUT_DIR [more loadtests.sweep arguments]
# Two replicas of Llama-3.1-8B shapes with random weights (one per GPU: the 2-GPU machine),
# the full app (Ray Serve, policy actor, OpenAI API) started by the sweep; speculation always
# ON, always OFF (operator override) and dynamic (goodput policy), concurrency 1..128, then the
# low->high->low transition for the dynamic policy. SGLANG_SIMULATE_ACC_LEN=ACC_LEN in the replicas.
# TOKENIZER_FROM: tokenizer to pad for the 8B vocabulary (default models/tiny/target).
set -euo pipefail
acc=$1 out=$2
shift 2
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
shapes=models/shapes8b
[ -f "$shapes/target-8b/tokenizer.json" ] ||
  "$py" -m loadtests models shapes --out "$shapes" --tokenizer-from "${TOKENIZER_FROM:-models/tiny/target}"
mkdir -p "$out"
config="$out/config-acc$acc.yaml"
"$py" - "$acc" "$config" <<'PY'
import os, sys, yaml
acc, dst = sys.argv[1:3]
src = "deployments/examples/h200-dummy8b-sweep.yaml"
cfg = yaml.safe_load(open(src))
for key in ("path", "draft_path"):  # relative to the example file; the copy lives elsewhere
    cfg["model"][key] = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(src)), cfg["model"][key]))
cfg["replicas"]["env"]["SGLANG_SIMULATE_ACC_LEN"] = acc
yaml.safe_dump(cfg, open(dst, "w"))
PY
export SPECFLIP_CONTROL_TOKEN=${SPECFLIP_CONTROL_TOKEN:-h200-sweep}
exec "$py" -m loadtests.sweep \
  --launch-cmd "$py -m deployments serve --config {config} --port {port}" \
  --token "$SPECFLIP_CONTROL_TOKEN" \
  --variant-config "on=$config" --variant-config "off=$config" --variant-config "dynamic=$config" \
  --variants on,off,dynamic --concurrency 1,2,4,8,16,32,64,128 --duration 8 --warmup 3 \
  --transition low=2,high=128,low_s=20,high_s=40,tail_s=20 --transition-variants dynamic \
  --locust-processes 4 --no-itl-events --input-len 128 --output-len 128 \
  --title "H200 x2, Llama-3.1-8B shapes (random weights), simulated acceptance $acc" \
  --out "$out" "$@"
