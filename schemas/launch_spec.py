"""The launch spec: what a Megatron training launch needs to consume a build, as one JSON file.

Format "cpp-data-launch/2" (`launch.json` at the root of a build, or of an export directory):
  name, vocab_size, seq_length, eod, pad
  tokenizer: {type: "HuggingFaceTokenizer", model: DIR}   (DIR holds tokenizer.json + tokenizer_config.json)
  weights: {source: weight}        the sources' blend weights (sources file key `weight`, default 1.0)
  default_dataset: "packed" or "documents"
  datasets: {packed: D, documents: D}, each D:
      kind               "packed" (rows of exactly seq_length ids, docs/DESIGN.md section 10) or "documents"
                         (one sequence per document, EOD appended)
      blend_per_split    {train: [[weight, prefix], ...], valid: [[1.0, prefix]], test: []}; a training
                         dataset per distinct source weight, weighted by its samples x weight
      groups             {prefix: [source, ...]}: which sources each training prefix holds
      megatron_args      flags for Megatron-LM's pretrain_gpt.py: per-split data paths, tokenizer, vocabulary,
                         sequence length, and for packed rows --reset-position-ids --reset-attention-mask
                         --eod-mask-loss (no second FIM: no --fim-* flag), then the harness's default batch and
                         learning-rate flags (`train_args`)
  megatron_args          the default dataset's megatron_args
  model_args: {preset: [flags]}    the harness's model presets (harness/presets.py) as pretrain_gpt.py flags
  train_args: [flags]              the harness's default batch, schedule and optimizer as pretrain_gpt.py flags
Every path (prefixes, tokenizer) is relative to the directory of launch.json, so a moved or copied build still
works: run pretrain_gpt.py from that directory (`cd BUILD && torchrun pretrain_gpt.py $(megatron_args) ...`),
or read the file with `load_launch_spec`, which makes the paths absolute. Megatron-LM refuses `--split` beside
per-split paths ("split and blend_per_split are incompatible"); our split is by (repo, path) hash
(docs/DESIGN.md section 9), so none is passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.foundation.fsutil import atomic_write_json, read_versioned_json

FORMAT = "cpp-data-launch/2"
PACKED_FLAGS = ["--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"]

# The longest sequence any cpp-data command takes (packed_rows.seq_length, export and train --seq-length):
# 16,777,216 tokens, past any context length in use, so that a typo (99999999999) fails before anything runs
# instead of after the stages before packing, when the packer asks for the memory of one row that long.
MAX_SEQ_LENGTH = 1 << 24


def weight_groups(weights: dict[str, float]) -> list[tuple[str, float, list[str]]]:
    """(suffix, weight, sources) per distinct weight: the training split is written once per group, as
    `<name>_train<suffix>`. With one weight (the default) there is one group and no suffix, so a build without
    weights has exactly one training prefix per dataset."""
    distinct = sorted(set(weights.values()))
    if len(distinct) <= 1:
        return [("", 1.0, sorted(weights))]
    out = []
    for w in distinct:
        text = f"{w:g}" if float(f"{w:g}") == w else repr(w)  # short, and never the same for two weights
        suffix = "" if w == 1.0 else "_w" + text.replace(".", "p").replace("+", "")
        out.append((suffix, w, sorted(n for n, v in weights.items() if v == w)))
    return out


def split_groups(split: str, weights: dict[str, float]) -> list[tuple[str, list[str], set[str] | None]]:
    """What an export writes for one split: (suffix, sources, the sources to keep or None for all) per
    prefix. The training split is one prefix per weight group; validation is one unweighted prefix."""
    groups = weight_groups(weights)
    if split != "train" or len(groups) == 1:
        return [("", sorted(weights), None)]
    return [(suffix, members, set(members)) for suffix, _, members in groups]


def _dataset_args(spec: dict, d: dict) -> list[str]:
    args = []
    for split in ("train", "valid", "test"):
        blend = d["blend_per_split"].get(split) or []
        if blend:
            args.append(f"--{split}-data-path")
            for w, prefix in blend:
                args += [repr(float(w)), prefix]
    args += ["--tokenizer-type", spec["tokenizer"]["type"], "--tokenizer-model", spec["tokenizer"]["model"],
             "--vocab-size", str(spec["vocab_size"]), "--seq-length", str(spec["seq_length"]),
             "--max-position-embeddings", str(spec["seq_length"])]
    if d["kind"] == "packed":
        args += PACKED_FLAGS
    return args + spec["train_args"]


def dataset_entry(kind: str, splits: dict, weights: dict[str, float]) -> dict:
    """A `datasets` entry from an export's per-prefix counts: `splits` maps a prefix (relative to launch.json)
    to {split, sources, documents, tokens, samples}, where samples is what Megatron draws from it per epoch
    (rows for packed rows, tokens for documents)."""
    blend: dict[str, list] = {"train": [], "valid": [], "test": []}
    groups = {}
    for prefix, v in splits.items():
        if not v["documents"]:
            continue
        if v["split"] == "train":
            w = weights.get(v["sources"][0], 1.0) if v["sources"] else 1.0
            blend["train"].append([v["samples"] * w, prefix])
            groups[prefix] = v["sources"]
        else:
            blend[v["split"]].append([1.0, prefix])
    if len(blend["train"]) == 1:
        blend["train"][0][0] = 1.0
    else:  # shares summing to 1, rounded for a readable command line (Megatron normalizes them anyway)
        total = sum(w for w, _ in blend["train"]) or 1.0
        blend["train"] = [[round(w / total, 9), p] for w, p in blend["train"]]
    return {"kind": kind, "blend_per_split": blend, "groups": groups,
            "documents": {s: sum(v["documents"] for v in splits.values() if v["split"] == s)
                          for s in ("train", "valid")},
            "tokens": {s: sum(v["tokens"] for v in splits.values() if v["split"] == s) for s in ("train", "valid")}}


def write_launch_spec(path: Path, name: str, datasets: dict[str, dict], vocab_size: int, seq_length: int,
                      tokenizer_dir: str, eod: int, pad: int | None, weights: dict[str, float],
                      default_dataset: str | None = None, *, model_args: dict[str, list[str]],
                      train_args: list[str]) -> dict:
    """Write launch.json; `datasets` are `dataset_entry` results with prefixes relative to `path`'s directory;
    the default dataset is `default_dataset`, else packed rows when present. `model_args` and `train_args` are
    the training harness's presets as pretrain_gpt.py flags (harness/presets.megatron_flags)."""
    spec: dict[str, Any] = {
        "format": FORMAT, "name": name, "vocab_size": vocab_size, "seq_length": seq_length, "eod": eod, "pad": pad,
        "tokenizer": {"type": "HuggingFaceTokenizer", "model": tokenizer_dir}, "weights": dict(sorted(weights.items())),
        "default_dataset": default_dataset or ("packed" if "packed" in datasets else "documents"),
        "model_args": model_args,
        "train_args": train_args,
    }
    spec["datasets"] = {k: {**d, "megatron_args": _dataset_args(spec, d)} for k, d in sorted(datasets.items())}
    spec["megatron_args"] = spec["datasets"][spec["default_dataset"]]["megatron_args"]
    atomic_write_json(path, spec)
    return spec


