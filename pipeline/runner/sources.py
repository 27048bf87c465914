"""Sources files (what to ingest) and lock files (the exact commit of each), docs/DESIGN.md section 1.

A sources file is TOML with one `[[source]]` table per input:
    name = "googletest"             unique, [A-Za-z0-9._-]+
    url = "/usr/src/googletest"     a git URL, a local git repository, or a plain local directory; a relative
                                    local path is resolved against the directory of the sources file
    ref = "v1.15.0"                 tag, branch or commit (git only; leave it out for a plain directory)
    license = "BSD-3-Clause"        optional SPDX expression, the last fallback of the license cascade
    vendored = true                 optional: this source is a vendored or mirrored copy; in duplicate clusters
                                    its files lose to any upstream copy (otherwise only vendor directories
                                    such as third_party/ mark files as vendored)
    history_from = "v1.12.0"        optional (git): the older end of the commit walk of the v2/v3 recipes
                                    (exclusive); locked to a commit like `ref`
    configure = false               optional: never run this source's CMake/Meson configure for libclang nor
                                    infer compile commands for it (its own compile_commands.json is still
                                    used; default true)
    weight = 2.0                    optional: this source's share of the training mix as a multiple of its
                                    natural share (its tokens); default 1.0. Sources of one weight share a
                                    Megatron dataset and the launch spec blends the datasets by tokens x weight
                                    (docs/DESIGN.md section 10); the weight changes no document, so it is not
                                    part of the pin

Locking resolves every ref to a full commit SHA (`git ls-remote` / `git rev-parse`); a plain directory is pinned
by a digest of its tree (paths, link targets and file contents), written as `tree:<sha256>`. A build records only
resolved pins, never a branch name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from cpp_data.pipeline.contract.source import Decontamination, LockedSource, OptOutRules
from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.runner.exclusions import load_exclusions
from cpp_data.stages.lib.dir_files import TreeDigest, file_sha256, walk_directory

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA = re.compile(r"^[0-9a-f]{40}$")


class SourcesError(BadInput):
    """A sources or lock file that cannot be used; the message is one line naming file and problem."""


@dataclass(frozen=True)
class SourceSpec:
    name: str
    url: str
    ref: str | None = None
    license: str | None = None
    vendored: bool = False
    history_from: str | None = None
    configure: bool = True
    weight: float = 1.0
    opt_out: OptOutRules = OptOutRules()  # pipeline/runner/exclusions.py: the opt-out rules that apply to this source
    decontaminate: Decontamination | None = None  # and the decontamination reference
    include: tuple[str, ...] = ()  # path globs: the files collected (LockedSource.in_scope)
    exclude: tuple[str, ...] = ()
    submodules: bool = False




class SourcesFile(NamedTuple):
    """A sources file read: its sources, and the [opt_out] `repos` entries that name none of them (a misspelt
    name or URL opts nothing out: the build warns of each)."""

    specs: list[SourceSpec]
    unmatched_opt_out: list[str]


def load_sources(path: Path) -> SourcesFile:
    """Parse and check a sources file; raises SourcesError with a one-line message naming the problem."""
    path = Path(path)
    data = _read_toml(path)
    tables = data.get("source")
    if not isinstance(tables, list) or not tables:
        raise SourcesError(f"{path}: no [[source]] tables; each source needs name, url and (for git) ref")
    unknown = set(data) - {"source", "opt_out", "decontaminate"}
    if unknown:
        raise SourcesError(f"{path}: unknown tables {sorted(unknown)} (allowed: [[source]], [opt_out], "
                           f"[decontaminate])")
    exclusions = load_exclusions(data, path)
    specs: list[SourceSpec] = []
    seen: dict[str, str] = {}  # casefolded name -> the name as written
    for i, table in enumerate(tables, 1):
        spec = _source_spec(table, f"{path}: source #{i}", path, exclusions)
        if spec.name.casefold() in seen:  # directories and ledger rows are named after it: case-blind file systems
            first = seen[spec.name.casefold()]
            raise SourcesError(f"{path}: source {spec.name!r}: "
                               + ("duplicate name" if first == spec.name
                                  else f"differs from source {first!r} only in case"))
        seen[spec.name.casefold()] = spec.name
        specs.append(spec)
    return SourcesFile(specs, exclusions.unmatched_repos([(s.name, s.url) for s in specs]))


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SourcesError(f"{path}: no such sources file") from None
    except IsADirectoryError:
        raise SourcesError(f"{path}: is a directory; give the sources TOML file (see sources/debian.toml)") from None
    except OSError as exc:
        raise SourcesError(f"{path}: cannot read the sources file ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SourcesError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise SourcesError(f"{path}: not UTF-8 text") from None


_SOURCE_KEYS = {"name", "url", "ref", "license", "vendored", "history_from", "configure", "weight", "include",
                "exclude", "submodules"}


def _source_spec(table, where: str, path: Path, exclusions) -> SourceSpec:
    """One [[source]] table, every key checked; `where` names it until its name is known."""
    if not isinstance(table, dict):
        raise SourcesError(f"{where}: must be a [[source]] table")
    unknown = set(table) - _SOURCE_KEYS
    if unknown:
        raise SourcesError(f"{where}: unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(_SOURCE_KEYS))})")
    name = _name(table.get("name"), where)
    where = f"{path}: source {name!r}"
    url = _url(table.get("url"), where, path)
    weight = table.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < float("inf"):
        raise SourcesError(f"{where}: 'weight' must be a positive number (1.0: the source's natural share)")
    return SourceSpec(name, url, _text(table, "ref", where), _license(table.get("license"), where),
                      _flag(table, "vendored", False, where), _text(table, "history_from", where),
                      _flag(table, "configure", True, where), float(weight),
                      exclusions.opt_out_rules(name, url), exclusions.decontamination(),
                      _globs(table, "include", where), _globs(table, "exclude", where),
                      _flag(table, "submodules", False, where))


def _name(name, where: str) -> str:
    if not isinstance(name, str):
        raise SourcesError(f"{where}: 'name' must be a string (a short name such as \"googletest\")")
    if not _NAME.fullmatch(name):  # not match: `$` also matches before a final line break
        raise SourcesError(f"{where}: 'name' {name!r} must start with an ASCII letter or digit and hold only "
                           f"those, '.', '_' or '-' (it names directories and ledger rows)")
    return name


def _url(url, where: str, path: Path) -> str:
    """The source's URL; a local path made absolute against the sources file's directory, not against wherever
    the command runs."""
    if url is None:
        raise SourcesError(f"{where}: 'url' is missing (a git URL, or a local path such as \"/usr/src/googletest\")")
    if not isinstance(url, str) or not url:
        raise SourcesError(f"{where}: 'url' must be a git URL or a local path, not {url!r}")
    if _is_local(url):
        return os.path.abspath(os.path.join(path.resolve().parent, os.path.expanduser(url)))
    return url


def _text(table: dict, key: str, where: str) -> str | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise SourcesError(f"{where}: '{key}' must be a non-empty string")
    return value


def _globs(table: dict, key: str, where: str) -> tuple[str, ...]:
    """A list of path globs (`include`, `exclude`): paths in the source, `*` crossing `/`."""
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(g, str) and g.strip() for g in value):
        raise SourcesError(f"{where}: '{key}' must be a list of path globs such as [\"include/*\", \"src/*.h\"]")
    bad = [g for g in value if g.startswith("/") or ".." in g.split("/")]
    if bad:
        raise SourcesError(f"{where}: '{key}' glob {bad[0]!r} must be a path inside the source (no leading / or ..)")
    return tuple(value)


def _flag(table: dict, key: str, default: bool, where: str) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise SourcesError(f"{where}: '{key}' must be true or false")
    return value


def _license(lic, where: str) -> str | None:
    """A declared license, read as the license cascade reads it: one that does not parse would refuse every
    file falling back to it."""
    from cpp_data.stages.lib.license_match import parse_spdx

    if lic is not None and not isinstance(lic, str):
        raise SourcesError(f"{where}: 'license' must be an SPDX expression string")
    if lic is not None and parse_spdx(lic) is None:
        raise SourcesError(f"{where}: license {lic!r} is not an SPDX license expression (for example MIT, "
                           f"BSD-3-Clause, Apache-2.0 OR MIT; LicenseRef-<name> for a license off the list)")
    return lic


def _git(*args: str, cwd: str | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.strip().splitlines() if line.strip()]
        # git's cause is its fatal: line; the hint lines after it ("Please make sure you have the correct
        # access rights / and the repository exists.") do not say what went wrong
        cause = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1] if lines else "")
        raise RuntimeError(cause or f"git {args[0]} failed")
    return proc.stdout


def _is_local(url: str) -> bool:
    return "://" not in url and not re.match(r"^[\w.-]+@[\w.-]+:", url)


def _is_git_repo(path: Path) -> bool:
    try:
        top = _git("rev-parse", "--show-toplevel", cwd=str(path)).strip()
    except RuntimeError as exc:
        if "dubious ownership" in str(exc):  # git's safe.directory check: a repository, but not this user's
            raise SourcesError(f"{path}: git refuses to read this repository because another user owns it "
                               f"(git's safe.directory check); build as its owner, or trust it with: "
                               f"git config --global --add safe.directory {path}") from None
        return (path / "HEAD").is_file() and (path / "objects").is_dir()  # a bare repository
    except (NotADirectoryError, FileNotFoundError):
        return (path / "HEAD").is_file() and (path / "objects").is_dir()
    return Path(top).resolve() == path.resolve()


def directory_source_holding(specs: list[SourceSpec], path: Path) -> SourceSpec | None:
    """The first source that is a plain local directory (not a git repository) holding `path`, else None.

    Why: a build's output inside such a source changes the source's files as the build writes them, so the
    tree digest its pin is checked against never matches (the build failed in collect, and again after
    every relock). A git source is read at its commit, so files written into its working tree do not matter."""
    where = Path(path).expanduser().resolve()
    for spec in specs:
        if not _is_local(spec.url):
            continue
        root = Path(spec.url).expanduser()
        try:
            inside = root.is_dir() and where.is_relative_to(root.resolve()) and not _is_git_repo(root)
        except OSError:  # an unreadable source: its own error comes when it is resolved
            continue
        if inside:
            return spec
    return None


def directory_digest(root: Path) -> str:
    """`tree:<sha256>` over every path, link target and file content under root (sorted, links not followed);
    a directory or file that cannot be read counts as unreadable (as collect records it)."""
    digest = TreeDigest()
    for rel, entry in walk_directory(root):
        if entry is None:
            digest.add(rel, unreadable=True)
        elif entry.is_symlink():
            digest.add(rel, link_target=os.readlink(entry.path))
        elif entry.is_file(follow_symlinks=False):
            try:
                digest.add(rel, file_sha256=file_sha256(entry.path))
            except OSError:
                digest.add(rel, unreadable=True)
        else:
            digest.add(rel)
    return digest.hexdigest()


def resolve(spec: SourceSpec) -> LockedSource:
    """Resolve a source's ref (and history_from) to commits, or a directory to its tree digest."""
    locked = replace(_resolve_ref(spec), configure=spec.configure, weight=spec.weight, opt_out=spec.opt_out,
                     decontaminate=spec.decontaminate, include=spec.include, exclude=spec.exclude,
                     submodules=spec.submodules)
    where = f"source {spec.name!r} ({spec.url})"
    if spec.submodules and locked.kind != "git":
        raise SourcesError(f"{where}: 'submodules' needs a git source")
    if spec.history_from is None:
        return locked
    if locked.kind != "git":
        raise SourcesError(f"{where}: 'history_from' needs a git source")
    since = _resolve_ref(SourceSpec(spec.name, spec.url, spec.history_from)).commit
    return replace(locked, history_from=spec.history_from, history_from_commit=since)


