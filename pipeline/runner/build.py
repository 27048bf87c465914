"""A whole build: lock the output directory, run the DAG, publish a sealed snapshot, print the summary.

Snapshot: builds/<version>-<YYYYMMDD>-<fp8>/ where fp8 starts the build fingerprint (the hash of every stage
instance's fingerprint). Shards, the ledger and the exports are copies out of the sealed cache (never links:
pipeline/runner/cache.py says why), read-only;
reports/summary.json and manifest.json (which holds the summary's SHA-256) are written, then `_COMPLETE`, then the
directory is renamed into place.
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

from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.source import LockedSource
from cpp_data.pipeline.contract.stage import Stage
from cpp_data.pipeline.foundation.errors import BadInput, CheckFailed
from cpp_data.pipeline.foundation.fsutil import atomic_write_json, atomic_write_text, is_sealed, seal
from cpp_data.pipeline.foundation.terminal_text import printable
from cpp_data.pipeline.foundation.version import __version__
from cpp_data.pipeline.runner.cache import copy_file
from cpp_data.pipeline.runner.dag import Runner, RunReport
from cpp_data.pipeline.runner.outlock import OutputLock
from cpp_data.pipeline.runner.recipe import Recipe
from cpp_data.pipeline.runner.sources import write_lock
from cpp_data.schemas.dataset_card import dataset_card, refresh_output_card
from cpp_data.schemas.generations import SCHEMA_REVISION
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


# The build summary's fields and their defaults, in the order summary.json lists them. Stages fill them from
# their counts as they declare (Stage.summary_counts); build.py names no stage.
SUMMARY_FIELDS: dict[str, Any] = {
    "files_seen": 0, "cpp_files_collected": 0, "cpp_bytes_collected": 0, "decisions": {}, "refused_by_rule": {},
    "exact_duplicates": 0, "exact_duplicate_bytes": 0, "largest_duplicate_clusters": [],
    "near_duplicates": 0, "near_duplicate_bytes": 0, "near_duplicate_clusters": 0,
    "largest_near_duplicate_clusters": [], "documents": 0, "train_documents": 0, "valid_documents": 0,
    "shards": 0, "shard_bytes": 0, "text_bytes": 0, "moved_to_valid": None, "tokens": 0,
    "tokenizer_vocab_size": None, "tokenizer_learned_ids": None, "tokenizer_padding_ids": None,
    "tokenizer_sha256": None, "tokenizer_requested_vocab_size": None, "semantic_coverage": {},
    "lanes": {}, "packing": {}, "seq_length": None, "phases": [], "skipped": {}, "retrieved_at": {},
    "files_seen_by_source": {}, "documents_after_filters": {}, "opt_out_matches": {},
}


def recipe_stages(runner: Runner) -> list[tuple[type[Stage], list]]:
    """(stage class, its artifacts) for every stage of the build, in recipe order."""
    classes: dict[str, type[Stage]] = {}
    for task in runner.tasks:
        classes.setdefault(task.name, type(task.stage))
    return [(cls, runner.artifacts(name)) for name, cls in classes.items()]


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _add(a.get(k), b.get(k)) if k in a and k in b else (b[k] if k in b else a[k])
                for k in sorted({*a, *b})}
    return (a or 0) + (b or 0) if isinstance(a, (int, float)) or isinstance(b, (int, float)) else b


def _summary_value(cls: type[Stage], artifacts: list, key: str) -> Any:
    if key.startswith("per_source:"):
        want = key.split(":", 1)[1]
        return {a.source: (a.counts if want == "*" else a.counts.get(want)) for a in artifacts}
    if cls.scope == "source":
        total = None
        for a in artifacts:
            total = _add(total, a.counts.get(key)) if total is not None else a.counts.get(key)
        return total
    return artifacts[0].counts.get(key) if artifacts else None


def summarize(runner: Runner, seconds: float, report: RunReport | None = None) -> dict[str, Any]:
    """Files seen, kept, refused by rule, duplicates, shards, bytes, time and throughput: each field from the
    latest stage in recipe order that declares it (Stage.summary_counts). Throughput is C/C++ collected over
    the runner's wall time when this run ran every stage (`report` says), else over the stages' recorded
    seconds added up, which overstates a build whose tokenizer ran beside structure (Stage.runs_beside)."""
    summary: dict[str, Any] = {"sources": len(runner.sources), **SUMMARY_FIELDS}
    for cls, artifacts in recipe_stages(runner):
        for field_name, key in cls.summary_counts.items():
            value = _summary_value(cls, artifacts, key)
            summary[field_name] = SUMMARY_FIELDS.get(field_name) if value is None else value
    stage_seconds = sum(r.get("seconds") or 0 for r in runner.stage_records())
    from cpp_data.pipeline.runner.executors.task_setup import TASKS_PER_NODE

    spent = report.seconds if report is not None and report.ran and not report.cached else stage_seconds
    summary.update({
        "tasks_per_node": dict(sorted(TASKS_PER_NODE.items())),  # this run's executor tasks (cached stages ran none)
        "wall_seconds": round(seconds, 2),
        "stage_seconds": round(stage_seconds, 2),
        "throughput_mb_s": round(summary["cpp_bytes_collected"] / 1e6 / spent, 2) if spent else None,
    })
    summary["warnings"] = _warnings(summary)
    return summary


def _warnings(s: dict[str, Any]) -> list[str]:
    """What a user should know before training on this build."""
    out = []
    for reason, what in (("unreadable", "could not be read (permissions?)"),
                         ("undecodable_path", "have names that are not UTF-8")):
        n = (s.get("skipped") or {}).get(reason, 0)
        if n:
            out.append(f"{n} file(s) or directories {what}: skipped, each with a ledger row (reason {reason})")
    for rule, n in sorted((s.get("opt_out_matches") or {}).items()):
        if n == 0:
            out.append(f"opt-out rule {printable(rule)} matched no file of any source; check its spelling")
    for name, kept in sorted((s.get("documents_after_filters") or {}).items()):
        seen = (s.get("files_seen_by_source") or {}).get(name)
        if kept == 0 and seen:  # say so: a source left empty (GSL's extensionless headers, say) is easy to miss
            out.append(f"source {printable(name)}: none of its {seen:,} file(s) passed collect, the license policy "
                       f"and the filters; provenance/ledger.parquet gives each one's reason")
    valid = s["valid_documents"]
    if s["documents"] and valid < 10:
        out.append(f"only {valid} validation document(s); validation loss will be noisy (a larger corpus or a "
                   f"larger shards.valid_fraction gives more)")
    if s.get("moved_to_valid"):
        out.append(f"the hash split chose no validation document; {printable(s['moved_to_valid'])} was moved to it")
    padding, learned, vocab = s["tokenizer_padding_ids"], s["tokenizer_learned_ids"], s["tokenizer_vocab_size"]
    if (padding or 0) >= 128:  # under 128: the rounding of cap_vocab_to_corpus
        out.append(f"the tokenizer learned {learned:,} of {vocab:,} ids; "
                   f"{padding:,} are padding (tokenizer.cap_vocab_to_corpus = true avoids them)")
    elif s["tokenizer_requested_vocab_size"] and vocab < s["tokenizer_requested_vocab_size"]:
        out.append(f"the corpus filled {learned:,} ids, so the vocabulary is {vocab:,}, "
                   f"not the recipe's {s['tokenizer_requested_vocab_size']:,}")
    return out


def format_summary(summary: dict[str, Any], build_dir: Path | None, new: bool) -> str:
    lines = ["", "build summary", "-------------"]
    lines.append(f"  sources            {summary['sources']}")
    lines.append(f"  files seen         {summary['files_seen']:,}")
    d = summary["decisions"]
    lines.append(f"  kept               {d.get('kept', 0):,}")
    for rule, n in sorted(summary["refused_by_rule"].items(), key=lambda x: (-x[1], x[0])):
        lines.append(f"    {rule:<36} {n:,}")
    lines.append(f"  exact duplicates   {summary['exact_duplicates']:,} "
                 f"({summary['exact_duplicate_bytes'] / 1e6:.1f} MB)")
    lines.append(f"  near duplicates    {summary['near_duplicates']:,} "
                 f"({summary['near_duplicate_bytes'] / 1e6:.1f} MB) "
                 f"in {summary['near_duplicate_clusters']:,} clusters")
    for c in summary["largest_near_duplicate_clusters"][:3]:
        lines.append(f"    cluster of {c['size']:<4} kept {printable(c['keeper'])}")
    lines.append(f"  documents          {summary['documents']:,} (train {summary['train_documents']:,}, "
                 f"valid {summary['valid_documents']:,})")
    lines.append(f"  shards             {summary['shards']} ({summary['shard_bytes'] / 1e6:.1f} MB on disk, "
                 f"{summary['text_bytes'] / 1e6:.1f} MB of text)")
    lines += _semantics_lines(summary)
    lines += _lane_lines(summary)
    if summary.get("tokenizer_sha256"):
        bpt = summary["text_bytes"] / summary["tokens"] if summary.get("tokens") else 0
        lines.append(f"  tokens             {summary['tokens']:,} ({bpt:.2f} bytes/token; tokenizer "
                     f"{summary['tokenizer_vocab_size']:,} ids ({summary['tokenizer_learned_ids']:,} learned, "
                     f"{summary['tokenizer_padding_ids']:,} padding), sha256 {summary['tokenizer_sha256'][:12]})")
    nodes = summary.get("tasks_per_node") or {}
    if len(nodes) > 1 or any(n.startswith("ray:") for n in nodes):
        lines.append("  tasks per node     " + ", ".join(f"{node} {n:,}" for node, n in nodes.items()))
    tp = summary["throughput_mb_s"]
    lines.append(f"  time               {summary['wall_seconds']:.1f}s this run; stages {summary['stage_seconds']:.1f}s"
                 + (f", {tp} MB/s of C/C++ collected" if tp else ""))
    if build_dir:
        lines.append(f"  build              {build_dir}{'' if new else '  (unchanged: nothing to do)'}")
    return "\n".join(lines)


def _semantics_lines(summary: dict[str, Any]) -> list[str]:
    """Per source: where its compile commands came from, its TUs (clean, with errors, timeouts; per database
    when there are several), reused and parsed, the parse seconds and TUs per second per worker (TUs over the
    seconds their workers spent on them); then libclang's share of the stages' time."""
    lines = []
    coverage = summary.get("semantic_coverage") or {}
    for source, c in coverage.items():
        if not c.get("tus"):
            lines.append(f"  libclang {source:<11} no compile commands ({c.get('database_reason', '')}): "
                         f"{c['files_fallen_back_to_tree_sitter']} files to tree-sitter")
            continue
        lines.append(f"  libclang {source:<11} {c['database']} database: {c['files_matched_to_compile_command']}/"
                     f"{c['source_files']} sources matched, {c['tus_clean']}/{c['tus']} TUs clean, "
                     f"{c['tus_with_errors']} with errors, {c.get('tus_timeouts', 0)} timeouts, "
                     f"{c['files_fallen_back_to_tree_sitter']} files to tree-sitter")
        kinds = c.get("tus_by_database") or {}
        if len(kinds) > 1:
            lines.append("    TUs by database: " + ", ".join(f"{k} {v['clean']}/{v['tus']} clean"
                                                            for k, v in kinds.items()))
        parsed, seconds = c.get("tus_parsed", c["tus"]), c.get("tu_seconds", 0.0)
        rate = f", {parsed / seconds:.2f} TUs/s per worker" if parsed and seconds else ""
        skipped = f", {c['tus_skipped']} skipped (skip_globs)" if c.get("tus_skipped") else ""
        if c.get("tus_not_kept") or c.get("tus_for_kept_headers"):
            skipped += (f", {c.get('tus_not_kept', 0)} not parsed (main file refused), "
                        f"{c.get('tus_for_kept_headers', 0)} refused parsed for kept headers")
        lines.append(f"    TUs reused {c.get('tus_reused', 0)}, parsed {parsed} in {seconds:.1f}s{rate}{skipped}; "
                     f"configure {c.get('configure_seconds', 0.0):.1f}s, stage {c.get('semantics_seconds', 0.0):.1f}s")
        lines.append(f"    from {c.get('database_reason', c['database'])}")
    spent = sum(c.get("semantics_seconds", 0.0) for c in coverage.values())
    if coverage and summary.get("stage_seconds"):
        lines.append(f"  libclang share     {spent / summary['stage_seconds']:.0%} of the stages' time "
                     f"({spent:.1f}s of {summary['stage_seconds']:.1f}s)")
    return lines


def _lane_lines(summary: dict[str, Any]) -> list[str]:
    """Per lane: its documents and tokens, and its packed training rows."""
    from cpp_data.schemas.lanes import ordered

    lines = []
    lanes = summary.get("lanes") or {}
    for lane, rec in ((k, lanes[k]) for k in ordered(list(lanes))):
        train = rec["splits"]["train"]
        lines.append(f"  lane {lane:<13} {rec['kind']} of <= {rec['budget']:,} tokens: {train['rows']:,} training "
                     f"documents, {train['tokens']:,} tokens")
        t = (summary.get("packing") or {}).get(lane, {}).get("train")
        if t:
            lines.append(f"    packed           {t['rows']:,} rows of {rec['seq_length']:,}: "
                         f"{t['slot_utilization']:.1%} of slots used, {t['docs_per_row']:.2f} docs/row, "
                         f"{t['cropped_token_share']:.1%} of tokens in split documents")
    return lines


def _read_only(path: Path) -> None:
    """Take away every write bit: each file of a published build is read-only, since a build is immutable."""
    path.chmod(path.stat().st_mode & ~0o222)


def _publish_file(src: Path, dst: Path) -> None:
    """A published data file: a copy out of the cache (pipeline/runner/cache.py says why), read-only."""
    copy_file(src, dst)
    _read_only(dst)


# a published export file's split: cpp_train.bin, cpp_packed_valid.idx, train-00000.parquet, a training weight
# group's cpp_train_w3.bin / train_w3-00000.parquet, and a FIM epoch's cpp_packed_train_e1.bin
_SPLIT_OF_FILE = re.compile(r"(?:^|_)(train|valid)(?:_w[0-9a-z-]+)?(?:_e\d+)?(?:-\d+)?\.(?:bin|idx|parquet)$")
_EXPORT_KINDS = {("megatron", ".bin"): "megatron_bin", ("megatron", ".idx"): "megatron_idx",
                 ("packed", ".parquet"): "packed", ("packed", ".bin"): "packed_bin", ("packed", ".idx"): "packed_idx",
                 ("lanes", ".parquet"): "lane_shard"}


def _export_files(src: Path) -> list[Path]:
    """The files of an export directory, its lane folders' included, in path order; scratch (`_work`) and the
    stage's own records are no part of it."""
    out = []
    for f in sorted(src.iterdir()):
        if f.name.startswith("_") or f.name in ("stage.json", "_COMPLETE"):
            continue
        out += _export_files(f) if f.is_dir() else [f]
    return out


