"""The tokenizer stage's training, run in a Python process of its own (docs/DESIGN.md section 8).

Why a process: the trainer's memory is the sample's (bench/results/tokenizer_memory.md), and in the build's
driver it would come on top of everything the driver imports (pyarrow, datatrove, every stage), making the
tokenizer stage the build's largest process. This process imports only pyarrow, tokenizers and the modules
below, reads the shards itself, trains, writes the tokenizer directory and sample.parquet, and reports what it
did in a JSON file; the stage checks the result. The same shards and job give the same bytes as training in the
driver would.

    python -m cpp_data.stages.lib.tokenizer_training JOB.json      (the stage writes JOB.json; not a user command)
"""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.tokenizer import sample


def iter_documents(files: list[Path], columns: list[str]) -> Iterator[dict]:
    from cpp_data.schemas.reader import iter_shard

    for f in files:
        for t in iter_shard(f, None, columns):
            yield from t.to_pylist()


def training_texts(files: list[Path], heldout_fraction: float, fraction: float = 1.0, seed: int = 0,
                   taken: list | None = None) -> Iterator[str]:
    """Texts of the training documents the tokenizer learns from: not held out, and in the sample (`fraction`
    of the hash space); the doc_id and size of each one yielded go to `taken`."""
    cols = ["text", "doc_id", "source_repo", "source_path", "source_commit", "size_bytes"]
    for row in iter_documents(files, cols):
        if sample.tokenizer_heldout(row["source_repo"], row["source_path"], heldout_fraction):
            continue
        if sample.tokenizer_sampled(seed, row["source_repo"], row["source_path"], row["source_commit"], fraction):
            if taken is not None:
                taken.append((row["doc_id"], row["size_bytes"]))
            yield row["text"]


def candidate_bytes(files: list[Path], heldout_fraction: float) -> tuple[int, int]:
    """(documents, bytes of text) the tokenizer could train on: the training split less its held-out files,
    from two small columns."""
    from cpp_data.schemas.reader import iter_shard

    n = total = 0
    for t in (t for f in files for t in iter_shard(f, None, ["source_repo", "source_path", "size_bytes"])):
        for repo, path, size in zip(*(t.column(c).to_pylist() for c in t.column_names)):
            if not sample.tokenizer_heldout(repo, path, heldout_fraction):
                n, total = n + 1, total + size
    return n, total


def run_job(job: dict) -> dict:
    """Train on the job's shards and write job["out"]/tokenizer/ and job["out"]/sample.parquet; returns the
    sample's record and the training documents seen. Job keys: files, heldout_fraction, sample_bytes,
    sample_seed, band_file, vocab_size, min_frequency, cap_to_corpus, show_progress, out; and threads, which
    main() applies before training (tokenizers' threads, pipeline/foundation/threads.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cpp_data.tokenizer.band import load_band
    from cpp_data.tokenizer.files import save_tokenizer
    from cpp_data.tokenizer.train import train_cpp_tokenizer

    files = [Path(f) for f in job["files"]]
    out = Path(job["out"])
    band = load_band(Path(job["band_file"]) if job["band_file"] else None)
    seen = sum(pq.read_metadata(f).num_rows for f in files)
    candidates, total = candidate_bytes(files, job["heldout_fraction"])
    fraction = 1.0 if total <= job["sample_bytes"] else job["sample_bytes"] / total
    taken: list[tuple[str, int]] = []
    texts = training_texts(files, job["heldout_fraction"], fraction, job["sample_seed"], taken)
    tok = train_cpp_tokenizer(texts, band, job["vocab_size"], length=round(candidates * fraction),
                              min_frequency=job["min_frequency"], show_progress=job["show_progress"],
                              cap_to_corpus=job["cap_to_corpus"])
    pq.write_table(pa.table({"doc_id": pa.array([d for d, _ in taken], pa.string())}), out / "sample.parquet",
                   compression="zstd")
    save_tokenizer(tok, band, out / "tokenizer")
    return {"train_documents_seen": seen, "vocab_size": tok.get_vocab_size(),
            "training_sample": {"fraction": round(fraction, 6), "seed": job["sample_seed"],
                                "budget_bytes": job["sample_bytes"], "documents": len(taken),
                                "bytes": sum(b for _, b in taken), "of_documents": candidates, "of_bytes": total}}


def train_in_own_process(job: dict, scratch: Path) -> dict:
    """run_job in a fresh `python -m cpp_data.stages.lib.tokenizer_training` (dying with the thread that
    starts it, main() says how); its result, or its exception raised here (as the same builtin type, else
    RuntimeError naming it; RuntimeError when it died without saying why). No preexec_fn: the runner calls
    this from a thread of its own (Stage.runs_beside), and a preexec_fn is not safe in a process with threads."""
    scratch.mkdir(parents=True, exist_ok=True)
    job_path, result_path = scratch / "job.json", scratch / "result.json"
    job_path.write_text(json.dumps({**job, "parent_pid": os.getpid()}))
    result_path.unlink(missing_ok=True)
    # A session of its own: Ctrl-C, which the terminal sends to the build's whole process group, stays the
    # build's to handle (this process would print a KeyboardInterrupt traceback from wherever it was); it still
    # dies with the build's thread (main: PR_SET_PDEATHSIG)
    # Its stderr is kept (but for a progress bar the user asked for) and only its last line shown: the stage's
    # error is one line, not the child's output ahead of it
    proc = subprocess.run([sys.executable, "-m", "cpp_data.stages.lib.tokenizer_training", str(job_path)],
                          stdout=subprocess.DEVNULL, stderr=None if job.get("show_progress") else subprocess.PIPE,
                          text=True, start_new_session=True)
    result = json.loads(result_path.read_text()) if result_path.is_file() else None
    if result is None:
        said = [line for line in (proc.stderr or "").splitlines() if line.strip()]
        raise RuntimeError(f"the tokenizer training process exited {proc.returncode} without a result: "
                           + (said[-1].strip() if said else "killed? out of memory?"))
    if "error" in result:  # the child's exception again, by its builtin type where it has one
        kind = getattr(builtins, result.get("kind", ""), None)
        if isinstance(kind, type) and issubclass(kind, Exception):
            raise kind(result["error"])
        raise RuntimeError(f"{result.get('kind')}: {result['error']}")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job_path = Path(argv[0])
    result_path = job_path.with_name("result.json")
    from cpp_data.pipeline.foundation.lifetime import die_with_parent

    job = json.loads(job_path.read_text())
    die_with_parent()  # killed when the thread that started this process ends (PR_SET_PDEATHSIG) ...
    if job.get("parent_pid") not in (None, os.getppid()):  # ... or already gone, before that took hold
        return 1
    try:
        from cpp_data.pipeline.foundation.allocator import use_system_allocator
        from cpp_data.pipeline.foundation.threads import limit_tokenizer_threads

        use_system_allocator()  # inherited from the build already; set again for a process started otherwise
        if job.get("threads"):  # the cores left beside structure's tasks, before the trainer starts its pool
            limit_tokenizer_threads(job["threads"])
        result = run_job(job)
    except Exception as exc:  # one line for the stage to raise; the traceback would be the trainer's internals
        result = {"error": str(exc), "kind": type(exc).__name__}
    try:
        atomic_write_json(result_path, result, durable=False)  # scratch: read once, by the stage that waits
    except OSError as exc:  # the stage reports the last line of what this process printed
        print(f"cannot write {result_path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
