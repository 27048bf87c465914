"""`cpp-data train`: a small GPT on an export, through megatron-core's GPTDataset.

One loop, in the spirit of nanoGPT, in three steps: `setup` reads the launch spec, builds the per-split
GPTDatasets, the model (the plain-PyTorch GPT of harness/plain_model.py, or with `--model-impl megatron`
megatron-core's GPTModel, its oracle) and AdamW (fused on CUDA), and resumes from the latest checkpoint; `loop`
steps: batch, forward (bf16 autocast on CUDA), loss over loss_mask, backward, clip, update with warmup and cosine
decay, log, evaluate, checkpoint; `finish` saves, evaluates and writes the summary. Attention runs on PyTorch's
kernels (harness/attention.py): packed rows keep their documents apart (flex_attention with a document block mask
on CUDA), cut where the position ids restart. Long rows checkpoint activations where the card would not hold a
step otherwise (harness/memory.py). Under torchrun (WORLD_SIZE > 1) it trains data parallel: each rank takes its
slice of every global batch, DistributedDataParallel averages the gradients, and the update equals one process's
on the whole batch. A run directory holds:
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from cpp_data.harness.distributed import close_distributed, init_distributed, world
from cpp_data.harness.presets import SIZES, TrainConfig
from cpp_data.pipeline.foundation.errors import BadInput

__all__ = ["TrainConfig", "close_distributed", "init_distributed", "keep_freed_memory", "train"]


@dataclass
class Run:
    """What the steps of one run share, as `setup` made it."""

    c: TrainConfig
    spec: dict
    device: torch.device
    rank: int
    world: int
    seq: int
    micro: int
    accum: int
    out: Path
    dataset: dict
    eval_dataset: dict
    train_ds: Any
    valid_ds: Any
    impl: str
    recompute: bool
    model: torch.nn.Module
    step_model: Any  # the model, or DistributedDataParallel around it
    opt: torch.optim.Optimizer
    forward: Callable
    start: int
    log: Callable

    @property
    def lead(self) -> bool:
        return self.rank == 0

    @property
    def per_rank(self) -> int:
        return self.c.batch_size // self.world


def train(c: TrainConfig, log=print) -> dict:
    """Run (or resume) a training run; returns the summary (on every rank; rank 0 writes the files)."""
    run = setup(c, log)
    logged, step = loop(run)
    return finish(run, logged, step)


def _segments(position_ids: torch.Tensor, device: torch.device):
    """megatron-core's PackedSeqParams of packed rows (harness/loss.segments), for a caller that builds
    megatron-core's inputs itself (tests/test_harness.py). Imported late: loss.py imports megatron-core, whose
    import warns before `cpp-data train` has silenced it."""
    from cpp_data.harness.loss import segments

    return segments(position_ids, device)


# ---- setup ---------------------------------------------------------------------------------------------------

def setup(c: TrainConfig, log=print) -> Run:
    """Everything before the first step: checks, device, data, model, optimizer, resumed state."""
    from cpp_data.harness.data import dataset_of
    from cpp_data.harness.memory import activation_checkpointing
    from cpp_data.schemas.launch_spec import load_launch_spec

    impl = _impl(c)  # the checks come before RUN/ gets any directory: a refused run leaves nothing behind
    spec = load_launch_spec(c.launch_spec)
    rank, size, local = world()
    log = log if rank == 0 else _quiet
    device = _device(c.device, local)
    dataset = dataset_of(spec, c.data, c.lane)
    seq = _sequence_length(c, spec, dataset)
    eval_dataset = dataset_of(spec, c.eval_data, c.lane) if c.eval_data else dataset
    micro, accum = _micro_batches(c, size)
    out = Path(c.out)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(c.seed)
    init_distributed(device, c.seed)
    train_ds, valid_ds = _datasets(c, spec, dataset, eval_dataset, seq, out)
    recompute = activation_checkpointing(c.activation_checkpointing, c.model, spec["vocab_size"], micro * seq, device)
    model, opt = _model_and_optimizer(c, impl, spec["vocab_size"], seq, device, recompute)
    start = _resume(c, model, opt, device, spec, seq, log)
    step_model, forward = _for_training(c, impl, model, size, device, local)
    if c.compile and device.type == "cuda" and dataset["kind"] == "packed" and impl == "plain":
        _compile_attention_paths(step_model, forward, micro, seq, device)
    run = Run(c, spec, device, rank, size, seq, micro, accum, out, dataset, eval_dataset, train_ds, valid_ds, impl,
              recompute, model, step_model, opt, forward, start, log)
    _announce(run)
    return run


def _compile_attention_paths(model, forward, micro: int, seq: int, device: torch.device) -> None:
    """Packed rows take two attention paths (harness/loss.py: causal where a batch's loss lies in first documents,
    a document mask elsewhere), each a compiled graph of its own. One forward and backward of each on synthetic
    rows, gradients dropped, before the first step: no training step pays a compilation, so a short run's
    tokens/s reads the kernels, not the compiler."""
    from cpp_data.harness.loss import micro_batch_loss

    tokens = torch.zeros((micro, seq), dtype=torch.long)
    one_document = torch.arange(seq).repeat(micro, 1)
    two_documents = one_document.clone()
    two_documents[:, seq // 2:] -= seq // 2
    for position_ids in (one_document, two_documents):
        batch = {"tokens": tokens, "labels": tokens, "loss_mask": torch.ones((micro, seq)),
                 "position_ids": position_ids}
        micro_batch_loss(model, batch, device, True, forward).backward()
    model.zero_grad(set_to_none=True)


def _sequence_length(c: TrainConfig, spec: dict, dataset: dict) -> int:
    """The run's sequence length: --seq-length, else the lane's; refused over the model's positions."""
    from cpp_data.harness.data import lane_of

    seq = c.seq_length or dataset["seq_length"]
    if c.max_positions and seq > c.max_positions:
        raise BadInput(f"lane {lane_of(spec, c.lane)} is {seq:,} tokens, longer than the model's {c.max_positions:,} "
                       f"positions (--max-positions); train a shorter lane or give the model more positions")
    return seq


