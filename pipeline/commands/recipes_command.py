"""cpp-data recipes list|show: the bundled recipes."""

from __future__ import annotations

import json

from cpp_data.pipeline.commands.common import (
    parse_overrides,
)
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput


def add_parser(sub, leaf, group) -> None:
    rc = group("recipes", help="the bundled recipes, one per schema generation")
    leaf(rc, "list", cmd_recipes_list, help="list the bundled recipes",
         description="One line per bundled recipe: its version, schema generation, stages and description.")
    rs = leaf(rc, "show", cmd_recipes_show, help="print a recipe: its TOML, or every parameter resolved",
              description="Print a bundled recipe's TOML as shipped; --resolved prints every stage's parameters "
                          "with their defaults filled in (and --set overrides applied), as JSON.",
              epilog="example: cpp-data recipes show v6 --resolved --set packed_rows.fim_rate=0.3")
    rs.add_argument("recipe_version", metavar="VERSION", help="v2..v6")
    rs.add_argument("--resolved", action="store_true", help="every parameter with defaults filled in, as JSON")
    rs.add_argument("--set", dest="overrides", action="append", default=[], metavar="STAGE.PARAM=VALUE",
                    help="as for build")


def cmd_recipes_list(args) -> int:
    from cpp_data.pipeline.runner.recipe import available_versions, load_recipe

    for version in available_versions():
        r = load_recipe(version)
        print(f"{version}  schema {r.schema_generation}  {len(r.stages)} stages: {' '.join(r.stages)}")
        if r.description:
            print(f"    {r.description}")
    return EXIT_OK


def cmd_recipes_show(args) -> int:
    from importlib import resources

    from cpp_data.pipeline.runner.recipe import available_versions, load_recipe

    if args.recipe_version not in available_versions():
        raise BadInput(f"no recipe {args.recipe_version!r}; available: {', '.join(available_versions())}")
    overrides = parse_overrides(args.overrides)
    if args.resolved or overrides:
        r = load_recipe(args.recipe_version, overrides=overrides or None)
        print(json.dumps({k: v for k, v in r.to_json().items() if k != "path"}, indent=2))
    else:
        print((resources.files("cpp_data.pipeline.recipes") / f"{args.recipe_version}.toml").read_text(), end="")
    return EXIT_OK
