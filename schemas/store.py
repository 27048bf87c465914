"""Builds kept in an object store: how a URL is read, and how a published build there is found and sealed.

A build in a store is laid out as on disk (docs/FORMATS.md, "Object storage"): OUT/builds/NAME/ holds the
build's files, OUT/builds/LATEST and OUT/builds/PROMOTED name builds, OUT/README.md is the output directory's
dataset card. A store has no rename, so a build there is sealed by writing `_COMPLETE` last, after every other
object has been read back and checked against the manifest (pipeline/runner/store_publish.py); readers trust
only a prefix with `_COMPLETE`, and only the objects its manifest lists (schemas/store_objects.py checks them).

Stores are reached through fsspec; `s3://` (s3fs) is the scheme this supports and tests, against any
S3-compatible server (the endpoint and the keys come from the usual AWS settings: AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, a profile). Any other URL scheme is refused in one line.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.schemas.manifest import FORMAT, check_manifest

SCHEMES = ("s3",)  # the URL schemes a build is published to and read from
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# a build's files its manifest does not list (schemas/validate.BUILD_FILES), in the order they are uploaded
UNLISTED = ("manifest.json", "reports/summary.json")


def url_scheme(text: str) -> str | None:
    """`s3` for "s3://bucket/x", None for a plain path."""
    m = _URL.match(text)
    return m.group(1).lower() if m else None


def is_url(text: Any) -> bool:
    return isinstance(text, str) and url_scheme(text) is not None


def refuse_scheme(url: str) -> None:
    """BadInput unless `url` is of a scheme this reads and writes."""
    scheme = url_scheme(url)
    if scheme not in SCHEMES:
        raise BadInput(f"{url}: {scheme}:// is not a store cpp-data reads or writes; it supports "
                       f"{', '.join(s + '://' for s in SCHEMES)} (docs/FORMATS.md, Object storage)")


def open_store(url: str, storage_options: dict | None = None):
    """(fsspec filesystem, path within it without a trailing slash) of a store URL."""
    refuse_scheme(url)
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as exc:  # s3fs comes with the s3 and test extras, not the base install
        raise BadInput(f"{url}: {url_scheme(url)}:// needs s3fs, which is not installed ({exc}); "
                       f"pip install 'cpp-data[s3]'") from None
    root = root.rstrip("/")
    if not root:
        raise BadInput(f"{url}: names no bucket; give s3://BUCKET/PREFIX")
    return fs, root


@dataclass(frozen=True)
class StoreBuild:
    """A published build in a store: its filesystem, its path there and its URL (scheme and path)."""

    fs: Any
    root: str
    scheme: str

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.root}"

    @property
    def name(self) -> str:
        return posixpath.basename(self.root)

    @property
    def out(self) -> str:
        """The output directory's path in the store (the build's grandparent)."""
        return posixpath.dirname(posixpath.dirname(self.root))

    @property
    def out_url(self) -> str:
        return f"{self.scheme}://{self.out}"

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def url_of(self, rel: str) -> str:
        return f"{self.scheme}://{self.root}/{rel}"


def _pointer(fs, path: str, url: str) -> str:
    """The build name a LATEST or PROMOTED object holds."""
    name = fs.cat_file(path).decode("utf-8", "replace").strip()
    if not name or "/" in name:
        raise BadInput(f"{url}: holds {name!r}, which is not a build name")
    return name


def locate_build(url: str, storage_options: dict | None = None) -> StoreBuild:
    """The build a URL names: a build's prefix, OUT/builds/LATEST or OUT/builds/PROMOTED, or an output
    directory's prefix (its builds/LATEST), as resolve_build reads a local path."""
    fs, root = open_store(url, storage_options)
    scheme = str(url_scheme(url))
    if fs.exists(f"{root}/manifest.json") or fs.exists(f"{root}/_COMPLETE"):
        return StoreBuild(fs, root, scheme)
    base, parent = posixpath.basename(root), posixpath.basename(posixpath.dirname(root))
    if base in ("LATEST", "PROMOTED") and parent == "builds" and fs.isfile(root):
        return StoreBuild(fs, f"{posixpath.dirname(root)}/{_pointer(fs, root, url)}", scheme)
    if fs.isfile(f"{root}/builds/LATEST"):
        return StoreBuild(fs, f"{root}/builds/{_pointer(fs, f'{root}/builds/LATEST', url)}", scheme)
    raise BadInput(f"{url}: not a build (no manifest.json) and not an output directory (no builds/LATEST)")


def require_sealed(build: StoreBuild) -> StoreBuild:
    """The build if its `_COMPLETE` object is there; a prefix without it is an upload that did not finish."""
    from cpp_data.schemas.reader import IncompleteBuild

    if not build.fs.exists(build.path("_COMPLETE")):
        raise IncompleteBuild(f"{build.url}: no _COMPLETE marker; the prefix is incomplete and is not read")
    return build


def read_manifest(build: StoreBuild) -> tuple[dict, bytes]:
    """(manifest, its bytes) of a build in a store, checked as load_manifest checks a local one."""
    where = build.url_of("manifest.json")
    try:
        raw = build.fs.cat_file(build.path("manifest.json"))
    except FileNotFoundError:
        raise BadInput(f"{where}: missing") from None
    try:
        manifest = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        raise BadInput(f"{where}: format {got!r}, expected {FORMAT!r}")
    check_manifest(manifest, where)
    return manifest, raw
