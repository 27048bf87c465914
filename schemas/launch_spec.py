"""The launch spec: what a training launch needs to consume one build or a blend of builds, as one JSON file.

Format "cpp-data-launch/3" (`launch.json` at the root of a build, of an export directory, or wherever
`cpp-data launch --out DIR` writes a blend):
  name, vocab_size, eod, pad
  tokenizer: {type: "HuggingFaceTokenizer", model: DIR, sha256}   (DIR holds tokenizer.json and its config)
  weights: {source: weight}          the sources' blend weights (sources file key `weight`, default 1.0)
  builds: [{build, path, weight}]    the builds it reads (one, or a blend's) and their weights
  default_dataset: "packed" or "documents"
  lanes: {LANE: {kind, seq_length, budget, datasets: {packed: D, documents: D}}}   (schemas/lanes.py)
    each D:
      kind               "packed" (rows of exactly seq_length ids) or "documents" (one sequence per document,
                         EOD appended)
      blend_per_split    {train: [[weight, prefix], ...], valid: [[weight, prefix], ...], test: []}: Megatron's
                         per-split blend; the training prefixes of packed rows are one per FIM epoch
      groups             {prefix: [source, ...]}: which sources each training prefix holds
      documents, tokens  {train: n, valid: n}
      rows               (packed) {train: [R, ...], valid: [R, ...]}, R = {weight, files, fim}: the rows as
                         Parquet files, per build of the blend with its share and its FIM draw ({rate, spm_rate,
                         seed, roles, epochs}), which the bundled harness reads, drawing FIM per epoch
                         (tokenizer/fim.py)
      megatron_args      flags for Megatron-LM's pretrain_gpt.py: per-split data paths, tokenizer, vocabulary,
                         sequence length, and for packed rows --reset-position-ids --reset-attention-mask
                         --eod-mask-loss, then the harness's default batch and learning-rate flags (`train_args`)
  phases: [{lane, seq_length, dataset, tokens, megatron_args}]   the curriculum: one phase per lane, shortest
                         first, each with its training tokens and its dataset's flags
  seq_length, megatron_args          the first phase's
  model_args: {preset: [flags]}      the harness's model presets (harness/presets.py) as pretrain_gpt.py flags
  train_args: [flags]                the harness's default batch, schedule and optimizer as pretrain_gpt.py flags
A blend's training weights are normalised by tokens: a build of weight w contributes w of each phase's tokens,
its prefixes sharing it by their samples (rows, or tokens for documents). Every path is relative to the
directory of launch.json, so a moved or copied build still works: run pretrain_gpt.py from that directory, or
read the file with `load_launch_spec`, which makes the paths absolute. Megatron-LM refuses `--split` beside
per-split paths ("split and blend_per_split are incompatible"); our split is by (repo, path) hash
(docs/DESIGN.md section 9), so none is passed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.foundation.fsutil import atomic_write_json, read_versioned_json
from cpp_data.schemas.lanes import ordered

FORMAT = "cpp-data-launch/3"
PACKED_FLAGS = ["--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"]
SPLITS = ("train", "valid", "test")

# The longest sequence any cpp-data command takes (packed_rows.seq_length, export and train --seq-length):
# 16,777,216 tokens, past any context length in use, so that a typo (99999999999) fails before anything runs
# instead of after the stages before packing, asking for 745 GiB for one row.
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


def dataset_args(spec: dict, d: dict, seq_length: int) -> list[str]:
    """pretrain_gpt.py's flags for dataset `d` at `seq_length`."""
    args = []
    for split in SPLITS:
        blend = d["blend_per_split"].get(split) or []
        if blend:
            args.append(f"--{split}-data-path")
            for w, prefix in blend:
                args += [repr(float(w)), prefix]
    args += ["--tokenizer-type", spec["tokenizer"]["type"], "--tokenizer-model", spec["tokenizer"]["model"],
             "--vocab-size", str(spec["vocab_size"]), "--seq-length", str(seq_length),
             "--max-position-embeddings", str(seq_length)]
    if d["kind"] == "packed":
        args += PACKED_FLAGS
    return args + spec["train_args"]


def _shares(blend: list[list]) -> list[list]:
    """Weights as shares summing to 1, rounded for a readable command line (Megatron normalizes them anyway)."""
    if len(blend) == 1:
        return [[1.0, blend[0][1]]]
    total = sum(w for w, _ in blend) or 1.0
    return [[round(w / total, 9), p] for w, p in blend]


