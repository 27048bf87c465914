"""One error hierarchy, and the exit-code table every command follows.

| exit | meaning                                                          | error class   |
|------|------------------------------------------------------------------|---------------|
| 0    | success (build: a new build was published)                       |               |
| 1    | a stage or a check failed                                        | CheckFailed   |
| 2    | bad input: the one-line message names the file and the problem   | BadInput      |
| 3    | nothing to do (build: these pins and this recipe are built)      | NothingToDo   |
| 75   | another build holds the output directory (EX_TEMPFAIL)           | Locked        |
| 130  | interrupted (Ctrl-C, SIGINT); a build rerun resumes              | (KeyboardInterrupt) |
| 143  | terminated (SIGTERM: a scheduler's time limit, a stopped service) | Terminated    |

Modules raise these (or subclasses with their own names: SourcesError, RecipeError, ShardError, StageFailed,
BuildLocked); the CLI turns one into its exit code and a single line on stderr. Anything else is a bug: one
line too, and the traceback only with --debug.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOTHING_TO_DO, EXIT_LOCKED = 0, 1, 2, 3, 75
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143  # 128 + the signal's number, as shells report them


class CppDataError(Exception):
    """Base of every error the CLI reports as one line."""

    exit_code = EXIT_FAILED


class CheckFailed(CppDataError):
    """A stage, a gate or a validation failed."""

    exit_code = EXIT_FAILED


class UnexplainedOutput(CheckFailed):
    """A stage's output does not account for its input (documents read but neither kept nor refused): the
    runner discards the output instead of sealing it, so the next run redoes the stage."""

    def __init__(self, message: str, directory: str):
        super().__init__(message)
        self.directory = directory  # the unsealed output to discard


class BadInput(CppDataError, ValueError):
    """A file or argument the user gave cannot be used; the message names it and what to do."""

    exit_code = EXIT_USAGE


class NothingToDo(CppDataError):
    """The command had nothing to do (not an error for schedulers)."""

    exit_code = EXIT_NOTHING_TO_DO


class Locked(CppDataError):
    """Another process holds the output directory."""

    exit_code = EXIT_LOCKED


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the command (Slurm's time limit, `systemctl stop`, a pod's eviction). Raised by the CLI's
    handler in the main thread, so the command unwinds as on Ctrl-C (pools stopped, locks released) instead of
    dying at once and leaving its workers to print broken-pipe tracebacks."""
