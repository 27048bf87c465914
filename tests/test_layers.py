"""The layering rule of issue 13: stages/ holds DAG nodes; a stage imports the library layer (stages/lib/),
the formats (schemas/) and the runner's contracts (pipeline/), never another stage; the library layer and the
formats import no stage."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    """Every cpp_data module a file imports, at any depth (function-level imports included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cpp_data"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("cpp_data"))
    return out


def _stage_modules() -> set[str]:
    return {f"cpp_data.stages.{p.stem}" for p in (ROOT / "stages").glob("*.py") if p.stem != "__init__"}


def test_no_stage_imports_another_stage():
    stages = _stage_modules()
    bad = {}
    for path in sorted((ROOT / "stages").glob("*.py")):
        if path.stem == "__init__":
            continue
        mine = f"cpp_data.stages.{path.stem}"
        hits = sorted(m for m in _imports(path) if any(m == s or m.startswith(s + ".") for s in stages - {mine}))
        if hits:
            bad[path.name] = hits
    assert not bad, f"stages importing other stages: {bad}"


def test_library_layer_and_formats_import_no_stage():
    stages = _stage_modules()
    bad = {}
    for path in sorted([*(ROOT / "stages" / "lib").glob("*.py"), *(ROOT / "schemas").glob("*.py")]):
        hits = sorted(m for m in _imports(path) if any(m == s or m.startswith(s + ".") for s in stages))
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    assert not bad, f"library or format modules importing stages: {bad}"


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


def test_build_py_asks_for_no_stage_by_name():
    """pipeline/runner/build.py builds the summary and chooses what to publish from what stages declare
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
