"""The stages of the DAG, one module each in this package (their shared code lives in stages/lib/).

`registry()` finds them: every Stage subclass defined in a module here, by its `name`. Adding a stage means
adding its module and naming it in a recipe; nothing else lists stages. Modules are imported on the first call,
not when this package is imported.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil


@functools.cache
def registry() -> dict[str, type]:
    """{stage name: Stage subclass} over the modules of this package."""
    from cpp_data.pipeline.contract.stage import Stage

    found: dict[str, type] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Stage) and obj.__module__ == module.__name__:
                if obj.name in found:
                    raise ValueError(f"two stages are named {obj.name!r}: {found[obj.name].__module__} and "
                                     f"{module.__name__}")
                found[obj.name] = obj
    return found


def __getattr__(name: str):
    if name == "STAGES":  # the registry under its old name
        return registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