def _resolve_ref(spec: SourceSpec) -> LockedSource:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    where = f"source {spec.name!r} ({spec.url})"
    if _is_local(spec.url):
        path = Path(spec.url).expanduser()
        if not path.exists():
            raise SourcesError(f"{where}: path does not exist")
        if not path.is_dir():
            raise SourcesError(f"{where}: not a directory")
        url = str(path.resolve())
        try:
            is_git = _is_git_repo(path)
        except PermissionError as exc:  # git cannot even enter it
            raise SourcesError(f"{where}: cannot read the directory ({exc.strerror})") from None
        if is_git:
            ref = spec.ref or "HEAD"
            try:
                commit = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=url).strip()
            except RuntimeError:
                hint = "the repository has no commits" if spec.ref is None else f"ref {ref!r} not found"
                raise SourcesError(f"{where}: cannot resolve {ref!r}: {hint}") from None
            return LockedSource(spec.name, url, "git", spec.ref or "HEAD", commit, now, spec.license, spec.vendored)
        if spec.ref:
            raise SourcesError(f"{where}: 'ref' given but the path is not a git repository; remove 'ref'")
        return LockedSource(spec.name, url, "dir", None, directory_digest(path), now, spec.license, spec.vendored)
    if not spec.ref:
        raise SourcesError(f"{where}: a remote git source needs 'ref' (tag, branch or commit)")
    if _SHA.match(spec.ref):
        return LockedSource(spec.name, spec.url, "git", spec.ref, spec.ref, now, spec.license, spec.vendored)
    try:
        out = _git("ls-remote", spec.url, spec.ref, f"{spec.ref}^{{}}")
    except RuntimeError as exc:
        raise SourcesError(f"{where}: git ls-remote failed: {exc}") from None
    refs = {ref: sha for sha, ref in (line.split("\t", 1) for line in out.splitlines() if "\t" in line)}
    for candidate in (f"refs/tags/{spec.ref}^{{}}", f"refs/tags/{spec.ref}", f"refs/heads/{spec.ref}", spec.ref):
        if candidate in refs:
            return LockedSource(spec.name, spec.url, "git", spec.ref, refs[candidate], now, spec.license,
                                spec.vendored)
    raise SourcesError(f"{where}: ref {spec.ref!r} not found on the remote")


