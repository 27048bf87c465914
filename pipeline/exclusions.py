"""What a sources file excludes from every build: opt-out lists and decontamination references.

In the sources file (paths relative to it):

    [opt_out]
    repos = ["poco-net", "https://github.com/org/repo"]   # sources, by name or URL: every file opted out
    paths = ["*/generated/*", "src/private.h"]            # globs on a file's path in its source (* crosses /)
    sha256 = ["9f86d08..."]                                # SHA-256 of a file's bytes
    files = ["optout-2026-11.toml"]                        # more lists with the same keys

    [decontaminate]
    paths = ["bench/humaneval-cpp.jsonl", "bench/solutions/"]  # JSONL (every string value of every line) or a
                                                              # directory / file (its text)
    ngram = 50                                               # shared n-gram of C++ tokens that refuses a file

Each source carries the rules that apply to it as strings (`repo`, `path:GLOB`, `sha256:HEX`) and the
decontamination reference as `ngram:N`, `digest:SHA256` and `file:PATH` entries. The opt-out rules are part of
the source's pin (collect applies them); the n-gram and the digest of the reference files' contents are part of
the decontaminate stage's fingerprint, so a new reference reruns from that stage on. Collect
records opted-out files as `skipped:opt_out`; the decontaminate stage refuses documents as `contamination`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from cpp_data.pipeline.errors import BadInput

_HEX64 = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Exclusions:
    repos: frozenset[str] = frozenset()
    paths: tuple[str, ...] = ()
    sha256: frozenset[str] = frozenset()
    reference_files: tuple[str, ...] = ()  # absolute paths
    reference_digest: str | None = None
    ngram: int = 50

    def opt_out_rules(self, name: str, url: str) -> tuple[str, ...]:
        """The opt-out rules of one source, as the strings its pin carries."""
        def norm(u: str) -> str:
            return u.rstrip("/").removesuffix(".git")

        if name in self.repos or norm(url) in {norm(r) for r in self.repos}:
            return ("repo",)
        return tuple(f"path:{p}" for p in self.paths) + tuple(f"sha256:{s}" for s in sorted(self.sha256))

    def decontaminate_rules(self) -> tuple[str, ...]:
        if not self.reference_files:
            return ()
        return (f"ngram:{self.ngram}", f"digest:{self.reference_digest}",
                *(f"file:{f}" for f in self.reference_files))


def _strings(table: dict, key: str, where: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadInput(f"{where}: '{key}' must be a list of non-empty strings")
    return value


def _read_opt_out(table: dict, where: str, base: Path, seen: set[Path]) -> tuple[set, list, set]:
    unknown = set(table) - {"repos", "paths", "sha256", "files"}
    if unknown:
        raise BadInput(f"{where}: unknown keys {sorted(unknown)} (allowed: files, paths, repos, sha256)")
    repos, paths = set(_strings(table, "repos", where)), list(_strings(table, "paths", where))
    shas = {s.lower() for s in _strings(table, "sha256", where)}
    bad = [s for s in shas if len(s) != 64 or not set(s) <= _HEX64]
    if bad:
        raise BadInput(f"{where}: sha256 {bad[0]!r} is not 64 hex digits")
    for name in _strings(table, "files", where):
        path = (base / name).resolve()
        if path in seen:
            continue
        seen.add(path)
        if path.exists() and not path.is_file():  # a FIFO would block the read forever, /dev/zero fill memory
            raise BadInput(f"{where}: opt-out file {path} is not a regular file")
        try:
            more = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise BadInput(f"{where}: opt-out file {path} does not exist") from None
        except OSError as exc:
            raise BadInput(f"{where}: cannot read opt-out file {path} ({exc.strerror})") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"{path}: not a valid opt-out list ({exc})") from None
        r, p, s = _read_opt_out(more, str(path), path.parent, seen)
        repos |= r
        paths += p
        shas |= s
    return repos, paths, shas


def reference_files(paths: list[Path]) -> list[Path]:
    """Every regular file under the given files and directories, sorted."""
    out = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and not f.is_symlink())
        else:
            out.append(p)
    return out


def reference_texts(files: list[str]) -> list[str]:
    """The texts of a decontamination reference: each JSONL line's string values (prompts, solutions, tests),
    each other file's whole text."""
    texts: list[str] = []

    def strings(value) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                strings(v)
        elif isinstance(value, list):
            for v in value:
                strings(v)

    for f in files:
        text = Path(f).read_text(encoding="utf-8-sig", errors="replace")  # a leading BOM is not JSON's
        if f.endswith(".jsonl"):
            for value in _jsonl_values(text, f):
                strings(value)
        else:
            texts.append(text)
    return texts


