"""tokenizer: train the hybrid C++ tokenizer on the build's own training split (docs/DESIGN.md section 8).

Reads the shards stage's training shards one row group at a time (bounded memory: the trainer keeps only
pre-token counts), leaves out a hashed `heldout_fraction` of training files (by repo and path, so the same
files on every run) which, with the validation split, form the held-out set of `cpp-data tokenizer eval`, and
writes tokenizer/ (see cpp_data.tokenizer.files). The same shards and recipe give a byte-identical
tokenizer.json; its SHA-256 goes in the build manifest.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


def iter_documents(files: list[Path], columns: list[str]) -> Iterator[dict]:
    for f in files:
        for t in iter_shard(f, None, columns):
            yield from t.to_pylist()


def training_texts(files: list[Path], heldout_fraction: float) -> Iterator[str]:
    for row in iter_documents(files, ["text", "source_repo", "source_path"]):
        if not keys.tokenizer_heldout(row["source_repo"], row["source_path"], heldout_fraction):
            yield row["text"]


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
        tok = train_cpp_tokenizer(training_texts(train_files, p.heldout_fraction), band, p.vocab_size,
                                  length=n, min_frequency=p.min_frequency, show_progress=ctx.executor.progress,
                                  cap_to_corpus=p.cap_vocab_to_corpus)
        path = save_tokenizer(tok, band, ctx.out / "tokenizer")
        check = load_tokenizer(path)
        size = check.get_vocab_size()
        if size != tok.get_vocab_size() or size > p.vocab_size:
            raise AssertionError(f"{path}: vocabulary {size}, trained {tok.get_vocab_size()}, recipe {p.vocab_size}")
        padding = padding_ids(check)
        return {"vocab_size": size, "requested_vocab_size": p.vocab_size, "learned_ids": size - padding,
                "padding_ids": padding, "band_revision": band.revision, "band_entries": len(band.entries),
                "train_documents_seen": n, "sha256": sha256_file(path)}


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