def uncommitted_files(pin: LockedSource) -> int:
    """How many files of a local git source's working tree are modified, staged or untracked (0 for any other
    source): the build reads the pinned commit, so a user's edits there are not in it until committed."""
    if pin.kind != "git" or not _is_local(pin.url):
        return 0
    try:
        status = _git("status", "--porcelain", "--untracked-files=all", cwd=pin.url)
    except (RuntimeError, OSError):  # a bare or vanished repository: collect reads the commit and says what is wrong
        return 0
    return sum(1 for line in status.splitlines() if line.strip())


def lock_path_for(sources_path: Path) -> Path:
    return Path(sources_path).with_suffix(".lock")


def _toml(value) -> str:
    """A TOML value of a lock field: JSON's spelling for strings, numbers, booleans and lists, an inline table
    for a dict (the opt-out rules and the decontamination reference)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items() if v is not None) + " }"
    return json.dumps(value)


def write_lock(path: Path, locked: list[LockedSource]) -> None:
    """Write a lock file (TOML, one [[source]] per pin) atomically."""
    from cpp_data.pipeline.foundation.fsutil import atomic_write_text

    lines = ["# Written by `cpp-data sources lock`: every ref resolved to the commit a build will use.", ""]
    for src in locked:
        lines.append("[[source]]")
        fields = asdict(src)
        if not src.opt_out:
            del fields["opt_out"]
        for key in ("include", "exclude", "submodules"):  # written only when given: older locks read the same
            if not fields[key]:
                del fields[key]
        for key, value in fields.items():
            if value is not None:
                lines.append(f"{key} = {_toml(value)}")
        lines.append("")
    atomic_write_text(Path(path), "\n".join(lines))


_LOCK_TYPES: dict[str, type | tuple[type, ...]] = {
               "name": str, "url": str, "kind": str, "requested_ref": (str, type(None)), "commit": str,
               "locked_at": str, "license": (str, type(None)), "vendored": bool, "history_from": (str, type(None)),
               "history_from_commit": (str, type(None)), "configure": bool,
               "weight": (float, int), "opt_out": dict, "decontaminate": dict, "include": list, "exclude": list,
               "submodules": bool}


def _lock_entry(table: dict, where: str) -> LockedSource:
    """One [[source]] table of a lock file as a LockedSource; SourcesError names the entry and key."""
    unknown = set(table) - set(_LOCK_TYPES)
    missing = {"name", "url", "kind", "commit", "locked_at"} - set(table)
    if unknown or missing:
        raise SourcesError(f"{where}: " + (f"unknown keys {sorted(unknown)}" if unknown
                                           else f"missing keys {sorted(missing)}"))
    for key, value in table.items():
        if not isinstance(value, _LOCK_TYPES[key]):
            raise SourcesError(f"{where} ({table.get('name')!r}): {key} = {value!r} has the wrong type; "
                               f"write the lock again with: cpp-data sources lock SOURCES")
    fields = dict(table)
    try:
        if "opt_out" in fields:
            rules = fields["opt_out"]
            fields["opt_out"] = OptOutRules(bool(rules.get("whole_source")), tuple(rules.get("paths", ())),
                                            tuple(rules.get("sha256", ())))
        for key in ("include", "exclude"):
            if key in fields:
                fields[key] = tuple(str(g) for g in fields[key])
        if "decontaminate" in fields:
            ref = fields["decontaminate"]
            fields["decontaminate"] = Decontamination(int(ref["ngram"]), str(ref["digest"]), tuple(ref["files"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise SourcesError(f"{where} ({table.get('name')!r}): unreadable opt_out or decontaminate ({exc}); "
                           f"write the lock again with: cpp-data sources lock SOURCES") from None
    return LockedSource(**{"requested_ref": None, "license": None, "vendored": False, **fields})


def read_lock(path: Path) -> list[LockedSource]:
    """Read a lock file written by `write_lock`; raises SourcesError naming the file, entry and key."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise SourcesError(f"{path}: unreadable lock file ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SourcesError(f"{path}: not a valid lock file ({exc})") from None
    tables = data.get("source", [])
    if not isinstance(tables, list):
        raise SourcesError(f"{path}: 'source' must be a list of [[source]] tables")
    out = []
    for i, table in enumerate(tables, 1):
        if not isinstance(table, dict):
            raise SourcesError(f"{path}: entry #{i}: must be a [[source]] table")
        out.append(_lock_entry(table, f"{path}: entry #{i}"))
    return out


