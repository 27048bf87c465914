"""tokenizer: train the hybrid C++ tokenizer on the build's own training split (docs/DESIGN.md section 8).

Reads the shards stage's training shards one row group at a time, leaves out a hashed `heldout_fraction` of
training files (by repo and path, so the same files on every run) which, with the validation split, form the
held-out set of `cpp-data tokenizer eval`, and writes tokenizer/ (see cpp_data.tokenizer.files).

The trainer counts pre-tokens in memory, which grows with the text it sees, so it trains on a bounded sample:
when the candidate documents hold more than `sample_bytes` of text, each is taken when a hash keyed by
`sample_seed` and its (repo, path, commit) falls under sample_bytes / total (keys.tokenizer_sampled): about
sample_bytes of text, the same documents on every run, chosen without reading them. The sample is recorded:
its fraction, documents and bytes in the stage's counts and the manifest, and the doc_id of every document in
sample.parquet. A corpus under the budget trains on all of it, as before. The same shards and recipe give a byte-identical
tokenizer.json; its SHA-256 goes in the build manifest.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.pipeline.stage import Stage, StageContext
from cpp_data.schemas.manifest import sha256_file
from cpp_data.schemas.reader import iter_shard, shard_files
from cpp_data.stages.lib import keys
from cpp_data.tokenizer.band import load_band
from cpp_data.tokenizer.files import load_tokenizer, save_tokenizer
from cpp_data.tokenizer.train import check_band_pieces, padding_ids, train_cpp_tokenizer


@dataclass(frozen=True)
class TokenizerParams:
    vocab_size: int = 65_536
    cap_vocab_to_corpus: bool = True  # a corpus that cannot fill vocab_size gets what it fills, rounded up to 128
    heldout_fraction: float = 0.05
    min_frequency: int = 2
    band_file: str = ""  # empty: the band shipped with cpp-data (tokenizer/cpp_band.toml)
    # a cpp-data tokenizer to reuse instead of training one: its directory, or a build (or OUT) holding it;
    # `build --tokenizer PATH` sets it. Token ids then stay those of the earlier build (continued training).
    frozen: str = ""
    # text the trainer sees at most (a seeded sample above it): its memory follows its sample, 941 MiB at 128 MB
    # of C++ and 1,337 MiB at 166 MB in a process of its own (bench/results/tokenizer_memory.md), so this keeps
    # the build's process under 2 GB whatever the corpus
    sample_bytes: int = 128_000_000
    sample_seed: int = 42


def iter_documents(files: list[Path], columns: list[str]) -> Iterator[dict]:
    for f in files:
        for t in iter_shard(f, None, columns):
            yield from t.to_pylist()


def training_texts(files: list[Path], heldout_fraction: float, fraction: float = 1.0, seed: int = 0,
                   taken: list | None = None) -> Iterator[str]:
    """Texts of the training documents the tokenizer learns from: not held out, and in the sample (`fraction`
    of the hash space); the doc_id and size of each one yielded go to `taken`."""
    cols = ["text", "doc_id", "source_repo", "source_path", "source_commit", "size_bytes"]
    for row in iter_documents(files, cols):
        if keys.tokenizer_heldout(row["source_repo"], row["source_path"], heldout_fraction):
            continue
        if keys.tokenizer_sampled(seed, row["source_repo"], row["source_path"], row["source_commit"], fraction):
            if taken is not None:
                taken.append((row["doc_id"], row["size_bytes"]))
            yield row["text"]


def candidate_bytes(files: list[Path], heldout_fraction: float) -> tuple[int, int]:
    """(documents, bytes of text) the tokenizer could train on: the training split less its held-out files,
    from two small columns."""
    n = total = 0
    for t in (t for f in files for t in iter_shard(f, None, ["source_repo", "source_path", "size_bytes"])):
        for repo, path, size in zip(*(t.column(c).to_pylist() for c in t.column_names)):
            if not keys.tokenizer_heldout(repo, path, heldout_fraction):
                n, total = n + 1, total + size
    return n, total


class TokenizerStage(Stage):
    name = "tokenizer"
    libraries = ('pyarrow', 'tokenizers')
    version = 2
    scope = "corpus"
    inputs = ("shards",)
    Params = TokenizerParams

    summary_counts = {"tokenizer_vocab_size": "vocab_size", "tokenizer_learned_ids": "learned_ids",
                      "tokenizer_padding_ids": "padding_ids", "tokenizer_sha256": "sha256",
                      "tokenizer_requested_vocab_size": "requested_vocab_size"}
    publishes = ("tokenizer",)

    def settings(self, source, sources) -> dict | None:
        """A frozen tokenizer enters the fingerprint by its content: another tokenizer at the same path reruns."""
        if not self.params.frozen:
            return None
        return {"frozen_tokenizer_sha256": sha256_file(frozen_tokenizer_dir(self.params.frozen) / "tokenizer.json")}

    def run(self, ctx: StageContext) -> dict:
        p: TokenizerParams = self.params
        if p.frozen:
            return reuse_tokenizer(frozen_tokenizer_dir(p.frozen), ctx.out / "tokenizer")
        band = load_band(Path(p.band_file) if p.band_file else None)
        unusable = check_band_pieces(band)
        if unusable:
            raise ValueError(f"band entries the pre-tokenizer never yields whole: {unusable[:5]}")
        train_files = shard_files(ctx.input("shards").path, "train")
        n = sum(pq.read_metadata(f).num_rows for f in train_files)
        candidates, total = candidate_bytes(train_files, p.heldout_fraction)
        fraction = 1.0 if total <= p.sample_bytes else p.sample_bytes / total
        taken: list[tuple[str, int]] = []
        texts = training_texts(train_files, p.heldout_fraction, fraction, p.sample_seed, taken)
        tok = train_cpp_tokenizer(texts, band, p.vocab_size, length=round(candidates * fraction),
                                  min_frequency=p.min_frequency, show_progress=ctx.executor.progress,
                                  cap_to_corpus=p.cap_vocab_to_corpus)
        pq.write_table(pa.table({"doc_id": pa.array([d for d, _ in taken], pa.string())}),
                       ctx.out / "sample.parquet", compression="zstd")
        sample = {"fraction": round(fraction, 6), "seed": p.sample_seed, "budget_bytes": p.sample_bytes,
                  "documents": len(taken), "bytes": sum(b for _, b in taken), "of_documents": candidates,
                  "of_bytes": total}
        path = save_tokenizer(tok, band, ctx.out / "tokenizer")
        check = load_tokenizer(path)
        size = check.get_vocab_size()
        if size != tok.get_vocab_size() or size > p.vocab_size:
            raise AssertionError(f"{path}: vocabulary {size}, trained {tok.get_vocab_size()}, recipe {p.vocab_size}")
        padding = padding_ids(check)
        return {"vocab_size": size, "requested_vocab_size": p.vocab_size, "learned_ids": size - padding,
                "padding_ids": padding, "band_revision": band.revision, "band_entries": len(band.entries),
                "train_documents_seen": n, "sha256": sha256_file(path), "training_sample": sample}


def frozen_tokenizer_dir(given: str) -> Path:
    """The tokenizer directory a `frozen` path names: the directory itself, a build's tokenizer/, or the
    latest build's of an output directory. BadInput naming the path when there is none."""
    from cpp_data.pipeline.errors import BadInput
    from cpp_data.schemas.reader import resolve_build

    path = Path(given)
    if (path / "tokenizer.json").is_file() and (path / "cpp_tokenizer.json").is_file():
        return path
    if (path / "tokenizer" / "tokenizer.json").is_file():
        return path / "tokenizer"
    if path.is_dir() and ((path / "builds").is_dir() or (path / "manifest.json").is_file()):
        found = resolve_build(path) / "tokenizer"
        if (found / "tokenizer.json").is_file():
            return found
    raise BadInput(f"{given}: no cpp-data tokenizer there (give a tokenizer/ directory, a build, or an output "
                   f"directory whose latest build has one)")


def reuse_tokenizer(src: Path, dest: Path) -> dict:
    """Copy a tokenizer directory as it is and describe it as a trained one would be (counts of the stage)."""
    import shutil

    from cpp_data.tokenizer.files import tokenizer_info

    info = tokenizer_info(src)
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_file():
            shutil.copyfile(f, dest / f.name)
    tok = load_tokenizer(dest)
    size = tok.get_vocab_size()
    if size != info["vocab_size"]:
        raise ValueError(f"{src}: tokenizer.json has {size} ids, cpp_tokenizer.json says {info['vocab_size']}")
    padding = padding_ids(tok)
    return {"vocab_size": size, "requested_vocab_size": size, "learned_ids": size - padding, "padding_ids": padding,
            "band_revision": info["band_revision"], "band_entries": info.get("band_entries"),
            "train_documents_seen": 0, "sha256": sha256_file(dest / "tokenizer.json"), "frozen_from": str(src)}
