"""Recipes: one TOML data file per schema generation (pipeline/recipes/v2.toml .. v6.toml).

A recipe names its schema generation, the stages it runs (in order) and their parameters:
    schema_generation = "v6"
    stages = ["collect", "license", "filter", "decontaminate", "exact_dedup", "shards", "ledger"]
    [params.filter]
    max_line_length = 1000
Parameters not given take the stage's defaults; unknown stages, unknown keys, mistyped values and values out
of a parameter's range (a Params class's `bounds`, and its `check()` for rules across parameters) are errors
that name the recipe file and the key, before any stage runs. Every number of the reference design is a
setting here, never a limit in code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, get_type_hints

from cpp_data.pipeline.contract.stage import resolve_inputs
from cpp_data.pipeline.foundation.errors import BadInput


class RecipeError(BadInput):
    """A recipe that cannot be used; one line naming the file and the problem."""


@dataclass
class Recipe:
    version: str
    schema_generation: str
    description: str
    stages: list[str]
    params: dict[str, Any]  # stage name -> its Params dataclass instance
    path: str
    sha256: str
    overrides: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # --set, as given

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "schema_generation": self.schema_generation,
            "description": self.description,
            "stages": self.stages,
            "params": {k: dataclasses.asdict(v) for k, v in self.params.items()},
            "path": self.path,
            "sha256": self.sha256,
            "overrides": self.overrides,
        }


def available_versions() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("cpp_data.pipeline.recipes").iterdir()
                  if p.name.endswith(".toml"))


def _coerce(where: str, key: str, value: Any, annotation: Any) -> Any:
    origin = getattr(annotation, "__origin__", None)
    if annotation is bool:
        if not isinstance(value, bool):
            raise RecipeError(f"{where}: {key} must be true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecipeError(f"{where}: {key} must be an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecipeError(f"{where}: {key} must be a number, got {value!r}")
        if not math.isfinite(value):  # TOML has nan and inf: a nan threshold compares false and turned a
            # filter off without a word, and neither is JSON, which the manifest and stage records are
            raise RecipeError(f"{where}: {key} must be a finite number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise RecipeError(f"{where}: {key} must be a string, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RecipeError(f"{where}: {key} must be a list of strings")
        return tuple(value)
    return value


def _range(lo: float | None, hi: float | None) -> str:
    if hi is None:
        return f"at least {lo}"
    if lo is None:
        return f"at most {hi}"
    return f"between {lo} and {hi}"


# Every seed parameter (`seed`, `*_seed`) is a 32-bit unsigned integer: what numpy's and datasketch's generators
# take; anything else (a negative seed) is refused rather than hashed as text.
SEED_MAX = 2**32 - 1


def build_params(cls: type, values: dict[str, Any], where: str, set_by: Mapping[str, str] | None = None) -> Any:
    """Instantiate a stage's Params dataclass from recipe values, checking names, types and ranges.

    A Params class may declare `bounds` ({name: (lowest, highest)}, inclusive, None for no bound) and a
    `check()` returning a problem across parameters or None. Without them a negative sequence length or a
    validation share of 2 ran until a stage failed on it, or published a build that silently did not do what
    was asked (a near-dedup threshold of 7 removes nothing). `set_by` maps the parameters that came from the
    command line to their `--set STAGE.PARAM` name: an error about one of them names the flag, not the recipe
    file the user did not touch."""
    set_by = set_by or {}

    def at(*keys: str) -> str:
        flags = [set_by[k] for k in keys if k in set_by]
        return f"{', '.join(flags)} (over {where})" if flags else where

    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise RecipeError(f"{at(*unknown)}: unknown parameter(s) {unknown}{nearest(unknown[0], names)}; known: "
                          f"{sorted(names)}")
    params = cls(**{k: _coerce(at(k), k, v, hints[k]) for k, v in values.items()})
    seeds = {n: (0, SEED_MAX) for n in names if n == "seed" or n.endswith("_seed")}
    for name, (lo, hi) in {**seeds, **getattr(cls, "bounds", {})}.items():
        value = getattr(params, name)
        if value is not None and ((lo is not None and value < lo) or (hi is not None and value > hi)):
            raise RecipeError(f"{at(name)}: {name} must be {_range(lo, hi)}, got {value!r}")
    if "compression" in names:  # the stages that write Parquet shards at a codec of the recipe's
        from cpp_data.schemas.shard_writer import compression_problem

        problem = compression_problem(params.compression, getattr(params, "compression_level", None))
        if problem:
            raise RecipeError(f"{at('compression', 'compression_level')}: {problem}")
    check = getattr(params, "check", None)
    if check is not None and (problem := check()):
        # a problem across parameters: the combination is at fault, not necessarily the flag, so say both
        given = f" with {', '.join(set_by[k] for k in sorted(set_by))}" if set_by else ""
        raise RecipeError(f"{where}{given}: {problem}")
    return params


def load_recipe(version: str | None = None, path: Path | None = None,
                overrides: dict[str, dict[str, Any]] | None = None, flags: dict[str, str] | None = None) -> Recipe:
    """Load the recipe of a schema generation (or a recipe file) and build every stage's parameters. `flags`
    names the option that set an override ("tokenizer.frozen": "--tokenizer"), for the error that names it;
    any other override is a `--set`."""
    raw, where = _read_recipe(version, path)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{where}: not valid TOML ({exc})") from None
    generation = _generation(data, where)
    stages = _stages(data, where)
    overrides = overrides or {}
    param_tables = data.get("params", {})
    stray = sorted(set(param_tables) - set(stages))
    if stray:
        raise RecipeError(f"{where}: [params.{stray[0]}] names a stage the recipe does not run")
    strange = sorted(set(overrides) - set(stages))
    if strange:
        raise RecipeError(f"--set {strange[0]}.*: {strange[0]!r} is not a stage of this recipe"
                          f"{nearest(strange[0], stages)} ({', '.join(stages)})")
    params = {name: _stage_params(name, param_tables.get(name, {}), overrides.get(name, {}), generation, where,
                                  flags or {})
              for name in stages}
    return Recipe(version=version or Path(str(path)).stem, schema_generation=generation,
                  description=str(data.get("description", "")), stages=list(stages), params=params, path=where,
                  sha256=hashlib.sha256(raw).hexdigest(),
                  overrides={k: dict(v) for k, v in sorted(overrides.items())})


def nearest(name: str, known) -> str:
    """"; did you mean X?" for the known name closest to a misspelt one, or "" when none is close."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _read_recipe(version: str | None, path: Path | None) -> tuple[bytes, str]:
    """(the recipe's bytes, how errors name it): a bundled recipe's, or a recipe file's."""
    if path is None:
        if version not in available_versions():
            raise RecipeError(f"no recipe for version {version!r}; available: {', '.join(available_versions())}")
        res = resources.files("cpp_data.pipeline.recipes") / f"{version}.toml"
        return res.read_bytes(), f"recipe {version} ({res})"
    try:
        return Path(path).read_bytes(), str(path)
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read recipe ({exc.strerror})") from None


