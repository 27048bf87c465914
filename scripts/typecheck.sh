#!/usr/bin/env bash
# mypy over the cpp_data package as it installs: pyproject maps cpp_data.<pkg> to the top-level folders
# (pipeline/, stages/, ...), which the editable install serves through an import hook mypy does not follow, so
# this builds that layout as symlinks in a temporary directory and checks `-p cpp_data` there, with the venv's
# libraries. Settings: pyproject.toml [tool.mypy].
#   scripts/typecheck.sh            (from any directory; uses .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LAYOUT=$(mktemp -d)
trap 'rm -rf "$LAYOUT"' EXIT
mkdir "$LAYOUT/cpp_data"
ln -s "$ROOT/pipeline/_namespace/__init__.py" "$LAYOUT/cpp_data/__init__.py"
for pkg in pipeline stages schemas tokenizer clang_index harness; do
  ln -s "$ROOT/$pkg" "$LAYOUT/cpp_data/$pkg"
done
MYPYPATH="$LAYOUT" .venv/bin/python -m mypy --config-file "$ROOT/pyproject.toml" -p cpp_data "$@" \
  | sed "s|$LAYOUT/cpp_data/||g; s|$(realpath "$LAYOUT")/cpp_data/||g"
exit "${PIPESTATUS[0]}"
