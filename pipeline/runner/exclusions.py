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

Each source carries the rules that apply to it as an `OptOutRules` (part of its pin: collect applies them) and
the decontamination reference as a `Decontamination` (its n-gram and the digest of the reference files' contents
are part of the decontaminate stage's fingerprint, so a new reference reruns from that stage on; the files' paths
are provenance). A `repos` entry matches a source by name or by URL, written as the sources file writes URLs: a
path relative to the sources file, an absolute path, a `file://` URL, or a remote URL in any of git's spellings
(`https://host/org/repo(.git)`, `ssh://git@host/org/repo`, `git@host:org/repo`). Collect records opted-out files
as `skipped:opt_out` and counts the files each rule matched; an entry that matches no source, and a rule that
matched no file, are warned of in the build summary. The decontaminate stage refuses documents as
`contamination`.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from cpp_data.pipeline.contract.source import Decontamination, OptOutRules
from cpp_data.pipeline.foundation.errors import BadInput

_HEX64 = frozenset("0123456789abcdef")


def canonical_url(url: str, base: Path) -> str:
    """One spelling of a source URL, for matching opt-out entries against sources: a local path (relative to
    `base`, the sources file's directory, or a `file://` URL) becomes an absolute path; a remote URL becomes
    host/path without scheme, user or port, in any of git's spellings; a trailing `/` or `.git` goes."""
    if url.startswith("file://"):
        url = unquote(urlsplit(url).path)
    if "://" in url:
        parts = urlsplit(url)
        url = f"{(parts.hostname or '').lower()}/{parts.path.lstrip('/')}"
    elif re.match(r"^[\w.-]+@[\w.-]+:", url):  # scp-like: git@host:org/repo
        host, path = url.split("@", 1)[1].split(":", 1)
        url = f"{host.lower()}/{path.lstrip('/')}"
    else:
        url = os.path.abspath(os.path.join(base, os.path.expanduser(url)))
    return url.rstrip("/").removesuffix(".git")


def _check_reference(files: list[Path], ngram: int, where: str) -> None:
    """Read the reference now, as the decontaminate stage will: a JSONL line that is not JSON fails here, not
    after collect and the filters, and a reference holding no run of `ngram` tokens (empty files, texts shorter
    than the n-gram) is refused, since it would refuse nothing and turn decontamination off without a word."""
    from cpp_data.stages.lib.contamination import ReferenceError, reference_hashes

    try:
        hashes = reference_hashes([str(f) for f in files], ngram)
    except ReferenceError as exc:
        raise BadInput(f"{where}: {exc}") from None
    if not len(hashes):
        raise BadInput(f"{where}: {', '.join(map(str, files[:3]))}{' ...' if len(files) > 3 else ''} hold no run of "
                       f"{ngram:,} C++ tokens, so decontamination would refuse nothing; give longer reference texts "
                       f"or a smaller ngram")


@dataclass(frozen=True)
class Exclusions:
    repos: frozenset[str] = frozenset()  # as written; matched through canonical_url
    paths: tuple[str, ...] = ()
    sha256: frozenset[str] = frozenset()
    reference_files: tuple[str, ...] = ()  # absolute paths
    reference_digest: str | None = None
    ngram: int = 50
    base: Path = Path(".")  # the sources file's directory, which relative URLs are relative to

    def opts_out(self, entry: str, name: str, url: str) -> bool:
        """Whether the `repos` entry names the source `name` at `url`."""
        return entry == name or canonical_url(entry, self.base) == canonical_url(url, self.base)

    def opt_out_rules(self, name: str, url: str) -> OptOutRules:
        """The opt-out rules of one source."""
        if any(self.opts_out(entry, name, url) for entry in self.repos):
            return OptOutRules(whole_source=True)
        return OptOutRules(False, self.paths, tuple(sorted(self.sha256)))

    def unmatched_repos(self, sources: list[tuple[str, str]]) -> list[str]:
        """The `repos` entries that name none of the (name, url) sources, sorted."""
        return sorted(e for e in self.repos if not any(self.opts_out(e, n, u) for n, u in sources))

    def decontamination(self) -> Decontamination | None:
        if not self.reference_files or self.reference_digest is None:
            return None
        return Decontamination(self.ngram, self.reference_digest, self.reference_files)


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
                content = f.read_bytes()
            except OSError as exc:
                raise BadInput(f"{where}: cannot read {f} ({exc.strerror})") from None
            h.update(f.name.encode("utf-8", "surrogateescape") + b"\0" + hashlib.sha256(content).digest())
        digest = h.hexdigest()
        _check_reference(files, ngram, where)
    return Exclusions(frozenset(repos), tuple(paths), frozenset(shas), tuple(str(f) for f in files), digest, ngram,
                      base)
