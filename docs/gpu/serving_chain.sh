#!/usr/bin/env bash
# bash reads a script while it runs it: a device command that copies the working tree onto the host
# again, or an edit, would change the lines not yet read (seen on CPU: a syntax error mid-chain). Run
# from a copy taken now, before anything else is read.
if [ -z "${CHAIN_SCRIPT_COPY:-}" ]; then
  CHAIN_SCRIPT_COPY=$(mktemp "${TMPDIR:-/tmp}/serving_chain.XXXXXX") && cp "$0" "$CHAIN_SCRIPT_COPY" || exit 2
  export CHAIN_SCRIPT_COPY
  exec bash "$CHAIN_SCRIPT_COPY" "$@"
fi
rm -f "$CHAIN_SCRIPT_COPY" && unset CHAIN_SCRIPT_COPY  # bash holds it open: read to the end all the same
# The serving-speed run of docs/benchmarks.md ("Serving at engine speed"), detached on a GPU host:
# the app on its default data path vs SGLang's own server (plain and EAGLE-3), both clients against
# the engine's own count. Runs from a source checkout with nothing installed but the wheel bundle
# (PYTHONPATH only). Start it from the repo root, detached:
#
#   setsid nohup bash docs/gpu/serving_chain.sh "$PWD" > /tmp/persist/chain.log 2>&1 < /dev/null &
#
# and poll with `OUT=$OUT bash docs/gpu/serving_poll.sh SECONDS`. Start it only once install.sh has
# returned, and not at the end of an `a && b && setsid ... &` list: `&` backgrounds the whole list,
# install included, and the device command's end then kills the install (seen 2026-12-02).
#
# - One at a time: a second start while one runs refuses (a lock in the results folder).
# - Resumable: a step that finished leaves STEP.done and is skipped when the chain starts again; a
#   step that did not finish starts clean (its output folder is removed first).
# - It stops only what it started: rawvsapp ends its servers' process groups; nothing is killed by
#   name, and Ray is never stopped host-wide.
#
# Settings (environment; the defaults are the H200 run):
#   CHAIN_BLOCK     a file of the settings below (docs/gpu/blocks/*.env: one GPU block's measurements,
#                   sized to fit one lease), read first: its assignments replace the environment's
#   CHAIN_RESULTS   results folder (default /tmp/persist/results/serving)
#   CHAIN_CONFIG    specflip config of the app and the raw servers
#   CHAIN_TOKENIZER tokenizer folder for the 8B shapes (default /tmp/persist/tok)
#   CHAIN_RAWVSAPP  extra arguments of loadtests.rawvsapp, replacing the default levels and windows
#   CHAIN_ARRIVALS  arguments of loadtests.bench.engine_arrivals (the engines alone under arrivals);
#                   when set, that step runs before rawvsapp (e.g. "--concurrency 64,128,256")
#   CHAIN_FIRST_FLIPS arguments of loadtests.bench.first_flips (a fresh engine flipped at batch sizes it has
#                   not run: the steps that stop while a kernel compiles, without and with the replica's
#                   warm-up; e.g. "--warm-up none,product --batches 37,100"); when set, it runs after the
#                   GPU tests
#   CHAIN_FIT       arguments of loadtests.bench.step_costs (e.g. "--batches 1,8,16,32,64,128,256"); when
#                   set, that step runs first and the steps after it use the config it writes
#                   ($CHAIN_RESULTS/fitted.yaml: CHAIN_CONFIG with the goodput priors fitted on this host)
#   CHAIN_SWEEP     arguments of loadtests.bench.client_sweep (SGLang's own client over the app's
#                   variants and SGLang's servers); when set, that step runs before rawvsapp
#   CHAIN_BEFORE / CHAIN_BEFORE_SWEEP  a before/after on one host: the app of another source tree (CHAIN_BEFORE,
#                   e.g. an older commit's packages, `git archive REV deployments patched_worker policy | tar -x -C
#                   .gpu-bundle/before`, carried with the last part) driven by this tree's client_sweep with
#                   CHAIN_BEFORE_SWEEP's arguments (`--app-tree`; app variants only, the raw servers are the same
#                   code), into $CHAIN_RESULTS/before, right after the sweep. CHAIN_BEFORE2 / CHAIN_BEFORE2_SWEEP: a
#                   second one, into $CHAIN_RESULTS/before2, after it. A `--config` in the arguments replaces the
#                   chain's (client_sweep takes the last), and `.` is this tree: e.g. this code with another setting
#   CHAIN_CLOSED / CHAIN_OPEN  arguments of loadtests.bench.client_transition --workload closed / open
#                   (phases and SLOs); when set, those steps run after the sweep
#   CHAIN_CLOSED_PLAN / CHAIN_OPEN_PLAN  arguments of loadtests.bench.transition_plan (e.g. "--low 2 --high
#                   256"): when set, that transition's phases are planned from this chain's sweep
#                   ($CHAIN_RESULTS/sweep/sweep.csv, its on and off rows at both levels; with none, from the
#                   `--sweep` files the arguments name, e.g. an earlier block's on the same kind of host) into
#                   $CHAIN_RESULTS/closed_plan.json (open_plan.json), and passed to CHAIN_CLOSED's (CHAIN_OPEN's)
#                   command after its own arguments (the planned --phases win)
#   CHAIN_GPU_TESTS pytest arguments of the GPU correctness tests (e.g.
#                   "tests/patched_worker/test_gpu_production.py"; carry models/tiny), run with -m gpu
#                   after the engines-alone step and before the fit, sweep and transitions; their reports
#                   go to $CHAIN_RESULTS/gpu_tests. A failure is logged and the chain goes on (the
#                   measurements after it do not depend on it). SPECFLIP_GPU_ATTENTION sets their attention
#                   backend only: every other step runs the config's
#   CHAIN_RAWVSAPP=skip  no rawvsapp step
#   CHAIN_ENV_SH    a file to source first (default: the bundle's .gpu-bundle/device/env.sh, if present)
#   CHAIN_JIT       kernels compiled on an earlier host (default .gpu-jit: flashinfer-cache.tgz,
#                   tvmffi-cache.tgz, triton-cache.tgz; carry it with the last part): unpacked before the first engine
#                   starts, so a fresh host skips flashinfer's ~4-minute JIT. The chain packs the
#                   host's own caches into $CHAIN_RESULTS/jit at the end; serving_poll.sh copies them to $OUT.
set -u
cd "$1" || exit 2
if [ -n "${CHAIN_BLOCK:-}" ]; then
  set -a
  # shellcheck disable=SC1090  # the block named
  source "$CHAIN_BLOCK" || { echo "[chain] cannot read the settings in $CHAIN_BLOCK" >&2; exit 2; }
  set +a
  echo "[chain] settings from $CHAIN_BLOCK: $(sed -n 's/^\([A-Z_]*\)=.*/\1/p' "$CHAIN_BLOCK" | tr '\n' ' ')"
