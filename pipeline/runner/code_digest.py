"""What a stage's output bytes depend on besides its inputs and parameters: its code and its libraries.

A stage's fingerprint includes `code_digest(stage class)`: the SHA-256 of the source of the stage's module and of
every `cpp_data` module it imports, directly or through others (found by reading `import` statements, also the
ones inside functions), plus the installed versions of the libraries the stage declares as shaping its bytes
(`Stage.libraries`). Editing a stage, or a helper it calls, reruns that stage and what depends on it, without
anyone remembering to bump a version number; upgrading pyarrow reruns the stages that write Parquet.

Hand-written: Python offers no per-module dependency digest (importlib knows what is loaded, not what a module
would import); reading the AST is exact for the absolute `cpp_data` imports this package uses.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import threading
from importlib import metadata
from pathlib import Path

PACKAGE = "cpp_data"
# CPython 3.11 keeps ast.parse's recursion depth in one counter per interpreter, so two threads parsing at once
# can fail with "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905). The runner computes
# fingerprints in two threads when a stage runs beside the others (the tokenizer beside structure), so parses
# take turns.
_PARSE_LOCK = threading.Lock()


@functools.lru_cache(maxsize=None)
def _locate(module: str) -> tuple[str, bool] | None:
    """(file, is_package) of a cpp_data module, found without executing it or its package's __init__ (the
    stages package imports every stage; running it here would also import torch)."""
    parts = module.split(".")
    if len(parts) <= 2:
        try:
            spec = importlib.util.find_spec(module)  # imports only the top package, cpp_data
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        return spec.origin, spec.submodule_search_locations is not None
    parent = _locate(".".join(parts[:-1]))
    if parent is None or not parent[1]:
        return None
    base = Path(parent[0]).parent / parts[-1]
    if (base / "__init__.py").is_file():
        return str(base / "__init__.py"), True
    if base.with_suffix(".py").is_file():
        return str(base.with_suffix(".py")), False
    return None


@functools.lru_cache(maxsize=None)
def _source(module: str) -> bytes | None:
    found = _locate(module)
    if found is None:
        return None
    with open(found[0], "rb") as f:
        return f.read()


@functools.lru_cache(maxsize=None)
def _imports(module: str) -> frozenset[str]:
    """The cpp_data modules `module` imports anywhere in its body. `from pkg import mod` counts `pkg.mod`, not
    `pkg`'s __init__, which only runs on the way."""
    text = _source(module)
    if text is None:
        return frozenset()
    out: set[str] = set()
    with _PARSE_LOCK:
        tree = ast.parse(text)
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if _ours(a.name))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _ours(node.module):
            submodules = [f"{node.module}.{a.name}" for a in node.names if _locate(f"{node.module}.{a.name}")]
            out.update(submodules)
            if len(submodules) < len(node.names):  # a name defined in the module itself
                out.add(node.module)
    return frozenset(m for m in out if _locate(m))


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def _statements(tree: ast.Module):
    """Every statement of a module, nested ones included (function and class bodies, branches, handlers, match
    cases), without entering expressions: an import is always a statement, and visiting every expression node
    (ast.walk) would be most of the cost of reading a build's module imports."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        for value in node.__dict__.values():
            if isinstance(value, list) and value and isinstance(value[0], _BLOCKS):
                todo.extend(value)


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def module_closure(module: str) -> list[str]:
    """`module` and every cpp_data module reachable through its imports, sorted."""
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(_imports(m) - seen)
    return sorted(seen)


def library_versions(names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for name in sorted(names):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


@functools.lru_cache(maxsize=None)
def code_digest(module: str, libraries: tuple[str, ...] = ()) -> str:
    """SHA-256 over the source of `module`'s import closure within cpp_data and the versions of `libraries`."""
    h = hashlib.sha256()
    for m in module_closure(module):
        text = _source(m)
        if text is not None:
            h.update(m.encode() + b"\0" + hashlib.sha256(text).digest())
    for name, version in library_versions(libraries).items():
        h.update(f"{name}=={version}\n".encode())
    return h.hexdigest()
