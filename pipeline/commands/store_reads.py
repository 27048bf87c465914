"""BUILD arguments that name a build in an object store (`cpp-data validate s3://bucket/out`): validate, verify,
show and diff read such a build through a local copy, fetched and checked against the manifest
(schemas/store_objects.fetch_build), in a temporary directory removed when the command ends. What the command prints
names the build by its URL, not by that directory. A URL of a scheme cpp-data does not support is refused in
one line (exit 2), like any other bad argument."""

from __future__ import annotations

import argparse
import atexit
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from cpp_data.pipeline.commands.common import path_arg
from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.schemas.store import StoreBuild, refuse_scheme, url_scheme
from cpp_data.schemas.store_objects import fetch_build

# the manifest kinds of the files a command reads (the rest stay in the store); a command not named reads all
KINDS_READ = {"show": frozenset({"shard"}), "diff": frozenset({"shard", "ledger"})}
_ORIGIN: dict[Path, StoreBuild] = {}  # local copy -> the build in the store it was fetched from


class StoreURL(str):
    """A BUILD argument naming a build, or an output directory, in an object store."""


def build_arg(text: str) -> Path | StoreURL:
    """An argparse type for a BUILD a command only reads: a local path (path_arg) or a store URL."""
    if url_scheme(text) is None:
        return path_arg(text)
    try:
        refuse_scheme(text)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return StoreURL(text)


class _ShownAs:
    """A text stream that writes each fetched copy's local path as its build's URL."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        for local, build in _ORIGIN.items():
            text = text.replace(str(local), build.url)
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def fetch_for_reading(url: StoreURL, command: str) -> Path:
    """A local copy of the build `url` names, with the files `command` reads."""
    into = Path(tempfile.mkdtemp(prefix="cpp-data-store-"))
    atexit.register(shutil.rmtree, into, True)
    build, local = fetch_build(str(url), into, KINDS_READ.get(command))
    if not _ORIGIN:
        sys.stdout, sys.stderr = _ShownAs(sys.stdout), _ShownAs(sys.stderr)
    _ORIGIN[local] = build
    return local


def origin(local: Path) -> StoreBuild | None:
    """The build in a store that `local` is a copy of; None for a build that is local."""
    return _ORIGIN.get(Path(local))
