#!/usr/bin/env bash
# Prepare what bench/gpu_harness.sh takes to the GPU machine (which has no network and takes 64 MiB a call):
#   .gpu/   a build of sources/debian-large.toml whose packed rows are 2048 tokens (the v6 recipe with
#           packed_rows.seq_length = 2048): launch.json, packed/ and megatron/ (bins xz-compressed, SHA256SUMS),
#           tokenizer/, and Megatron-LM's tarball (../shared/peers); packed-nofim/: the same build's training rows
#           packed again with FIM off (`export packed --fim-rate 0`, for the loss phase's comparison with the
#           per-document export, which has no FIM) and launch-nofim.json naming them (validation rows are the
#           same bytes: FIM only touches the training split)
#   .whl/   megatron-core 0.16.1 and einops wheels for CPython 3.12 (the device's torch is its own)
# usage: bash bench/gpu_prepare.sh [OUT]     (OUT: the build's output directory, default /tmp/gpu-build)
set -euo pipefail
OUT=${1:-/tmp/gpu-build}
RECIPE=$(mktemp -d)/v6-seq2048.toml
sed 's/^seq_length = 4096 /seq_length = 2048 /' pipeline/recipes/v6.toml > "$RECIPE"
grep -q '^seq_length = 2048 ' "$RECIPE"
cpp-data build --recipe "$RECIPE" --sources sources/debian-large.toml --out "$OUT" --no-progress
BUILD=$(cd "$OUT/builds" && ls -td */ | head -n 1); BUILD="$OUT/builds/${BUILD%/}"
rm -rf .gpu && mkdir -p .gpu/packed .gpu/megatron
cp "$BUILD/launch.json" .gpu/ && cp -r "$BUILD/tokenizer" .gpu/
for sub in packed megatron; do
  for f in "$BUILD/$sub"/*; do
    case "$f" in
      *.bin) (cd "$BUILD" && sha256sum "$sub/$(basename "$f")") >> .gpu/SHA256SUMS
             xz -T2 -6 -c "$f" > ".gpu/$sub/$(basename "$f").xz" ;;
      *.idx|*.json) cp "$f" ".gpu/$sub/" ;;
    esac
  done
done
NOFIM=$OUT/exports/packed-2048-nofim
[ -f "$NOFIM/_COMPLETE" ] || cpp-data export packed "$BUILD" --seq-length 2048 --fim-rate 0 --out "$NOFIM"
mkdir -p .gpu/packed-nofim && cp "$NOFIM/cpp_packed_train.idx" "$NOFIM/packed.json" .gpu/packed-nofim/
(cd "$NOFIM" && sha256sum cpp_packed_train.bin) | awk '{print $1 "  packed-nofim/" $2}' >> .gpu/SHA256SUMS
xz -T2 -6 -c "$NOFIM/cpp_packed_train.bin" > .gpu/packed-nofim/cpp_packed_train.bin.xz
python3 - <<'PY'
import json
spec = json.load(open(".gpu/launch.json"))
packed = spec["datasets"]["packed"]
packed["blend_per_split"]["train"] = [[w, p.replace("packed/", "packed-nofim/")] for w, p in packed["blend_per_split"]["train"]]
packed["groups"] = {k.replace("packed/", "packed-nofim/"): v for k, v in packed["groups"].items()}
rows = json.load(open(".gpu/packed-nofim/packed.json"))["prefixes"]["cpp_packed_train"]
packed["tokens"]["train"] = rows["tokens"]
packed["megatron_args"] = [a.replace("packed/cpp_packed_train", "packed-nofim/cpp_packed_train") for a in packed["megatron_args"]]
spec["megatron_args"] = packed["megatron_args"]
json.dump(spec, open(".gpu/launch-nofim.json", "w"), indent=1)
PY
cp "$(ls ../shared/peers/megatron-lm-core_v0.16.1.tar.xz /work/shared/peers/megatron-lm-core_v0.16.1.tar.xz 2>/dev/null | head -n 1)" .gpu/
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl megatron-core==0.16.1 einops==0.8.2 pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 typing_inspection==0.4.5 typing_extensions==4.16.0
du -sh .gpu .whl