def _publish_export(artifact, sub: str, partial: Path) -> list[dict]:
    """Copy an export directory of a stage's artifact (or, for ".", the files at its root: launch.json, whose
    paths are relative to it, so a moved or copied build still works) into the build."""
    files = []
    src = artifact.path if sub == "." else artifact.path / sub
    for f in (sorted(x for x in src.iterdir() if x.is_file() and x.name not in ("stage.json", "_COMPLETE"))
              if sub == "." else _export_files(src)):
        rel = f.name if sub == "." else f"{sub}/{f.relative_to(src).as_posix()}"
        (partial / rel).parent.mkdir(parents=True, exist_ok=True)
        _publish_file(f, partial / rel)
        m = _SPLIT_OF_FILE.search(f.name)
        split = m.group(1) if m else None
        kind = _EXPORT_KINDS.get((sub, f.suffix)) or ("launch_spec" if f.name == "launch.json" else f"{sub}_meta")
        files.append({"path": rel, "kind": kind, "split": split, "rows": None,
                      "bytes": (partial / rel).stat().st_size, "sha256": sha256_file(partial / rel)})
    return files


def _publish_tokenizer(artifact, partial: Path) -> tuple[list[dict], dict]:
    files = []
    for f in sorted((artifact.path / "tokenizer").iterdir()):
        rel = f"tokenizer/{f.name}"
        _publish_file(f, partial / rel)
        files.append({"path": rel, "kind": "tokenizer", "split": None, "rows": None,
                      "bytes": f.stat().st_size, "sha256": sha256_file(f)})
    c = artifact.counts
    record = {"path": "tokenizer/tokenizer.json", "sha256": c["sha256"], "vocab_size": c["vocab_size"],
              "band_revision": c["band_revision"],
              **{k: c.get(k) for k in ("requested_vocab_size", "learned_ids", "padding_ids")},
              **({"frozen_from": c["frozen_from"]} if c.get("frozen_from") else {}),
              **({"training_sample": c["training_sample"]} if c.get("training_sample") else {})}
    return files, record


