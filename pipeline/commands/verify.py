"""`cpp-data verify`: the gates of docs/DESIGN.md section 11 that a build passes before it is promoted.

Gates, in order (all run; the command fails naming every gate that failed). "Every lane" means each length
lane of the build (lanes/<lane>/, its megatron/<lane>/ and packed/<lane>/ exports):
  files           validate: `_COMPLETE`, every manifest file's size and SHA-256 (and the summary's), every shard
                  against its schema
  counts          manifest totals = shard rows; token counts agree across the shards' token_ids and the manifest;
                  per lane, its rows = its Megatron sequences and its tokens + one EOD each = its .bin tokens
  token_range     max(token_id) < vocab_size in the shards, every lane, every .bin and the packed rows (the
                  silent uint16 truncation of docs/DESIGN.md section 10 fails here)
  decode          the first documents of each lane and split decode back to their exact text, from the .bin files
  empty_documents share of documents with empty text or no tokens under `max_empty_ratio`
  lanes           every lane holds every document once: a chunk's body (its text after `context_chars`) put
                  back in chunk order gives its document's text exactly, a group's text is its files' under
                  their header lines; no row over its lane's budget; the first rows' token_ids are their text's
  megatron_read   megatron-core's IndexedDataset opens every prefix, one sequence per document, and every
                  sequence equals its lane row's token_ids + EOD (per weight group, in shard order)
  gpt_dataset     every lane's datasets of launch.json yield a sample: BlendedMegatronDatasetBuilder's
                  GPTDataset over its documents and its packed bin/idx, and the harness's packed-rows reader
  packed          every packed row has its lane's sequence length, doc_ids and loss_mask agree with
                  valid_token_count, no loss on padding or on a context prefix
  packed_binidx   each packed bin/idx read back equals its Parquet rows (a training prefix with its epoch's
                  FIM drawn); the rows' segments, put back in order, are every lane row's token_ids + EOD
  train_step      one step of the bundled harness (tiny model, CPU) on the curriculum's first lane: a finite loss
A passing build is promoted: OUT/builds/PROMOTED names it, and OUT/verify/<build>.json keeps the receipt.
"""

from __future__ import annotations

import functools
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cpp_data.pipeline.foundation.fsutil import atomic_write_json, atomic_write_text
from cpp_data.schemas.dataset_card import refresh_output_card
from cpp_data.schemas.manifest import load_manifest


@dataclass
class Gate:
    name: str
    ok: bool
    detail: str
    seconds: float = 0.0


class GateFailed(Exception):
    pass


def _files(manifest: dict, kind: str, split: str | None = None) -> list[dict]:
    return [e for e in manifest["files"] if e.get("kind") == kind and (split is None or e.get("split") == split)]


