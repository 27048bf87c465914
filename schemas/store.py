"""Builds kept in an object store: how a URL is read, and how a published build there is found and checked.

A build in a store is laid out as on disk (docs/FORMATS.md, "Object storage"): OUT/builds/NAME/ holds the
build's files, OUT/builds/LATEST and OUT/builds/PROMOTED name builds, OUT/README.md is the output directory's
dataset card. A store has no rename, so a build there is sealed by writing `_COMPLETE` last, after every other
object has been read back and checked against the manifest (pipeline/runner/store_publish.py); readers trust
only a prefix with `_COMPLETE`, and only the objects its manifest lists.

Stores are reached through fsspec; `s3://` (s3fs) is the scheme this supports and tests, against any
S3-compatible server (the endpoint and the keys come from the usual AWS settings: AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, a profile). Any other URL scheme is refused in one line.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpp_data.pipeline.foundation.errors import BadInput, CheckFailed
from cpp_data.schemas.manifest import FORMAT, check_manifest

SCHEMES = ("s3",)  # the URL schemes a build is published to and read from
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
CHUNK = 8 << 20  # bytes read at a time when an object is hashed
WORKERS = 8  # objects moved or hashed at once
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
    except ImportError as exc:  # s3fs is a dependency; a trimmed install may lack it
        raise BadInput(f"{url}: reading {url_scheme(url)}:// needs a package that is not installed ({exc})") from None
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


def sha256_object(fs, path: str) -> str:
    """SHA-256 of an object, read back from the store a chunk at a time (never held whole)."""
    h = hashlib.sha256()
    with fs.open(path, "rb", block_size=CHUNK, cache_type="none") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def expected_objects(manifest: dict, unlisted: dict[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
    """{relative path: (bytes, SHA-256)} of every object a build holds but its seal: the manifest's files and
    `unlisted` (manifest.json and reports/summary.json, whose digests come from elsewhere)."""
    out = {e["path"]: (e["bytes"], e["sha256"]) for e in manifest["files"]}
    out.update(unlisted)
    return out


def object_problems(fs, root: str, expected: dict[str, tuple[int, str]]) -> list[str]:
    """What differs between the objects under `root` and `expected`: a missing object, a size or SHA-256
    (read back) other than expected, an object no one expects (`_COMPLETE` aside). Empty when all match."""
    listing = {posixpath.relpath(p, root): d for p, d in fs.find(root, detail=True).items()}
    problems = []
    for rel, (size, _) in sorted(expected.items()):
        if rel not in listing:
            problems.append(f"{rel}: missing")
        elif listing[rel].get("size") != size:
            problems.append(f"{rel}: {listing[rel].get('size')} bytes, manifest says {size}")
    problems += [f"{rel}: in the store but not in the manifest" for rel in sorted(set(listing) - set(expected))
                 if rel != "_COMPLETE"]
    present = sorted(r for r in expected if r in listing)
    with ThreadPoolExecutor(WORKERS) as pool:
        digests = list(pool.map(lambda r: sha256_object(fs, f"{root}/{r}"), present))
    for rel, digest in zip(present, digests):
        if digest != expected[rel][1]:
            problems.append(f"{rel}: SHA-256 {digest[:16]}..., manifest says {expected[rel][1][:16]}...")
    return problems


def fetch_build(url: str, into: Path, kinds: frozenset[str] | None = None,
                storage_options: dict | None = None) -> tuple[StoreBuild, Path]:
    """Copy a sealed build from a store into `into`/builds/NAME; returns the build in the store and the local
    directory. Every file copied is checked
    against the manifest's SHA-256 (CheckFailed names the object otherwise). `kinds`: only the manifest files of
    these kinds (shard, ledger, ...), for a reader that needs no more; None: every file, and then an object under
    the prefix that the manifest does not list fails too, as an unlisted file fails validate."""
    from cpp_data.schemas.manifest import sha256_file

    build = require_sealed(locate_build(url, storage_options))
    manifest, raw = read_manifest(build)
    local = Path(into) / "builds" / build.name
    local.mkdir(parents=True, exist_ok=True)
    (local / "manifest.json").write_bytes(raw)
    want = {e["path"]: e.get("sha256") for e in manifest["files"] if kinds is None or e.get("kind") in kinds}
    for rel in want:
        if not _inside(rel):
            raise CheckFailed(f"{build.url_of('manifest.json')}: lists {rel!r}, which is not a path inside the build")
    if build.fs.exists(build.path("reports/summary.json")):
        want["reports/summary.json"] = manifest.get("summary_sha256")
    if kinds is None:
        extra = sorted(set(posixpath.relpath(p, build.root) for p in build.fs.find(build.root))
                       - set(want) - {"manifest.json", "_COMPLETE"})
        if extra:
            raise CheckFailed(f"{build.url_of(extra[0])}: in the store but not in the build's manifest "
                              f"({len(extra)} such object(s)); the prefix holds more than the build")
    rels = sorted(want)
    for rel in rels:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
    if rels:
        build.fs.get([build.path(r) for r in rels], [str(local / r) for r in rels])
    for rel in rels:
        if want[rel] is not None and sha256_file(local / rel) != want[rel]:
            raise CheckFailed(f"{build.url_of(rel)}: SHA-256 differs from the manifest's (damaged in the store); "
                              f"publish the build again")
    (local / "_COMPLETE").write_bytes(build.fs.cat_file(build.path("_COMPLETE")))
    return build, local


def _inside(rel: str) -> bool:
    """A manifest path that stays inside its build: relative, no `..` part."""
    return bool(rel) and not rel.startswith("/") and ".." not in rel.split("/")
