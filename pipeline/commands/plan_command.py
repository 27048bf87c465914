"""cpp-data plan: what a build would run and why, running nothing."""

from __future__ import annotations

import json

from cpp_data.pipeline.commands.common import (
    pins,
    recipe_arguments,
    recipe_of,
)
from cpp_data.pipeline.foundation.errors import EXIT_OK


def add_parser(sub, leaf, group) -> None:
    pl = leaf(sub, "plan", cmd_plan, help="what a build would run and why, running nothing",
              description="For every stage instance of the recipe over the sources: cached (its sealed output is "
                          "in OUT's cache) or run, and why: its code, a parameter (old -> new), the source's pin, "
                          "the sources' settings, or an input that runs again, compared with OUT's LATEST build "
                          "(or the newest of the same recipe when LATEST is of another). Writes nothing.",
              epilog="example: cpp-data plan --version v6 --sources sources/debian.toml --out out "
                     "--set packed_rows.fim_rate=0.3")
    recipe_arguments(pl)
    pl.add_argument("--json", action="store_true", help="the plan as JSON")


def cmd_plan(args) -> int:
    from cpp_data.pipeline.contract.executor import ExecutorConfig
    from cpp_data.pipeline.runner.dag import Runner
    from cpp_data.pipeline.runner.plan import format_plan, plan

    # build --dry-run carries --only, --from and --force, and the plan honours them as the build would
    runner = Runner(args.out, recipe_of(args), pins(args), ExecutorConfig(kind="local", workers=1),
                    only=getattr(args, "only", None), from_stage=getattr(args, "from_stage", None),
                    force=getattr(args, "force", False))
    p = plan(runner)
    print(json.dumps(p, indent=2) if getattr(args, "json", False) else format_plan(p))
    return EXIT_OK
