"""launch.json (issue 14): both datasets of a build, paths relative to the file, the harness's presets as
Megatron-LM flags, and per-source weights as the Megatron blend."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import GOOGLETEST, NLOHMANN, POCO, build, write_sources

from cpp_data.harness.presets import SIZES, TrainConfig
from cpp_data.schemas.launch_spec import load_launch_spec, weight_groups


def _flag(args: list[str], name: str, n: int = 1) -> list[str]:
    i = args.index(name)
    return args[i + 1:i + 1 + n]


@pytest.mark.slow
def test_launch_json_describes_every_lane_relative_to_itself(reference_build: Path, tmp_path: Path):
    raw = json.loads((reference_build / "launch.json").read_text())
    assert raw["format"] == "cpp-data-launch/3" and raw["default_dataset"] == "packed"
    assert raw["tokenizer"]["model"] == "tokenizer" and len(raw["tokenizer"]["sha256"]) == 64
    assert [p["lane"] for p in raw["phases"]] == ["4k", "16k", "64k"]
    assert [p["seq_length"] for p in raw["phases"]] == [4096, 16384, 65536] and raw["seq_length"] == 4096
    assert raw["megatron_args"] == raw["phases"][0]["megatron_args"] == \
        raw["lanes"]["4k"]["datasets"]["packed"]["megatron_args"]
    for lane, T in (("4k", 4096), ("16k", 16384)):
        d = raw["lanes"][lane]["datasets"]
        packed, documents = d["packed"]["megatron_args"], d["documents"]["megatron_args"]
        assert _flag(packed, "--train-data-path", 2) == ["1.0", f"packed/{lane}/cpp_packed_train_e0"]
        assert _flag(documents, "--train-data-path", 2) == ["1.0", f"megatron/{lane}/cpp_train"]
        for flag in ("--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"):
            assert flag in packed and flag not in documents
        assert not any(a.startswith("--fim") or a == "--split" for a in packed + documents)  # FIM is in the rows
        assert _flag(packed, "--seq-length") == [str(T)] == _flag(packed, "--max-position-embeddings")
        assert d["packed"]["rows"]["train"][0]["files"] == [f"packed/{lane}/train-00000.parquet"]
        assert d["packed"]["rows"]["train"][0]["fim"]["epochs"] == 1
    # the harness's presets, as flags
    c = TrainConfig(launch_spec=Path("x"), out=Path("y"))
    packed = raw["lanes"]["4k"]["datasets"]["packed"]["megatron_args"]
    assert _flag(packed, "--global-batch-size") == [str(c.batch_size)] and _flag(packed, "--lr") == [str(c.lr)]
    tiny = raw["model_args"]["tiny"]
    assert set(raw["model_args"]) == set(SIZES)
    assert _flag(tiny, "--hidden-size") == [str(SIZES["tiny"].hidden_size)]
    # a copied build reads from the copy: nothing points back at the original
    moved = tmp_path / "moved"
    shutil.copytree(reference_build, moved)
    spec = load_launch_spec(moved)
    for lane in spec["lanes"].values():
        for d in lane["datasets"].values():
            for blend in d["blend_per_split"].values():
                for _, prefix in blend:
                    assert prefix.startswith(str(moved)) and Path(prefix + ".bin").is_file()
    assert Path(spec["tokenizer"]["model"]) == moved / "tokenizer"


def test_weight_groups():
    assert weight_groups({"a": 1.0, "b": 1.0}) == [("", 1.0, ["a", "b"])]
    assert weight_groups({"a": 3.0, "b": 3.0}) == [("", 1.0, ["a", "b"])]  # one weight is the natural mix
    assert weight_groups({"a": 0.5, "b": 1.0, "c": 3.0}) == [("_w0p5", 0.5, ["a"]), ("", 1.0, ["b"]),
                                                            ("_w3", 3.0, ["c"])]
    close = weight_groups({"a": 0.1, "b": 0.1000001, "c": 1.0})  # never one file for two weights
    assert len({suffix for suffix, _, _ in close}) == 3


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_source_weights_become_the_megatron_blend(reference_build: Path, tmp_path: Path):
    """The reference build's cache, built again with googletest at weight 3: only the exports and launch.json
    change; googletest's documents move into their own training prefix, weighted tokens x 3."""
    import torch

    from cpp_data.harness.data import build_datasets, dataset_of
    from cpp_data.harness.train import init_distributed
    from cpp_data.pipeline.commands.verify import Verifier

    out = tmp_path / "out"
    shutil.copytree(reference_build.parent.parent, out, symlinks=True)
    shutil.rmtree(out / "builds")
    sources = write_sources(tmp_path / "sources.toml", [
        {"name": "googletest", "url": str(GOOGLETEST), "license": "BSD-3-Clause", "configure": False,
         "weight": 3},
        {"name": "nlohmann-json", "url": str(NLOHMANN)},
        {"name": "poco-json", "url": str(POCO / "JSON")},
        {"name": "poco-net", "url": str(POCO / "Net")},
    ])
    proc = build(sources, out)
    assert "megatron_export: running" in proc.stdout and "shards: running" not in proc.stdout
    weighted = next(d for d in (out / "builds").iterdir() if (d / "_COMPLETE").exists())
    for f in sorted(reference_build.glob("shards/*.parquet")):  # a weight changes no document
        assert _digest(f) == _digest(weighted / "shards" / f.name)
    raw = json.loads((weighted / "launch.json").read_text())
    assert raw["weights"]["googletest"] == 3.0
    for kind, sub, name in (("documents", "megatron/4k", "cpp_train"), ("packed", "packed/4k", "cpp_packed_train")):
        d = raw["lanes"]["4k"]["datasets"][kind]
        epoch = "_e0" if kind == "packed" else ""
        assert d["groups"] == {f"{sub}/{name}{epoch}": ["nlohmann-json", "poco-json", "poco-net"],
                               f"{sub}/{name}_w3{epoch}": ["googletest"]}
        meta = json.loads((weighted / sub / ("export.json" if kind == "documents" else "packed.json")).read_text())
        samples = {f"{sub}/{p}": v["samples"] for p, v in meta["prefixes"].items()}
        plain, heavy = f"{sub}/{name}{epoch}", f"{sub}/{name}_w3{epoch}"
        expect = {plain: samples[plain], heavy: 3 * samples[heavy]}
        total = sum(expect.values())
        assert {p: w for w, p in d["blend_per_split"]["train"]} == pytest.approx(
            {p: v / total for p, v in expect.items()}, abs=1e-8)
        assert _flag(d["megatron_args"], "--train-data-path", 4)[1::2] == [plain, heavy]
    v = Verifier(weighted)  # every document is in exactly one prefix, and comes back from the packed rows
    v.counts(), v.decode(), v.megatron_read(), v.packed_binidx()
    spec = load_launch_spec(weighted)
    init_distributed(torch.device("cpu"), 1)
    train, _ = build_datasets(spec, dataset_of(spec, "documents"), 256, 3, 400, 0, tmp_path / "cache")
    drawn = Counter(int(train[i]["dataset_id"]) for i in range(len(train)))
    share = drawn[1] / sum(drawn.values())
    assert share == pytest.approx(dataset_of(spec, "documents")["blend_per_split"]["train"][1][0], abs=0.02)