def _lane_of(path: str) -> str:
    """The lane of a lane or export file (lanes/4k/train-00000.parquet, megatron/4k/cpp_train.bin)."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else ""


class Verifier:
    def __init__(self, build: Path, first_docs: int = 8, max_empty_ratio: float = 0.001, train_step: bool = True):
        self.build = Path(build)
        self.first_docs, self.max_empty_ratio, self.train_step = first_docs, max_empty_ratio, train_step
        self.manifest = load_manifest(self.build)
        self.spec_path = self.build / "launch.json"

    # ---- what the build holds ----------------------------------------------------------------------------
    @functools.cached_property
    def lanes(self) -> list[str]:
        from cpp_data.schemas.lanes import ordered

        found = {_lane_of(e["path"]) for e in _files(self.manifest, "lane_shard")}
        if not found:
            raise GateFailed("the build has no length lanes (its recipe lacks the lanes stage)")
        return ordered(sorted(found))

    def _lane_files(self, kind: str, lane: str, split: str | None = None) -> list[dict]:
        return [e for e in _files(self.manifest, kind, split) if _lane_of(e["path"]) == lane]

    def _lane_record(self, lane: str) -> dict:
        import json

        return json.loads((self.build / "lanes" / lane / "shards.json").read_text())

    def _need_both_splits(self) -> None:
        """A split without documents fails the gate with this line: megatron-core's readers fail on its empty
        files with 'cannot mmap an empty file' or 'GPTDataset failed to build as a mock data generator', and
        print AttributeError tracebacks from their __del__."""
        s = self.shard_stats
        empty = [split for split in ("train", "valid") if s[split]["rows"] == 0]
        if empty:
            raise GateFailed(f"the {' and '.join(empty)} split{'s are' if len(empty) > 1 else ' is'} empty: the "
                             f"build has {self.manifest['totals']['documents']} document(s); a build needs at "
                             f"least 2 (one per split), so add files or sources")

    def _prefixes(self, lane: str, split: str) -> list[Path]:
        """A lane's Megatron prefixes of a split: one, or (training, with source weights) one per weight group.
        An empty split, or a pair with a file missing or an empty .bin, fails the gate here: megatron-core's
        IndexedDataset asserts on it and then prints an AttributeError traceback from its __del__ for each one
        it failed to open."""
        self._need_both_splits()
        prefixes = [self.build / e["path"][: -len(".bin")] for e in self._lane_files("megatron_bin", lane, split)]
        if not prefixes:
            raise GateFailed(f"lane {lane} has no {split} Megatron export (megatron/{lane}/)")
        for prefix in prefixes:
            missing = [prefix.name + ext for ext in (".bin", ".idx")
                       if not prefix.with_name(prefix.name + ext).is_file()]
            if missing:
                raise GateFailed(f"{prefix.parent}: {' and '.join(missing)} missing")
            if prefix.with_name(prefix.name + ".bin").stat().st_size == 0:  # megatron-core cannot map it either
                raise GateFailed(f"{prefix}.bin: empty, though the {split} split holds documents")
        return prefixes

    def _prefix_sources(self, lane: str) -> dict[str, list[str] | None]:
        """{prefix name: its sources} for a lane's training prefixes of weight groups; {} without weights."""
        import json

        if not self.spec_path.is_file():
            return {}
        groups = json.loads(self.spec_path.read_text())["lanes"][lane]["datasets"]["documents"]["groups"]
        return {Path(p).name: v for p, v in groups.items()} if len(groups) > 1 else {}

    def _table_stats(self, entries: list[dict]) -> dict:
        rows = tokens = empty = 0
        max_id = -1
        for e in entries:
            path = self.build / e["path"]
            tokenized = "token_ids" in pq.read_schema(path).names
            t = pq.read_table(path, columns=["text", "token_ids"] if tokenized else ["text"])
            empty_doc = pc.equal(pc.utf8_length(t.column("text")), 0)
            rows += t.num_rows
            if tokenized:
                lengths = pc.list_value_length(t.column("token_ids"))
                file_tokens = int(pc.sum(lengths).as_py() or 0)
                if e.get("tokens") is not None and e["tokens"] != file_tokens:
                    raise GateFailed(f"{path}: {file_tokens:,} tokens, manifest.json says {e['tokens']:,}")
                tokens += file_tokens
                empty_doc = pc.or_(empty_doc, pc.equal(lengths, 0))
                m = pc.max(pc.list_flatten(t.column("token_ids"))).as_py()
                max_id = max(max_id, -1 if m is None else m)
            empty += int(pc.sum(empty_doc).as_py() or 0)
        return {"rows": rows, "tokens": tokens, "empty": empty, "max_id": max_id}

    @functools.cached_property
    def shard_stats(self) -> dict:
        """Rows, tokens, empty documents and max token id per split of the whole documents."""
        return {split: self._table_stats(_files(self.manifest, "shard", split)) for split in ("train", "valid")}

    @functools.cached_property
    def lane_stats(self) -> dict:
        """The same per lane and split."""
        return {lane: {split: self._table_stats(self._lane_files("lane_shard", lane, split))
                       for split in ("train", "valid")} for lane in self.lanes}

    # ---- gates -------------------------------------------------------------------------------------------
    def files(self) -> str:
        from cpp_data.schemas.validate import validate_build

        res = validate_build(self.build)
        return f"{res['files']} files, {res['rows']:,} documents"

    def counts(self) -> str:
        s = self.shard_stats
        totals = self.manifest["totals"]
        self._need_both_splits()
        if s["train"]["rows"] + s["valid"]["rows"] != totals["documents"]:
            raise GateFailed(f"shards hold {s['train']['rows'] + s['valid']['rows']} documents, manifest says "
                             f"{totals['documents']}")
        if totals.get("tokens") is not None and s["train"]["tokens"] + s["valid"]["tokens"] != totals["tokens"]:
            raise GateFailed(f"shards hold {s['train']['tokens'] + s['valid']['tokens']} tokens, manifest says "
                             f"{totals['tokens']}")
        out = []
        for lane in self.lanes:
            for split in ("train", "valid"):
                ls = self.lane_stats[lane][split]
                sets = [_indexed(p) for p in self._prefixes(lane, split)]
                names = " + ".join(p.name for p in self._prefixes(lane, split))
                sequences = sum(len(ds) for ds in sets)
                if sequences != ls["rows"]:
                    raise GateFailed(f"megatron/{lane}/{names}: {sequences} sequences, the lane's {split} rows are "
                                     f"{ls['rows']}")
                bin_tokens = sum(int(ds.sequence_lengths.sum()) for ds in sets)
                if bin_tokens != ls["tokens"] + ls["rows"]:
                    raise GateFailed(f"megatron/{lane}/{names}.bin: {bin_tokens} tokens, lane {lane} gives "
                                     f"{ls['tokens']} + {ls['rows']} EOD")
            out.append(f"{lane} {self.lane_stats[lane]['train']['rows']:,}")
        return (f"{totals['documents']:,} documents and {s['train']['tokens'] + s['valid']['tokens']:,} tokens "
                f"agree across manifest and shards; lane rows = sequences ({', '.join(out)})")

    def token_range(self) -> str:
        vocab = self.manifest["tokenizer"]["vocab_size"]
        found = {f"shards/{k}": v["max_id"] for k, v in self.shard_stats.items()}
        for lane in self.lanes:
            found |= {f"lanes/{lane}/{k}": v["max_id"] for k, v in self.lane_stats[lane].items()}
            for prefix in self._prefixes(lane, "train") + self._prefixes(lane, "valid"):
                ids = _bin_array(_indexed(prefix))  # uint16 under 65,500 ids (megatron-core's rule)
                found[f"megatron/{lane}/{prefix.name}.bin"] = int(ids.max()) if ids.size else -1
        for e in _files(self.manifest, "packed"):
            m = pc.max(pc.list_flatten(pq.read_table(self.build / e["path"], columns=["input_ids"])
                                       .column("input_ids"))).as_py()
            found[e["path"]] = -1 if m is None else m
        bad = {k: v for k, v in found.items() if v >= vocab}
        if bad:
            raise GateFailed(f"token ids reach the vocabulary size {vocab}: {bad}")
        return f"max id {max(found.values())} < vocab {vocab} in {len(found)} places"

    def decode(self) -> str:
        from cpp_data.tokenizer.files import load_tokenizer

        tok = load_tokenizer(self.build / "tokenizer")
        eod = self._eod()
        checked = 0
        for lane in self.lanes:
            groups = self._prefix_sources(lane)
            for split in ("train", "valid"):
                shards = self._lane_files("lane_shard", lane, split)
                if not shards:
                    continue
                first = pq.ParquetFile(self.build / shards[0]["path"]).read_row_group(
                    0, columns=["text", "source_repo"])
                for prefix in self._prefixes(lane, split):
                    members = groups.get(prefix.name)
                    texts = [t for t, r in zip(first.column("text").to_pylist(),
                                               first.column("source_repo").to_pylist())
                             if members is None or r in members][: self.first_docs]
                    ds = _indexed(prefix)
                    for i, text in enumerate(texts):
                        ids = ds[i].tolist()
                        if ids[-1] != eod:
                            raise GateFailed(f"{prefix}.bin: sequence {i} does not end with EOD")
                        if tok.decode(ids[:-1], skip_special_tokens=False) != text:
                            raise GateFailed(f"{prefix}.bin: sequence {i} does not decode to its lane row")
                        checked += 1
        return f"first {checked} documents of {len(self.lanes)} lane(s) decode exactly"

    def empty_documents(self) -> str:
        s = self.shard_stats
        rows = s["train"]["rows"] + s["valid"]["rows"]
        empty = s["train"]["empty"] + s["valid"]["empty"]
        ratio = empty / rows if rows else 1.0
        if not rows:
            raise GateFailed("the build has no documents")
        if ratio > self.max_empty_ratio:
            raise GateFailed(f"{empty} of {rows} documents are empty ({ratio:.2%} > {self.max_empty_ratio:.2%})")
        return f"{empty} empty of {rows:,}"

    def lanes_gate(self) -> str:
        from cpp_data.stages.lib.lane_check import check_lane

        whole = [self.build / e["path"] for e in _files(self.manifest, "shard")]
        out = []
        for lane in self.lanes:
            record = self._lane_record(lane)
            try:
                found = check_lane(whole, [self.build / e["path"] for e in self._lane_files("lane_shard", lane)],
                                   record["budget"], self.build / "tokenizer", self.first_docs)
            except ValueError as exc:
                raise GateFailed(f"lane {lane}: {exc}") from None
            out.append(f"{lane} {found}")
        return "; ".join(out)

    def megatron_read(self) -> str:
        out = []
        eod = np.array([self._eod()])
        for lane in self.lanes:
            groups = self._prefix_sources(lane)
            for split in ("train", "valid"):
                sets = {}
                for prefix in self._prefixes(lane, split):
                    ds = _indexed(prefix)
                    if not np.array_equal(ds.document_indices, np.arange(len(ds) + 1)):
                        raise GateFailed(f"{prefix}.idx: document index is not one sequence per document")
                    sets[prefix] = [ds, 0]
                    out.append(f"{lane}/{prefix.name} {len(ds):,}")
                for e in self._lane_files("lane_shard", lane, split):
                    self._rows_match(e, sets, groups, eod, split)
        return ", ".join(out) + " sequences; every sequence equals its lane row's token_ids + EOD"

    def _rows_match(self, e: dict, sets: dict, groups: dict, eod: np.ndarray, split: str) -> None:
        """Every row of lane file `e` is the next sequence of the prefix of its source's weight group."""
        t = pq.read_table(self.build / e["path"], columns=["token_ids", "source_repo"])
        for ids, repo in zip(t.column("token_ids").to_numpy(zero_copy_only=False), t.column("source_repo").to_pylist()):
            owner = next((p for p in sets if repo in (groups.get(p.name) or [repo])), None)
            if owner is None:
                raise GateFailed(f"{e['path']}: a document of {repo} belongs to no prefix of launch.json")
            ds, i = sets[owner]
            if i >= len(ds) or not np.array_equal(ds[i], np.concatenate([ids, eod])):
                raise GateFailed(f"{owner}.bin: sequence {i} is not row {i} of the {split} lane rows' token_ids "
                                 f"and EOD")
            sets[owner][1] = i + 1

    def _eod(self) -> int:
        """The build tokenizer's end-of-document id (its cpp_tokenizer.json roles)."""
        from cpp_data.tokenizer.files import tokenizer_info

        return tokenizer_info(self.build / "tokenizer")["roles"]["eos"]

    def gpt_dataset(self) -> str:
        self._need_both_splits()
        import torch

        from cpp_data.harness.train import close_distributed, init_distributed
        from cpp_data.schemas.launch_spec import load_launch_spec

        spec = load_launch_spec(self.spec_path)
        # GPTDataset wants a process group; one made here is closed again, so that `cpp-data verify` (or a
        # program calling it) is left without one
        made_here = not (torch.distributed.is_available() and torch.distributed.is_initialized())
        init_distributed(torch.device("cpu"), 1234)
        try:
            return "; ".join(self._gpt_dataset_samples(spec, lane) for lane in spec["lanes"])
        finally:
            if made_here:
                close_distributed()

    def _gpt_dataset_samples(self, spec: dict, lane: str) -> str:
        from cpp_data.harness.data import build_datasets, dataset_of

        with tempfile.TemporaryDirectory() as cache:
            out = []
            for kind in sorted(spec["lanes"][lane]["datasets"]):
                d = dataset_of(spec, kind, lane)
                seq = d["seq_length"] if kind == "packed" else min(d["seq_length"], 512)
                readers = [("", d)]
                if kind == "packed":  # the harness reads the Parquet rows; Megatron-LM, GPTDataset the bin/idx
                    readers.append((" bin/idx", {k: v for k, v in d.items() if k != "rows"}))
                for label, data in readers:
                    train, valid = build_datasets(spec, data, seq, 1234, 4, 2, Path(cache), attention_mask=False)
                    sample = train[0]
                    if int(sample["tokens"].max()) >= spec["vocab_size"]:
                        raise GateFailed(f"a sample of lane {lane}'s {kind}{label} holds an id past the vocabulary")
                    out.append(f"{kind}{label} {len(train)}" + (f"/{len(valid)}" if valid is not None else ""))
        return f"{lane}: " + ", ".join(out)

    def packed(self) -> str:
        entries = _files(self.manifest, "packed")
        if not entries:
            if not self.manifest.get("totals", {}).get("documents"):
                raise GateFailed("the build has no documents, so no packed rows")
            raise GateFailed("the build has no packed rows (its recipe lacks packed_rows)")
        self._same_first_length()
        rows = 0
        for e in entries:
            seq = self._lane_record(_lane_of(e["path"]))["seq_length"]
            t = pq.read_table(self.build / e["path"])
            for r in t.to_pylist():
                _check_row(e["path"], r, seq)
                rows += 1
        return f"{rows:,} rows consistent"

    def _same_first_length(self) -> None:
        """The manifest's seq_length is the curriculum's first phase's, as launch.json says."""
        import json

        seq = self.manifest.get("seq_length")
        spec_seq = json.loads(self.spec_path.read_text()).get("seq_length") if self.spec_path.is_file() else seq
        if seq != spec_seq:
            raise GateFailed(f"{self.build / 'manifest.json'}: seq_length {seq}, launch.json says {spec_seq}")

    def packed_binidx(self) -> str:
        from cpp_data.stages.lib.packed_reader import packed_documents

        if not _files(self.manifest, "packed_bin"):
            raise GateFailed("the build has no packed bin/idx (its recipe lacks packed_rows)")
        self._need_both_splits()
        eod = np.array([self._eod()])
        checked = 0
        for lane in self.lanes:
            for split in ("train", "valid"):
                try:
                    docs = packed_documents(self.build / "packed" / lane, split)
                except ValueError as exc:
                    raise GateFailed(str(exc)) from None
                ordinal = 0
                for e in self._lane_files("lane_shard", lane, split):
                    ids = pq.read_table(self.build / e["path"], columns=["token_ids"]).column("token_ids")
                    for row in ids.to_pylist():
                        got = docs.pop(ordinal, None)
                        if got is None or not np.array_equal(got, np.concatenate([row, eod])):
                            raise GateFailed(f"packed/{lane} {split}: row {ordinal} of {e['path']} does not come "
                                             f"back from the packed rows")
                        ordinal += 1
                if docs:
                    raise GateFailed(f"packed/{lane} {split}: {len(docs)} packed documents match no lane row")
                checked += ordinal
        return f"{checked:,} lane rows come back exactly; every bin/idx row is its Parquet row (FIM per epoch)"

    def train_step_gate(self) -> str:
        """One step of `cpp-data train` on the first lane, in a child process: the harness patches torch.cuda
        for the CPU and opens a process group, neither of which may leak into the process that runs verify."""
        import json
        import subprocess
        import sys

        self._need_both_splits()
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run([sys.executable, "-m", "cpp_data.pipeline.cli", "train", "--launch-spec",
                                   str(self.spec_path), "--out", tmp, "--model", "tiny", "--steps", "1",
                                   "--batch-size", "1", "--device", "cpu", "--log-every", "1",
                                   "--lane", self.lanes[0]],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
                raise GateFailed(f"cpp-data train exited {proc.returncode}: {last}")
            summary = json.loads((Path(tmp) / "summary.json").read_text())
        loss = summary["final_loss"]
        if loss is None or not np.isfinite(loss):
            raise GateFailed(f"one training step gave loss {loss}")
        return f"loss {loss:.3f} after one step on lane {self.lanes[0]}'s {summary['data_kind']} rows"

    def gates(self) -> list[tuple[str, Callable[[], str]]]:
        g = [("files", self.files), ("counts", self.counts), ("token_range", self.token_range),
             ("decode", self.decode), ("empty_documents", self.empty_documents), ("lanes", self.lanes_gate),
             ("megatron_read", self.megatron_read), ("gpt_dataset", self.gpt_dataset), ("packed", self.packed),
             ("packed_binidx", self.packed_binidx)]
        if self.train_step:
            g.append(("train_step", self.train_step_gate))
        return g


def _check_row(path: str, r: dict, seq: int) -> None:
    """One packed row: its lane's length, columns of one length, counts that agree, no loss on padding or on a
    context prefix."""
    n = len(r["input_ids"])
    doc_ids = r["doc_ids"]
    if n != seq:
        raise GateFailed(f"{path}: row {r['pack_id']} holds {n} ids, its lane's sequence length is {seq}")
    if n != len(r["target_ids"]) or n != len(r["loss_mask"]) or n != len(doc_ids):
        raise GateFailed(f"{path}: row {r['pack_id']} has columns of different lengths")
    if sum(1 for d in doc_ids if d) != r["valid_token_count"] or max(doc_ids) != r["num_docs"]:
        raise GateFailed(f"{path}: row {r['pack_id']} doc_ids disagree with its counts")
    if any(m and not d for m, d in zip(r["loss_mask"], doc_ids)):
        raise GateFailed(f"{path}: row {r['pack_id']} has loss on padding")
    pos = 0
    for k, c in enumerate(r["segment_context_lengths"], start=1):
        start = doc_ids.index(k, pos)
        if c > 1 and any(r["loss_mask"][start:start + c - 1]):
            raise GateFailed(f"{path}: row {r['pack_id']} has loss on segment {k}'s context prefix")
        pos = start


def _indexed(prefix: Path):
    """megatron-core's IndexedDataset over `prefix`; a pair it cannot open fails the gate naming the files
    (its own assertions carry no message: a damaged .idx read 'AssertionError: ')."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    try:
        return IndexedDataset(str(prefix))
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__} in megatron-core's reader"
        raise GateFailed(f"{prefix}.idx/.bin: megatron-core cannot open them ({reason}); the pair is damaged "
                         f"(`cpp-data validate` names the file)") from None


def _bin_array(ds) -> np.ndarray:
    """All token ids of an IndexedDataset as one memory-mapped array (no copy)."""
    prefix = ds.path_prefix
    return np.memmap(prefix + ".bin", dtype=ds.index.dtype, mode="r")


def verify(build: Path, log=print, **kw) -> tuple[bool, list[Gate]]:
    from cpp_data.harness.megatron_cpu import quiet_missing_fast_kernels
    from cpp_data.pipeline.foundation.errors import CheckFailed

    quiet_missing_fast_kernels()  # megatron-core's optimizer modules are imported on the way to GPTDataset

    try:
        v = Verifier(build, **kw)
    except ValueError as exc:  # a damaged manifest is a failed check, as `validate` says it (exit 1, not 2)
        raise CheckFailed(str(exc)) from None
    results = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_quiet_reader_teardown, previous_hook)
    try:
        for name, fn in v.gates():
            t0 = time.monotonic()
            try:
                results.append(Gate(name, True, fn()))
            except GateFailed as exc:
                results.append(Gate(name, False, str(exc)))
            except Exception as exc:  # a gate that crashes is a failed gate, with its reason, in one line
                first = (str(exc).strip().splitlines() or [""])[0]  # pyarrow's errors go on with the whole schema
                results.append(Gate(name, False, f"{type(exc).__name__}: {first}"))
            results[-1].seconds = round(time.monotonic() - t0, 2)
            g = results[-1]
            log(f"  {'PASS' if g.ok else 'FAIL'}  {g.name:<16} {g.detail}")
    finally:
        sys.unraisablehook = previous_hook
    ok = all(g.ok for g in results)
    return ok, results


def _quiet_reader_teardown(previous, unraisable) -> None:
    """Drop the AttributeError that megatron-core's IndexedDataset.__del__ raises after its __init__ failed on a
    damaged pair (a 13- to 31-line traceback on stderr); the gate has already said which pair, in one line."""
    if getattr(unraisable.object, "__qualname__", "").startswith("IndexedDataset."):
        return
    previous(unraisable)


def promote(build: Path, gates: list[Gate]) -> Path:
    """Record the receipt and point OUT/builds/PROMOTED at the build."""
    build = Path(build).resolve()
    out = build.parent.parent
    receipt = out / "verify" / f"{build.name}.json"
    atomic_write_json(receipt, {"build": build.name, "verified_at": datetime.now(timezone.utc).isoformat(
        timespec="seconds"), "passed": True, "gates": [g.__dict__ for g in gates]})
    atomic_write_text(build.parent / "PROMOTED", build.name + "\n")
    refresh_output_card(out)  # load_dataset(OUT) loads the promoted build
    return receipt


def record_failure(build: Path, gates: list[Gate]) -> Path:
    build = Path(build).resolve()
    receipt = build.parent.parent / "verify" / f"{build.name}.json"
    atomic_write_json(receipt, {"build": build.name, "verified_at": datetime.now(timezone.utc).isoformat(
        timespec="seconds"), "passed": False, "gates": [g.__dict__ for g in gates]})
    return receipt

