"""A whole build: lock the output directory, run the DAG, publish a sealed snapshot, print the summary.

Snapshot: builds/<version>-<YYYYMMDD>-<fp8>/ where fp8 starts the build fingerprint (the hash of every stage
instance's fingerprint). Shards, the ledger and the exports are copies out of the sealed cache (never links:
pipeline/cache.py says why), read-only;
manifest.json and reports/summary.json are written, then `_COMPLETE`, then the directory is renamed into place.
A build whose fingerprint already has a snapshot publishes nothing new ("nothing to do").
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cpp_data import __version__
from cpp_data.pipeline.cache import copy_file
from cpp_data.pipeline.executors import ExecutorConfig
from cpp_data.pipeline.fsutil import atomic_write_json, atomic_write_text, is_sealed, seal
from cpp_data.pipeline.outlock import OutputLock
from cpp_data.pipeline.recipe import Recipe
from cpp_data.pipeline.runner import Runner
from cpp_data.pipeline.sources import LockedSource, write_lock
from cpp_data.schemas.manifest import FORMAT, sha256_file


@dataclass
class BuildResult:
    build_dir: Path | None
    new_build: bool
    summary: dict[str, Any]


def find_build(out: Path, version: str, fp: str) -> Path | None:
    for candidate in sorted((Path(out) / "builds").glob(f"{version}-*-{fp[:8]}")):
        if is_sealed(candidate):
            return candidate
    return None


def summarize(runner: Runner, seconds: float) -> dict[str, Any]:
    """Files seen, kept, refused by rule, duplicates, shards, bytes, time and throughput."""
    collect = [a.counts for a in runner.artifacts("collect")]
    ledger = runner.artifacts("ledger")[0].counts if runner.artifacts("ledger") else {}
    # the documents a build publishes: v4's or v5's documents, else the shards stage's
    doc_stage = next((s for s in ("context_graph", "dependency_documents") if runner.artifacts(s)), "shards")
    shards = runner.artifacts(doc_stage)[0].counts if runner.artifacts(doc_stage) else {}
    dedup = runner.artifacts("exact_dedup")[0].counts if runner.artifacts("exact_dedup") else {}
    near = runner.artifacts("near_dedup")[0].counts if runner.artifacts("near_dedup") else {}
    tokens = runner.artifacts("token_columns")[0].counts if runner.artifacts("token_columns") else {}
    tok = runner.artifacts("tokenizer")[0].counts if runner.artifacts("tokenizer") else {}
    packed = runner.artifacts("packed_rows")[0].counts if runner.artifacts("packed_rows") else {}
    coverage = {a.source: a.counts for a in runner.artifacts("semantics")}
    collected_bytes = sum(c.get("bytes_collected", 0) for c in collect)
    stage_seconds = sum(r.get("seconds") or 0 for r in runner.stage_records())
    return {
        "sources": len(collect),
        "files_seen": sum(c.get("files_seen", 0) for c in collect),
        "cpp_files_collected": sum(c.get("files_collected", 0) for c in collect),
        "cpp_bytes_collected": collected_bytes,
        "decisions": ledger.get("decisions", {}),
        "refused_by_rule": ledger.get("reasons", {}),
        "exact_duplicates": dedup.get("duplicates_removed", 0),
        "exact_duplicate_bytes": dedup.get("duplicate_bytes", 0),
        "largest_duplicate_clusters": dedup.get("largest_clusters", []),
        "near_duplicates": near.get("near_duplicates_removed", 0),
        "near_duplicate_bytes": near.get("near_duplicate_bytes", 0),
        "near_duplicate_clusters": near.get("clusters", 0),
        "largest_near_duplicate_clusters": near.get("largest_clusters", []),
        "documents": shards.get("documents", 0),
        "train_documents": shards.get("train_documents", 0),
        "valid_documents": shards.get("valid_documents", 0),
        "shards": shards.get("shards", 0),
        "shard_bytes": tokens.get("shard_bytes", shards.get("shard_bytes", 0)),  # the published shards
        "text_bytes": shards.get("text_bytes", 0),
        "tokens": tokens.get("tokens", 0),
        "tokenizer_vocab_size": tok.get("vocab_size"),
        "tokenizer_learned_ids": tok.get("learned_ids"),
        "tokenizer_padding_ids": tok.get("padding_ids"),
        "tokenizer_sha256": tok.get("sha256"),
        "semantic_coverage": coverage,
        "packed_seq_length": packed.get("seq_length"),
        "packing": packed.get("telemetry"),
        "wall_seconds": round(seconds, 2),
        "stage_seconds": round(stage_seconds, 2),
        "throughput_mb_s": round(collected_bytes / 1e6 / stage_seconds, 2) if stage_seconds else None,
        "warnings": _warnings(shards, tok, collect),
    }


def _warnings(shards: dict, tok: dict, collect: list[dict]) -> list[str]:
    """What a user should know before training on this build."""
    out = []
    for reason, what in (("unreadable", "could not be read (permissions?)"),
                         ("undecodable_path", "have names that are not UTF-8")):
        n = sum(c.get("skipped", {}).get(reason, 0) for c in collect)
        if n:
            out.append(f"{n} file(s) or directories {what}: skipped, each with a ledger row (reason {reason})")
    if shards.get("documents", 0) == 0:
        out.append("the build has no documents; see provenance/ledger.parquet for why")
    valid = shards.get("valid_documents", 0)
    if shards.get("documents", 0) and valid < 10:
        out.append(f"only {valid} validation document(s); validation loss will be noisy (a larger corpus or a "
                   f"larger shards.valid_fraction gives more)")
    if shards.get("moved_to_valid"):
        out.append(f"the hash split chose no validation document; {shards['moved_to_valid']} was moved to it")
    if (tok.get("padding_ids") or 0) >= 128:  # under 128: the rounding of cap_vocab_to_corpus
        out.append(f"the tokenizer learned {tok['learned_ids']:,} of {tok['vocab_size']:,} ids; "
                   f"{tok['padding_ids']:,} are padding (tokenizer.cap_vocab_to_corpus = true avoids them)")
    elif tok.get("requested_vocab_size") and tok["vocab_size"] < tok["requested_vocab_size"]:
        out.append(f"the corpus filled {tok['learned_ids']:,} ids, so the vocabulary is {tok['vocab_size']:,}, "
                   f"not the recipe's {tok['requested_vocab_size']:,}")
    return out


def format_summary(summary: dict[str, Any], build_dir: Path | None, new: bool) -> str:
    lines = ["", "build summary", "-------------"]
    lines.append(f"  sources            {summary['sources']}")
    lines.append(f"  files seen         {summary['files_seen']:,}")
    d = summary["decisions"]
    lines.append(f"  kept               {d.get('kept', 0):,}")
    for rule, n in sorted(summary["refused_by_rule"].items(), key=lambda x: (-x[1], x[0])):
        lines.append(f"    {rule:<36} {n:,}")
    lines.append(f"  exact duplicates   {summary['exact_duplicates']:,} ({summary['exact_duplicate_bytes'] / 1e6:.1f} MB)")
    lines.append(f"  near duplicates    {summary['near_duplicates']:,} ({summary['near_duplicate_bytes'] / 1e6:.1f} MB) "
                 f"in {summary['near_duplicate_clusters']:,} clusters")
    for c in summary["largest_near_duplicate_clusters"][:3]:
        lines.append(f"    cluster of {c['size']:<4} kept {c['keeper']}")
    lines.append(f"  documents          {summary['documents']:,} (train {summary['train_documents']:,}, "
                 f"valid {summary['valid_documents']:,})")
    lines.append(f"  shards             {summary['shards']} ({summary['shard_bytes'] / 1e6:.1f} MB on disk, "
                 f"{summary['text_bytes'] / 1e6:.1f} MB of text)")
    for source, c in (summary.get("semantic_coverage") or {}).items():
        if c["database"] == "none":
            lines.append(f"  libclang {source:<11} no compile database ({c.get('database_reason', '')}): "
                         f"{c['files_fallen_back_to_tree_sitter']} files to tree-sitter")
            continue
        lines.append(f"  libclang {source:<11} {c['database']} database: {c['files_matched_to_compile_command']}/"
                     f"{c['source_files']} sources matched, {c['tus_clean']}/{c['tus']} TUs clean, "
                     f"{c['tus_with_errors']} with errors, {c['files_fallen_back_to_tree_sitter']} files to tree-sitter")
        lines.append(f"    from {c.get('database_reason', c['database'])}")
    for split, t in (summary.get("packing") or {}).items():
        lines.append(f"  packed {split:<11} {t['rows']:,} rows of {summary['packed_seq_length']}: "
                     f"{t['slot_utilization']:.1%} of slots used, {t['docs_per_row']:.2f} docs/row, "
                     f"{t['cropped_token_share']:.1%} of tokens in split documents, {t['fim_documents']:,} FIM")
    if summary.get("tokenizer_sha256"):
        bpt = summary["text_bytes"] / summary["tokens"] if summary.get("tokens") else 0
        lines.append(f"  tokens             {summary['tokens']:,} ({bpt:.2f} bytes/token; tokenizer "
                     f"{summary['tokenizer_vocab_size']:,} ids ({summary['tokenizer_learned_ids']:,} learned, "
                     f"{summary['tokenizer_padding_ids']:,} padding), sha256 {summary['tokenizer_sha256'][:12]})")
    tp = summary["throughput_mb_s"]
    lines.append(f"  time               {summary['wall_seconds']:.1f}s this run; stages {summary['stage_seconds']:.1f}s"
                 + (f", {tp} MB/s of C/C++ collected" if tp else ""))
    if build_dir:
        lines.append(f"  build              {build_dir}{'' if new else '  (unchanged: nothing to do)'}")
    return "\n".join(lines)


def _publish_file(src: Path, dst: Path) -> None:
    """A published data file: a copy out of the cache (pipeline/cache.py says why), read-only, since a build is
    immutable."""
    copy_file(src, dst)
    dst.chmod(dst.stat().st_mode & ~0o222)


# a published export file's split: cpp_train.bin, cpp_packed_valid.idx, train-00000.parquet, and a training
# weight group's cpp_train_w3.bin / train_w3-00000.parquet
_SPLIT_OF_FILE = re.compile(r"(?:^|_)(train|valid)(?:_w[0-9a-z-]+)?(?:-\d+)?\.(?:bin|idx|parquet)$")
_EXPORT_KINDS = {("megatron", ".bin"): "megatron_bin", ("megatron", ".idx"): "megatron_idx",
                 ("packed", ".parquet"): "packed", ("packed", ".bin"): "packed_bin", ("packed", ".idx"): "packed_idx"}


def _publish_exports(runner: Runner, partial: Path) -> list[dict]:
    """Publish the Megatron export, the packed rows and launch.json (at the build root: its paths are relative
    to it, so a moved or copied build still works)."""
    files = []
    for stage, sub in (("megatron_export", "megatron"), ("packed_rows", "packed"), ("launch_spec", "")):
        if not runner.artifacts(stage):
            continue
        src = runner.artifacts(stage)[0].path / sub
        for f in sorted(src.iterdir()):
            if f.is_dir() or f.name in ("stage.json", "_COMPLETE"):
                continue
            rel = f"{sub}/{f.name}" if sub else f.name
            _publish_file(f, partial / rel)
            m = _SPLIT_OF_FILE.search(f.name)
            split = m.group(1) if m else None
            kind = _EXPORT_KINDS.get((sub, f.suffix)) or ("launch_spec" if f.name == "launch.json" else f"{sub}_meta")
            files.append({"path": rel, "kind": kind, "split": split, "rows": None,
                          "bytes": (partial / rel).stat().st_size, "sha256": sha256_file(partial / rel)})
    return files


def _damaged(build: Path) -> str | None:
    """None when every file of a published build matches its manifest; else the first problem."""
    from cpp_data.schemas.reader import ShardError
    from cpp_data.schemas.validate import validate_build

    try:
        validate_build(build)
    except (ShardError, OSError, ValueError) as exc:
        return str(exc).splitlines()[0]
    return None


def publish(runner: Runner, recipe: Recipe, sources: list[LockedSource], summary: dict,
            log=print) -> tuple[Path, bool]:
    out, fp = runner.out, runner.build_fingerprint()
    existing = find_build(out, recipe.version, fp)
    if existing and runner.force:  # --force also checks the published copy, and replaces it when damaged
        problem = _damaged(existing)
        if problem:
            aside = existing.with_name(f".damaged-{existing.name}-{int(time.time())}")
            existing.rename(aside)
            log(f"build {existing.name} is damaged ({problem}); published again (the damaged copy is {aside})")
            existing = None
    if existing:
        return existing, False
    name = f"{recipe.version}-{datetime.now(timezone.utc):%Y%m%d}-{fp[:8]}"
    final = out / "builds" / name
    partial = final.with_name(name + ".partial")
    if partial.exists():
        import shutil

        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    # the last stage that writes shards is the one published (token_columns adds token ids to shards')
    shards_art = (runner.artifacts("token_columns") or runner.artifacts("context_graph")
                  or runner.artifacts("dependency_documents") or runner.artifacts("shards"))[0]
    shard_files = json.loads((shards_art.path / "shards.json").read_text())["files"]
    files = []
    for entry in shard_files:
        _publish_file(shards_art.path / entry["path"], partial / entry["path"])
        files.append(entry)
    tokenizer = None
    if runner.artifacts("tokenizer"):
        tok_art = runner.artifacts("tokenizer")[0]
        for f in sorted((tok_art.path / "tokenizer").iterdir()):
            rel = f"tokenizer/{f.name}"
            _publish_file(f, partial / rel)
            files.append({"path": rel, "kind": "tokenizer", "split": None, "rows": None,
                          "bytes": f.stat().st_size, "sha256": sha256_file(f)})
        tokenizer = {"path": "tokenizer/tokenizer.json", "sha256": tok_art.counts["sha256"],
                     "vocab_size": tok_art.counts["vocab_size"], "band_revision": tok_art.counts["band_revision"],
                     **{k: tok_art.counts.get(k) for k in ("requested_vocab_size", "learned_ids", "padding_ids")}}
    files += _publish_exports(runner, partial)
    ledger_src = runner.artifacts("ledger")[0].path / "ledger.parquet"
    _publish_file(ledger_src, partial / "provenance" / "ledger.parquet")
    import pyarrow.parquet as pq

    files.append({"path": "provenance/ledger.parquet", "kind": "ledger", "split": None,
                  "rows": pq.read_metadata(ledger_src).num_rows, "bytes": ledger_src.stat().st_size,
                  "sha256": sha256_file(ledger_src)})
    retrieved = {a.source: a.counts.get("retrieved_at") for a in runner.artifacts("collect")}
    manifest = {
        "format": FORMAT,
        "build": name,
        "build_fingerprint": fp,
        "schema_generation": recipe.schema_generation,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpp_data_version": __version__,
        "recipe": recipe.to_json(),
        "sources": [{**asdict(s), "retrieved_at": retrieved.get(s.name)} for s in sources],
        "stages": runner.stage_records(),
        "tokenizer": tokenizer,
        "seq_length": runner.artifacts("launch_spec")[0].counts["seq_length"] if runner.artifacts("launch_spec")
        else None,
        "semantic_coverage": summary.get("semantic_coverage", {}),
        "files": files,
        "totals": {k: summary[k] for k in ("documents", "train_documents", "valid_documents", "text_bytes",
                                           "tokens")},
    }
    atomic_write_json(partial / "manifest.json", manifest)
    atomic_write_json(partial / "reports" / "summary.json", summary)
    seal(partial, final)
    return final, True


def run_build(out: Path, recipe: Recipe, sources: list[LockedSource], executor: ExecutorConfig,
              only: str | None = None, from_stage: str | None = None, force: bool = False,
              wait: bool = False, log=print) -> BuildResult:
    out = Path(out)
    t0 = time.monotonic()
    with OutputLock(out, wait=wait):
        write_lock(out / "sources.lock", sources)
        runner = Runner(out, recipe, sources, executor, only=only, from_stage=from_stage, force=force)
        runner.run(log=log)
        if not runner.all_sealed():
            return BuildResult(None, False, {})
        summary = summarize(runner, time.monotonic() - t0)
        build_dir, new = publish(runner, recipe, sources, summary, log=log)
        atomic_write_text(out / "builds" / "LATEST", build_dir.name + "\n")
    return BuildResult(build_dir, new, summary)
