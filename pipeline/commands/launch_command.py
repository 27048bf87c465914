"""cpp-data launch: one launch.json over several builds and lanes, blended by weight (schemas/launch_spec.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cpp_data.pipeline.commands.common import path_arg
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput


def blend_arg(text: str) -> tuple[Path, float]:
    """BUILD[:WEIGHT] (weight 1 by default): a build directory or OUT, and its share of the blend."""
    where, _, weight = text.rpartition(":") if ":" in text else (text, "", "1")
    try:
        w = float(weight)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected BUILD:WEIGHT with a number, like out/builds/A:0.6"
                                         ) from None
    if not w > 0 or w != w or w == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: the weight must be a positive number")
    return path_arg(where), w


def lane_list(text: str) -> list[str]:
    from cpp_data.schemas.lanes import seq_length

    lanes = [x.strip() for x in text.split(",") if x.strip()]
    try:
        for lane in lanes:
            seq_length(lane)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not lanes:
        raise argparse.ArgumentTypeError("name at least one lane, like 4k or 4k,16k")
    return lanes


def add_parser(sub, leaf, group) -> None:
    la = leaf(sub, "launch", cmd_launch, reads=_blend_reads,
              help="one launch.json over several builds and lanes (a blend and a curriculum)",
              description="Write DIR/launch.json over the given builds, which must share one tokenizer: for each "
                          "lane (shortest first, one curriculum phase each), Megatron's per-split blend of every "
                          "build's prefixes, a build of weight w taking w of the phase's samples (weights are "
                          "shares of tokens: a packed sample is a row of the lane's length), and the packed rows "
                          "for the bundled harness. Paths are relative to DIR. `cpp-data train --launch-spec DIR` "
                          "runs the curriculum; Megatron-LM takes each phase's megatron_args.",
              epilog="example: cpp-data launch --blend out-v5:0.6 out-v3:0.4 --lanes 4k,16k --out runs/mix")
    la.add_argument("--blend", type=blend_arg, nargs="+", required=True, metavar="BUILD:WEIGHT",
                    help="builds (a build directory, or OUT for its latest build) with their weights")
    la.add_argument("--lanes", type=lane_list, help="lanes to train, comma-separated (default: every lane all "
                                                    "the builds have)")
    la.add_argument("--data", choices=("packed", "documents"), default="packed",
                    help="the dataset each phase trains on (default: packed rows)")
    la.add_argument("--name", default="blend", help="the spec's name")
    la.add_argument("--out", type=path_arg, required=True, help="directory for launch.json")


def _blend_reads(args: argparse.Namespace) -> list[Path]:
    from cpp_data.schemas.reader import resolve_build

    args.blend = [(resolve_build(b), w) for b, w in args.blend]
    return [b for b, _ in args.blend]


def cmd_launch(args) -> int:
    from cpp_data.pipeline.commands.common import outside_published_builds
    from cpp_data.schemas.launch_spec import blend_specs, load_launch_spec, relative, write_launch_spec
    from cpp_data.schemas.reader import require_complete

    outside_published_builds(args.out, "--out", "a directory of its own")
    builds = []
    for build, weight in args.blend:
        require_complete(build)
        builds.append((build, load_launch_spec(build), weight))
    names = [b.name for b, _, _ in builds]
    if len(set(names)) < len(names):
        raise BadInput(f"--blend names build {next(n for n in names if names.count(n) > 1)} twice; give each once")
    spec = blend_specs(builds, args.lanes, args.data, args.name)
    args.out.mkdir(parents=True, exist_ok=True)
    write_launch_spec(args.out / "launch.json", relative(spec, args.out))
    for phase in spec["phases"]:
        print(f"phase {phase['lane']:<5} seq {phase['seq_length']:>6,}  {phase['tokens']:>14,} training tokens")
    print(f"wrote {args.out / 'launch.json'} ({len(builds)} build(s), {len(spec['phases'])} phase(s))")
    return EXIT_OK