def absolute(spec: dict, base: Path) -> dict:
    """The spec with every path made absolute against `base` (launch.json's directory)."""
    def fix(p: str) -> str:
        return str((Path(base) / p).resolve())

    out = {**spec, "tokenizer": {**spec["tokenizer"], "model": fix(spec["tokenizer"]["model"])}, "datasets": {}}
    for k, d in spec["datasets"].items():
        d = {**d, "blend_per_split": {s: [[w, fix(p)] for w, p in b] for s, b in d["blend_per_split"].items()},
             "groups": {fix(p): v for p, v in d["groups"].items()}}
        out["datasets"][k] = {**d, "megatron_args": _dataset_args(out, d)}
    out["megatron_args"] = out["datasets"][out["default_dataset"]]["megatron_args"]
    return out


def launch_spec_path(path: Path) -> Path:
    """A launch.json, or a build or export directory holding one."""
    path = Path(path)
    return path / "launch.json" if path.is_dir() else path


def load_launch_spec(path: Path) -> dict:
    """Read a launch spec (a file, or a directory holding launch.json) with absolute paths; BadInput names the
    file and the problem."""
    path = launch_spec_path(path)
    spec = absolute(read_versioned_json(path, FORMAT, "no such launch spec (a build's launch.json)"), path.parent)
    for kind, d in spec["datasets"].items():
        for split, blend in d["blend_per_split"].items():
            for _, prefix in blend:
                for ext in (".bin", ".idx"):
                    if not Path(prefix + ext).is_file():
                        raise BadInput(f"{path}: {kind} {split} data {prefix}{ext} does not exist")
    return spec
