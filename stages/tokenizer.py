"""tokenizer: train the hybrid C++ tokenizer on the build's own training split (docs/DESIGN.md section 8).

Reads the shards stage's training shards one row group at a time, leaves out a hashed `heldout_fraction` of
training files (by repo and path, so the same files on every run) which, with the validation split, form the
held-out set of `cpp-data tokenizer eval`, and writes tokenizer/ (see cpp_data.tokenizer.files).

The trainer counts pre-tokens in memory, which grows with the text it sees, so it trains on a bounded sample:
when the candidate documents hold more than `sample_bytes` of text, each is taken when a hash keyed by
`sample_seed` and its (repo, path, commit) falls under sample_bytes / total (tokenizer/sample.py): about
sample_bytes of text, the same documents on every run, chosen without reading them. The sample is recorded:
its fraction, documents and bytes in the stage's counts and the manifest, and the doc_id of every document in
sample.parquet. A corpus under the budget trains on all of it, as before. The same shards and recipe give a
byte-identical
tokenizer.json; its SHA-256 goes in the build manifest. The training runs in a process of its own
(stages/lib/tokenizer_training.py), so its memory is the sample's and not the driver's too.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from cpp_data.pipeline.contract.executor import tokenizer_threads
from cpp_data.pipeline.contract.stage import FIRST_SHARDS, Stage, StageContext
from cpp_data.schemas.manifest import sha256_file
from cpp_data.schemas.reader import shard_files
from cpp_data.stages.lib.tokenizer_training import train_in_own_process
from cpp_data.tokenizer.band import load_band
from cpp_data.tokenizer.files import TOKENIZER_JSON, load_tokenizer
from cpp_data.tokenizer.train import check_band_pieces, padding_ids, smallest_vocab_size


@dataclass(frozen=True)
class TokenizerParams:
    # vocab_size at most 4,194,304 (16 times the largest vocabularies in use): tokenizers' trainer allocates
    # for every id before it reads a text, and a typo of 99999999999 aborted it with a Rust backtrace
    bounds: ClassVar[dict] = {"vocab_size": (1, 1 << 22), "heldout_fraction": (0, 0.5), "min_frequency": (1, None),
                              "sample_bytes": (1, None)}
    vocab_size: int = 65_536
    cap_vocab_to_corpus: bool = True  # a corpus that cannot fill vocab_size gets what it fills, rounded up to 128
    heldout_fraction: float = 0.05
    min_frequency: int = 2
    band_file: str = ""  # empty: the band shipped with cpp-data (tokenizer/cpp_band.toml)
    # a cpp-data tokenizer to reuse instead of training one: its directory, or a build (or OUT) holding it;
    # `build --tokenizer PATH` sets it. Token ids then stay those of the earlier build (continued training).
    frozen: str = ""
    # text the trainer sees at most (a seeded sample above it). Its process's peak follows the sample (its merge
    # queue holds sets of the words each pair occurs in: bench/results/tokenizer_memory.md). The default lies
    # just under the default corpus's size, so from that corpus up the trainer's peak stops growing with the
    # corpus, for a small loss in held-out bytes per token against training on everything
    # (bench/results/tokenizer_sample-4x-20261204.md).
    sample_bytes: int = 12_000_000
    sample_seed: int = 42

    def check(self) -> str | None:
        """The band file must read, and vocab_size must hold its fixed ids and their merge chains (the trainer's
        own rule, smallest_vocab_size); a frozen tokenizer brings its own vocabulary, and must load here, before
        any stage runs, not fail the build at this stage naming the cache's copy."""
        if self.frozen:
            from cpp_data.pipeline.foundation.errors import BadInput
            from cpp_data.tokenizer.files import tokenizer_info

            try:
                found = frozen_tokenizer_dir(self.frozen)
                tokenizer_info(found)
                load_tokenizer(found)
            except (BadInput, ValueError, OSError) as exc:
                return f"frozen: {exc}"
            return None
        try:
            band = load_band(Path(self.band_file) if self.band_file else None)
        except (OSError, ValueError) as exc:
            return f"band_file: {exc}"
        smallest = smallest_vocab_size(band)
        if self.vocab_size < smallest:
            return (f"vocab_size {self.vocab_size} is smaller than the tokenizer's fixed band with its merge chains "
                    f"({smallest} ids)")
        return None


