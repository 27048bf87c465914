"""A source as a stage sees it: its pin (`LockedSource`), the opt-out rules and decontamination reference that
come with it, and the blend weights. Sources files and lock files are read and written by the runner
(pipeline/runner/sources.py, exclusions.py); a stage only reads these."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OptOutRules:
    """The opt-out rules that apply to one source: every file of it (`whole_source`), files whose path in the
    source matches a glob of `paths` (`*` crosses `/`), files whose bytes have a SHA-256 of `sha256`."""

    whole_source: bool = False
    paths: tuple[str, ...] = ()
    sha256: tuple[str, ...] = ()  # sorted, lower-case hex

    def __bool__(self) -> bool:
        return self.whole_source or bool(self.paths) or bool(self.sha256)

    def pin(self) -> dict:
        """What a source's pin (and so every fingerprint of its stages) records of these rules."""
        return {"whole_source": self.whole_source, "paths": list(self.paths), "sha256": list(self.sha256)}

    def path_rule(self, rel: str) -> str | None:
        """The rule that opts out the file at `rel` by its path ("repo" or "path:GLOB"), or None."""
        if self.whole_source:
            return "repo"
        return next((f"path:{g}" for g in self.paths if fnmatch.fnmatchcase(rel, g)), None)

    def content_rule(self, sha256_hex: str) -> str | None:
        """The rule that opts out a file of these bytes ("sha256:HEX"), or None."""
        return f"sha256:{sha256_hex}" if sha256_hex in self.sha256 else None

    def rules(self) -> list[str]:
        """Every rule by the name path_rule and content_rule give it (what collect's counts are keyed by)."""
        return ["repo"] if self.whole_source else [*(f"path:{g}" for g in self.paths),
                                                   *(f"sha256:{s}" for s in self.sha256)]


@dataclass(frozen=True)
class Decontamination:
    """A decontamination reference: refuse files sharing an n-gram of `ngram` C++ tokens with the texts of
    `files` (absolute paths), whose contents have the digest `digest`."""

    ngram: int
    digest: str
    files: tuple[str, ...]

    def settings(self) -> dict:
        """What the decontaminate stage's fingerprint takes of it: the n-gram and the contents' digest (the
        files' paths are provenance)."""
        return {"ngram": self.ngram, "digest": self.digest}


@dataclass(frozen=True)
class LockedSource:
    name: str
    url: str
    kind: str  # git | dir
    requested_ref: str | None
    commit: str  # 40-hex SHA for git, tree:<sha256> for a directory
    locked_at: str
    license: str | None = None
    vendored: bool = False
    history_from: str | None = None  # requested
    history_from_commit: str | None = None  # resolved
    configure: bool = True
    weight: float = 1.0
    opt_out: OptOutRules = OptOutRules()
    decontaminate: Decontamination | None = None
    include: tuple[str, ...] = ()  # path globs (`*` crosses `/`): only files matching one are collected
    exclude: tuple[str, ...] = ()  # path globs: files matching one are not collected
    submodules: bool = False  # git: walk submodules too, each at the commit its parent records

    def in_scope(self, rel: str) -> bool:
        """Whether the file at `rel` (its path in the source) is one the sources file asks for: matching an
        `include` glob (when there are any) and no `exclude` glob."""
        if any(fnmatch.fnmatchcase(rel, g) for g in self.exclude):
            return False
        return not self.include or any(fnmatch.fnmatchcase(rel, g) for g in self.include)

    def may_hold(self, directory: str) -> bool:
        """Whether some file under `directory` may be in scope (a submodule worth fetching): False only when an
        exclude glob ending in `*` takes the whole directory, or when no include glob can reach into it."""
        probe = directory.rstrip("/") + "/\x00"
        if any(g.endswith("*") and fnmatch.fnmatchcase(probe, g) for g in self.exclude):
            return False
        return not self.include or any(fnmatch.fnmatchcase(probe, g) or g.startswith(directory.rstrip("/") + "/")
                                       or directory.startswith(g.split("*", 1)[0].rstrip("/"))
                                       for g in self.include)

    def pin(self) -> dict:
        """What identifies this source's content and treatment (goes into stage fingerprints). The URL or path
        is provenance only: the same commit or tree digest read from another place is the same source."""
        pin: dict[str, Any] = {"name": self.name, "kind": self.kind, "commit": self.commit,
               "license": self.license, "vendored": self.vendored}
        if self.history_from_commit:  # only then, so pins of sources without history keep their fingerprints
            pin["history_from_commit"] = self.history_from_commit
        if not self.configure:
            pin["configure"] = False
        if self.opt_out:
            pin["opt_out"] = self.opt_out.pin()
        if self.include or self.exclude:
            pin["scope"] = {"include": list(self.include), "exclude": list(self.exclude)}
        if self.submodules:
            pin["submodules"] = True
        return pin


def source_weights(sources: list[LockedSource]) -> dict[str, float]:
    """{source name: blend weight} (the sources file's `weight`, default 1.0)."""
    return {s.name: float(s.weight) for s in sorted(sources, key=lambda s: s.name)}