def check_directory_pins(pins: list[LockedSource], lock_file: Path, sources_file: Path) -> None:
    """A plain directory edited after it was locked must never build as its old pin (the cache would answer
    "nothing to do" for content that has changed): compare each directory's digest with its pin. A local
    repository must still hold its pinned commit (a rewritten history is refused here, not in the collect stage)."""
    for src in pins:
        if src.kind == "dir" and Path(src.url).is_dir() and directory_digest(Path(src.url)) != src.commit:
            if Path(lock_file).resolve().is_relative_to(Path(src.url).resolve()):  # relocking cannot help
                raise SourcesError(f"{lock_file}: this lock lies inside source {src.name!r} ({src.url}), a plain "
                                   f"directory, so writing it changed the directory it pins; move it out "
                                   f"(cpp-data sources lock {sources_file} -o PATH, then --lock PATH)")
            raise SourcesError(f"{lock_file}: source {src.name!r}: the directory {src.url} changed since it was "
                               f"locked; relock (cpp-data sources lock {sources_file}) or build with --relock")
        if src.kind == "git" and _is_local(src.url) and not _has_commit(src.url, src.commit):
            raise SourcesError(f"{lock_file}: source {src.name!r} pins commit {src.commit[:12]}, which the "
                               f"repository {src.url} does not hold (history rewritten?); relock (cpp-data "
                               f"sources lock {sources_file}) or build with --relock")


