"""How a command ends: every error turned into its exit code (pipeline/foundation/errors.py) and one line on
stderr, the traceback only with --debug; SIGTERM raised as Terminated in the main thread, so a command unwinds as
on Ctrl-C; with --log-format json, a failed command's last event on stdout says why."""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import threading

from cpp_data.pipeline.foundation.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    CppDataError,
    Terminated,
)

_LAST_ERROR: list[str] = []  # the line _err printed last: a JSON log's closing `error` event repeats it


def _err(msg: str) -> None:
    _LAST_ERROR[:] = [msg]
    print(f"cpp-data: error: {msg}", file=sys.stderr)


def json_error_event(rc: int) -> None:
    """With --log-format json, a build that fails says so on stdout too, as its last event, so a scheduler
    reading the JSON lines learns why the stream ends."""
    from cpp_data.pipeline.runner.buildlog import utc_now

    record = {"time": utc_now(), "event": "error",
              "exit_code": rc, "message": _LAST_ERROR[0] if _LAST_ERROR else ""}
    try:
        print(json.dumps(record, ensure_ascii=False), flush=True)
    except (BrokenPipeError, ValueError, OSError):
        pass


def run_command(args: argparse.Namespace, prepare) -> int:
    """The command `args.func` on `prepare(args)`, with every error turned into its exit code and one line on
    stderr."""
    previous = _raise_on_sigterm()
    try:
        return args.func(prepare(args))
    except Terminated:
        return _terminated()
    except CppDataError as exc:
        if _SIGTERM_SEEN:  # the signal went to the whole group: a worker's death surfaced first, as a failure
            return _terminated()
        if args.debug:
            raise
        _err(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return exc.exit_code
    except KeyboardInterrupt:
        _err("interrupted (run the same command again: a build resumes from its finished tasks)")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `cpp-data recipes show v6 | head`: the reader left; stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:
        if _SIGTERM_SEEN:
            return _terminated()
        if args.debug:
            raise
        return _os_error(exc)
    except Exception as exc:  # a bug or an unexpected environment: one line, the traceback on request
        if _SIGTERM_SEEN:
            return _terminated()
        if args.debug:
            raise
        _err(f"{type(exc).__name__}: {exc} (run again with --debug for the traceback)".splitlines()[0])
        return EXIT_FAILED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


_SIGTERM_SEEN: list[int] = []  # the SIGTERMs this command received (a scheduler may signal every process at once)


def _terminated() -> int:
    _err("terminated by SIGTERM (run the same command again: a build resumes from its finished tasks)")
    return EXIT_TERMINATED


def _raise_on_sigterm():
    """Make SIGTERM raise Terminated in this (main) thread for the command's duration; the previous handler,
    or None where signals cannot be set (not the main thread)."""
    _SIGTERM_SEEN.clear()
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminated(signum, frame):
        _SIGTERM_SEEN.append(signum)
        raise Terminated()

    return signal.signal(signal.SIGTERM, terminated)


def _os_error(exc: OSError) -> int:
    """The file system said no: name the path, and say whether to fix the input (2) or free space and retry (1)."""
    where = f"{exc.filename}: " if exc.filename else ""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        _err(f"{where}{exc.strerror} (give a path this user can write, or change its permissions)")
        return EXIT_USAGE
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        _err(f"{where}no space left on its device; free space and run the same command again")
        return EXIT_FAILED
    _err(f"{where}{exc.strerror or exc} (run again with --debug for the traceback)".splitlines()[0])
    return EXIT_FAILED


def clear_last_error() -> None:
    _LAST_ERROR.clear()
