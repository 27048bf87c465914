#!/usr/bin/env bash
# The harness on a GPU, one call per phase of the device tool:
#   lanes:  (issue 60) for each row length (2048, 16384, 65536 tokens; the same tokens per step at each), the
#           plain-PyTorch reference (bench/reference_gpt.py, causal attention over whole rows: an upper bound)
#           and `cpp-data train` (documents kept apart), gpt-125m, bf16, compiled, one after the other in this
#           call; then the CUDA paths' exactness (bench/gpu_exactness.py). Writes RESULTS/gpu_harness-<card>.json
#           (bench/gpu_harness_report.py) after every run, so a call cut short keeps what it measured.
#           DATA: bench/gpu_lanes_prepare.sh's folder (DATA/<length>/: a packed export at that length).
#   speed:  the plain-PyTorch reference (bench/reference_gpt.py) and the harness, same shape, same call, then
#           Megatron-LM's own pretrain_gpt.py for 20 steps from launch.json's megatron_args + model flags
#   profile: the attention kernels alone, then harness (as is, and with PATCHES, bench/gpu_profile.py's
#           experiments) and reference: whole steps timed, kernels by CUDA time per micro batch
#   loss:   packed rows (FIM off) vs documents, trained on the same number of tokens, both evaluated on the
#           validation documents (each on its own, no FIM) every EVAL steps
# (bench/results/train-h200-gpt125m-* came from its predecessor, bench/gpu_train_h200.sh, in git history.)
# Prepared on the build machine by bench/gpu_prepare.sh (a build whose packed rows are 2048 tokens, its
# bins xz-compressed; the training rows again with FIM off, for the loss phase; megatron-core 0.16.1 and einops
# wheels in .whl/; Megatron-LM's tarball in .gpu/).
# On the device:  bash bench/gpu_harness.sh .gpu $OUT speed|profile|loss|ddp     (QUICK=1: speed without the eager
# reference and Megatron-LM; LOCAL=1 adds megatron-core's own attention to the speed runs)
#                 bash bench/gpu_harness.sh .gpu-lanes $OUT lanes    (BUDGET: seconds the phase may take, 400;
#                 LANES: "length batch reference-micro harness-micro steps" per length, ';' between; EXACTNESS=0: skip)
set -euo pipefail
DATA=$(realpath "${1:?data dir}"); RESULTS=$(realpath "${2:?results dir}"); PHASE=${3:?lanes, speed, profile, loss or ddp}
REPO=$(pwd)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
rm -rf /tmp/site/cpp_data && mkdir -p /tmp/site/cpp_data  # the cpp_data namespace as pyproject.toml's package-dir maps it
cp pipeline/_namespace/__init__.py /tmp/site/cpp_data/
for pkg in pipeline stages schemas tokenizer clang_index harness; do cp -r "$pkg" "/tmp/site/cpp_data/$pkg"; done
export PYTHONPATH=/tmp/site
python3 - "$DATA" <<'PY'
import hashlib, lzma, pathlib, sys
root = pathlib.Path(sys.argv[1])
sums = dict(line.split()[::-1] for line in (root / "SHA256SUMS").read_text().splitlines())
for xz in sorted(root.rglob("*.bin.xz")):
    data = lzma.decompress(xz.read_bytes())
    rel = str(xz.relative_to(root))[:-3]
    assert hashlib.sha256(data).hexdigest() == sums[rel], f"{rel}: sha256 mismatch"
    (root / rel).write_bytes(data)
    xz.unlink()
print("bins unpacked, sha256 ok")
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "gpus", torch.cuda.device_count())' || true

