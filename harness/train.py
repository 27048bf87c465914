"""`cpp-data train`: a small GPT on an export, through megatron-core's GPTDataset and GPTModel.

One file, one loop, in the spirit of nanoGPT: read the launch spec, build the per-split GPTDatasets, build
the model, then step: batch, forward (bf16 autocast on CUDA), loss over loss_mask, AdamW with warmup and
cosine decay, log, evaluate, checkpoint. A run directory holds:
  log.jsonl          one line per logged step: step, loss, lr, tokens/s (valid_loss on eval steps)
  checkpoints/       step-NNNNNNN.pt (model, optimizer, step, RNG), written atomically; the last two are kept
  summary.json       what ran: spec, model size and parameters, steps, losses, tokens/s, data fingerprints
Running again with the same directory resumes from the latest checkpoint: the data order is a function of
(seed, step), so a resumed run sees exactly the batches the uninterrupted run would have.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path

import torch

from cpp_data.harness.presets import TrainConfig
from cpp_data.pipeline.errors import BadInput


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init_distributed(device: torch.device, seed: int) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    if not dist.is_initialized():  # one process: its own loopback rendezvous, whatever MASTER_PORT says
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1,
                                init_method=f"tcp://127.0.0.1:{_free_port()}")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    if device.type == "cuda":
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        model_parallel_cuda_manual_seed(seed)


def _lr(step: int, c: TrainConfig) -> float:
    if step < c.warmup:
        return c.lr * (step + 1) / c.warmup
    progress = (step - c.warmup) / max(1, c.steps - c.warmup)
    return c.lr * (c.min_lr_ratio + (1 - c.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _loss(model, batch: dict, device: torch.device, packed: bool) -> torch.Tensor:
    b = {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "dataset_id"}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        losses = model(input_ids=b["tokens"], position_ids=b["position_ids"], attention_mask=b["attention_mask"],
                       labels=b["labels"])
    mask = b["loss_mask"].float()
    if packed:  # a packed row's last label is the first id of another row (harness/data.py)
        mask[:, -1] = 0
    return (losses.float() * mask).sum() / mask.sum().clamp(min=1)


def _save(path: Path, state: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _latest_checkpoint(directory: Path) -> Path | None:
    ckpts = sorted(directory.glob("step-*.pt"))
    return ckpts[-1] if ckpts else None


def _data_fingerprints(dataset: dict) -> dict:
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


def train(c: TrainConfig, log=print) -> dict:
    """Run (or resume) a training run; returns the summary."""
    from torch.utils.data import DataLoader, Subset

    from cpp_data.harness.data import build_datasets, dataset_of
    from cpp_data.harness.megatron_cpu import apply_cpu_patches
    from cpp_data.harness.model import build_model, count_parameters
    from cpp_data.schemas.launch_spec import load_launch_spec

    spec = load_launch_spec(c.launch_spec)
    device = torch.device("cuda" if c.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if c.device == "auto" else c.device))
    if device.type == "cuda":
        torch.cuda.set_device(0)
        torch.backends.cuda.matmul.allow_tf32 = True
    else:
        apply_cpu_patches()
    seq = c.seq_length or spec["seq_length"]
    dataset = dataset_of(spec, c.data)
    packed = dataset["kind"] == "packed"
    out = Path(c.out)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(c.seed)
    _init_distributed(device, c.seed)
    train_ds, valid_ds = build_datasets(spec, dataset, seq, c.seed, c.steps * c.batch_size,
                                        c.eval_batches * c.batch_size, out / "index_cache")
    model, _ = build_model(c.model, spec["vocab_size"], seq, device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=c.lr, betas=(0.9, 0.95),
                            fused=device.type == "cuda")
    start = 0
    ckpt = _latest_checkpoint(out / "checkpoints")
    if ckpt:
        state = torch.load(ckpt, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start = state["step"]
        log(f"resumed from {ckpt} at step {start}")
    params = count_parameters(model)
    log(f"model {c.model}: {params / 1e6:.1f}M parameters, data {dataset['kind']}, seq {seq}, batch {c.batch_size} "
        f"(micro {c.micro_batch_size or c.batch_size}), device {device}, "
        f"steps {start}..{c.steps}")
    micro = c.micro_batch_size or c.batch_size
    if c.batch_size % micro:
        raise BadInput(f"micro batch {micro} does not divide batch {c.batch_size}")
    accum = c.batch_size // micro
    loader = DataLoader(Subset(train_ds, range(start * c.batch_size, c.steps * c.batch_size)),
                        batch_size=micro, shuffle=False, num_workers=c.num_workers,
                        pin_memory=device.type == "cuda", drop_last=True)

    def evaluate() -> float | None:
        if valid_ds is None:
            return None
        model.eval()
        vl = DataLoader(Subset(valid_ds, range(min(len(valid_ds), c.eval_batches * c.batch_size))),
                        batch_size=micro)
        with torch.no_grad():
            losses = [_loss(model, b, device, packed).item() for b in vl]
        model.train()
        return sum(losses) / len(losses) if losses else None

    def save(step: int) -> None:
        _save(out / "checkpoints" / f"step-{step:07d}.pt",
              {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
               "rng": torch.get_rng_state(), "model_size": c.model, "seq_length": seq})
        for old in sorted((out / "checkpoints").glob("step-*.pt"))[:-2]:
            old.unlink()

    model.train()
    log_file = open(out / "log.jsonl", "a")
    t_last, tokens_since, losses = time.perf_counter(), 0, []
    step = start
    first_loss = None
    batches = iter(loader)
    while step < c.steps:
        for g in opt.param_groups:
            g["lr"] = _lr(step, c)
        opt.zero_grad(set_to_none=True)
        loss = torch.zeros((), device=device)
        for _ in range(accum):  # gradient accumulation over micro batches: the same update as one big batch
            batch = next(batches)
            micro_loss = _loss(model, batch, device, packed) / accum
            micro_loss.backward()
            loss += micro_loss.detach()
            tokens_since += batch["tokens"].numel()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip)
        opt.step()
        step += 1
        value = loss.item() if (step % c.log_every == 0 or step == c.steps or step == start + 1) else None
        if value is not None:
            if not math.isfinite(value):
                raise FloatingPointError(f"loss is {value} at step {step}")
            first_loss = value if first_loss is None else first_loss
            if device.type == "cuda":
                torch.cuda.synchronize()
            now = time.perf_counter()
            rec = {"step": step, "loss": round(value, 5), "lr": _lr(step - 1, c),
                   "tokens_per_s": round(tokens_since / (now - t_last), 1)}
            if c.eval_every and step % c.eval_every == 0:
                rec["valid_loss"] = evaluate()
            log_file.write(json.dumps(rec) + "\n")
            log_file.flush()
            log(f"step {step:>6}  loss {value:.4f}  lr {rec['lr']:.2e}  {rec['tokens_per_s']:,.0f} tok/s"
                + (f"  valid {rec['valid_loss']:.4f}" if rec.get("valid_loss") is not None else ""))
            losses.append(rec)
            t_last, tokens_since = time.perf_counter(), 0
        if c.save_every and step % c.save_every == 0 and step < c.steps:
            save(step)
        if c.stop_after and step >= c.stop_after:
            break
    log_file.close()
    if step > start:
        save(step)
    valid = evaluate()
    rates = [r["tokens_per_s"] for r in losses[1:]] or [r["tokens_per_s"] for r in losses]
    summary = {
        "launch_spec": str(c.launch_spec), "model": c.model, "parameters": params, "seq_length": seq,
        "batch_size": c.batch_size, "micro_batch_size": c.micro_batch_size or c.batch_size, "steps": step, "resumed_from": start, "device": str(device),
        "device_name": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "precision": "bf16 autocast" if device.type == "cuda" else "fp32",
        "first_logged_loss": first_loss, "final_loss": losses[-1]["loss"] if losses else None,
        "valid_loss": valid, "tokens_per_s_mean": round(sum(rates) / len(rates), 1) if rates else None,
        "tokens_seen": step * c.batch_size * seq, "data_kind": dataset["kind"],
        "data": _data_fingerprints(dataset),
        "torch": torch.__version__,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
