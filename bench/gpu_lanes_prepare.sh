#!/usr/bin/env bash
# Prepare what `bench/gpu_harness.sh DATA OUT lanes` takes to the GPU machine (no network there, 64 MiB a call):
#   DATA/<length>/   for each of LENGTHS (2048, 16384 and 65536 tokens a row): `cpp-data export packed BUILD
#                    --seq-length <length> --fim-rate 0`, of the lane LANE_<length> names where it names one
#                    (default: the 16k lane at 16,384, the 64k lane at 65,536, whole files at 2,048)
#                    (launch.json without the Parquet rows, so the harness
#                    reads the bin/idx through GPTDataset; packed.json, the .idx files; the .bin files
#                    xz-compressed, DATA/SHA256SUMS)
#   .whl/            megatron-core 0.16.1 and einops wheels for CPython 3.12 (bench/gpu_prepare.sh's; the device's
#                    torch is its own), unless .whl/ exists
# usage: bash bench/gpu_lanes_prepare.sh BUILD [DATA]     (DATA default .gpu-lanes; BUILD: a build directory)
set -euo pipefail
BUILD=${1:?a build directory}; DATA=${2:-.gpu-lanes}
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
rm -rf "$DATA" && mkdir -p "$DATA"
for seq in ${LENGTHS:-2048 16384 65536}; do
  case "$seq" in 16384) default=16k ;; 65536) default=64k ;; *) default="" ;; esac
  lane_var="LANE_$seq"; lane=${!lane_var-$default}
  cpp-data export packed "$BUILD" --seq-length "$seq" --fim-rate 0 ${lane:+--lane "$lane"} --out "$WORK/$seq" >/dev/null
  mkdir -p "$DATA/$seq"
  cp "$WORK/$seq/packed.json" "$WORK/$seq"/*.idx "$DATA/$seq/"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); [d.pop('rows', None) for l in s['lanes'].values()
for d in l['datasets'].values()]; json.dump(s, open(sys.argv[2], 'w'))" "$WORK/$seq/launch.json" "$DATA/$seq/launch.json"
  for bin in "$WORK/$seq"/*.bin; do
    (cd "$WORK" && sha256sum "$seq/$(basename "$bin")") >> "$DATA/SHA256SUMS"
    xz -T2 -6 -c "$bin" > "$DATA/$seq/$(basename "$bin").xz"
  done
done
[ -d .whl ] || python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl megatron-core==0.16.1 einops==0.8.2
du -sh "$DATA" .whl