def _quiet(*args, **kwargs) -> None:
    """The log of ranks other than 0."""


def _impl(c: TrainConfig) -> str:
    """The model implementation: as given, else megatron-core's where its own attention is asked for."""
    if c.model not in SIZES:
        raise BadInput(f"unknown model size {c.model!r}; known: {', '.join(SIZES)}")
    impl = c.model_impl or ("megatron" if c.attention == "local" else "plain")
    if impl == "plain" and c.attention == "local":
        raise BadInput("--attention local is megatron-core's own attention: it runs with --model-impl megatron")
    return impl


def _device(name: str, local_rank: int) -> torch.device:
    """The device to train on, set up: TF32 matmuls on CUDA; on CPU megatron-core's patches and glibc's heap."""
    from cpp_data.harness.megatron_cpu import apply_cpu_patches

    device = torch.device("cuda" if name == "auto" and torch.cuda.is_available() else
                          ("cpu" if name == "auto" else name))
    if device.type != "cuda":
        apply_cpu_patches()
        keep_freed_memory()
        return device
    if not torch.cuda.is_available():  # else torch's own AttributeError about torch._C, exit 1
        raise BadInput(f"--device {name}: this torch ({torch.__version__}) has no usable CUDA device; "
                       f"use --device cpu (or auto)")
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = True
    return device


def _micro_batches(c: TrainConfig, ranks: int) -> tuple[int, int]:
    """(sequences per forward pass, micro batches per step on each rank)."""
    micro = c.micro_batch_size or c.batch_size
    if c.batch_size % (micro * ranks):
        raise BadInput(f"batch {c.batch_size} is not a whole number of micro batches ({micro}) on {ranks} rank(s)")
    return micro, c.batch_size // ranks // micro


def _datasets(c: TrainConfig, spec: dict, dataset: dict, eval_dataset: dict, seq: int, out: Path) -> tuple[Any, Any]:
    """(train split, valid split): GPTDatasets over the launch spec's dataset, the valid split from eval_dataset."""
    from cpp_data.harness.data import build_datasets

    masks = c.attention == "local"  # megatron-core's own attention needs GPTDataset's [s, s] masks
    valid_samples = c.eval_batches * c.batch_size
    train_ds, valid_ds = build_datasets(spec, dataset, seq, c.seed, c.steps * c.batch_size, valid_samples,
                                        out / "index_cache", attention_mask=masks)
    if eval_dataset is not dataset:
        _, valid_ds = build_datasets(spec, eval_dataset, seq, c.seed, 0, valid_samples, out / "index_cache",
                                     attention_mask=masks)
    return train_ds, valid_ds


