"""cpp-data train: the bundled harness on a build's or an export's launch spec."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cpp_data.pipeline.commands.common import (
    int_at_least,
    number,
    path_arg,
)
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput
from cpp_data.schemas.launch_spec import MAX_SEQ_LENGTH


def add_parser(sub, leaf, group) -> None:
    tr = leaf(sub, "train", cmd_train, reads=launch_spec_reads, help="train a small GPT on an export (bundled harness)",
              description="Train a GPT (plain PyTorch, or megatron-core's GPTModel) on the data a launch spec "
                          "names: its curriculum, one phase per length lane, shortest first (or one --lane). By "
                          "default on the packed rows, read from their Parquet files with fill-in-the-middle drawn "
                          "per epoch: one row per sample in a seeded order, attention and positions reset at every "
                          "document, no loss on padding, across documents or on a chunk's context prefix; --data "
                          "documents trains on the per-document export through megatron-core's GPTDataset "
                          "instead. Logs loss and tokens/s to "
                          "OUT/log.jsonl, checkpoints to OUT/checkpoints/, and resumes from the latest checkpoint "
                          "when OUT already holds one. bf16 autocast and fused AdamW on CUDA. Under torchrun "
                          "(--nproc-per-node N) it trains data parallel over N GPUs; --batch-size stays the global "
                          "batch.",
              epilog="example: cpp-data train --launch-spec out --out runs/tiny --model tiny --steps 50")
    tr.add_argument("--launch-spec", type=path_arg, required=True,
                    help="a launch.json, or a build (or OUT, its latest build) holding one")
    tr.add_argument("--data", choices=("packed", "documents"),
                    help="which dataset of the launch spec (default: its default_dataset, packed rows)")
    tr.add_argument("--lane", help="train this lane alone (default: the spec's curriculum, every lane shortest "
                                   "first, each phase starting from the weights the one before it ended with)")
    tr.add_argument("--max-positions", type=int_at_least(2, MAX_SEQ_LENGTH),
                    help="the model's longest sequence: a longer lane is refused (default: no limit, RoPE)")
    tr.add_argument("--init-from", type=path_arg,
                    help="start a new run from these model weights (a checkpoint, or a run directory)")
    tr.add_argument("--out", type=path_arg, required=True, help="run directory (log, checkpoints, summary)")
    tr.add_argument("--model", default="tiny", help="tiny, small, gpt-125m or gpt-350m")
    tr.add_argument("--steps", type=int_at_least(1), default=50, help="optimizer steps")
    tr.add_argument("--batch-size", type=int_at_least(1), default=8, help="sequences per optimizer step")
    tr.add_argument("--micro-batch-size", type=int_at_least(1),
                    help="sequences per forward pass (gradient accumulation; default: the batch size)")
    tr.add_argument("--seq-length", type=int_at_least(2, MAX_SEQ_LENGTH),
                    help="tokens per sequence (default: the launch spec's; packed rows accept only theirs)")
    tr.add_argument("--lr", type=number(0, above=True), default=3e-3, help="peak learning rate")
    tr.add_argument("--warmup", type=int_at_least(0), default=10, help="linear warmup steps")
    tr.add_argument("--device", default="auto", help="auto, cpu or cuda")
    tr.add_argument("--log-every", type=int_at_least(1), default=10, help="steps between log lines")
    tr.add_argument("--eval-every", type=int_at_least(0), default=0, help="steps between validation passes (0: none)")
    tr.add_argument("--save-every", type=int_at_least(0), default=0,
                    help="steps between checkpoints (0: only at the end)")
    tr.add_argument("--num-workers", type=int_at_least(0), default=0, help="DataLoader workers")
    tr.add_argument("--seed", type=int, default=1234, help="seed of the model and the data order")
    tr.add_argument("--stop-after", type=int_at_least(1),
                    help="checkpoint and stop after this step; run again to resume")
    tr.add_argument("--eval-batches", type=int_at_least(1), default=4, help="batches per validation pass")
    tr.add_argument("--eval-data", choices=("packed", "documents"),
                    help="evaluate on this dataset's validation split (default: the one trained on); packed: "
                         "each validation document on its own, no FIM")
    tr.add_argument("--attention", choices=("sdpa", "local"), default="sdpa",
                    help="sdpa: PyTorch's kernels, packed rows keeping their documents apart (flex_attention with a "
                         "document block mask on CUDA; default); local: megatron-core's unfused attention with "
                         "GPTDataset's masks (runs --model-impl megatron)")
    tr.add_argument("--model-impl", choices=("plain", "megatron"),
                    help="plain: the plain-PyTorch GPT (default); megatron: megatron-core's GPTModel, the same "
                         "function with the same parameter names (the oracle; default with --attention local)")
    tr.add_argument("--activation-checkpointing", choices=("auto", "on", "off"), default="auto",
                    help="recompute each layer in the backward; auto: only where the step would not fit the GPU "
                         "otherwise (long rows, large presets)")
    tr.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA; pays off over many steps)")


def cmd_train(args) -> int:
    from cpp_data.harness.curriculum import run_curriculum
    from cpp_data.harness.megatron_cpu import quiet_missing_fast_kernels
    from cpp_data.harness.train import TrainConfig, train

    quiet_missing_fast_kernels()

    c = TrainConfig(launch_spec=args.launch_spec, out=args.out, model=args.model, steps=args.steps,
                    batch_size=args.batch_size, micro_batch_size=args.micro_batch_size, seq_length=args.seq_length,
                    lr=args.lr, warmup=args.warmup, device=args.device, log_every=args.log_every,
                    eval_every=args.eval_every, save_every=args.save_every, num_workers=args.num_workers,
                    seed=args.seed, stop_after=args.stop_after, data=args.data, eval_data=args.eval_data,
                    eval_batches=args.eval_batches,
                    attention=args.attention, compile=args.compile, model_impl=args.model_impl,
                    activation_checkpointing=args.activation_checkpointing, lane=args.lane,
                    max_positions=args.max_positions, init_from=args.init_from)
    try:
        summary = run_curriculum(c, train)
    except ValueError as exc:
        raise BadInput(f"train: {exc}") from exc
    print(json.dumps(summary, indent=2))
    return EXIT_OK


def _build_of_launch_spec(spec_dir: Path) -> list[Path]:
    """The builds a launch.json outside a build reads ([] if none can be read): a blend's builds, or the build
    whose tokenizer an export's names; `train` holds them against gc too."""
    try:
        spec = json.loads((spec_dir / "launch.json").read_text())
        builds = [(spec_dir / b["path"]).resolve() for b in spec.get("builds", [])]
        builds.append((spec_dir / spec["tokenizer"]["model"]).resolve().parent)
    except (OSError, ValueError, KeyError, TypeError):  # train's own checks name what is wrong with the spec
        return []
    return sorted({b for b in builds if (b / "manifest.json").is_file()})


def launch_spec_reads(args: argparse.Namespace) -> list[Path]:
    """The published builds `train` reads, held against gc while it runs: the build whose launch.json it was given
    (OUT meaning its latest build's), or for an export's launch.json the build whose tokenizer it names."""
    from cpp_data.schemas.reader import resolve_build

    if args.launch_spec.is_dir() and not (args.launch_spec / "launch.json").is_file():
        args.launch_spec = resolve_build(args.launch_spec)  # OUT: its latest build's launch.json
    spec_dir = args.launch_spec if args.launch_spec.is_dir() else args.launch_spec.parent
    if (spec_dir / "manifest.json").is_file():  # a build's own launch.json
        return [spec_dir]
    return _build_of_launch_spec(spec_dir)  # an export's: gc removes a build's exports with it
