"""Writing a build's shards as Megatron bin/idx (what the megatron_export stage and `cpp-data export megatron`
write), one document per sequence with EOD appended
(docs/DESIGN.md section 10), one training prefix per weight group of the sources; the launch_spec stage
describes them for a training launch.

Writing goes through schemas/indexed.py (megatron-core's format, dtype rule and bytes; the format is
written down there). The documents are cut into slices of `rows_per_task` (stages/lib/shard_tasks.py) and each
slice is a datatrove task on the build's executor that writes a partial bin/idx per prefix; the driver then
joins each prefix's partials in shard order (join_partials: the .bin files back to back and the index arrays
streamed, the bytes of megatron-core's `add_index` with memory that does not grow with the documents), which
gives the same bytes as writing the documents one by one. Token ids come from the shards'
`token_ids` column when present, else from the tokenizer. Identical inputs give identical bytes, whatever the
slicing, the number of workers or the executor.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.pipeline.foundation.worker_cache import worker_cache
from cpp_data.schemas.reader import iter_shard, shard_files
from cpp_data.stages.lib.shard_tasks import WORK, SliceWork, clean_work, map_shards, plan_slices
from cpp_data.tokenizer.files import load_tokenizer, tokenizer_info
from cpp_data.tokenizer.pretokenizer import encode_in_parts


def encoded_arrays(tok, texts: list[str], batch: int) -> Iterator[np.ndarray]:
    """Each text's token ids (int32), encoded `batch` texts at a time (pretokenizer.encode_in_parts)."""
    for start in range(0, len(texts), batch):
        for ids in encode_in_parts(tok, texts[start:start + batch]):
            yield np.asarray(ids, dtype=np.int32)


def token_arrays(files: list[Path], tok=None, batch: int = 256, sources: set[str] | None = None
                 ) -> Iterator[np.ndarray]:
    """Each document's token ids (int32), in shard order: from `token_ids`, or encoded from `text`; only the
    documents of `sources` (by source_repo) when given."""
    for f in files:
        has_ids = "token_ids" in pq.read_schema(f).names
        if not has_ids and tok is None:
            raise ValueError(f"{f}: no token_ids column and no tokenizer given")
        wanted = ["token_ids" if has_ids else "text"] + (["source_repo"] if sources is not None else [])
        for t in iter_shard(f, None, wanted):
            keep = None if sources is None else [r in sources for r in t.column("source_repo").to_pylist()]
            if has_ids:
                col = t.column("token_ids").combine_chunks()
                values = col.values.to_numpy(zero_copy_only=False)
                offsets = col.offsets.to_numpy()
                for i in range(len(col)):
                    if keep is None or keep[i]:
                        yield values[offsets[i]:offsets[i + 1]]
            else:
                texts = t.column("text").to_pylist()
                if keep is not None:
                    texts = [x for x, k in zip(texts, keep) if k]
                yield from encoded_arrays(tok, texts, batch)


def jsonl_token_arrays(path: Path, tok, batch: int = 256, key: str = "text") -> Iterator[np.ndarray]:
    """Token ids of each line's `key` of a JSONL file (the input format of Megatron-LM's preprocess_data.py)."""
    import json

    texts: list[str] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                texts.append(json.loads(line)[key])
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not a JSON object with a {key!r} string ({exc})") from None
            if len(texts) == batch:
                yield from encoded_arrays(tok, texts, batch)
                texts = []
    yield from encoded_arrays(tok, texts, batch)


