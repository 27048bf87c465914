"""The objects of a build in a store, checked: read back, hashed and compared with the manifest.

What `cpp-data publish` runs before it seals a prefix (object_problems) and what a reader of a store runs on the
files it fetches (fetch_build). Hashing reads each object back from the store a chunk at a time, several at
once: a size in a listing says nothing of the bytes, and a store's ETag is no SHA-256 (multipart uploads).
"""

from __future__ import annotations

import hashlib
import posixpath
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cpp_data.pipeline.foundation.errors import CheckFailed
from cpp_data.schemas.store import StoreBuild, locate_build, read_manifest, require_sealed

CHUNK = 8 << 20  # bytes read at a time when an object is hashed
WORKERS = 8  # objects hashed at once


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
