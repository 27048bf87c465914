#!/usr/bin/env bash
# One GPU call for issues 58 and 60 (the device tool runs it in a copy of this tree; nothing there reaches out):
#   1. chunks vs whole files (issue 58): bench/chunks_vs_files.py run on .gpu58/bundle.npz (prepared here by
#      `bench/chunks_vs_files.py prepare`), gpt-125m on the same tokens of (a) whole files in rows of 4,096 and
#      (b) the 4k chunk lane, both evaluated on the same held-out chunks -> RESULTS/chunks_vs_files-<card>.{json,png}
#   2. long lanes (issue 60): `bench/gpu_harness.sh .gpu-lanes RESULTS lanes` with what is left of BUDGET, at the
#      lengths of LANES (default 16,384 and 65,536 tokens a row)
# usage (device): bash bench/gpu_lanes_and_chunks.sh RESULTS      (TOKENS: training tokens a side; BUDGET: seconds)
set -uo pipefail
RESULTS=$(realpath "${1:?results dir}"); T0=$(date +%s); BUDGET=${BUDGET:-500}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
rm -rf /tmp/site/cpp_data && mkdir -p /tmp/site/cpp_data
cp pipeline/_namespace/__init__.py /tmp/site/cpp_data/
for pkg in pipeline stages schemas tokenizer clang_index harness; do cp -r "$pkg" "/tmp/site/cpp_data/$pkg"; done
export PYTHONPATH=/tmp/site
CARD=$(python3 -c 'import torch; n=torch.cuda.get_device_name(0); print("h200" if "H200" in n else "h100" if "H100" in n else "gpu")')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "[$(( $(date +%s) - T0 ))s] chunks vs whole files"
timeout "${CHUNKS_S:-300}" python3 bench/chunks_vs_files.py run .gpu58/bundle.npz --tokens "${TOKENS:-12000000}" \
  --eval-every "${EVAL_EVERY:-40}" --json "$RESULTS/chunks_vs_files-$CARD.json" \
  --plot "$RESULTS/chunks_vs_files-$CARD.png" 2>&1 | grep -v -i warn | tail -n 40
left=$(( BUDGET - ($(date +%s) - T0) ))
echo "[$(( $(date +%s) - T0 ))s] long lanes with ${left}s left"
if [ "$left" -gt 60 ]; then
  BUDGET=$left EXACTNESS=0 LANES="${LANES:-16384 4 2 4 16;65536 1 1 1 12}" bash bench/gpu_harness.sh .gpu-lanes "$RESULTS" lanes
fi
echo "[$(( $(date +%s) - T0 ))s] done"