def _publish_ledger(artifact, partial: Path) -> list[dict]:
    import pyarrow.parquet as pq

    src = artifact.path / "ledger.parquet"
    _publish_file(src, partial / "provenance" / "ledger.parquet")
    return [{"path": "provenance/ledger.parquet", "kind": "ledger", "split": None,
             "rows": pq.read_metadata(src).num_rows, "bytes": src.stat().st_size, "sha256": sha256_file(src)}]


def build_damage(build: Path) -> str | None:
    """None when every file of a published build matches its manifest; else the first problem."""
    from cpp_data.schemas.reader import ShardError
    from cpp_data.schemas.validate import validate_build

    try:
        validate_build(build)
    except (ShardError, OSError, ValueError) as exc:
        return str(exc).splitlines()[0]
    return None


def _check_shards(artifact, partial: Path, files: list[dict]) -> None:
    """Each published shard against the SHA-256 its stage recorded when it wrote it (shards.json), before the
    build is sealed. The cache's own check (pipeline/runner/cache.py) cannot see a file rewritten together with its
    checksum record in stage.json; this record is another. On a mismatch the cache entry is set aside (the next
    build runs that stage again) and nothing is published."""
    for entry in files:
        if sha256_file(partial / entry["path"]) != entry["sha256"]:
            aside = artifact.path.with_name(f"{artifact.path.name}.old-damaged-{int(time.time())}")
            artifact.path.rename(aside)
            raise CheckFailed(f"{artifact.path / entry['path']}: does not match the SHA-256 its stage recorded in "
                              f"shards.json (changed in the cache after it was sealed); nothing was published and "
                              f"the entry was set aside: run the build again to rebuild it")


