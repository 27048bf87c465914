#!/usr/bin/env bash
# The harness's GPU run (issue 6), as it ran on one NVIDIA H200 (bench/results/train-h200-gpt125m.*):
# gpt-125m (megatron-core GPTModel, local spec, 12 x 768, tied 65,536-entry embeddings: ~135M parameters),
# bf16 autocast, seq 2048, batch 32 (4 micro batches of 8: megatron-core's local attention is unfused and
# batch 32 at once ran out of the H200's memory), on the v6 export of sources/debian-large.toml (default corpus + Boost
# headers: 15,418 documents, 20.1M tokens).
#
# Prepared on the build machine (the export travels xz-compressed; the device has no network):
#   cpp-data build --version v6 --sources sources/debian-large.toml --out /tmp/bigbuild
#   .gpu/megatron: cpp_train.bin.xz (+ .sha256), cpp_train.idx, cpp_valid.{bin,idx}, export.json,
#                  launch.json (the build's, with paths relative to it); .gpu/tokenizer: the build's tokenizer/
#   .whl: megatron_core-0.16.1 for CPython 3.12 (pip download, see the device README)
# On the device:  bash bench/gpu_train_h200.sh .gpu $OUT [SECONDS]
set -euo pipefail
DATA=${1:?data dir}; RESULTS=${2:?results dir}; BUDGET_S=${3:-390}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/megatron_core-*.whl
# the cpp_data namespace, laid out as pyproject.toml's package-dir maps it (no build backend needed there)
mkdir -p /tmp/site/cpp_data
cp pipeline/_namespace/__init__.py /tmp/site/cpp_data/
for pkg in pipeline stages schemas tokenizer clang_index harness; do cp -r "$pkg" "/tmp/site/cpp_data/$pkg"; done
export PYTHONPATH=/tmp/site
python3 - "$DATA/megatron" <<'PY'
import hashlib, lzma, sys, pathlib
d = pathlib.Path(sys.argv[1])
data = lzma.decompress((d / "cpp_train.bin.xz").read_bytes())
assert hashlib.sha256(data).hexdigest() == (d / "cpp_train.bin.sha256").read_text().strip(), "bin sha256 mismatch"
(d / "cpp_train.bin").write_bytes(data)
print("cpp_train.bin", len(data), "bytes, sha256 ok")
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch, megatron.core; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
TRAIN=(python3 -m cpp_data.pipeline.cli train --launch-spec "$DATA/megatron/launch.json" --model gpt-125m
       --batch-size 32 --micro-batch-size 8 --seq-length 2048 --lr 6e-4 --num-workers 4)
# probe the speed, then size the run to the time budget
"${TRAIN[@]}" --out /tmp/probe --steps 30 --warmup 10 --log-every 10 | tail -n 3
STEPS=$(python3 -c "import json; s=json.load(open('/tmp/probe/summary.json')); print(int($BUDGET_S * s['tokens_per_s_mean'] / (32 * 2048)))")
echo "steps for ${BUDGET_S}s: $STEPS"
"${TRAIN[@]}" --out "$RESULTS/run" --steps "$STEPS" --warmup 100 --log-every 10 --eval-every 100 --save-every 0 \
  | grep -v '^ ' | tail -n 40
rm -f "$RESULTS"/run/checkpoints/*.pt  # too large to bring back
python3 -m cpp_data.harness.plot "$RESULTS/run" "$RESULTS/run/loss.png"
