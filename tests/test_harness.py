"""The bundled training harness (issues 6 and 14): a tiny megatron-core GPT on CPU learns from packed rows, a
document inside a packed row sees nothing of its neighbours (tests/test_harness_runs.py: resuming and two
ranks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli


def _train(spec: Path, out: Path, *extra: str):
    # batch 4: the tiny model's time is its output layer over the whole vocabulary, per token
    return run_cli("train", "--launch-spec", str(spec), "--out", str(out), "--model", "tiny",
                   "--batch-size", "4", "--log-every", "1", *extra)


@pytest.fixture(scope="module")
def packed_256(reference_build: Path, tmp_path_factory) -> Path:
    """The reference build's packed rows at 256 tokens (`export packed`), with their own launch.json."""
    out = tmp_path_factory.mktemp("packed256") / "export"
    run_cli("export", "packed", str(reference_build), "--seq-length", "256", "--out", str(out))
    return out


def _log(out: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())}


@pytest.mark.slow
def test_tiny_gpt_loss_falls_on_packed_rows(packed_256: Path, tmp_path: Path):
    _train(packed_256, tmp_path / "run", "--steps", "30", "--warmup", "5")
    losses = _log(tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert sorted(losses) == list(range(1, 31))
    first, last = losses[1], sum(losses[s] for s in range(26, 31)) / 5
    assert first > 10.5 and last < first - 1.5, losses  # ln(65,536) = 11.09 at the start
    assert summary["parameters"] > 1_000_000 and summary["valid_loss"] is not None
    assert summary["data_kind"] == "packed" and summary["seq_length"] == 256
    assert summary["data"]["cpp_packed_train_e0"] and summary["tokens_per_s_mean"] > 0
    assert (tmp_path / "run" / "checkpoints" / "step-0000030.pt").is_file()


@pytest.mark.slow
def test_missing_launch_spec_is_one_clear_line(tmp_path: Path):
    proc = run_cli("train", "--launch-spec", str(tmp_path / "nope.json"), "--out", str(tmp_path / "r"), check=False)
    assert proc.returncode == 2
    assert "nope.json: no such launch spec" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_packed_rows_refuse_another_length(reference_build: Path, tmp_path: Path):
    proc = run_cli("train", "--launch-spec", str(reference_build), "--out", str(tmp_path / "r"), "--seq-length", "128",
                   check=False)
    assert proc.returncode == 2
    assert "would cut samples across rows" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_document_in_a_packed_row_sees_nothing_of_its_neighbours(packed_256: Path, tmp_path: Path):
    """For every document of packed rows holding two or more: its logits inside the row (as the harness feeds
    the row: GPTDataset with boundaries reset) are bit-identical when every other document of the row is
    replaced by other tokens, and equal, to fp32 rounding, its logits when it runs alone from position 0."""
    import torch

    from cpp_data.harness.data import build_datasets, dataset_of
    from cpp_data.harness.megatron_cpu import apply_cpu_patches
    from cpp_data.harness.model import build_model
    from cpp_data.harness.train import init_distributed
    from cpp_data.schemas.launch_spec import load_launch_spec

    spec = load_launch_spec(packed_256)
    T, eod = spec["seq_length"], spec["eod"]
    apply_cpu_patches()
    init_distributed(torch.device("cpu"), 0)
    torch.manual_seed(0)
    rows = dataset_of(spec, "packed")["documents"]["train"] * 4
    train, _ = build_datasets(spec, dataset_of(spec, "packed"), T, 1234, rows, 0, tmp_path / "cache")
    model, _ = build_model("tiny", spec["vocab_size"], T, torch.device("cpu"))
    model.eval()
    gen = torch.Generator().manual_seed(1)
    checked, worst = 0, 0.0
    for i in range(len(train)):
        s = train[i]
        tokens, pos, mask = s["tokens"], s["position_ids"], s["attention_mask"]
        bounds, start = [], 0  # (start, end inclusive of its EOD) of each real document of the row
        for e in (tokens == eod).nonzero().flatten().tolist() + [T - 1]:
            if e - start >= 1:
                bounds.append((start, e))
            start = e + 1
        if len(bounds) < 2:
            continue
        with torch.no_grad():
            row = model(input_ids=tokens[None], position_ids=pos[None], attention_mask=mask[None])[0]
            for a, b in bounds:
                assert pos[a] == 0, "position ids restart at every document"
                other = tokens.clone()
                noise = torch.randint(3, spec["vocab_size"], (T,), generator=gen)
                outside = torch.ones(T, dtype=torch.bool)
                outside[a:b + 1] = False
                outside &= tokens != eod  # same boundaries, so the same mask and positions
                other[outside] = noise[outside]
                swapped = model(input_ids=other[None], position_ids=pos[None], attention_mask=mask[None])[0]
                assert torch.equal(swapped[a:b + 1], row[a:b + 1]), f"row {i}: document at {a} sees its neighbours"
                L = b + 1 - a
                alone = model(input_ids=tokens[None, a:b + 1], position_ids=torch.arange(L)[None],
                              attention_mask=(torch.tril(torch.ones(L, L)) < 0.5)[None, None])[0]
                worst = max(worst, (alone - row[a:b + 1]).abs().max().item())
                checked += 1
        if checked >= 6:
            break
    assert checked >= 2, "the export has no packed row with two documents"
    assert worst < 1e-5, worst  # fp32 sums over another length round differently (far below this bound)


@pytest.mark.slow
def test_document_segments_are_gpt_datasets_own_masks(packed_256: Path, tmp_path: Path):
    """The segments the harness cuts where position ids restart give exactly the mask megatron-core's
    GPTDataset builds with reset_attention_mask (the ground truth), row by row and across a batch."""
    import torch

    from cpp_data.harness.attention import document_segments, segments_mask
    from cpp_data.harness.data import build_datasets, dataset_of
    from cpp_data.harness.train import init_distributed
    from cpp_data.schemas.launch_spec import load_launch_spec

    spec = load_launch_spec(packed_256)
    T = spec["seq_length"]
    init_distributed(torch.device("cpu"), 0)
    bin_idx = {k: v for k, v in dataset_of(spec, "packed").items() if k != "rows"}  # GPTDataset over the bin/idx
    train, _ = build_datasets(spec, bin_idx, T, 1234, 48, 0, tmp_path / "cache")
    batch = [train[i] for i in range(len(train))]
    pos = torch.stack([s["position_ids"] for s in batch])
    theirs = torch.stack([s["attention_mask"] for s in batch])  # [b, 1, s, s], True = masked out
    cu = document_segments(pos)
    assert cu[0] == 0 and cu[-1] == pos.numel() and len(cu) > len(batch) + 1  # rows hold several documents
    assert torch.equal(segments_mask(cu, len(batch), T), ~theirs)


@pytest.mark.slow
def test_sdpa_attention_computes_megatron_cores_attention(packed_256: Path, reference_build: Path, tmp_path: Path):
    """The same weights give the same logits with megatron-core's unfused DotProductAttention on GPTDataset's
    masks and with the harness's SDPA attention on document segments (packed) or causal (documents)."""
    import torch

    from cpp_data.harness.data import build_datasets, dataset_of
    from cpp_data.harness.megatron_cpu import apply_cpu_patches
    from cpp_data.harness.model import build_model
    from cpp_data.harness.train import _segments, init_distributed
    from cpp_data.schemas.launch_spec import load_launch_spec

    spec = load_launch_spec(packed_256)
    T = spec["seq_length"]
    apply_cpu_patches()
    init_distributed(torch.device("cpu"), 0)
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    local, _ = build_model("tiny", spec["vocab_size"], T, cpu, attention="local")
    sdpa, _ = build_model("tiny", spec["vocab_size"], T, cpu, attention="sdpa")
    sdpa.load_state_dict(local.state_dict())
    assert type(sdpa.decoder.layers[0].self_attention.core_attention).__name__ == "SDPAAttention"
    for kind, where in (("packed", packed_256), ("documents", reference_build)):
        this = load_launch_spec(where)
        train, _ = build_datasets(this, dataset_of(this, kind), T, 1234, 4, 0, tmp_path / kind)
        b = {k: torch.stack([train[i][k] for i in range(4)]) for k in ("tokens", "position_ids", "attention_mask")}
        with torch.no_grad():
            want = local(input_ids=b["tokens"], position_ids=b["position_ids"], attention_mask=b["attention_mask"])
            segments = _segments(b["position_ids"], cpu) if kind == "packed" else None
            got = sdpa(input_ids=b["tokens"], position_ids=b["position_ids"], attention_mask=None,
                       packed_seq_params=segments)
        assert (got - want).abs().max().item() < 1e-4, kind