def publish(runner: Runner, recipe: Recipe, sources: list[LockedSource], summary: dict,
            log=print) -> tuple[Path, bool]:
    out, fp = runner.out, runner.build_fingerprint()
    existing = find_build(out, recipe.version, fp)
    if existing:  # checked before it counts as done: a damaged copy is set aside and published again
        problem = build_damage(existing)
        if problem is None:
            return existing, False
        aside = existing.with_name(f".damaged-{existing.name}-{int(time.time())}")
        existing.rename(aside)
        log(f"build {existing.name} is damaged ({problem}); published again (the damaged copy is {aside})")
    name = f"{recipe.version}-{datetime.now(timezone.utc):%Y%m%d}-{fp[:8]}"
    final = out / "builds" / name
    partial = final.with_name(name + ".partial")
    if partial.exists():
        import shutil

        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    stages = recipe_stages(runner)
    # the latest stage that writes shards is the one published (token_columns adds token ids to shards')
    shards_art = [arts[0] for cls, arts in stages if "shards" in cls.publishes][-1]
    files = []
    for entry in json.loads((shards_art.path / "shards.json").read_text())["files"]:
        _publish_file(shards_art.path / entry["path"], partial / entry["path"])
        files.append(entry)
    _check_shards(shards_art, partial, files)
    tokenizer, ledger = None, []
    for cls, arts in stages:
        for what in cls.publishes:
            if what == "tokenizer":
                tok_files, tokenizer = _publish_tokenizer(arts[0], partial)
                files += tok_files
            elif what == "ledger":
                ledger = _publish_ledger(arts[0], partial)  # the provenance goes last
            elif what != "shards":
                files += _publish_export(arts[0], what, partial)
    files += ledger
    retrieved = summary.get("retrieved_at") or {}
    manifest = {
        "format": FORMAT,
        "build": name,
        "build_fingerprint": fp,
        "schema_generation": recipe.schema_generation,
        "schema_revision": SCHEMA_REVISION,  # the column names' revision (schemas/generations.py)
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpp_data_version": __version__,
        "recipe": recipe.to_json(),
        "sources": [{**asdict(s), "retrieved_at": retrieved.get(s.name)} for s in sources],
        "stages": runner.stage_records(),
        "tokenizer": tokenizer,
        "seq_length": summary.get("seq_length"),
        "semantic_coverage": summary.get("semantic_coverage", {}),
        "files": files,
        "totals": {k: summary[k] for k in ("documents", "train_documents", "valid_documents", "text_bytes",
                                           "tokens")},
    }
    # the dataset card: how datasets.load_dataset(BUILD) finds the documents and the packed rows
    card = partial / "README.md"
    atomic_write_text(card, dataset_card(partial, manifest, summary))
    _read_only(card)
    files.append({"path": "README.md", "kind": "card", "split": None, "rows": None, "bytes": card.stat().st_size,
                  "sha256": sha256_file(card)})
    # the summary holds this run's timings, so it is no file of the build's bytes; its digest in the manifest
    # still lets validate tell a damaged or replaced one (garbage there would otherwise pass validate and verify)
    atomic_write_json(partial / "reports" / "summary.json", summary)
    manifest["summary_sha256"] = sha256_file(partial / "reports" / "summary.json")
    atomic_write_json(partial / "manifest.json", manifest)
    _read_only(partial / "reports" / "summary.json")
    _read_only(partial / "manifest.json")
    runner.guard()
    seal(partial, final)
    _read_only(final / "_COMPLETE")
    return final, True