def _generation(data: dict, where: str) -> str:
    from cpp_data.schemas.generations import GENERATIONS

    generation = data.get("schema_generation")
    if not isinstance(generation, str):
        raise RecipeError(f"{where}: missing schema_generation")
    if generation not in GENERATIONS:  # else the shards stage failed on it, several stages in
        raise RecipeError(f"{where}: schema_generation {generation!r} is not one of {', '.join(GENERATIONS)}")
    return generation


def _stages(data: dict, where: str) -> list[str]:
    """The recipe's stages: each implemented, listed once, after every stage it reads."""
    from cpp_data.stages import STAGES

    stages = data.get("stages")
    if not isinstance(stages, list) or not stages:
        raise RecipeError(f"{where}: 'stages' must list the stages to run")
    twice = sorted({s for s in stages if isinstance(s, str) and stages.count(s) > 1})
    if twice:
        raise RecipeError(f"{where}: stage {twice[0]!r} is listed more than once; a stage runs once per build")
    missing = [s for s in stages if s not in STAGES]
    if missing:
        raise RecipeError(f"{where}: stage(s) {missing} are not implemented in this version of cpp-data"
                          f"{nearest(str(missing[0]), STAGES)} (implemented: {', '.join(STAGES)})")
    for name in stages:
        try:
            reads = resolve_inputs(STAGES[name], stages, STAGES)
        except ValueError as exc:
            raise RecipeError(f"{where}: {exc}") from None
        for dep in reads:
            if dep not in stages[: stages.index(name)]:
                raise RecipeError(f"{where}: stage {name!r} reads {dep!r}, which must be listed before it")
    return stages


def _stage_params(name: str, table: dict, overrides: dict, generation: str, where: str, flags: dict[str, str]):
    """A stage's Params: the recipe's [params.NAME] table with the overrides over it, checked (build_params)."""
    from cpp_data.stages import STAGES

    values = {**table, **overrides}
    if "generation" in {f.name for f in dataclasses.fields(STAGES[name].Params)}:
        values.setdefault("generation", generation)
    set_by = {k: flags.get(f"{name}.{k}", f"--set {name}.{k}") for k in overrides}
    return build_params(STAGES[name].Params, values, f"{where} [params.{name}]", set_by)


def cut_recipe(version: str, wanted: list[str], dest: Path) -> list[str]:
    """Write bundled recipe `version` cut down to the `wanted` stages and every stage they read (transitively,
    from each stage's `inputs`), in the recipe's order, without the params of the stages left out; returns
    the stage list. For runs that need only part of a build (the ledger's decisions, dedup): the benchmarks
    and the tests that check them build this instead of the whole recipe."""
    import re

    from cpp_data.stages import STAGES

    text = (resources.files("cpp_data.pipeline.recipes") / f"{version}.toml").read_text()
    order = tomllib.loads(text)["stages"]
    need, todo = set(), list(wanted)
    while todo:
        name = todo.pop()
        if name not in STAGES:
            raise RecipeError(f"no stage {name!r} (stages: {', '.join(STAGES)})")
        if name not in need:
            need.add(name)
            todo += list(resolve_inputs(STAGES[name], order, STAGES))
    stages = [s for s in order if s in need]
    text, n = re.subn(r"^stages\s*=\s*\[.*?\]", "stages = [" + ", ".join(f'"{s}"' for s in stages) + "]", text,
                      count=1, flags=re.S | re.M)
    if n != 1:
        raise RecipeError(f"recipe {version}: no `stages = [...]` list found")
    kept, skipping = [], False
    for line in text.splitlines(keepends=True):
        header = re.match(r"^\s*\[params\.([A-Za-z0-9_]+)\]", line)
        if header:
            skipping = header.group(1) not in stages
        elif re.match(r"^\s*\[", line):
            skipping = False
        if not skipping:
            kept.append(line)
    Path(dest).write_text("".join(kept))
    return stages
