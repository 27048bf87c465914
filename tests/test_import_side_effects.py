"""Issue 13, point 6: importing cpp_data does nothing to the process that imports it. The state an import could
change is the umask (fsutil), loguru's handlers (executors) and torch.cuda with a process group (verify's train
step). A child interpreter imports every module of the package and compares that state, with signal handlers,
environment, streams and the multiprocessing start method, before and after. What the libraries do when
imported (datatrove replaces loguru's default handler) happens before the first look. The test can fail: with
datatrove imported only by cpp_data, it names loguru_handlers."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = r"""
import importlib, json, multiprocessing, os, pkgutil, signal, sys
from loguru import logger
import datatrove.utils.logging  # datatrove swaps loguru's default handler for its own when imported: its
import torch, torch.distributed  # doing, not ours, so it happens before the "before" state
import megatron.core.packed_seq_params  # so does megatron-core: its import sets TORCHINDUCTOR_CACHE_DIR


def state():
    mask = os.umask(0o022)
    os.umask(mask)
    cuda = torch.cuda
    return {"umask": mask, "loguru_handlers": sorted(map(str, logger._core.handlers)),
            "signals": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)},
            "environ": dict(os.environ), "streams": [id(sys.stdout), id(sys.stderr), id(sys.stdin)],
            "start_method": multiprocessing.get_start_method(allow_none=True),
            "cuda": [id(getattr(cuda, n)) for n in ("is_available", "device_count", "current_device",
                                                     "set_device", "synchronize")],
            "process_group": torch.distributed.is_available() and torch.distributed.is_initialized()}


os.umask(0o027)  # not the default, so that a module setting its own is seen
before = state()
names = []
for top in ("pipeline", "stages", "schemas", "tokenizer", "clang_index", "harness"):  # pyproject's packages
    package = importlib.import_module(f"cpp_data.{top}")
    names.append(package.__name__)
    names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
              if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": len(names), "before": before, "after": state()}))
"""


def test_importing_every_module_changes_nothing_in_the_process():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["modules"] > 60, result["modules"]  # the walk reached the stages, the library and the harness
    before, after = result["before"], result["after"]
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    if "environ" in changed:  # name only the variables, not every value of the environment
        b, a = changed.pop("environ")
        changed["environ"] = sorted(k for k in set(b) | set(a) if b.get(k) != a.get(k))
    assert not changed, changed