class TokenizerStage(Stage):
    name = "tokenizer"
    libraries = ('pyarrow', 'tokenizers')
    version = 2
    scope = "corpus"
    inputs = (FIRST_SHARDS,)  # the documents as first written: structure runs beside the training
    runs_beside = True  # the training is a process of its own: structure runs meanwhile (docs/SCALING.md)
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
        job = {"files": [str(f) for f in shard_files(ctx.input(FIRST_SHARDS).path, "train")],
               "heldout_fraction": p.heldout_fraction, "sample_bytes": p.sample_bytes, "sample_seed": p.sample_seed,
               "band_file": p.band_file, "vocab_size": p.vocab_size, "min_frequency": p.min_frequency,
               "cap_to_corpus": p.cap_vocab_to_corpus, "show_progress": ctx.executor.config.progress,
               "out": str(ctx.out),
               "threads": tokenizer_threads(ctx.executor.config, beside=True)}
        trained = train_in_own_process(job, ctx.out / "_work")
        shutil.rmtree(ctx.out / "_work")
        path = ctx.out / "tokenizer" / TOKENIZER_JSON
        check = load_tokenizer(path)
        size = check.get_vocab_size()
        if size != trained["vocab_size"] or size > p.vocab_size:
            raise AssertionError(f"{path}: vocabulary {size}, trained {trained['vocab_size']}, recipe {p.vocab_size}")
        padding = padding_ids(check)
        return {"vocab_size": size, "requested_vocab_size": p.vocab_size, "learned_ids": size - padding,
                "padding_ids": padding, "band_revision": band.revision, "band_entries": len(band.entries),
                "train_documents_seen": trained["train_documents_seen"], "sha256": sha256_file(path),
                "training_sample": trained["training_sample"]}


def frozen_tokenizer_dir(given: str) -> Path:
    """The tokenizer directory a `frozen` path names: the directory itself, a build's tokenizer/, or the
    latest build's of an output directory. BadInput naming the path when there is none, and when the tokenizer
    of a build differs from what that build's manifest records (edited after the build: its ids would silently
    differ from the ids the build was written with)."""
    from cpp_data.pipeline.foundation.errors import BadInput
    from cpp_data.schemas.reader import require_complete, resolve_build

    path = Path(given)
    found = None
    if (path / "tokenizer.json").is_file() and (path / "cpp_tokenizer.json").is_file():
        found = path
    elif (path / "manifest.json").is_file():  # a build: read only a sealed one, as every reader of builds does
        require_complete(path)
    if found is None and (path / "tokenizer" / "tokenizer.json").is_file():
        found = path / "tokenizer"
    if found is None and path.is_dir() and ((path / "builds").is_dir() or (path / "manifest.json").is_file()):
        candidate = resolve_build(path) / "tokenizer"
        found = candidate if (candidate / "tokenizer.json").is_file() else None
    if found is None:
        raise BadInput(f"{given}: no cpp-data tokenizer there (give a tokenizer/ directory, a build, or an output "
                       f"directory whose latest build has one)")
    if (found.parent / "manifest.json").is_file():
        _check_against_manifest(found)
    return found


def _check_against_manifest(tokenizer: Path) -> None:
    """BadInput unless every file of a build's tokenizer/ has the SHA-256 its build's manifest records."""
    from cpp_data.pipeline.foundation.errors import BadInput
    from cpp_data.schemas.manifest import load_manifest

    build = tokenizer.parent
    recorded = {f["path"]: f.get("sha256") for f in load_manifest(build)["files"] if f.get("kind") == "tokenizer"}
    for f in sorted(tokenizer.iterdir()):
        rel = f"tokenizer/{f.name}"
        if f.is_file() and recorded.get(rel) != sha256_file(f):
            why = "is not in" if rel not in recorded else "does not match"
            raise BadInput(f"{f}: {why} the manifest of build {build.name} (changed after the build), so its token "
                           f"ids would differ from the build's; give an unchanged tokenizer")


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