if [ "$PHASE" = lanes ]; then
  T0=$(date +%s); BUDGET=${BUDGET:-400}; LOGS=/tmp/lane-logs; mkdir -p "$LOGS"
  # cap SECONDS: what is left of the budget, at most SECONDS (at least 1: `timeout 0` would mean no limit)
  cap() { local left=$(( BUDGET - ($(date +%s) - T0) )); left=$(( left < $1 ? left : $1 )); echo $(( left > 1 ? left : 1 )); }
  report() { python3 bench/gpu_harness_report.py "$RESULTS" "$DATA" || true; tar -czf "$RESULTS/logs.tar.gz" -C "$LOGS" . || true; }
  export TORCH_LOGS=recompiles  # a recompilation per batch would show here
  # length, global batch (rows), the reference's micro batch, the harness's micro batch, steps: 65,536 tokens a step
  IFS=';' read -r -a lanes <<< "${LANES:-2048 32 16 32 32;16384 4 2 4 24;65536 1 1 1 20}"
  for lane in "${lanes[@]}"; do
    read -r seq batch ref_micro micro steps <<< "$lane"
    echo "[$(( $(date +%s) - T0 ))s] seq $seq: reference"
    timeout "$(cap 110)" python3 bench/reference_gpt.py "$DATA/$seq/cpp_packed_train_e0" --seq-length "$seq" \
      --batch-size "$batch" --micro-batch-size "$ref_micro" --steps "$steps" --compile --json "$RESULTS/lanes.jsonl" \
      > "$LOGS/reference-$seq.txt" 2>&1 || echo "reference $seq failed: $(tail -n 3 "$LOGS/reference-$seq.txt")"
    echo "[$(( $(date +%s) - T0 ))s] seq $seq: harness"
    timeout "$(cap 100)" python3 -m cpp_data.pipeline.cli train --launch-spec "$DATA/$seq/launch.json" --model gpt-125m \
      --batch-size "$batch" --micro-batch-size "$micro" --steps "$steps" --compile --warmup 10 --log-every 4 \
      --num-workers 4 --eval-batches 1 --out "/tmp/runs/lane-$seq" > "$LOGS/harness-$seq.txt" 2>&1 \
      && python3 -c "import json,sys; s=json.load(open(sys.argv[1])); s['run']='harness'; print(json.dumps(s))" \
           "/tmp/runs/lane-$seq/summary.json" >> "$RESULTS/lanes.jsonl" \
      || echo "harness $seq failed: $(grep -v -i warn "$LOGS/harness-$seq.txt" | tail -n 5)"
    grep -E '^model|^step' "$LOGS/harness-$seq.txt" | tail -n 3 || true
    rm -rf "/tmp/runs/lane-$seq/checkpoints"
    report
  done
  if [ "${EXACTNESS:-1}" = 1 ]; then
    echo "[$(( $(date +%s) - T0 ))s] exactness"
    timeout "$(cap 120)" python3 bench/gpu_exactness.py "$DATA/2048" --json "$RESULTS/exactness.jsonl" \
      > "$LOGS/exactness.txt" 2>&1 || echo "exactness failed or cut: $(grep -v -i warn "$LOGS/exactness.txt" | tail -n 5)"
    report
  fi
  echo "[$(( $(date +%s) - T0 ))s] done"
  exit 0
fi
SPEC=$DATA/launch.json
[ "$PHASE" = loss ] && SPEC=$DATA/launch-nofim.json  # the loss phase's packed rows: FIM off (see below)
TRAIN=(python3 -m cpp_data.pipeline.cli train --launch-spec "$SPEC" --model gpt-125m --batch-size 32
       --seq-length 2048 --lr 6e-4 --num-workers 4)
summary() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); s['run']=sys.argv[2]; print(json.dumps(s))" "$1" "$2" >> "$RESULTS/$PHASE.jsonl"; }

if [ "$PHASE" = speed ]; then
  PREFIX=$DATA/packed/cpp_packed_train
  timeout 150 python3 bench/reference_gpt.py "$PREFIX" --micro-batch-size 16 --steps 40 --compile --json "$RESULTS/speed.jsonl" || echo "reference compiled failed"
  [ -z "${QUICK:-}" ] && { timeout 60 python3 bench/reference_gpt.py "$PREFIX" --micro-batch-size 8 --steps 16 --json "$RESULTS/speed.jsonl" || echo "reference eager failed"; }
  VARIANTS=${VARIANTS:-"sdpa-mb16-compiled sdpa-mb32-compiled sdpa-mb16"}
  for name in $VARIANTS ${LOCAL:+local-mb8}; do
    case $name in
      sdpa-mb16-compiled) flags="--micro-batch-size 16 --compile --steps 40" ;;
      sdpa-mb32-compiled) flags="--micro-batch-size 32 --compile --steps 40" ;;
      sdpa-mb16) flags="--micro-batch-size 16 --steps 24" ;;
      local-mb8) flags="--micro-batch-size 8 --attention local --steps 12" ;;
    esac
    # shellcheck disable=SC2086
    timeout 150 "${TRAIN[@]}" $flags --warmup 10 --log-every 4 --out "/tmp/runs/$name" > "$RESULTS/$name.txt" 2>&1 \
      && summary "/tmp/runs/$name/summary.json" "$name" || echo "$name failed: $(tail -n 3 "$RESULTS/$name.txt")"
    grep -E '^step|^model' "$RESULTS/$name.txt" || true
  done