def prefetch(items: Iterable, chunk: int = 256, depth: int = 8) -> Iterator:
    """Run `items` in a background thread, at most `depth` chunks of `chunk` items ahead (memory bound).
    Tokenization releases the GIL, so it overlaps with what the consumer does meanwhile: importing torch and
    megatron-core (seconds) and writing."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()

    def produce() -> None:
        try:
            buf = []
            for item in items:
                buf.append(item)
                if len(buf) == chunk:
                    q.put(buf)
                    buf = []
            q.put(buf)
            q.put(done)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            q.put(exc)

    def consume() -> Iterator:
        while (got := q.get()) is not done:
            if isinstance(got, BaseException):
                raise got
            yield from got

    threading.Thread(target=produce, daemon=True, name="export-prefetch").start()  # here, not at the first next()
    return consume()


def write_indexed(prefix: Path, docs: Iterable[np.ndarray], vocab_size: int, eod: int) -> dict:
    """Write <prefix>.bin/.idx, one sequence per document with `eod` appended; returns counts and SHA-256."""
    docs = prefetch(docs)  # start tokenizing before the heavy imports of the writer
    from cpp_data.schemas.indexed import IndexedWriter

    writer = IndexedWriter(prefix, vocab_size)
    eod_arr = np.array([eod], dtype=np.int32)
    for ids in docs:
        writer.add(np.concatenate([np.asarray(ids, dtype=np.int32), eod_arr]))
    out = writer.close()
    out["documents"] = out.pop("sequences")
    return out


class ExportSlice(SliceWork):
    """One slice's documents as a partial bin/idx per prefix of its split (parts/<prefix>-<rank>,
    schemas/indexed.PartialWriter), with what each holds in parts/<rank>.json."""

    def __init__(self, tokenizer_dir: Path, name: str, splits: list[str], weights: dict[str, float],
                 has_ids: bool, batch: int):
        self.tokenizer_dir, self.name, self.splits, self.weights = str(tokenizer_dir), name, splits, weights
        self.has_ids, self.batch = has_ids, batch
        self.columns = ["token_ids" if has_ids else "text", "source_repo"]

    def transform(self, table, piece, rank: int, work: Path, stat) -> None:
        from cpp_data.schemas.indexed import PartialWriter
        from cpp_data.schemas.launch_spec import split_groups

        info = worker_cache(("tokenizer info", self.tokenizer_dir), lambda: tokenizer_info(Path(self.tokenizer_dir)))
        if self.has_ids:
            col = table.column("token_ids").combine_chunks()
            values, offsets = col.values.to_numpy(zero_copy_only=False), col.offsets.to_numpy()
            docs = [values[offsets[i]:offsets[i + 1]] for i in range(len(col))]
        else:
            tok = worker_cache(("tokenizer", self.tokenizer_dir), lambda: load_tokenizer(Path(self.tokenizer_dir)))
            texts = table.column("text").to_pylist()
            docs = list(encoded_arrays(tok, texts, self.batch))
        repos = table.column("source_repo").to_pylist()
        eod = np.array([info["roles"]["eos"]], dtype=np.int32)
        split = self.splits[piece.file]
        written = {}
        (work / "parts").mkdir(exist_ok=True)
        for suffix, _, keep in split_groups(split, self.weights):
            prefix = f"{self.name}_{split}{suffix}"
            writer = PartialWriter(work / "parts" / f"{prefix}-{rank:05d}", info["vocab_size"])
            for ids, repo in zip(docs, repos):
                if keep is None or repo in keep:
                    writer.add(np.concatenate([np.asarray(ids, dtype=np.int32), eod]))
            written[prefix] = writer.close()
        (work / "parts" / f"{rank:05d}.json").write_text(json.dumps(written))
        stat("documents", len(docs))
        return None


def export_shards(shards_dir: Path, tokenizer_dir: Path, out: Path, name: str, weights: dict[str, float],
                  executor, batch: int = 256, rows_per_task: int = 1024, label: str = "export") -> dict:
    """Both splits of a shards directory (or a build) into `out` as `<name>_train<suffix>` per weight group
    (one, unsuffixed, without weights: schemas/launch_spec.weight_groups) and `<name>_valid`, as datatrove tasks
    on `executor` (their scratch under out/_work, removed at the end); writes export.json; returns
    {prefix name: {split, sources, documents, tokens, samples, dtype, bin_sha256, ...}}."""
    from types import SimpleNamespace

    from cpp_data.schemas.indexed import join_partials
    from cpp_data.schemas.launch_spec import split_groups

    info = tokenizer_info(tokenizer_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = shard_files(shards_dir)
    listing = [{"path": str(f.relative_to(shards_dir)), "split": s}
               for s in ("train", "valid") for f in shard_files(shards_dir, s)]
    slices = plan_slices(shards_dir, listing, rows_per_task)
    has_ids = bool(files) and "token_ids" in pq.read_schema(files[0]).names
    job = ExportSlice(tokenizer_dir, name, [e["split"] for e in listing], weights, has_ids, batch)
    ctx = SimpleNamespace(out=out, executor=executor, label=label)
    map_shards(ctx, shards_dir, listing, job, slices, "export")
    parts = out / WORK / "parts"
    prefixes = {}
    for split in ("train", "valid"):
        ranks = [r for r, s in enumerate(slices) if listing[s.file]["split"] == split]
        for suffix, members, _ in split_groups(split, weights):
            prefix = f"{name}_{split}{suffix}"
            got = join_partials(out / prefix, [(parts / f"{prefix}-{r:05d}",
                                                json.loads((parts / f"{r:05d}.json").read_text())[prefix])
                                               for r in ranks], info["vocab_size"])
            got["documents"] = got.pop("sequences")
            if suffix and not got["documents"]:  # a weight group whose sources left no training document
                for ext in (".bin", ".idx"):
                    (out / f"{prefix}{ext}").unlink()
                continue
            prefixes[prefix] = {"split": split, "sources": members, **got, "samples": got["tokens"]}
    clean_work(ctx)
    atomic_write_json(out / "export.json", {"name": name, "vocab_size": info["vocab_size"],
                                            "eod": info["roles"]["eos"], "pad": info["roles"].get("pad"),
                                            "prefixes": prefixes})
    return prefixes
