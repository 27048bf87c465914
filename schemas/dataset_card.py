"""The dataset card a build carries: README.md with YAML front matter in the Hugging Face datasets format.

The front matter's `configs` tell `datasets.load_dataset(BUILD)` which Parquet files make which dataset, so the
shards (config `documents`, the default), each length lane's documents (`lane_4k`, ...) and its packed rows
(`packed_4k`, ...) never merge into one table (their columns differ). Every path is relative to the build, so
a copied or moved build loads the same. The body says, in plain words and numbers from the manifest and the
summary, what the build holds and how to load it. Written by pipeline/runner/build.py before the manifest, and
listed in it (kind "card").
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

SPLIT_NAMES = {"train": "train", "valid": "validation"}  # datasets' split names
# the build's datasets by the manifest kind of their files: the whole documents (the default config), and per
# lane folder its documents and its packed rows
CONFIGS = {"shard": "documents", "lane_shard": "lane", "packed": "packed"}
_SIZES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
          (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]


def size_category(n: int) -> str:
    return next((label for bound, label in _SIZES if n < bound), "n>100M")


def config_files(files: list[dict]) -> dict[str, list[dict]]:
    """{config name: its manifest entries} for the datasets a build holds: `documents` (the shards), and per
    lane `lane_<lane>` and `packed_<lane>` (the folder's name after `lanes/` or `packed/`; `packed` when the
    rows sit in packed/ itself), in that order."""
    out: dict[str, list[dict]] = {}
    for kind, prefix in CONFIGS.items():
        for f in files:
            if f.get("kind") != kind or not f.get("split"):
                continue
            folder = f["path"].rsplit("/", 1)[0]
            lane = folder.split("/", 1)[1] if "/" in folder else ""
            out.setdefault(prefix if kind == "shard" or not lane else f"{prefix}_{lane}", []).append(f)
    return out


def _configs(files: list[dict]) -> list[dict]:
    """The front matter's configs: each dataset with the glob of its Parquet files per split."""
    configs = []
    for name, entries in config_files(files).items():
        folder = entries[0]["path"].rsplit("/", 1)[0]
        splits = sorted({f["split"] for f in entries}, key=list(SPLIT_NAMES).index)
        entry: dict[str, Any] = {"config_name": name, "data_files": [
            {"split": SPLIT_NAMES[s], "path": f"{folder}/{s}*.parquet"} for s in splits]}
        if name == "documents":
            entry["default"] = True
        configs.append(entry)
    return configs


def _output_configs(name: str, files: list[dict]) -> list[dict]:
    """The output directory card's configs: the build's datasets, each split listing its files one by one under
    builds/NAME/ (no glob: another build's files, or one added later, are never read)."""
    configs = []
    for config, entries in config_files(files).items():
        splits = sorted({f["split"] for f in entries}, key=list(SPLIT_NAMES).index)
        entry: dict[str, Any] = {"config_name": config, "data_files": [
            {"split": SPLIT_NAMES[s], "path": [f"builds/{name}/{f['path']}" for f in entries if f["split"] == s]}
            for s in splits]}
        if config == "documents":
            entry["default"] = True
        configs.append(entry)
    return configs


OUTPUT_CARD_TITLE = "cpp-data output directory"  # how a card at OUT written by cpp-data is told from a user's


def output_card(name: str, pointer: str, files: list[dict]) -> str:
    """README.md at an output directory: `datasets.load_dataset(OUT)` loads the build `name` (the one
    builds/`pointer` names) as `datasets.load_dataset(OUT/builds/NAME)` would, with the same configs."""
    front = {"pretty_name": f"{OUTPUT_CARD_TITLE}: build {name}", "configs": _output_configs(name, files)}
    return "\n".join([
        "---", *_yaml(front), "---", "", f"# {front['pretty_name']}", "",
        f"`datasets.load_dataset(\"path/to/OUT\")` loads `builds/{name}`, the build `builds/{pointer}` names "
        f"(the promoted build, or the latest where none is promoted). cpp-data rewrites this card whenever "
        f"`builds/LATEST` or `builds/PROMOTED` moves; the build's own card is `builds/{name}/README.md`.", ""])