def dataset_entry(kind: str, splits: dict, weights: dict[str, float], rows: dict[str, list[str]] | None = None,
                  fim: dict | None = None) -> dict:
    """A dataset entry from an export's per-prefix counts: `splits` maps a prefix (relative to launch.json) to
    {split, sources, documents, tokens, samples}, where samples is what Megatron draws from it per epoch (rows
    for packed rows, tokens for documents). A packed dataset also names its Parquet `rows` and its `fim`."""
    blend: dict[str, list] = {s: [] for s in SPLITS}
    groups = {}
    counted: dict[str, dict[str, int]] = {"documents": {}, "tokens": {}}
    for prefix, v in splits.items():
        if not v["documents"]:
            continue
        w = weights.get(v["sources"][0], 1.0) if v["split"] == "train" and v["sources"] else 1.0
        blend[v["split"]].append([v["samples"] * w, prefix])
        if v["split"] == "train":
            groups[prefix] = v["sources"]
        if v.get("epoch") in (None, 0):  # FIM epochs hold the same documents
            for what in counted:
                counted[what][v["split"]] = counted[what].get(v["split"], 0) + v[what]
    out: dict[str, Any] = {
        "kind": kind, "blend_per_split": {s: _shares(b) if b else [] for s, b in blend.items()}, "groups": groups,
        **{what: {s: c.get(s, 0) for s in ("train", "valid")} for what, c in counted.items()}}
    if rows is not None:
        out["rows"] = {s: [{"weight": 1.0, "files": files, "fim": fim}] for s, files in rows.items() if files}
    return out


def finish_spec(spec: dict) -> dict:
    """Every dataset's megatron_args, the phases (one per lane, shortest first) and the first phase's
    seq_length and megatron_args, from the spec's lanes."""
    default = spec["default_dataset"]
    phases = []
    for lane in ordered(list(spec["lanes"])):
        entry = spec["lanes"][lane]
        for d in entry["datasets"].values():
            d["megatron_args"] = dataset_args(spec, d, entry["seq_length"])
        if default not in entry["datasets"]:
            raise BadInput(f"lane {lane} has no {default!r} dataset (it has: {', '.join(entry['datasets'])})")
        d = entry["datasets"][default]
        phases.append({"lane": lane, "seq_length": entry["seq_length"], "dataset": default,
                       "tokens": d["tokens"]["train"], "megatron_args": d["megatron_args"]})
    if not phases:
        raise BadInput("the launch spec has no lane")
    spec["phases"] = phases
    spec["seq_length"], spec["megatron_args"] = phases[0]["seq_length"], phases[0]["megatron_args"]
    return spec


def new_spec(name: str, lanes: dict[str, dict], vocab_size: int, tokenizer: dict, eod: int, pad: int | None,
             weights: dict[str, float], builds: list[dict], default_dataset: str = "packed", *,
             model_args: dict[str, list[str]], train_args: list[str]) -> dict:
    """A launch spec over `lanes` ({lane: {kind, seq_length, budget, datasets}}), paths relative to where it
    will be written; `tokenizer` is {model: DIR, sha256}."""
    spec: dict[str, Any] = {
        "format": FORMAT, "name": name, "vocab_size": vocab_size, "eod": eod, "pad": pad,
        "tokenizer": {"type": "HuggingFaceTokenizer", **tokenizer}, "weights": dict(sorted(weights.items())),
        "builds": builds, "default_dataset": default_dataset, "model_args": model_args, "train_args": train_args,
        "lanes": {lane: lanes[lane] for lane in ordered(list(lanes))},
    }
    return finish_spec(spec)


def write_launch_spec(path: Path, spec: dict) -> dict:
    atomic_write_json(path, spec)
    return spec


def _paths(spec: dict, fix) -> dict:
    """The spec with `fix` applied to every path it holds (tokenizer, prefixes, rows, builds)."""
    out = {**spec, "tokenizer": {**spec["tokenizer"], "model": fix(spec["tokenizer"]["model"])},
           "builds": [{**b, "path": fix(b["path"])} for b in spec.get("builds", [])], "lanes": {}}
    for lane, entry in spec["lanes"].items():
        datasets = {}
        for k, d in entry["datasets"].items():
            d = {**d, "blend_per_split": {s: [[w, fix(p)] for w, p in b] for s, b in d["blend_per_split"].items()},
                 "groups": {fix(p): v for p, v in d["groups"].items()}}
            if "rows" in d:
                d["rows"] = {s: [{**r, "files": [fix(p) for p in r["files"]]} for r in rs]
                             for s, rs in d["rows"].items()}
            datasets[k] = d
        out["lanes"][lane] = {**entry, "datasets": datasets}
    return finish_spec(out)


def absolute(spec: dict, base: Path) -> dict:
    """The spec with every path made absolute against `base` (launch.json's directory)."""
    return _paths(spec, lambda p: str((Path(base) / p).resolve()))


def relative(spec: dict, base: Path) -> dict:
    """An absolute spec with every path made relative to `base` (where it will be written)."""
    return _paths(spec, lambda p: os.path.relpath(p, base))


def launch_spec_path(path: Path) -> Path:
    """A launch.json, or a build or export directory holding one."""
    path = Path(path)
    return path / "launch.json" if path.is_dir() else path


