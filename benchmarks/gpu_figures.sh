#!/usr/bin/env bash
# The GPU figures, each the CPU benchmark's own command with the device named, in one run:
#
#   bash benchmarks/gpu_figures.sh [RESULTS_DIR [STEP ...]]   # on a CUDA machine, from the repo root
#
# STEP: imagination, throughput, time_to_quality, learn, trxl (default: all of them).
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
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
