"""The layers of the package, lowest first; a module imports only its own layer and the ones below it, and no
import (module level, inside a function, under TYPE_CHECKING) closes a cycle.

  foundation   cpp_data.pipeline.foundation   errors, fs helpers, lifetime, threads, terminal text, allocator,
                                              worker cache, version: imports nothing of ours
  schemas      cpp_data.schemas               the formats: one writer and one reader per format
  contract     cpp_data.pipeline.contract     Stage, StageContext, Artifact, ExecutorConfig, the Executor a
                                              stage runs its tasks on, SourceTasks, LockedSource, typed rules
  beside       cpp_data.tokenizer, .clang_index, .harness
  library      cpp_data.stages.lib            what stages share; no stage
  stages       cpp_data.stages                one module per DAG node; the package's registry()
  runner       cpp_data.pipeline.runner       recipe, sources, cache, the DAG runner, executors/ by engine, build
  commands     cpp_data.pipeline.commands, cpp_data.pipeline.cli   one module per CLI verb; cli.py dispatches
  api          cpp_data                       the package root (load_build); nothing imports it

Read from the source (ast), as pipeline/runner/code_digest.py reads imports; nothing is imported.
"""

from __future__ import annotations

import ast
import os
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(os.environ.get("CPP_DATA_LAYERS_ROOT", Path(__file__).resolve().parent.parent))

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("cpp_data.pipeline.foundation",)),
    ("schemas", ("cpp_data.schemas",)),
    ("contract", ("cpp_data.pipeline.contract",)),
    ("beside", ("cpp_data.tokenizer", "cpp_data.clang_index", "cpp_data.harness")),
    ("library", ("cpp_data.stages.lib",)),
    ("stages", ("cpp_data.stages",)),
    ("runner", ("cpp_data.pipeline.runner", "cpp_data.pipeline.recipes")),
    ("commands", ("cpp_data.pipeline.commands", "cpp_data.pipeline.cli")),
    ("api", ("cpp_data",)),
]


def _modules() -> dict[str, Path]:
    """{installed module name: file}, from pyproject's package-dir."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    folders = {pkg: (ROOT / d).resolve() for pkg, d in mapping.items()}
    out = {}
    for pkg, folder in folders.items():
        for path in folder.rglob("*.py"):
            if any(other != folder and other in path.resolve().parents for other in folders.values()):
                continue  # pipeline/_namespace belongs to cpp_data, not cpp_data.pipeline
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if not all((folder.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
                continue
            out[".".join([pkg, *(parts[:-1] if parts[-1] == "__init__" else parts)])] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, int, list[str]]]:
    """(imported module, line, names) for every cpp_data import in a file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, []) for a in node.names if a.name.split(".")[0] == "cpp_data"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "cpp_data":
            names = [a.name for a in node.names]
            subs = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in MODULES]
            out += [(s, node.lineno, []) for s in subs]
            if len(subs) < len(names):
                out.append((node.module, node.lineno, [n for n in names if f"{node.module}.{n}" not in MODULES]))
    return out


EDGES = [(name, dst, line, names) for name, path in sorted(MODULES.items()) for dst, line, names in _imports(path)
         if dst != name]


def _rank(module: str) -> int:
    if module == "cpp_data.pipeline":  # the folder's package: an empty __init__.py
        return 0
    best, length = -1, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > length:
                best, length = rank, len(p)
    return best


def test_every_module_has_a_layer():
    """Nothing but the package root sits in the top layer: a new module lands in a layer's folder."""
    assert not [m for m in MODULES if m != "cpp_data" and _rank(m) == len(LAYERS) - 1]


def test_no_module_imports_a_layer_above_its_own():
    up = [f"{a} [{LAYERS[_rank(a)][0]}] -> {b} [{LAYERS[_rank(b)][0]}] line {line}"
          for a, b, line, _ in EDGES if _rank(b) > _rank(a)]
    assert not up, "upward imports:\n" + "\n".join(up)


def _cycles(adj: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(adj[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    """Function-level imports count: a cycle through one is still two modules that cannot be read apart. The
    registry's importlib over the stage modules counts too (cpp_data.stages -> every stage module)."""
    adj: dict[str, set[str]] = defaultdict(set)
    for a, b, _, _ in EDGES:
        if b in MODULES:
            adj[a].add(b)
    stage_modules = [m for m in MODULES if m.count(".") == 2 and m.startswith("cpp_data.stages.")
                     and m != "cpp_data.stages.lib"]
    adj["cpp_data.stages"].update(stage_modules)
    assert not _cycles(adj)


def test_only_the_registry_imports_a_stage_module():
    """Commands and the runner reach a stage through `cpp_data.stages.registry()` or a library function; a
    stage imports no other stage."""
    stage_modules = {m for m in MODULES if m.count(".") == 2 and m.startswith("cpp_data.stages.")
                     and m != "cpp_data.stages.lib"}
    bad = [f"{a} -> {b} line {line}" for a, b, line, _ in EDGES
           if b in stage_modules and a != "cpp_data.stages"]
    assert not bad, bad


def test_no_module_imports_another_modules_private_name():
    bad = [f"{a} line {line}: {b}.{n}" for a, b, line, names in EDGES for n in names
           if n.startswith("_") and n != "__version__"]
    assert not bad, bad


def test_every_module_in_stages_is_a_stage():
    """A module directly in stages/ defines a Stage subclass; shared code lives in stages/lib/."""
    lonely = []
    for path in sorted((ROOT / "stages").glob("*.py")):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text())
        bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for n in ast.walk(tree)
                 if isinstance(n, ast.ClassDef) for b in n.bases}
        if "Stage" not in bases:
            lonely.append(path.name)
    assert not lonely, f"modules in stages/ that hold no stage: {lonely}"


def test_build_asks_for_no_stage_by_name():
    """The publishing step builds the summary and chooses what to publish from what stages declare
    (Stage.summary_counts, Stage.publishes): it never asks the runner for a stage's artifacts by name."""
    tree = ast.parse((ROOT / "pipeline" / "runner" / "build.py").read_text())
    by_name = [node.lineno for node in ast.walk(tree)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr == "artifacts" and node.args and isinstance(node.args[0], ast.Constant)]
    assert not by_name, f"pipeline/runner/build.py asks for stages by name at lines {by_name}"


def test_the_registry_finds_every_stage_module():
    from cpp_data.stages import registry

    names = registry()
    modules = {p.stem for p in (ROOT / "stages").glob("*.py") if p.stem != "__init__"}
    assert {cls.__module__.rsplit(".", 1)[1] for cls in names.values()} == modules
    assert all(cls.name == name for name, cls in names.items())
