"""`cpp-data train`: a small GPT on an export, through megatron-core's GPTDataset and GPTModel.

One file, one loop, in the spirit of nanoGPT: read the launch spec, build the per-split GPTDatasets, build
the model, then step: batch, forward (bf16 autocast on CUDA), loss over loss_mask, AdamW (fused on CUDA) with
warmup and cosine decay, log, evaluate, checkpoint. Attention runs on PyTorch's kernels (harness/attention.py):
FlashAttention, and for packed rows per-document segments cut where the position ids restart, so no s x s mask
is ever built. Under torchrun (WORLD_SIZE > 1) it trains data parallel: each rank takes its slice of every
global batch, DistributedDataParallel averages the gradients, and the update equals one process's on the whole
batch. A run directory holds:
  log.jsonl          one line per logged step: step, loss, lr, tokens/s, tokens (valid_loss on eval steps)
  checkpoints/       step-NNNNNNN.pt (model, optimizer, step, RNG), written atomically; the last two are kept
  summary.json       what ran: spec, model size and parameters, steps, losses, tokens/s, data fingerprints
Running again with the same directory resumes from the latest checkpoint: the data order is a function of
(seed, step), so a resumed run sees exactly the batches the uninterrupted run would have.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from cpp_data.harness.presets import PEAK_BF16_FLOPS, SIZES, TrainConfig, flops_per_token
from cpp_data.pipeline.foundation.errors import BadInput


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _world() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; (0, 1, 0) in a plain process."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def init_distributed(device: torch.device, seed: int) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        if _world()[1] > 1:  # torchrun: its rendezvous
            dist.init_process_group(backend, init_method="env://")
        else:  # one process: its own loopback rendezvous, whatever MASTER_PORT says
            dist.init_process_group(backend, rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{_free_port()}")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    if device.type == "cuda":
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        model_parallel_cuda_manual_seed(seed)


def close_distributed() -> None:
    """Undo init_distributed: megatron-core's model-parallel groups, then the process group. For a caller that
    only needed them for a moment (verify's gpt_dataset gate) and must leave its process as it found it."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def _lr(step: int, c: TrainConfig) -> float:
    if step < c.warmup:
        return c.lr * (step + 1) / c.warmup
    progress = (step - c.warmup) / max(1, c.steps - c.warmup)
    return c.lr * (c.min_lr_ratio + (1 - c.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _segments(position_ids: torch.Tensor, device: torch.device):
    """PackedSeqParams naming the documents of a batch of packed rows (computed on the host, sent once)."""
    from megatron.core.packed_seq_params import PackedSeqParams

    from cpp_data.harness.attention import document_segments

    cu = document_segments(position_ids).to(device, non_blocking=True)
    s = position_ids.shape[-1]
    return PackedSeqParams(qkv_format="sbhd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=s, max_seqlen_kv=s)


def _check_resume(ckpt: Path, state: dict, now: dict) -> None:
    """A run resumes only as it started: another batch size would silently change the sample order and the
    token count, and another vocabulary would fail in load_state_dict with a bare RuntimeError. A checkpoint
    that does not record a key skips that key."""
    differ = [f"{k} {state[k]} (now {v})" for k, v in now.items() if k in state and state[k] != v]
    if differ:
        raise BadInput(f"{ckpt}: this run was trained with {', '.join(differ)}; resume it with the same "
                       f"arguments and launch spec, or give a new --out")


def _forward_loss(model, tokens, position_ids, attention_mask, labels, loss_mask, segments, autocast: bool):
    """Mean next-token cross-entropy over loss_mask: the model's logits, then the loss here rather than in
    megatron-core, so that torch.compile fuses the bf16-to-fp32 cast and the log-softmax into one pass over the
    logits instead of megatron-core's several fp32 copies (bench/results: gpu-h200-speed.json).

    The loss runs in the output layer's own [s, b] order (labels and mask transposed, not the logits): GPTModel
    hands the logits back as [b, s] (`transpose(0, 1).contiguous()`), and a loss taken in that order sends the
    output layer a transposed gradient, which compiles into a batched matmul of s products of b rows each for
    its input gradient, several times slower than the same FLOPs as one matmul
    (bench/results/gpu-h200-profile.txt). Compiled, the two transposes cancel and no copy is made."""
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=tokens, position_ids=position_ids, attention_mask=attention_mask,
                       packed_seq_params=segments)
    logits = logits.transpose(0, 1).flatten(0, 1)  # [s * b, vocab]
    losses = F.cross_entropy(logits.float(), labels.t().flatten(), reduction="none")
    mask = loss_mask.t().flatten().float()
    return (losses * mask).sum() / mask.sum().clamp(min=1)


def _loss(model, batch: dict, device: torch.device, packed: bool, forward=_forward_loss) -> torch.Tensor:
    """Mean loss over the batch's loss_mask. Packed rows reach attention as document segments; a batch with a
    Megatron mask (attention="local") passes it; otherwise attention is causal over the whole sequence."""
    b = {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "dataset_id"}
    segments = _segments(batch["position_ids"], device) if packed and "attention_mask" not in b else None
    mask = b["loss_mask"]
    if packed:  # a packed row's last label is the first id of another row (harness/data.py)
        mask = mask.clone()
        mask[:, -1] = 0
    return forward(model, b["tokens"], b["position_ids"], b.get("attention_mask"), b["labels"], mask, segments,
                   device.type == "cuda")


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


def _peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def keep_freed_memory() -> None:
    """On CPU, let glibc keep the memory PyTorch frees instead of returning it to the kernel: every step
    allocates and frees the logits ([tokens, vocabulary] floats, hundreds of MB), which glibc serves with a fresh
    mmap each time, and the page faults of touching it again cost as much system time as the step's compute.
    No effect elsewhere."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_top_pad, m_mmap_max = -1, -2, -4
    libc.mallopt(m_mmap_max, 0)  # large blocks from the heap, which is reused, not from one-off mmaps
    libc.mallopt(m_trim_threshold, 1 << 34)  # and never trimmed back to the kernel
    libc.mallopt(m_top_pad, 1 << 28)


def train(c: TrainConfig, log=print) -> dict:
    """Run (or resume) a training run; returns the summary (on every rank; rank 0 writes the files)."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    from cpp_data.harness.data import build_datasets, dataset_of
    from cpp_data.harness.megatron_cpu import apply_cpu_patches
    from cpp_data.harness.model import build_model, count_parameters
    from cpp_data.schemas.launch_spec import load_launch_spec

    if c.model not in SIZES:  # before RUN/ gets any directory: a refused run leaves nothing behind
        raise BadInput(f"unknown model size {c.model!r}; known: {', '.join(SIZES)}")
    spec = load_launch_spec(c.launch_spec)
    rank, world, local = _world()
    device = torch.device("cuda" if c.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if c.device == "auto" else c.device))
    if device.type == "cuda":
        if not torch.cuda.is_available():  # else torch's own AttributeError about torch._C, exit 1
            raise BadInput(f"--device {c.device}: this torch ({torch.__version__}) has no usable CUDA device; "
                           f"use --device cpu (or auto)")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    else:
        apply_cpu_patches()
        keep_freed_memory()
    lead = rank == 0
    log = log if lead else (lambda *a, **k: None)
    seq = c.seq_length or spec["seq_length"]
    dataset = dataset_of(spec, c.data)
    packed = dataset["kind"] == "packed"
    eval_dataset = dataset_of(spec, c.eval_data) if c.eval_data else dataset
    micro = c.micro_batch_size or c.batch_size
    if c.batch_size % (micro * world):
        raise BadInput(f"batch {c.batch_size} is not a whole number of micro batches ({micro}) on {world} rank(s)")
    per_rank = c.batch_size // world
    accum = per_rank // micro
    out = Path(c.out)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(c.seed)
    init_distributed(device, c.seed)
    masks = c.attention == "local"  # megatron-core's own attention needs GPTDataset's [s, s] masks
    train_ds, valid_ds = build_datasets(spec, dataset, seq, c.seed, c.steps * c.batch_size,
                                        c.eval_batches * c.batch_size, out / "index_cache", attention_mask=masks)
    if eval_dataset is not dataset:
        _, valid_ds = build_datasets(spec, eval_dataset, seq, c.seed, 0, c.eval_batches * c.batch_size,
                                     out / "index_cache", attention_mask=masks)
    eval_packed = eval_dataset["kind"] == "packed"
    model, _ = build_model(c.model, spec["vocab_size"], seq, device, attention=c.attention)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=c.lr, betas=(0.9, 0.95),
                            fused=device.type == "cuda")
    start = 0
    ckpt = _latest_checkpoint(out / "checkpoints")
    if ckpt:
        state = torch.load(ckpt, map_location=device, weights_only=False)
        _check_resume(ckpt, state, {"model_size": c.model, "seq_length": seq, "batch_size": c.batch_size,
                                    "vocab_size": spec["vocab_size"]})
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start = state["step"]
        log(f"resumed from {ckpt} at step {start}")
    params = count_parameters(model)
    step_model = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        step_model = DistributedDataParallel(model, device_ids=[local] if device.type == "cuda" else None)
    forward = torch.compile(_forward_loss) if c.compile else _forward_loss
    log(f"model {c.model}: {params / 1e6:.1f}M parameters, data {dataset['kind']}, seq {seq}, batch {c.batch_size} "
        f"(micro {micro}, {world} rank(s)), attention {c.attention}{', compiled' if c.compile else ''}, "
        f"device {device}, steps {start}..{c.steps}")
    # this rank's samples: its slice of every global batch, in GPTDataset's seeded order
    mine = [step * c.batch_size + rank * per_rank + i for step in range(start, c.steps) for i in range(per_rank)]
    loader = DataLoader(Subset(train_ds, mine), batch_size=micro, shuffle=False, num_workers=c.num_workers,
                        pin_memory=device.type == "cuda", drop_last=True, persistent_workers=c.num_workers > 0)

    def evaluate() -> float | None:
        if valid_ds is None or not lead:
            return None
        model.eval()
        vl = DataLoader(Subset(valid_ds, range(min(len(valid_ds), c.eval_batches * c.batch_size))),
                        batch_size=micro)
        with torch.no_grad():
            losses = [_loss(model, b, device, eval_packed).item() for b in vl]
        model.train()
        return sum(losses) / len(losses) if losses else None

    def save(step: int) -> None:
        if lead:
            _save(out / "checkpoints" / f"step-{step:07d}.pt",
                  {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                   "rng": torch.get_rng_state(), "model_size": c.model, "seq_length": seq,
                   "batch_size": c.batch_size, "vocab_size": spec["vocab_size"]})
            for old in sorted((out / "checkpoints").glob("step-*.pt"))[:-2]:
                old.unlink()
        if world > 1:
            dist.barrier()

    model.train()
    log_file = open(out / "log.jsonl", "a") if lead else None
    t_last, tokens_since, losses = time.perf_counter(), 0, []
    step = start
    first_loss = None
    batches = iter(loader)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    while step < c.steps:
        for g in opt.param_groups:
            g["lr"] = _lr(step, c)
        opt.zero_grad(set_to_none=True)
        loss = torch.zeros((), device=device)
        for k in range(accum):  # gradient accumulation over micro batches: the same update as one big batch
            batch = next(batches)
            sync = contextlib.nullcontext() if world == 1 or k == accum - 1 else step_model.no_sync()
            with sync:  # DDP averages gradients across ranks once per step, on the last micro batch
                micro_loss = _loss(step_model, batch, device, packed, forward) / accum
                micro_loss.backward()
            loss += micro_loss.detach()
            tokens_since += batch["tokens"].numel() * world
        torch.nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip)
        opt.step()
        step += 1
        if step % c.log_every == 0 or step == c.steps or step == start + 1:
            if world > 1:
                dist.all_reduce(loss, op=dist.ReduceOp.AVG if device.type == "cuda" else dist.ReduceOp.SUM)
                if device.type != "cuda":  # gloo has no AVG
                    loss /= world
            value = loss.item()  # waits for the step's kernels: the rate below is the GPU's
            if not math.isfinite(value):
                raise FloatingPointError(f"loss is {value} at step {step}")
            first_loss = value if first_loss is None else first_loss
            now = time.perf_counter()
            rec: dict[str, Any] = {"step": step, "loss": round(value, 5), "lr": _lr(step - 1, c),
                   "tokens_per_s": round(tokens_since / (now - t_last), 1), "tokens": step * c.batch_size * seq}
            if c.eval_every and step % c.eval_every == 0:
                rec["valid_loss"] = evaluate()
            if log_file:
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
    if log_file:
        log_file.close()
    if step > start:
        save(step)
    valid = evaluate()
    # the rate: the logged intervals after the run's first quarter (start-up, warm-up and, compiled, the
    # compilations for new shapes), else every interval after the first
    settled = start + (step - start) // 4
    rates = ([r["tokens_per_s"] for r in losses if r["step"] > settled and r is not losses[0]]
             or [r["tokens_per_s"] for r in losses[1:]] or [r["tokens_per_s"] for r in losses])
    rate = round(sum(rates) / len(rates), 1) if rates else None
    fpt = flops_per_token(params, c.model, seq)
    peak = _peak_flops(device)
    summary = {
        "launch_spec": str(c.launch_spec), "model": c.model, "parameters": params, "seq_length": seq,
        "batch_size": c.batch_size, "micro_batch_size": micro, "ranks": world, "steps": step,
        "resumed_from": start, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": "bf16 autocast" if device.type == "cuda" else "fp32",
        "attention": c.attention, "compiled": c.compile,
        "first_logged_loss": first_loss, "final_loss": losses[-1]["loss"] if losses else None,
        "valid_loss": valid, "valid_data": eval_dataset["kind"], "tokens_per_s_mean": rate,
        "flops_per_token": fpt,
        "mfu": round(rate * fpt / (peak * world), 4) if rate and peak else None,
        "max_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda"
        else None,
        "tokens_seen": step * c.batch_size * seq, "data_kind": dataset["kind"],
        "data": _data_fingerprints(dataset),
        "torch": torch.__version__,
    }
    if lead:
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
