"""Run a repository's own build code (CMake, Meson, a `configure` script, make) where it can do no harm.

Under bubblewrap: the whole filesystem read-only except the work directory, a private /tmp, a temporary HOME,
no network, killed with its process group at the time limit. Where bwrap is missing or does not work (some
containers forbid namespaces), `sandbox_problem` says why and the caller decides (the recipe's
`allow_unsandboxed_configure`). Every run is one `Attempt`, as the coverage receipt records it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TAIL_LINES = 8


@dataclass
class Attempt:
    """One configure run, as the receipt records it."""
    tool: str
    options: list[str]
    ok: bool = False
    seconds: float = 0.0
    tail: list[str] = field(default_factory=list)


def sandbox_problem() -> str | None:
    """None when bubblewrap can run a command here; else one line saying why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap not found (apt-get install bubblewrap)"
    try:
        proc = subprocess.run([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
                               "--die-with-parent", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap does not run here: {exc}"
    if proc.returncode != 0:
        return f"bwrap does not run here: {(proc.stderr.strip().splitlines() or ['exit %d' % proc.returncode])[-1]}"
    return None


def sandboxed(cmd: list[str], root: Path, work: Path, sandbox: bool) -> tuple[list[str], dict]:
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "CMAKE_BUILD_PARALLEL_LEVEL": "1"}
    if not sandbox:
        return cmd, env
    # later mounts lie on top of earlier ones: the source, the build directory and this Python's environment
    # (meson is installed there, with the interpreter its script names) stay visible even where they live under
    # the private /tmp
    return ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--ro-bind", sys.prefix, sys.prefix, "--ro-bind", sys.base_prefix, sys.base_prefix,
            "--ro-bind", str(root), str(root), "--bind", str(work), str(work), "--unshare-net", "--die-with-parent",
            "--chdir", str(work), *cmd], env


def run_sandboxed(attempt: Attempt, cmd: list[str], root: Path, work: Path, sandbox: bool, timeout_s: float,
         keep: list[str] | None = None) -> bool:
    """Run `cmd` sandboxed into `attempt` (ok, seconds, the last lines of a failure); `keep` gets the whole
    output, for a caller that reads it (the make dry run)."""
    argv, env = sandboxed(cmd, root, work, sandbox)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, text=True, errors="replace")
    except OSError as exc:
        attempt.tail = [f"cannot start {argv[0]}: {exc}"]
        return False
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output += f"\nkilled after {timeout_s:.0f}s (configure_timeout_s)"
    attempt.seconds = round(time.monotonic() - t0, 2)
    attempt.ok = proc.returncode == 0
    if keep is not None:
        keep.append(output)
    if not attempt.ok:
        attempt.tail = [ln for ln in output.strip().splitlines() if ln.strip()][-TAIL_LINES:]
    return attempt.ok