def _model_and_optimizer(c: TrainConfig, impl: str, vocab: int, seq: int, device: torch.device,
                         recompute: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and AdamW over it: weight decay on matrices only, fused on CUDA."""
    from cpp_data.harness.model import build_model

    model, _ = build_model(c.model, vocab, seq, device, attention=c.attention, impl=impl, recompute=recompute)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=c.lr, betas=(0.9, 0.95),
                            fused=device.type == "cuda")
    return model, opt


def _resume(c: TrainConfig, model, opt, device: torch.device, spec: dict, seq: int, log) -> int:
    """The step to start from: the latest checkpoint's, restored, if the run directory holds one."""
    from cpp_data.harness.checkpoint import initial_weights, load_weights, resume

    start, ckpt = resume(Path(c.out) / "checkpoints", model, opt, device, _settings(c, seq, spec))
    if ckpt:
        log(f"resumed from {ckpt} at step {start}")
    elif c.init_from:
        load_weights(model, initial_weights(c.init_from, device))
        log(f"starting from the weights of {c.init_from}")
    return start


def _settings(c: TrainConfig, seq: int, spec: dict) -> dict:
    """What a checkpoint records and a resume must match."""
    return {"model_size": c.model, "seq_length": seq, "batch_size": c.batch_size, "vocab_size": spec["vocab_size"]}


def _for_training(c: TrainConfig, impl: str, model, ranks: int, device: torch.device, local: int):
    """(the module the step calls, the forward-and-loss function): compiled when asked (the plain model block by
    block, megatron-core's with its loss as one graph), wrapped for data parallelism over several ranks."""
    from cpp_data.harness.loss import megatron_loss, plain_loss

    forward: Callable = plain_loss if impl == "plain" else megatron_loss
    if c.compile and impl == "plain":
        model.compile_regions()
    elif c.compile:
        forward = torch.compile(megatron_loss)
    if ranks == 1:
        return model, forward
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[local] if device.type == "cuda" else None), forward


def _announce(run: Run) -> None:
    from cpp_data.harness.model import count_parameters

    c = run.c
    run.log(f"model {c.model} ({run.impl}): {count_parameters(run.model) / 1e6:.1f}M parameters, data "
            f"{run.dataset['kind']}, seq {run.seq}, batch {c.batch_size} (micro {run.micro}, {run.world} rank(s)), "
            f"attention {c.attention}{', compiled' if c.compile else ''}"
            f"{', activation checkpointing' if run.recompute else ''}, device {run.device}, "
            f"steps {run.start}..{c.steps}")


# ---- the loop ------------------------------------------------------------------------------------------------

def loop(run: Run) -> tuple[list[dict], int]:
    """Train from run.start to c.steps (or c.stop_after); returns (the logged records, the last step)."""
    c = run.c
    batches = iter(_loader(run))
    logged: list[dict] = []
    log_file = open(run.out / "log.jsonl", "a") if run.lead else None
    t_last, tokens = time.perf_counter(), 0
    step = run.start
    run.model.train()
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    while step < c.steps:
        loss = train_step(run, batches, step)
        tokens += c.batch_size * run.seq
        step += 1
        if step % c.log_every == 0 or step == c.steps or step == run.start + 1:
            rec = _record(run, step, loss, tokens, t_last)
            _write(log_file, rec)
            logged.append(rec)
            t_last, tokens = time.perf_counter(), 0
        if c.save_every and step % c.save_every == 0 and step < c.steps:
            save(run, step)
        if c.stop_after and step >= c.stop_after:
            break
    if log_file:
        log_file.close()
    return logged, step


def _loader(run: Run):
    """This rank's samples, micro batch by micro batch: its slice of every global batch, in GPTDataset's seeded
    order, from the step the run starts at."""
    from torch.utils.data import DataLoader, Subset

    c, per_rank = run.c, run.per_rank
    mine = [step * c.batch_size + run.rank * per_rank + i for step in range(run.start, c.steps)
            for i in range(per_rank)]
    return DataLoader(Subset(run.train_ds, mine), batch_size=run.micro, shuffle=False, num_workers=c.num_workers,
                      pin_memory=run.device.type == "cuda", drop_last=True, persistent_workers=c.num_workers > 0)


