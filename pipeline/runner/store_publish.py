"""`cpp-data publish BUILD URL`: copy a sealed local build into an object store, sealed there too.

A store has no rename, so the build is sealed as datatrove-style writers seal a prefix: every file but the seal
is uploaded, each object is read back and checked against the manifest (size and SHA-256; manifest.json and
reports/summary.json against the local bytes), nothing else may sit under the prefix, and only then is
`_COMPLETE` written. Readers (schemas/store.py) trust a prefix only with `_COMPLETE`. Then the output
directory's pointers move: builds/LATEST names the build (unless asked not to), a build the local output
directory promoted (verify passed) is promoted there too with its receipt, and the store's OUT/README.md card
follows PROMOTED, else LATEST. One publisher per output prefix at a time: a store has no lock.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from cpp_data.pipeline.foundation.errors import BadInput, CheckFailed
from cpp_data.schemas.dataset_card import output_card
from cpp_data.schemas.manifest import load_manifest, named_build
from cpp_data.schemas.store import UNLISTED, StoreBuild, open_store, read_manifest, url_scheme
from cpp_data.schemas.store_objects import expected_objects, object_problems


@dataclass
class Published:
    url: str  # the build's URL in the store
    files: int
    bytes: int
    new: bool  # False: the same build was already sealed there
    pointers: list[str]  # the store's pointer objects this run wrote (builds/LATEST, builds/PROMOTED, README.md)


def _digest(data: bytes) -> tuple[int, str]:
    return len(data), hashlib.sha256(data).hexdigest()


def _local_objects(build: Path, manifest: dict) -> dict[str, tuple[int, str]]:
    """Every object the build is in the store, but its seal: (bytes, SHA-256) from the manifest, and for the two
    files it does not list from their local bytes."""
    return expected_objects(manifest, {rel: _digest((build / rel).read_bytes()) for rel in UNLISTED
                                       if (build / rel).is_file()})


def _already_there(target: StoreBuild, build: Path) -> bool:
    """True when the store holds this very build sealed; BadInput when it holds another of that name."""
    if not target.fs.exists(target.path("_COMPLETE")):
        return False
    _, raw = read_manifest(target)
    if raw != (build / "manifest.json").read_bytes():
        raise BadInput(f"{target.url}: a different build of that name is already published there; a published "
                       f"build is never replaced (remove it from the store first if it must go)")
    return True


def _upload(target: StoreBuild, build: Path, expected: dict[str, tuple[int, str]]) -> None:
    """Upload, read back, and only then seal."""
    if target.fs.exists(target.root):  # an upload that did not finish: its objects would fail the check below
        target.fs.rm(target.root, recursive=True)
    rels = sorted(expected)
    target.fs.put([str(build / r) for r in rels], [target.path(r) for r in rels])
    target.fs.invalidate_cache()
    problems = object_problems(target.fs, target.root, expected)
    if problems:
        raise CheckFailed(f"{target.url}: the upload does not match the build: {problems[0]} "
                          f"({len(problems)} problem(s)); not sealed, publish again")
    target.fs.pipe_file(target.path("_COMPLETE"), (build / "_COMPLETE").read_bytes())


def _promoted_locally(build: Path) -> Path | None:
    """The local verify receipt when the build's own output directory promoted it, else None."""
    out = build.parent.parent
    receipt = out / "verify" / f"{build.name}.json"
    if build.parent.name == "builds" and named_build(out, "PROMOTED") == build.name and receipt.is_file():
        return receipt
    return None


def move_pointers(fs, scheme: str, out_root: str, name: str, latest: bool, receipt: bytes | None) -> list[str]:
    """Point the store's output directory at build `name`: builds/LATEST (when `latest`), builds/PROMOTED with
    the verify receipt (when `receipt`), and the README.md card (PROMOTED's build, else LATEST's). Each is one
    object written whole. Returns the objects written."""
    written = []
    if receipt is not None:
        fs.pipe_file(f"{out_root}/verify/{name}.json", receipt)
        fs.pipe_file(f"{out_root}/builds/PROMOTED", f"{name}\n".encode())
        written.append("builds/PROMOTED")
    if latest:
        fs.pipe_file(f"{out_root}/builds/LATEST", f"{name}\n".encode())
        written.append("builds/LATEST")
    card = _store_card_build(fs, out_root)
    if card is not None:
        target = StoreBuild(fs, f"{out_root}/builds/{card[0]}", scheme)
        manifest, _ = read_manifest(target)
        fs.pipe_file(f"{out_root}/README.md", output_card(card[0], card[1], manifest["files"]).encode())
        written.append("README.md")
    return written


def _store_card_build(fs, out_root: str) -> tuple[str, str] | None:
    """(build, pointer) the store's card follows: PROMOTED's sealed build, else LATEST's."""
    for pointer in ("PROMOTED", "LATEST"):
        path = f"{out_root}/builds/{pointer}"
        name = fs.cat_file(path).decode("utf-8", "replace").strip() if fs.isfile(path) else ""
        if name and "/" not in name and fs.exists(f"{out_root}/builds/{name}/_COMPLETE"):
            return name, pointer
    return None


def publish_build(build: Path, out_url: str, latest: bool = True, storage_options: dict | None = None) -> Published:
    """Publish the sealed local `build` as OUT_URL/builds/NAME (validated first, so nothing damaged leaves)."""
    from cpp_data.schemas.validate import validate_build

    validate_build(build)
    manifest = load_manifest(build)
    fs, out_root = open_store(out_url, storage_options)
    target = StoreBuild(fs, f"{out_root}/builds/{build.name}", str(url_scheme(out_url)))
    expected = _local_objects(build, manifest)
    new = not _already_there(target, build)
    if new:
        _upload(target, build, expected)
    receipt = _promoted_locally(build)
    pointers = move_pointers(fs, target.scheme, out_root, build.name, latest,
                             receipt.read_bytes() if receipt else None)
    return Published(target.url, len(expected) + 1, sum(size for size, _ in expected.values()), new, pointers)


def promote_in_store(build: StoreBuild, receipt: Path) -> list[str]:
    """After `cpp-data verify URL` passed on a build read from a store: its receipt and PROMOTED there."""
    json.loads(receipt.read_text())  # a receipt that is not JSON never reaches the store
    return move_pointers(build.fs, build.scheme, build.out, build.name, False, receipt.read_bytes())