fi
if [ "$PHASE" = speed ] && [ -z "${QUICK:-}" ]; then
  # Megatron-LM: launch.json's megatron_args for the packed rows, the gpt-125m preset's flags, and what a
  # TransformerEngine-less core_v0.16.1 needs (local layers, no fused kernels), bf16, 20 steps
  mkdir -p /tmp/mlm && tar -xJf "$DATA/megatron-lm-core_v0.16.1.tar.xz" -C /tmp/mlm
  MLM=$(dirname "$(find /tmp/mlm -name pretrain_gpt.py | head -n 1)")
  mapfile -t ARGS < <(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('\n'.join(s['datasets']['packed']['megatron_args'] + s['model_args']['gpt-125m']))" "$SPEC")
  (cd "$DATA" && timeout 200 torchrun --nproc-per-node 1 "$REPO/bench/pretrain_gpt_gpu.py" "$MLM" -- "${ARGS[@]}" \
      --transformer-impl local --no-gradient-accumulation-fusion --no-rope-fusion --no-persist-layer-norm \
      --no-masked-softmax-fusion --bf16 --micro-batch-size 8 --global-batch-size 32 --train-iters 20 \
      --lr-decay-iters 20 --lr-warmup-iters 5 --eval-iters 2 --eval-interval 20 --log-interval 1 \
      --data-cache-path /tmp/mlm-cache) > "$RESULTS/pretrain_gpt-h200.log" 2>&1 \
      || echo "pretrain_gpt failed: $(tail -n 5 "$RESULTS/pretrain_gpt-h200.log")"
  grep -E "iteration +[0-9]+/" "$RESULTS/pretrain_gpt-h200.log" | tail -n 3 || true
fi

if [ "$PHASE" = loss ]; then
  # packed rows with FIM off (launch-nofim.json: the same build's rows packed again, bench/gpu_prepare.sh) vs the
  # per-document export (no FIM either): the same steps x batch x seq tokens, and both evaluated on the same
  # validation rows, the validation documents each on its own (document segments) and without FIM (FIM only
  # ever touches the training split); 9 batches of 32 = every one of the 72 validation rows 4 times
  STEPS=${STEPS:-200}; EVAL=${EVAL:-25}; FLAGS=${FLAGS:---micro-batch-size 32 --compile}
  for data in packed documents; do
    # shellcheck disable=SC2086
    timeout 280 "${TRAIN[@]}" $FLAGS --data $data --eval-data packed --eval-batches 9 \
      --steps "$STEPS" --warmup 20 --log-every 5 --eval-every "$EVAL" --out "/tmp/runs/$data" > "$RESULTS/loss-$data.txt" 2>&1 \
      && summary "/tmp/runs/$data/summary.json" "$data" || echo "$data failed: $(tail -n 3 "$RESULTS/loss-$data.txt")"
    cp "/tmp/runs/$data/log.jsonl" "$RESULTS/loss-$data.jsonl" || true
    grep -E 'valid|^model' "$RESULTS/loss-$data.txt" | tail -n 4 || true
  done
fi

if [ "$PHASE" = ddp ]; then  # issue 16 point 4: data parallel over every GPU of the machine (nvidia-h200-x2)
  # against one GPU, same global batch, same call; torchrun + NCCL, megatron-core's parallel_state in the harness
  N=$(python3 -c "import torch; print(torch.cuda.device_count())")
  flags=(--micro-batch-size 16 --compile --steps 40 --warmup 10 --log-every 4)
  timeout 200 "${TRAIN[@]}" "${flags[@]}" --out /tmp/runs/ddp-1 > "$RESULTS/ddp-1.txt" 2>&1 \
    && summary /tmp/runs/ddp-1/summary.json "1 gpu" || echo "1 gpu failed: $(tail -n 3 "$RESULTS/ddp-1.txt")"
  timeout 240 torchrun --nproc-per-node "$N" "${TRAIN[@]:1}" "${flags[@]}" --out "/tmp/runs/ddp-$N" \
    > "$RESULTS/ddp-$N.txt" 2>&1 && summary "/tmp/runs/ddp-$N/summary.json" "$N gpus" \
    || echo "$N gpus failed: $(tail -n 3 "$RESULTS/ddp-$N.txt")"
fi

if [ "$PHASE" = profile ]; then  # where the step time goes and what candidate changes buy (bench/gpu_profile.py)
  PROF=(python3 bench/gpu_profile.py "$SPEC")
  { timeout 90 "${PROF[@]}" attention || echo "attention failed"
    timeout 150 "${PROF[@]}" harness --micro-batch-size 32 --profile --json "$RESULTS/profile.jsonl" || echo "harness failed"
    for patch in ${PATCHES:-megatron-bias-gelu}; do
      timeout 120 "${PROF[@]}" harness --micro-batch-size 32 --patch "$patch" --profile --json "$RESULTS/profile.jsonl" \
        || echo "harness + $patch failed"
    done
    timeout 120 "${PROF[@]}" reference --micro-batch-size 16 --profile --json "$RESULTS/profile.jsonl" || echo "reference failed"
    [ -n "${MORE:-}" ] && for run in $MORE; do  # e.g. MORE="harness:16: harness:32:megatron-rope"
      IFS=: read -r impl mb patch <<< "$run"
      timeout 120 "${PROF[@]}" "$impl" --micro-batch-size "$mb" ${patch:+--patch "$patch"} --json "$RESULTS/profile.jsonl" \
        || echo "$run failed"
    done
  } 2>&1 | grep --line-buffered -v -i -E 'warn|^ *warnings\.warn|^$' | tee "$RESULTS/profile.txt"
fi