def _jsonl_values(text: str, name: str) -> list:
    """The JSON value of each non-blank line of a JSONL text; BadInput names the first line that is not."""
    values = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BadInput(f"{name}:{n}: not JSON ({exc.msg})") from None
    return values


def load_exclusions(data: dict, sources_file: Path) -> Exclusions:
    """The [opt_out] and [decontaminate] tables of a parsed sources file; BadInput names file and problem."""
    base = Path(sources_file).resolve().parent
    opt = data.get("opt_out", {})
    if not isinstance(opt, dict):
        raise BadInput(f"{sources_file}: [opt_out] must be a table")
    repos, paths, shas = _read_opt_out(opt, f"{sources_file}: [opt_out]", base, set())
    dec = data.get("decontaminate", {})
    if not isinstance(dec, dict):
        raise BadInput(f"{sources_file}: [decontaminate] must be a table")
    where = f"{sources_file}: [decontaminate]"
    unknown = set(dec) - {"paths", "ngram"}
    if unknown:
        raise BadInput(f"{where}: unknown keys {sorted(unknown)} (allowed: ngram, paths)")
    ngram = dec.get("ngram", 50)
    if isinstance(ngram, bool) or not isinstance(ngram, int) or ngram < 5:
        raise BadInput(f"{where}: 'ngram' must be an integer of at least 5 (tokens)")
    given = [base / p for p in _strings(dec, "paths", where)]
    missing = [str(p) for p in given if not p.exists()]
    if missing:
        raise BadInput(f"{where}: {missing[0]} does not exist")
    special = [str(p) for p in given if not p.is_dir() and not p.is_file()]  # a FIFO, a socket, /dev/zero
    if special:
        raise BadInput(f"{where}: {special[0]} is not a regular file or a directory")
    files = reference_files(given)
    if given and not files:
        raise BadInput(f"{where}: {', '.join(map(str, given))} hold no file to decontaminate against")
    digest = None
    if files:
        h = hashlib.sha256()
        for f in files:
            try:
                data = f.read_bytes()
            except OSError as exc:
                raise BadInput(f"{where}: cannot read {f} ({exc.strerror})") from None
            if f.suffix == ".jsonl":  # read here anyway: a bad line fails now, not in the decontaminate stage
                try:                                                                # after collect and filters
                    _jsonl_values(data.decode("utf-8-sig", errors="replace"), str(f))
                except BadInput as exc:
                    raise BadInput(f"{where}: {exc}") from None
            h.update(f.name.encode("utf-8", "surrogateescape") + b"\0" + hashlib.sha256(data).digest())
        digest = h.hexdigest()
    return Exclusions(frozenset(repos), tuple(paths), frozenset(shas), tuple(str(f) for f in files), digest, ngram)


@dataclass(frozen=True)
class OptOut:
    """A source's opt-out rules (its pin's `opt_out` strings), ready to match files."""

    whole_source: bool
    globs: tuple[str, ...]
    sha256: frozenset[str]

    @classmethod
    def from_rules(cls, rules: tuple[str, ...]) -> OptOut:
        return cls("repo" in rules, tuple(r[5:] for r in rules if r.startswith("path:")),
                   frozenset(r[7:] for r in rules if r.startswith("sha256:")))

    def path(self, rel: str) -> bool:
        return self.whole_source or any(fnmatch.fnmatchcase(rel, g) for g in self.globs)

    def content(self, sha256_hex: str) -> bool:
        return sha256_hex in self.sha256