def card_build(out: Path) -> tuple[str, str] | None:
    """(build name, pointer) the output directory's card follows: PROMOTED's sealed build, else LATEST's."""
    for pointer in ("PROMOTED", "LATEST"):
        f = Path(out) / "builds" / pointer
        name = f.read_text().strip() if f.is_file() else ""
        if name and "/" not in name and (Path(out) / "builds" / name / "_COMPLETE").is_file():
            return name, pointer
    return None


def refresh_output_card(out: Path) -> Path | None:
    """Write OUT/README.md for the build card_build names (and remove a card of ours that names none); a
    README.md that cpp-data did not write is left alone. Returns the card written, if any."""
    from cpp_data.pipeline.foundation.fsutil import atomic_write_text
    from cpp_data.schemas.manifest import load_manifest

    card = Path(out) / "README.md"
    if card.is_file() and OUTPUT_CARD_TITLE not in card.read_text(errors="replace")[:400]:
        return None
    named = card_build(out)
    if named is None:
        card.unlink(missing_ok=True)
        return None
    files = load_manifest(Path(out) / "builds" / named[0])["files"]
    atomic_write_text(card, output_card(named[0], named[1], files))
    return card


def license_counts(build: Path, files: list[dict]) -> Counter:
    """Documents per SPDX expression over the build's shards (the license_spdx column alone is read)."""
    counts: Counter = Counter()
    for f in files:
        if f.get("kind") == "shard":
            column = pq.read_table(build / f["path"], columns=["license_spdx"]).column("license_spdx")
            counts.update(v or "NOASSERTION" for v in column.to_pylist())
    return counts