fi
R=${CHAIN_RESULTS:-/tmp/persist/results/serving}
case $R in /*) ;; *) R=$PWD/$R ;; esac  # the steps run from a copy of the code (SRC below)
CONFIG=${CHAIN_CONFIG:-deployments/examples/h200-dummy8b-serving.yaml}
TOK=${CHAIN_TOKENIZER:-/tmp/persist/tok}
ENV_SH=${CHAIN_ENV_SH:-.gpu-bundle/device/env.sh}
DEFAULT_ARGS="--speculation off,on --concurrency 1,32,64,128,256 --repeat 128=3,256=3 --window 20
  --settle 3 --stream both --plain-concurrency 128,256 --plain-speculation off --sglang-client 128,256
  --output-spread 0.5 --stagger 2 --locust-processes 4 --profile-at 128
  --calibration docs/gpu/h200-2026-12-01/calibration.json"
ARGS=${CHAIN_RAWVSAPP:-$DEFAULT_ARGS}
mkdir -p "$R"
exec 9>"$R/chain.lock"
if ! flock -n 9; then
  echo "[chain] another chain holds $R/chain.lock: not starting a second one" >&2
  exit 1
fi
# The chain runs a copy of the code taken at its start, in SRC beside the results: each device command
# copies the working tree onto the host again, so a file edited meanwhile would reach every step that
# starts later (seen 2026-12-06: the before step imported a launcher change still being written).
# The carried folders (models, the bundle, kernel caches) are linked, not copied.
SRC=${R%/}.src
rm -rf "$SRC" && mkdir -p "$SRC" || exit 2
for item in deployments patched_worker policy loadtests tests docs pyproject.toml; do
  [ -e "$item" ] && { cp -a "$item" "$SRC/" || exit 2; }
done
for item in models .gpu-bundle .gpu-jit; do
  [ -e "$item" ] && ln -s "$PWD/$item" "$SRC/$item"
done
cd "$SRC" || exit 2
[ -f "$ENV_SH" ] && source "$ENV_SH"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export SPECFLIP_CONTROL_TOKEN=${SPECFLIP_CONTROL_TOKEN:-chain}
[ -d /tmp/site/bin ] && export PATH=/tmp/site/bin:$PATH
log() { echo "[chain $(date +%H:%M:%S)] $*" | tee -a "$R/progress.log"; }
JIT=${CHAIN_JIT:-.gpu-jit}
FI_CACHE=$HOME/.cache/flashinfer
# files already there stay (importing flashinfer may have made its cache folder already)
if [ -f "$JIT/flashinfer-cache.tgz" ]; then
  mkdir -p "$HOME/.cache" && tar xzf "$JIT/flashinfer-cache.tgz" --skip-old-files -C "$HOME/.cache" && log "flashinfer JIT cache unpacked from $JIT"
  # The JIT builds with ninja, which rebuilds an output whose build-log time is older than its newest
  # input; the headers it compiles against were installed minutes ago, so every cached kernel was
  # rebuilt anyway (seen 2026-12-04: the same command hashes logged twice, 85 s in the first prefill).
  # Date those inputs back to before any cached build (checked with ninja 1.13 on CPU: an unpacked
  # build with newer inputs rebuilds, dated back it reports no work; the command lines must match too).
  for pkg in flashinfer tvm_ffi sglang; do
    dir=$(python3 -c "import importlib.util as u; s = u.find_spec('$pkg'); print(s.submodule_search_locations[0] if s else '')" 2> /dev/null)
    [ "$pkg" = sglang ] && [ -n "$dir" ] && dir=$dir/kernels/jit
    [ -n "$dir" ] && [ -d "$dir" ] && find "$dir" -exec touch -h -d 2000-01-01 {} + && log "JIT inputs in $dir dated back"
  done
fi
if [ -f "$JIT/tvmffi-cache.tgz" ] && [ -n "${TVM_FFI_CACHE_DIR:-}" ]; then
  mkdir -p "$TVM_FFI_CACHE_DIR" && tar xzf "$JIT/tvmffi-cache.tgz" --skip-old-files --strip-components=1 -C "$TVM_FFI_CACHE_DIR" && log "tvm-ffi cache unpacked from $JIT"
fi
# Triton's kernels (the bundle's env.sh sets TRITON_CACHE_DIR): SGLang compiles some per power-of-two
# batch bucket on first use, and the replica's warm-up runs every bucket, so a fresh host compiles them
# while the app starts
if [ -f "$JIT/triton-cache.tgz" ] && [ -n "${TRITON_CACHE_DIR:-}" ]; then
  mkdir -p "$TRITON_CACHE_DIR" && tar xzf "$JIT/triton-cache.tgz" --skip-old-files --strip-components=1 -C "$TRITON_CACHE_DIR" && log "Triton cache unpacked from $JIT"
fi

# step NAME COMMAND...: skipped when NAME.done exists; otherwise its folder starts clean
step() {
  local name=$1
  shift
  if [ -f "$R/$name.done" ]; then
    log "$name: done already (remove $R/$name.done to run it again)"
    return 0
  fi
  rm -rf "${R:?}/$name"
  log "$name: start"
  "$@" > "$R/$name.log" 2>&1
  local rc=$?
  log "$name: rc=$rc"
  [ $rc -eq 0 ] && touch "$R/$name.done"
  return $rc
}

command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv
# the host's busiest processes every 2 s while the chain runs ($R/top.log, packed with the sweep): whether
# the engine's scheduler shares the CPUs with the serving processes around it
if command -v top > /dev/null; then
  (while sleep 2; do echo "== $(date +%s)"; top -b -n 1 -c -w 220 | head -n 30; done) > "$R/top.log" 2>&1 9>&- &
  TOP_PID=$!
  trap 'kill "$TOP_PID" 2> /dev/null' EXIT
fi
log "python3 $(python3 -c 'import sys; print(sys.version.split()[0])'), $(nproc) cores, config $CONFIG, code copied to $SRC"

# the 8B-shaped model folders the config names, when missing (random weights: configs + tokenizer)
model_dir=$(python3 -c "from deployments.config import load_config; print(load_config('$CONFIG').model.path)") || exit 2
if [ ! -f "$model_dir/config.json" ]; then
  step models python3 -m loadtests models shapes --out "$(dirname "$model_dir")" --tokenizer-from "$TOK" || exit 1
fi
if [ -n "${CHAIN_ARRIVALS:-}" ]; then
  # shellcheck disable=SC2086  # a list of words
  step arrivals python3 -m loadtests.bench.engine_arrivals --config "$CONFIG" --out "$R/arrivals" $CHAIN_ARRIVALS || exit 1
fi
# this host's compiled kernels, for the next fresh host (see CHAIN_JIT); packed after the first step
# that started engines too, so a lease that ends during rawvsapp still brings them back
pack_jit() {
  mkdir -p "$R/jit"
  if [ -d "$FI_CACHE" ]; then
    tar czf "$R/jit/flashinfer-cache.tgz.tmp" -C "$(dirname "$FI_CACHE")" flashinfer &&
      mv "$R/jit/flashinfer-cache.tgz.tmp" "$R/jit/flashinfer-cache.tgz"
  fi
  if [ -n "${TVM_FFI_CACHE_DIR:-}" ] && [ -d "$TVM_FFI_CACHE_DIR" ]; then
    tar czf "$R/jit/tvmffi-cache.tgz.tmp" -C "$(dirname "$TVM_FFI_CACHE_DIR")" "$(basename "$TVM_FFI_CACHE_DIR")" &&
      mv "$R/jit/tvmffi-cache.tgz.tmp" "$R/jit/tvmffi-cache.tgz"
  fi
  if [ -n "${TRITON_CACHE_DIR:-}" ] && [ -d "$TRITON_CACHE_DIR" ]; then
    tar czf "$R/jit/triton-cache.tgz.tmp" -C "$(dirname "$TRITON_CACHE_DIR")" "$(basename "$TRITON_CACHE_DIR")" &&
      mv "$R/jit/triton-cache.tgz.tmp" "$R/jit/triton-cache.tgz"
  fi
  log "JIT caches packed into $R/jit"
}
[ -n "${CHAIN_ARRIVALS:-}" ] && pack_jit
# correctness before speed: the GPU tests run before the measurements, so a lease that ends during
# a sweep still brings their verdict back (2026-12-04: run last, they were cut by the lease)
if [ -n "${CHAIN_GPU_TESTS:-}" ]; then
  # shellcheck disable=SC2086  # a list of words
  step gpu_tests env SPECFLIP_GPU_REPORT_DIR="$R/gpu_tests" python3 -m pytest -m gpu -p no:cacheprovider \
    $CHAIN_GPU_TESTS || log "gpu_tests failed: see $R/gpu_tests.log"
fi
if [ -n "${CHAIN_FIRST_FLIPS:-}" ]; then
  # shellcheck disable=SC2086  # a list of words
  step first_flips python3 -m loadtests.bench.first_flips --config "$CONFIG" --out "$R/first_flips" $CHAIN_FIRST_FLIPS || exit 1
fi
if [ -n "${CHAIN_FIT:-}" ]; then
  # shellcheck disable=SC2086  # a list of words
  step fit python3 -m loadtests.bench.step_costs --config "$CONFIG" --out "$R/fit" --write-config "$R/fitted.yaml" $CHAIN_FIT || exit 1
  pack_jit
  CONFIG=$R/fitted.yaml
  log "the steps after fit use $CONFIG"
fi
if [ -n "${CHAIN_SWEEP:-}" ]; then
  # shellcheck disable=SC2086  # a list of words
  step sweep python3 -m loadtests.bench.client_sweep --config "$CONFIG" --out "$R/sweep" $CHAIN_SWEEP || exit 1
  pack_jit
fi
for before in before before2; do  # CHAIN_BEFORE, then CHAIN_BEFORE2
  tree_var=CHAIN_${before^^} args_var=CHAIN_${before^^}_SWEEP
  if [ -n "${!tree_var:-}" ]; then
    [ -n "${!args_var:-}" ] || { log "$tree_var needs $args_var"; exit 1; }
    # shellcheck disable=SC2086  # a list of words
    step "$before" python3 -m loadtests.bench.client_sweep --config "$CONFIG" --out "$R/$before" \
      --app-tree "${!tree_var}" ${!args_var} || exit 1
  fi
done
for workload in closed open; do
  args_var=CHAIN_${workload^^}
  if [ -n "${!args_var:-}" ]; then
    planned=() plan_var=CHAIN_${workload^^}_PLAN own=()
    if [ -n "${!plan_var:-}" ]; then
      [ -f "$R/sweep/sweep.csv" ] && own=(--sweep "$R/sweep/sweep.csv")
      # shellcheck disable=SC2086  # a list of words
      step "${workload}_plan" python3 -m loadtests.bench.transition_plan --workload "$workload" --config "$CONFIG" \
        --json "$R/${workload}_plan.json" ${own[@]+"${own[@]}"} ${!plan_var} || exit 1
      planned=(--phases "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["phases"])' "$R/${workload}_plan.json")") || exit 1
      log "$workload transition: phases ${planned[1]}, planned from the sweeps in ${workload}_plan.json"
    fi
    # shellcheck disable=SC2086  # a list of words
    step "transition_$workload" python3 -m loadtests.bench.client_transition --config "$CONFIG" --workload "$workload" \
      --out "$R/transition_$workload" ${!args_var} ${planned[@]+"${planned[@]}"} || exit 1
  fi
done
if [ "$ARGS" != skip ]; then
  # shellcheck disable=SC2086  # ARGS is a list of words
  step rawvsapp python3 -m loadtests.rawvsapp --config "$CONFIG" --out "$R/rawvsapp" $ARGS || exit 1
  pack_jit
fi
pack_jit  # again at the end: kernels the steps after the last pack compiled
log "all done: $R"
