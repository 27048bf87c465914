"""A per-TU cache of libclang index results, shared by every build and source of an output directory.

A TU's result depends on its command, libclang, the indexing code and the contents of every file its parse
read; which headers those are is only known after a parse, so the cache has two levels, as ccache's direct mode
does:
- `manifests/<k1>.json`, k1 = H(format, libclang's version, its resource directory, the digest of the indexing
  code, the command's directory and cleaned arguments, the main file's name and the files the TU does not walk
  (clang_index/selection.py), all placeless, and the main file's contents): up to MAX_VARIANTS recorded input
  sets, newest first, each with every file the parse read (main file and headers, the project's and the
  system's, from the TU's own include list) and its XXH3, the tree's files of each basename the TU read or
  failed to find (a header added to the tree that would now answer an include, earlier on the search path,
  changes that list), the result's name and digest, and the parse's seconds (seconds_before: which changed TUs
  to start first; never part of a result);
- `results/<k2>.json`: the result, placeless (`<source>/...`, `<configure>/...`), k2 = H(k1, the inputs).
A lookup hashes the main file, reads the manifest, and takes the first variant whose inputs all hash the same
now (each file hashed once per build, whatever the number of TUs that read it) and whose basename lists are
those of the tree now; the result's bytes are verified against the recorded digest before reuse, as the stage
cache verifies its entries, and a damaged one is parsed again and written anew. Writes are atomic (temporary
file, then rename), so builds sharing the directory never read half an entry.

Hand-written: clang has no cache of index results (its PCH and module caches hold ASTs, not these rows), and
ccache caches objects keyed by preprocessor output, which would need a preprocessing run per TU.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from cpp_data.clang_index.compile_db import CompileCommand, clean_args
from cpp_data.pipeline.foundation.fsutil import atomic_write_bytes

FORMAT = 2  # 2: the files a TU skips (clang_index/selection.py) are part of its key
MAX_VARIANTS = 4
_NOT_FOUND = re.compile(r"'([^']+)' file not found")
# The code whose output a cached result is: a change to any of these files makes every entry miss
_CODE = ("walker.py", "compile_db.py", "tu_cache.py")


def libclang_version() -> str:
    """clang_getClangVersion's text (cindex does not declare its return type, so it is declared here)."""
    import clang.cindex as ci

    lib = ci.conf.lib
    fn = lib.clang_getClangVersion
    fn.restype = ci._CXString
    fn.errcheck = ci._CXString.from_result
    return str(fn())


@functools.cache
def code_digest() -> str:
    """SHA-256 of the indexing code (_CODE), read once per process: the code the process runs, so that its
    stage runs agree on the key even where the files are edited on disk meanwhile."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in _CODE:
        h.update((here / name).read_bytes())
    return h.hexdigest()


class Placeless:
    """Paths of this build's tree and configure run written as tokens, and back."""

    def __init__(self, places: list[tuple[str, str]]):
        self.places = sorted(places, key=lambda p: -len(p[0]))  # the longest first: one may hold the other

    def out(self, text: str) -> str:
        for where, token in self.places:
            text = text.replace(where, token)
        return text

    def back(self, text: str) -> str:
        for where, token in self.places:
            text = text.replace(token, where)
        return text