def load_launch_spec(path: Path) -> dict:
    """Read a launch spec (a file, or a directory holding launch.json) with absolute paths; BadInput names the
    file and the problem."""
    path = launch_spec_path(path)
    try:
        raw = read_versioned_json(path, FORMAT, "no such launch spec (a build's launch.json)")
    except BadInput as exc:
        if "format 'cpp-data-launch/2'" in str(exc):
            raise BadInput(f"{path}: written by an earlier cpp-data (format cpp-data-launch/2, without length "
                           f"lanes); build again to get a launch spec this version reads") from None
        raise
    spec = absolute(raw, path.parent)
    for lane, entry in spec["lanes"].items():
        for kind, d in entry["datasets"].items():
            _check_files(path, lane, kind, d)
    return spec


def _check_files(path: Path, lane: str, kind: str, d: dict) -> None:
    for split, blend in d["blend_per_split"].items():
        for _, prefix in blend:
            for ext in (".bin", ".idx"):
                if not Path(prefix + ext).is_file():
                    raise BadInput(f"{path}: lane {lane} {kind} {split} data {prefix}{ext} does not exist")
    for split, parts in d.get("rows", {}).items():
        for f in (f for r in parts for f in r["files"]):
            if not Path(f).is_file():
                raise BadInput(f"{path}: lane {lane} {kind} {split} rows {f} do not exist")


def blend_specs(builds: list[tuple[Path, dict, float]], lanes: list[str] | None, dataset: str, name: str) -> dict:
    """One absolute spec over (build, its absolute spec, weight) triples: the lanes all of them have (or
    `lanes`, each of which all must have), every dataset's blend the builds' prefixes scaled by their weights.
    BadInput when the builds' tokenizers differ or a lane is missing."""
    first_build, first, _ = builds[0]
    for build, spec, _ in builds[1:]:
        if spec["tokenizer"].get("sha256") != first["tokenizer"].get("sha256"):
            theirs, ours = (str(s["tokenizer"].get("sha256"))[:12] for s in (spec, first))
            raise BadInput(f"{build}: its tokenizer differs from {first_build}'s (sha256 {theirs} vs {ours}); a "
                           f"blend needs one tokenizer: build it again with --tokenizer {first_build}")
    common = [lane for lane in first["lanes"] if all(lane in s["lanes"] for _, s, _ in builds)]
    for lane in lanes or []:
        missing = [str(b) for b, s, _ in builds if lane not in s["lanes"]]
        if missing:
            raise BadInput(f"lane {lane}: not in {', '.join(missing)} (its lanes: "
                           f"{', '.join(next(s for b, s, _ in builds if str(b) == missing[0])['lanes'])})")
    chosen = lanes or common
    if not chosen:
        raise BadInput("the builds have no lane in common; give --lanes that every build has")
    total = sum(w for _, _, w in builds)
    shares = [(b, s, w / total) for b, s, w in builds]
    out_lanes = {lane: _blend_lane(lane, shares) for lane in chosen}
    spec = {**{k: first[k] for k in ("vocab_size", "eod", "pad", "tokenizer", "model_args", "train_args")},
            "format": FORMAT, "name": name, "default_dataset": dataset,
            "weights": {f"{b.name}:{src}": w for b, s, _ in builds for src, w in s["weights"].items()},
            "builds": [{"build": b.name, "path": str(b), "weight": w} for b, _, w in shares], "lanes": out_lanes}
    return finish_spec(spec)


def _blend_lane(lane: str, shares: list[tuple[Path, dict, float]]) -> dict:
    entries = [s["lanes"][lane] for _, s, _ in shares]
    if len({e["seq_length"] for e in entries}) > 1:
        raise BadInput(f"lane {lane}: the builds give it different sequence lengths")
    datasets = {}
    for kind in entries[0]["datasets"]:
        if not all(kind in e["datasets"] for e in entries):
            continue
        parts = [(e["datasets"][kind], w) for e, (_, _, w) in zip(entries, shares)]
        d: dict[str, Any] = {"kind": parts[0][0]["kind"], "groups": {}, "documents": {}, "tokens": {}}
        d["blend_per_split"] = {split: _shares([[bw * w, p] for part, bw in parts
                                                for w, p in part["blend_per_split"].get(split) or []])
                                if any(part["blend_per_split"].get(split) for part, _ in parts) else []
                                for split in SPLITS}
        for part, _ in parts:
            d["groups"].update(part["groups"])
        for what in ("documents", "tokens"):
            d[what] = {s: sum(part[what].get(s, 0) for part, _ in parts) for s in ("train", "valid")}
        if all("rows" in part for part, _ in parts):
            d["rows"] = {s: [{**r, "weight": r["weight"] * bw} for part, bw in parts for r in part["rows"].get(s, [])]
                         for s in ("train", "valid")}
        datasets[kind] = d
    return {**{k: entries[0][k] for k in ("kind", "seq_length", "budget")}, "datasets": datasets}