def refuse_empty(summary: dict[str, Any]) -> None:
    """BadInput when the corpus gave no document (no file, or every file skipped, refused or a duplicate): a
    build of nothing is never published, so builds/LATEST keeps naming the last build that has data."""
    if summary["documents"]:
        return
    why = sorted({**summary.get("skipped", {}), **summary["refused_by_rule"]}.items(), key=lambda x: (-x[1], x[0]))
    reasons = ", ".join(f"{rule} {n:,}" for rule, n in why[:3]) + (", ..." if len(why) > 3 else "")
    raise BadInput(f"{summary['files_seen']:,} file(s) seen and no document kept"
                   + (f" ({reasons})" if reasons else "") + "; nothing is published and builds/LATEST is unchanged "
                   "(check each source's url, and its license where files are refused as no_license)")


def run_build(out: Path, recipe: Recipe, sources: list[LockedSource], executor: ExecutorConfig,
              only: str | None = None, from_stage: str | None = None, force: bool = False,
              wait: bool = False, log=None) -> BuildResult:
    """Lock OUT, run the stages, publish the build; `log` hears of every stage (pipeline/runner/buildlog.py)."""
    from cpp_data.pipeline.foundation.allocator import use_system_allocator
    from cpp_data.pipeline.runner.dag import print_log

    use_system_allocator()
    log = log or print_log
    out = Path(out)
    t0 = time.monotonic()
    with OutputLock(out, wait=wait) as lock:
        write_lock(out / "sources.lock", sources)
        runner = Runner(out, recipe, sources, executor, only=only, from_stage=from_stage, force=force,
                        guard=lock.check)
        report = runner.run(log=log)
        if not runner.all_sealed():
            return BuildResult(None, False, {})
        summary = summarize(runner, time.monotonic() - t0, report)
        refuse_empty(summary)
        build_dir, new = publish(runner, recipe, sources, summary, log=log)
        lock.check()
        atomic_write_text(out / "builds" / "LATEST", build_dir.name + "\n")
        refresh_output_card(out)  # load_dataset(OUT) follows LATEST where no build is promoted
    return BuildResult(build_dir, new, summary)