def _has_commit(repo: str, commit: str) -> bool:
    """Whether a local repository holds `commit` (True when git cannot tell: collect will say why)."""
    try:
        _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=repo)
    except RuntimeError as exc:
        return "Not a valid object name" not in str(exc)
    except OSError:
        return True
    return True


def lock_sources(specs: list[SourceSpec], existing: list[LockedSource] | None = None,
                 update: bool = True, origin: Path | None = None) -> list[LockedSource]:
    """Resolve every spec. With update=False, an existing pin whose name, url and ref match is kept.
    Errors are prefixed with `origin` (the sources file) so the message names the file to fix."""
    try:
        return _lock(specs, existing, update)
    except SourcesError as exc:
        raise SourcesError(f"{origin}: {exc}" if origin else str(exc)) from None


def _lock(specs: list[SourceSpec], existing: list[LockedSource] | None, update: bool) -> list[LockedSource]:
    by_name = {s.name: s for s in existing or []}
    out: list[LockedSource] = []
    for spec in specs:
        old = by_name.get(spec.name)
        same = (old is not None and old.requested_ref == (spec.ref or ("HEAD" if old.kind == "git" else None))
                and old.history_from == spec.history_from
                and (old.url == spec.url or old.url == str(Path(spec.url).expanduser().resolve())))
        if not update and same and old is not None:
            out.append(replace(old, license=spec.license, vendored=spec.vendored, configure=spec.configure,
                               weight=spec.weight, opt_out=spec.opt_out, decontaminate=spec.decontaminate,
                               include=spec.include, exclude=spec.exclude, submodules=spec.submodules))
        else:
            out.append(resolve(spec))
    return out
