"""The launch spec: what a Megatron training launch needs to consume an export, as one JSON file.

Format "cpp-data-launch/1" (`launch.json` beside the bin/idx files):
  name, vocab_size, seq_length, eod
  tokenizer: {type: "HuggingFaceTokenizer", model: DIR}   (DIR holds tokenizer.json + tokenizer_config.json)
  blend_per_split: {train: [[weight, prefix], ...], valid: [...], test: []}
  data_path: ["1.0", train_prefix, ...] and split "100,0,0": the training blend in --data-path form; our
      train/valid split is by (repo, path) hash (docs/DESIGN.md section 9), so Megatron must not re-split it
  megatron_args: the flags for Megatron-LM's pretrain_gpt.py, ready to append to a launch:
      --train-data-path W P --valid-data-path W P --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR
      --vocab-size V --seq-length S  (never --split: Megatron-LM refuses it beside per-split paths, "split and
      blend_per_split are incompatible"; the --data-path form trains only with --eval-iters 0)
Prefixes and the tokenizer are stored relative to the spec's directory (`relative: true`) inside a stage's
output, and made absolute when a build is published; `resolve_paths` accepts either.
"""

from __future__ import annotations

from pathlib import Path

from cpp_data.pipeline.errors import BadInput
from cpp_data.pipeline.fsutil import atomic_write_json, read_versioned_json

FORMAT = "cpp-data-launch/1"


def _args(spec: dict) -> list[str]:
    args = []
    for split in ("train", "valid", "test"):
        blend = spec["blend_per_split"].get(split) or []
        if blend:
            args.append(f"--{split}-data-path")
            for w, prefix in blend:
                args += [str(w), prefix]
    return args + ["--tokenizer-type", spec["tokenizer"]["type"], "--tokenizer-model", spec["tokenizer"]["model"],
                   "--vocab-size", str(spec["vocab_size"]), "--seq-length", str(spec["seq_length"]),
                   "--max-position-embeddings", str(spec["seq_length"])]


def write_launch_spec(path: Path, name: str, splits: dict, vocab_size: int, seq_length: int,
                      tokenizer_dir: Path, eod: int | None = None) -> dict:
    spec = {
        "format": FORMAT, "name": name, "vocab_size": vocab_size, "seq_length": seq_length, "eod": eod,
        "relative": True,
        "tokenizer": {"type": "HuggingFaceTokenizer", "model": str(tokenizer_dir)},
        "blend_per_split": {s: [[1.0, v["prefix"]]] if v["documents"] else [] for s, v in splits.items()}
        | {"test": []},
        "documents": {s: v["documents"] for s, v in splits.items()},
        "tokens": {s: v["tokens"] for s, v in splits.items()},
    }
    spec["data_path"] = [x for w, p in spec["blend_per_split"]["train"] for x in (str(w), p)]
    spec["split"] = "100,0,0"
    spec["megatron_args"] = _args(spec)
    atomic_write_json(path, spec)
    return spec


def absolute(spec: dict, base: Path) -> dict:
    """The spec with every path made absolute against `base` (the spec's directory)."""
    if not spec.get("relative"):
        return spec
    def fix(p: str) -> str:
        return str((Path(base) / p).resolve())
    out = {**spec, "relative": False}
    out["tokenizer"] = {**spec["tokenizer"], "model": fix(spec["tokenizer"]["model"])}
    out["blend_per_split"] = {s: [[w, fix(p)] for w, p in b] for s, b in spec["blend_per_split"].items()}
    out["data_path"] = [x for w, p in out["blend_per_split"]["train"] for x in (str(w), p)]
    out["megatron_args"] = _args(out)
    return out


def load_launch_spec(path: Path) -> dict:
    """Read a launch spec with absolute paths; ValueError names the file and the problem."""
    path = Path(path)
    spec = absolute(read_versioned_json(path, FORMAT, "no such launch spec"), path.parent)
    for split, blend in spec["blend_per_split"].items():
        for _, prefix in blend:
            for ext in (".bin", ".idx"):
                if not Path(prefix + ext).is_file():
                    raise BadInput(f"{path}: {split} data {prefix}{ext} does not exist")
    return spec
