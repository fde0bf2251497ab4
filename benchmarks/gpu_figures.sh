#!/usr/bin/env bash
# The GPU figures, each the CPU benchmark's own command with the device named, in one run:
#
#   bash benchmarks/gpu_figures.sh [RESULTS_DIR [STEP ...]]   # on a CUDA machine, from the repo root
#
# STEP: imagination, throughput, time_to_quality, learn, trxl, dreamer (default: all but dreamer).
#
# - imagination steps/s at N = 256, 1,024 and 4,096, over whole episodes too
#   -> benchmarks/results/imagination_gpu.json
# - world-model training and inference throughput      -> worldmodel_throughput_gpu.json
# - time to the default's quality (the reference config's final held-out view CE, its row reused
#   from the CPU result)                                 -> worldmodel_time_to_quality_gpu.json
# - one learn run to 10,000 real steps (world model and imagination on the GPU, the agent's PPO on
#   the CPU), stopped after LEARN_SECONDS (default 300) -> learn_curve_gpu.json: the iterations it
#   finished, each stage's seconds
# - TrXL-PPO's env steps/s on the memory proof task, one seed    -> memory_agents_trxl_gpu.json
# - DreamerV3 XS at sheeprl's recipe (replay ratio 1) on the one-hot view, seeds 0-2 side by side on
#   the GPU to 10,000 real steps, stopped after DREAMER_SECONDS (default 400), every 1,000-step
#   checkpoint played greedily on the loop's 32 games -> dreamer_rr1_gpu_eval_sS.json, and the runs'
#   logs, checkpoint times and episodes (no checkpoints) -> dreamer_rr1_gpu_runs.tar.gz. Needs sheeprl
#   0.8.4 importable by `python` (ANCHORS.md); not in the default steps.
#
# Each step's JSON records the device's name. A step that fails is reported and the next one runs.
set -uo pipefail
cd "$(dirname "$0")/.."
results=${1:-benchmarks/results}
only=("${@:2}")
mkdir -p "$results"
export PYTHONUNBUFFERED=1
failed=()

step() {  # step NAME COMMAND...: run it, note a failure, go on
  local name=$1
  shift
  if [ ${#only[@]} -eq 0 ] && [ "$name" = dreamer ]; then return; fi
  if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " =~ " $name " ]]; then return; fi
  echo "=== $name: $*"
  local start=$SECONDS
  "$@" || failed+=("$name (exit $?)")
  echo "=== $name: $((SECONDS - start)) s"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
step imagination python benchmarks/imagination.py --device cuda --sizes 256 1024 4096 --steps 20 \
  --repeats 2 --whole-episodes --baseline ""
if [ "$results" != benchmarks/results ] && [ -f benchmarks/results/imagination_gpu.json ]; then
  cp benchmarks/results/imagination_gpu.json "$results/"
fi
step throughput python benchmarks/worldmodel_throughput.py --device cuda --threads 2 \
  --out "$results/worldmodel_throughput_gpu.json"
step time_to_quality python benchmarks/worldmodel_time_to_quality.py --device cuda --candidates default \
  --reference-from benchmarks/results/worldmodel_time_to_quality.json \
  --out "$results/worldmodel_time_to_quality_gpu.json"
run=runs/learn_gpu_$(date +%s)
step learn timeout --signal INT "${LEARN_SECONDS:-300}" python -m rpg_worldmodel.learn --steps 10000 \
  --out "$run" device=cuda
if [ -f "$run/curve.json" ]; then cp "$run/curve.json" "$results/learn_curve_gpu.json"; fi
step trxl python benchmarks/memory_agents.py --tasks proof --algos trxl-ppo --seeds 0 --device cuda \
  --runs "runs/memory_agents_gpu_$(date +%s)" --out "$results/memory_agents_trxl_gpu.json"
dreamer_seeds() {  # DreamerV3 seeds 0-2 on one GPU at once, each stopped after DREAMER_SECONDS; then played
  local root=runs/dreamer_gpu_$(date +%s) seed pid status=0 evals=()
  mkdir -p "$root"
  for seed in 0 1 2; do  # each run ends at its time limit (exit 124 or an interrupt): not a failure
    timeout --signal INT --kill-after 30 "${DREAMER_SECONDS:-400}" python benchmarks/sheeprl_dreamer.py \
      --steps 10000 --seed "$seed" --accelerator "${DREAMER_ACCELERATOR:-cuda}" \
      --out "$root/dreamer-s$seed" buffer.checkpoint=False >"$root/train_s$seed.log" 2>&1 &
  done
  wait
  for seed in 0 1 2; do
    python benchmarks/sheeprl_dreamer.py --episodes-only --out "$root/dreamer-s$seed" || status=1
    # the checkpoints whose save finished (a stopped run's last one may not have)
    mapfile -t saved < <(python -c 'import json, sys; [print(sys.argv[1] + "/" + e["checkpoint"])
for e in json.load(open(sys.argv[1] + "/checkpoint_times.json"))]' "$root/dreamer-s$seed")
    python benchmarks/sheeprl_dreamer_eval.py "${saved[@]}" --out "$results/dreamer_rr1_gpu_eval_s$seed.json" \
      >"$root/eval_s$seed.log" 2>&1 &
    evals+=($!)
  done
  for pid in "${evals[@]}"; do wait "$pid" || status=1; done
  tar czf "$results/dreamer_rr1_gpu_runs.tar.gz" --exclude='*.ckpt' -C "$root" . || status=1
  ls "$results"/dreamer_rr1_gpu_eval_s{0,1,2}.json >/dev/null || status=1
  return $status
}
step dreamer dreamer_seeds
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