def _yaml(value: Any, indent: int = 0) -> list[str]:
    """The small YAML subset the card needs (mappings, lists, scalars), written by hand so that no YAML library
    is needed to publish a build and the output is stable byte for byte."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{k}:")
                lines += _yaml(v, indent + (0 if isinstance(v, list) else 2))
            else:
                lines.append(f"{pad}{k}: {_scalar(v)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                sub = _yaml(item, indent + 2)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines += sub[1:]
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    return lines


def _scalar(v: Any) -> str:
    if v is True or v is False:
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):  # empty
        return "[]"
    if isinstance(v, dict):
        return "{}"
    s = str(v)
    return s if s.replace("-", "").replace("_", "").replace(".", "").replace("/", "").isalnum() else \
        '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def license_keys(spdx: str | None) -> list[str]:
    """The licenses an SPDX expression names, for the card's `license:` list: every term of an AND or OR, nested
    ones included (`(... OR ...) AND MIT` lists MIT too), a `WITH`'s license, keys off the SPDX list
    (`LicenseRef-...`) and NOASSERTION left out."""
    if not spdx:
        return []
    terms = re.split(r"\s+(?:AND|OR)\s+|[()]", spdx)
    keys = [t.split(" WITH ")[0].strip() for t in terms]
    return [k for k in keys if k and k != "NOASSERTION" and not k.startswith(("LicenseRef-", "DocumentRef-"))]


def dataset_card(build: Path, manifest: dict, summary: dict) -> str:
    """README.md for a build whose files (manifest["files"]) are already in `build`."""
    files = manifest["files"]
    licenses = license_counts(build, files)
    hub_licenses = sorted({key.lower() for spdx in licenses for key in license_keys(spdx)})
    if any(re.search(r"\b(?:LicenseRef|DocumentRef)-", spdx or "") for spdx in licenses):
        hub_licenses.append("other")  # the Hub's tag for licenses off its list (the public domain, a company's)
    front = {
        "pretty_name": f"cpp-data build {manifest['build']}",
        "language": ["code"],
        "license": hub_licenses or ["other"],
        "size_categories": [size_category(summary.get("documents", 0))],
        "task_categories": ["text-generation"],
        "tags": ["cpp", "code", "megatron", f"schema-{manifest['schema_generation']}"],
        "configs": _configs(files),
    }
    lines = ["---", *_yaml(front), "---", "", f"# {front['pretty_name']}", ""]
    lines += [f"C and C++ source files of {len(manifest['sources'])} pinned repositories, filtered (quality, "
              f"licenses, secrets), deduplicated (exact, then MinHash near dedup) and tokenized by cpp-data "
              f"{manifest['cpp_data_version']}, recipe {manifest['recipe'].get('version')} (schema generation "
              f"{manifest['schema_generation']}). Build fingerprint `{manifest['build_fingerprint'][:16]}`.", ""]
    lines += ["## Load it", "", "```python",
              "from datasets import load_dataset",
              "docs = load_dataset(\"path/to/this/build\")             # config documents: one row per file",
              "chunks = load_dataset(\"path/to/this/build\", \"lane_4k\")   # the 4k lane's chunks",
              "rows = load_dataset(\"path/to/this/build\", \"packed_4k\")   # its packed rows for training",
              "",
              "import cpp_data",
              "docs = cpp_data.load_build(\"path/to/this/build\")      # the same, from the manifest",
              "```", "",
              "DuckDB: `SELECT source_repo, source_path, license_spdx FROM 'shards/*.parquet'`. Megatron: "
              "`launch.json` names the bin/idx datasets and the flags of pretrain_gpt.py; paths are relative "
              "to it.", ""]
    lines += ["## Sources", "", "| source | url | pinned commit | license (sources file) | weight |",
              "|---|---|---|---|---|"]
    for s in manifest["sources"]:
        lines.append(f"| {s['name']} | {s['url']} | `{s['commit'][:16]}` | {s.get('license') or 'detected'} | "
                     f"{s.get('weight', 1.0)} |")
    lines += ["", "## Licenses", "", "| SPDX | documents |", "|---|---|"]
    lines += [f"| {spdx} | {n:,} |" for spdx, n in sorted(licenses.items(), key=lambda x: (-x[1], x[0]))]
    d = summary.get("decisions", {})
    lines += ["", "## What was kept", "",
              f"- files seen: {summary.get('files_seen', 0):,}; kept: {d.get('kept', 0):,}",
              *[f"- refused, {rule}: {n:,}" for rule, n in sorted(summary.get("refused_by_rule", {}).items(),
                                                               key=lambda x: (-x[1], x[0]))],
              f"- exact duplicates removed: {summary.get('exact_duplicates', 0):,}; near duplicates removed: "
              f"{summary.get('near_duplicates', 0):,} in {summary.get('near_duplicate_clusters', 0):,} clusters",
              f"- documents: {summary.get('documents', 0):,} (train {summary.get('train_documents', 0):,}, "
              f"validation {summary.get('valid_documents', 0):,}; split by repository and path)",
              "- every file seen has a row in `provenance/ledger.parquet` saying what happened to it and why", ""]
    tok = manifest.get("tokenizer")
    if tok:
        lines += ["## Tokenizer", "",
                  f"`tokenizer/` (Hugging Face tokenizers): {tok['vocab_size']:,} ids, sha256 `{tok['sha256'][:16]}`; "
                  f"{summary.get('tokens', 0):,} tokens in the shards' `token_ids`.", ""]
    lines += _lane_section(summary)
    lines += ["Every file of the build, with its SHA-256, is listed in `manifest.json`.", ""]
    return "\n".join(lines)


def _lane_section(summary: dict) -> list[str]:
    """The length lanes: what each holds and how it packs."""
    lanes = summary.get("lanes") or {}
    if not lanes:
        return []
    lines = ["## Length lanes", "", "Training units per sequence length (config `lane_<lane>`; packed rows in "
             "`packed_<lane>`, fill-in-the-middle drawn per epoch when read):", "",
             "| lane | kind | budget | training documents | tokens | packed rows | slots used | docs per row |",
             "|---|---|---|---|---|---|---|---|"]
    for lane, rec in lanes.items():
        t = (summary.get("packing") or {}).get(lane, {}).get("train") or {}
        train = rec["splits"]["train"]
        lines.append(f"| {lane} | {rec['kind']} | {rec['budget']:,} | {train['rows']:,} | {train['tokens']:,} | "
                     f"{t.get('rows', 0):,} | {t.get('slot_utilization', 0):.1%} | {t.get('docs_per_row', 0):.2f} |")
    return lines + [""]
