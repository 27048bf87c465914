"""The build manifest: every file with SHA-256, rows and bytes, plus what produced the build.

Format (JSON, `manifest.json` at the root of a build):
  format: "cpp-data-manifest/1"
  build: name; schema_generation: v2..v6; created_at (UTC ISO); cpp_data_version
  recipe: {version, path, sha256, stages: {...}} ; sources: the lock entries (url, requested ref, resolved commit)
  stages: [{stage, source, fingerprint, version, params, counts, seconds}]
  tokenizer: {path, sha256, vocab_size, band_revision} or null (recipes without a tokenizer stage)
  files: [{path, kind, split, rows, bytes, sha256, tokens?}]  paths relative to the build directory; kind is
         shard, tokenizer or ledger; shards carry their token count once token ids are written
  totals: {documents, train_documents, valid_documents, text_bytes, tokens}
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.foundation.fsutil import hash_file

FORMAT = "cpp-data-manifest/1"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file, read `chunk` bytes at a time."""
    return hash_file(hashlib.sha256(), path, chunk).hexdigest()


def load_manifest(build_dir: Path) -> dict[str, Any]:
    """Read and minimally check `manifest.json`; raises ValueError with the file named."""
    from cpp_data.pipeline.foundation.fsutil import read_versioned_json

    path = Path(build_dir) / "manifest.json"
    return check_manifest(read_versioned_json(path, FORMAT), str(path))


def check_manifest(manifest: dict[str, Any], where: str) -> dict[str, Any]:
    """`manifest` if it has what every reader of a build relies on; BadInput naming `where` otherwise."""
    for key in ("schema_generation", "files"):
        if key not in manifest:
            raise BadInput(f"{where}: missing key {key!r}")
    if not isinstance(manifest["schema_generation"], str) or not isinstance(manifest["files"], list):
        raise BadInput(f"{where}: damaged (schema_generation must be a string and files a list)")
    for k, entry in enumerate(manifest["files"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) \
                or not isinstance(entry.get("kind", ""), str):
            raise BadInput(f"{where}: damaged (files[{k}] is not an entry with a path)")
    return manifest


def named_build(out: Path, pointer: str) -> str | None:
    """The build name OUT/builds/<pointer> holds (LATEST or PROMOTED), None without that file."""
    f = Path(out) / "builds" / pointer
    return f.read_text().strip() if f.is_file() else None


def sealed_builds(out: Path) -> list[tuple[Path, dict[str, Any] | None]]:
    """(directory, manifest) of every sealed build under OUT/builds/, in name order (plan and gc look at these);
    the manifest is None where it is missing or damaged (load_manifest says why)."""
    from cpp_data.pipeline.foundation.fsutil import is_sealed

    builds = Path(out) / "builds"
    if not builds.is_dir():
        return []
    found: list[tuple[Path, dict[str, Any] | None]] = []
    for d in sorted(builds.iterdir()):
        if d.is_dir() and is_sealed(d):
            try:
                found.append((d, load_manifest(d)))
            except BadInput:
                found.append((d, None))
    return found