def learning_rate(step: int, c: TrainConfig) -> float:
    """Linear warmup to c.lr, then cosine decay to c.lr x c.min_lr_ratio at c.steps."""
    if step < c.warmup:
        return c.lr * (step + 1) / c.warmup
    progress = (step - c.warmup) / max(1, c.steps - c.warmup)
    return c.lr * (c.min_lr_ratio + (1 - c.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train_step(run: Run, batches, step: int) -> torch.Tensor:
    """One optimizer step over run.accum micro batches (the same update as one big batch); returns the step's
    mean loss on this rank, on the device (reading it would wait for the GPU)."""
    from cpp_data.harness.loss import micro_batch_loss

    for g in run.opt.param_groups:
        g["lr"] = learning_rate(step, run.c)
    run.opt.zero_grad(set_to_none=True)
    packed = run.dataset["kind"] == "packed"
    loss = torch.zeros((), device=run.device)
    for k in range(run.accum):
        last = k == run.accum - 1
        # DDP averages gradients across ranks once per step, on the last micro batch
        sync = contextlib.nullcontext() if run.world == 1 or last else run.step_model.no_sync()
        with sync:
            micro_loss = micro_batch_loss(run.step_model, next(batches), run.device, packed, run.forward) / run.accum
            micro_loss.backward()
        loss += micro_loss.detach()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.c.grad_clip)
    run.opt.step()
    return loss


def _record(run: Run, step: int, loss: torch.Tensor, tokens: int, since: float) -> dict[str, Any]:
    """The log line of `step` (its loss averaged over ranks; valid_loss on eval steps), also printed; the rate is
    `tokens` over the time from `since` to the end of the step's kernels."""
    value = _mean_over_ranks(run, loss)  # waits for the step's kernels: the rate below is the GPU's
    tokens_per_s = tokens / (time.perf_counter() - since)
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")
    rec: dict[str, Any] = {"step": step, "loss": round(value, 5), "lr": learning_rate(step - 1, run.c),
                           "tokens_per_s": round(tokens_per_s, 1), "tokens": step * run.c.batch_size * run.seq}
    if run.c.eval_every and step % run.c.eval_every == 0:
        rec["valid_loss"] = evaluate(run)
    run.log(f"step {step:>6}  loss {value:.4f}  lr {rec['lr']:.2e}  {rec['tokens_per_s']:,.0f} tok/s"
            + (f"  valid {rec['valid_loss']:.4f}" if rec.get("valid_loss") is not None else ""))
    return rec


def _mean_over_ranks(run: Run, loss: torch.Tensor) -> float:
    if run.world > 1:
        import torch.distributed as dist

        cuda = run.device.type == "cuda"
        dist.all_reduce(loss, op=dist.ReduceOp.AVG if cuda else dist.ReduceOp.SUM)
        if not cuda:  # gloo has no AVG
            loss /= run.world
    return loss.item()


def _write(log_file, rec: dict) -> None:
    if log_file:
        log_file.write(json.dumps(rec) + "\n")
        log_file.flush()


def evaluate(run: Run) -> float | None:
    """Mean loss over the validation split's first c.eval_batches batches (rank 0; None without validation data)."""
    from torch.utils.data import DataLoader, Subset

    from cpp_data.harness.loss import micro_batch_loss

    if run.valid_ds is None or not run.lead:
        return None
    c = run.c
    run.model.eval()
    batches = DataLoader(Subset(run.valid_ds, range(min(len(run.valid_ds), c.eval_batches * c.batch_size))),
                         batch_size=run.micro)
    packed = run.eval_dataset["kind"] == "packed"
    with torch.no_grad():
        losses = [micro_batch_loss(run.model, b, run.device, packed, run.forward).item() for b in batches]
    run.model.train()
    return sum(losses) / len(losses) if losses else None


def save(run: Run, step: int) -> None:
    """Checkpoint `step` (rank 0 writes; every rank waits for it)."""
    from cpp_data.harness.checkpoint import save_checkpoint

    if run.lead:
        save_checkpoint(run.out / "checkpoints", step, run.model, run.opt, _settings(run.c, run.seq, run.spec))
    if run.world > 1:
        import torch.distributed as dist

        dist.barrier()


# ---- finish --------------------------------------------------------------------------------------------------

def finish(run: Run, logged: list[dict], step: int) -> dict:
    """Checkpoint the last step, evaluate, and write (rank 0) and return the summary."""
    if step > run.start:
        save(run, step)
    summary = _summary(run, logged, step, evaluate(run))
    if run.lead:
        (run.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _summary(run: Run, logged: list[dict], step: int, valid: float | None) -> dict:
    from cpp_data.harness.data import lane_of
    from cpp_data.harness.model import count_parameters
    from cpp_data.harness.presets import flops_per_token
    from cpp_data.harness.summary import data_fingerprints, device_summary, settled_rate

    c = run.c
    params = count_parameters(run.model)
    rate = settled_rate(logged, run.start, step)
    flops = flops_per_token(params, c.model, run.seq)
    return {
        "launch_spec": str(c.launch_spec), "model": c.model, "model_impl": run.impl, "parameters": params,
        "seq_length": run.seq, "batch_size": c.batch_size, "micro_batch_size": run.micro, "ranks": run.world,
        "steps": step, "resumed_from": run.start, **device_summary(run.device, rate, flops, run.world),
        "attention": c.attention, "compiled": c.compile, "activation_checkpointing": run.recompute,
        "first_logged_loss": logged[0]["loss"] if logged else None,
        "final_loss": logged[-1]["loss"] if logged else None,
        "valid_loss": valid, "valid_data": run.eval_dataset["kind"], "tokens_per_s_mean": rate,
        "flops_per_token": flops, "tokens_seen": step * c.batch_size * run.seq, "data_kind": run.dataset["kind"],
        "data": data_fingerprints(run.dataset), "torch": torch.__version__, "lane": lane_of(run.spec, c.lane),
    }


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
