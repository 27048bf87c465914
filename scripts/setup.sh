#!/usr/bin/env bash
# Set up cpp-data on a fresh Debian/Ubuntu machine, then run the main job on the default corpus.
#   scripts/setup.sh              install everything, then the main job: cpp-data build --version v6 on the
#                                 default corpus (sources/debian.toml -> out/), and cpp-data verify promotes it
#   scripts/setup.sh --no-build   install everything only
# Installs: Debian packages (git, and the C++ trees of the default corpus and the tests), a venv in .venv with
# cpp-data in editable mode and its test and lint extras (ruff, mypy: the gate .ci/run runs after the tests).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# chromium: the report test renders the HTML report in a real headless browser
# libeigen3-dev, libsigc++-2.0-dev, libzstd-dev: with the corpus packages, the license-accuracy slice (their
# Debian copyright files are the ground truth of tests/test_license_accuracy.py)
# libclang-common-19-dev: clang's builtin headers for the libclang wheel; cmake, ninja-build and g++: compile
# databases by a configure-only run; bubblewrap: that configure runs the repository's CMake code in a sandbox
APT_PACKAGES=(git python3 python3-venv googletest nlohmann-json3-dev juce-modules-source libpoco-dev chromium
              libeigen3-dev libsigc++-2.0-dev libzstd-dev
              libclang-common-19-dev cmake ninja-build g++ bubblewrap)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ -n "$SUDO" ] && ! command -v sudo >/dev/null; then
    echo "setup: the Debian packages ${missing[*]} are missing, and installing them needs root or sudo" >&2
    exit 1
  fi
  echo "setup: installing Debian packages (root or sudo needed; a few minutes on a bare machine): ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: cpp-data needs Python 3.11 or newer; $PYTHON is $("$PYTHON" --version 2>&1). Set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
echo "setup: installing cpp-data and its dependencies into .venv"
# torch first, pinned: megatron-core's unpinned torch requirement would otherwise pull a multi-GB CUDA build
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test,lint]"

if [ "${1:-}" != "--no-build" ]; then
  echo "setup: running the main job"
  rc=0
  .venv/bin/cpp-data build --version v6 --sources sources/debian.toml --out out || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || exit "$rc"  # 3: nothing to do (this build exists already)
  .venv/bin/cpp-data verify out
fi
