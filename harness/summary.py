"""What a finished run reports (summary.json): its settings, losses, the settled rate, MFU, memory, data."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from cpp_data.harness.presets import PEAK_BF16_FLOPS


def data_fingerprints(dataset: dict) -> dict:
    """{prefix name: SHA-256 of its .bin} from the export's own record (export.json or packed.json)."""
    out = {}
    for blend in dataset["blend_per_split"].values():
        for _, prefix in blend:
            p = Path(prefix)
            for meta_name in ("export.json", "packed.json"):
                meta = p.parent / meta_name
                if meta.is_file():
                    rec = json.loads(meta.read_text())
                    for f in rec.get("files", []):
                        if f["path"].endswith(p.name + ".bin"):
                            out[p.name] = f["sha256"]
                    if p.name in rec.get("prefixes", {}) and "bin_sha256" in rec["prefixes"][p.name]:
                        out[p.name] = rec["prefixes"][p.name]["bin_sha256"]
    return out


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def settled_rate(logged: list[dict], start: int, step: int) -> float | None:
    """Mean tokens/s of the logged intervals after the run's first quarter (start-up, warm-up and, compiled, the
    compilations for new shapes), else of every interval after the first."""
    settled = start + (step - start) // 4
    rates = ([r["tokens_per_s"] for r in logged if r["step"] > settled and r is not logged[0]]
             or [r["tokens_per_s"] for r in logged[1:]] or [r["tokens_per_s"] for r in logged])
    return round(sum(rates) / len(rates), 1) if rates else None


def device_summary(device: torch.device, rate: float | None, flops: int, ranks: int) -> dict:
    """The device's name, precision, MFU (rate x FLOPs per token / the card's bf16 peak) and peak memory."""
    cuda = device.type == "cuda"
    peak = peak_flops(device)
    return {"device": str(device), "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "precision": "bf16 autocast" if cuda else "fp32",
            "mfu": round(rate * flops / (peak * ranks), 4) if rate and peak else None,
            "max_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if cuda else None}