@dataclass
class TUCache:
    """The cache at `directory`, for the TUs of one tree (`names`: the tree's files by basename, relative)."""
    directory: Path
    placeless: Placeless
    names: dict[str, list[str]]
    resource_dir: str
    _hashes: dict[str, str | None] = field(default_factory=dict)
    _base: str = ""
    used: set[str] = field(default_factory=set)  # the results this build reused or wrote (what gc keeps)

    def __post_init__(self) -> None:
        self._base = json.dumps([FORMAT, libclang_version(), self.resource_dir, code_digest()])

    def file_hash(self, path: str) -> str | None:
        """XXH3-128 of a file's bytes, once per build; None for a file that cannot be read."""
        if path not in self._hashes:
            try:
                with open(path, "rb") as f:
                    self._hashes[path] = xxhash.xxh3_128(f.read()).hexdigest()
            except OSError:
                self._hashes[path] = None
        return self._hashes[path]

    def key(self, cmd: CompileCommand, skip: frozenset[str] = frozenset()) -> str | None:
        main = self.file_hash(cmd.file)
        if main is None:
            return None
        args = [self.placeless.out(a) for a in clean_args(cmd, self.resource_dir)]
        skipped = sorted(self.placeless.out(f) for f in skip)
        blob = json.dumps([self._base, self.placeless.out(cmd.directory), args, self.placeless.out(cmd.file), main,
                           skipped])
        return hashlib.sha256(blob.encode()).hexdigest()

    def _listing(self, basenames: list[str]) -> str:
        return hashlib.sha256(json.dumps([[b, self.names.get(b, [])] for b in sorted(basenames)]).encode()).hexdigest()

    def _manifest(self, k1: str) -> Path:
        return self.directory / "manifests" / k1[:2] / f"{k1}.json"

    def _variants(self, k1: str | None) -> list:
        """The manifest's recorded variants for `k1`, newest first; none where there is no key, no manifest or
        one that cannot be read."""
        try:
            return json.loads(self._manifest(k1).read_text()) if k1 else []
        except (OSError, ValueError):
            return []

    def _result(self, k2: str) -> Path:
        return self.directory / "results" / k2[:2] / f"{k2}.json"

    def lookup(self, cmd: CompileCommand, skip: frozenset[str] = frozenset()) -> dict | None:
        """The recorded result of this TU, walked without the files of `skip`, when every file it read is as it
        was (verified), else None."""
        for v in self._variants(self.key(cmd, skip)):
            if any(self.file_hash(self.placeless.back(name)) != h for name, h in v["inputs"]) \
                    or self._listing(v["basenames"]) != v["listing"]:
                continue
            try:
                data = self._result(v["result"]).read_bytes()
            except OSError:
                continue
            if xxhash.xxh3_128(data).hexdigest() == v["digest"]:
                self.used.add(v["result"])
                return json.loads(self.placeless.back(data.decode()))
        return None

    def seconds_before(self, cmd: CompileCommand, skip: frozenset[str] = frozenset()) -> float:
        """How long this TU's newest recorded parse took, in seconds (0 when none is recorded): what parsing it
        again is likely to cost, so that the longest changed TUs start first. The time, not a proxy for it: on
        abseil one benchmark TU parses for 34 s against 2 s for TUs reading more files, and ordered by files read
        it started last while the other worker sat idle."""
        variants = self._variants(self.key(cmd, skip))
        newest = variants[0] if variants and isinstance(variants[0], dict) else {}
        seconds = newest.get("seconds", 0.0)
        return float(seconds) if isinstance(seconds, (int, float)) else 0.0

    def store(self, cmd: CompileCommand, result: dict, skip: frozenset[str] = frozenset()) -> None:
        """Record a parsed TU's result (walked without the files of `skip`) under the files it read
        (`result["reads"]`); a TU that crashed or timed out, or whose files cannot be read now, is not recorded."""
        k1 = self.key(cmd, skip)
        reads = sorted(set(result.get("reads") or ()))
        if k1 is None or result.get("status") not in ("ok", "errors") or not reads:
            return
        inputs = [[self.placeless.out(f), self.file_hash(f)] for f in reads]
        if any(h is None for _, h in inputs):
            return
        missing = [m.group(1) for msg in result.get("error_messages") or [] for m in [_NOT_FOUND.search(msg)] if m]
        basenames = sorted({os.path.basename(f) for f in reads} | {os.path.basename(m) for m in missing})
        kept = {k: v for k, v in result.items() if k not in ("seconds", "parse_s", "walk_s")}
        data = self.placeless.out(json.dumps(kept)).encode()  # key order is column order
        k2 = hashlib.sha256(json.dumps([k1, inputs]).encode()).hexdigest()
        atomic_write_bytes(self._result(k2), data, durable=False)  # verified before reuse
        self.used.add(k2)
        entry = {"inputs": inputs, "basenames": basenames, "listing": self._listing(basenames), "result": k2,
                 "digest": xxhash.xxh3_128(data).hexdigest(), "seconds": round(float(result.get("seconds", 0.0)), 2)}
        variants = [entry] + [v for v in self._variants(k1) if v.get("result") != k2][:MAX_VARIANTS - 1]
        atomic_write_bytes(self._manifest(k1), json.dumps(variants).encode(), durable=False)


def tree_names(root: Path) -> dict[str, list[str]]:
    """Every file of the tree (relative paths, sorted) by basename: what an include could find."""
    out: dict[str, list[str]] = defaultdict(list)
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        rel = os.path.relpath(directory, root)
        for name in sorted(files):
            out[name].append(name if rel == "." else f"{rel}/{name}")
    return dict(out)


# The file of a semantics artifact naming the per-TU cache results its build used (gc keeps those)
USED_FILE = "tu_cache_used.json"


@dataclass
class Pruned:
    results: int = 0
    manifests: int = 0
    bytes: int = 0


def prune(directory: Path, needed: set[str], dry_run: bool = False) -> Pruned:
    """Remove from the cache at `directory` every result not in `needed` (result names) and every manifest
    variant naming one; a manifest left without variants goes. Manifests are rewritten atomically."""
    out = Pruned()
    for path in sorted(directory.glob("results/*/*.json")):
        if path.stem not in needed:
            out.results += 1
            out.bytes += path.stat().st_size
            if not dry_run:
                path.unlink(missing_ok=True)
    for path in sorted(directory.glob("manifests/*/*.json")):
        try:
            variants = json.loads(path.read_text())
        except (OSError, ValueError):
            variants = []
        left = [v for v in variants if isinstance(v, dict) and v.get("result") in needed]
        if len(left) == len(variants) and variants:
            continue
        if not left:
            out.manifests += 1
            out.bytes += path.stat().st_size
            if not dry_run:
                path.unlink(missing_ok=True)
        elif not dry_run:
            atomic_write_bytes(path, json.dumps(left).encode(), durable=False)
    return out


def size(directory: Path) -> dict[str, int]:
    """How many results and manifests the cache at `directory` holds, and their bytes (for `status`)."""
    results = list(directory.glob("results/*/*.json"))
    manifests = list(directory.glob("manifests/*/*.json"))
    return {"results": len(results), "manifests": len(manifests),
            "bytes": sum(p.stat().st_size for p in results + manifests)}
