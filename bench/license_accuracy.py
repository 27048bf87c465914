"""Measure cpp-data's per-file license decisions against Debian's machine-readable copyright files.

Ground truth nobody on the project wrote: every Debian package below ships /usr/share/doc/<pkg>/copyright in the
DEP-5 format (https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/), whose `Files:` stanzas map
globs of the upstream source tree to a `License:` expression of Debian short names.

How it measures:

1. Parse each package's DEP-5 file (its own small parser: paragraphs split by blank lines, fields with
   continuation lines). Packages whose copyright is not DEP-5 or has fewer than 2 `Files:` stanzas are skipped.
2. Copy the package's installed regular files (`dpkg -L`; no symlinks, no directories; nothing from
   /usr/share/doc, /usr/share/man, /usr/lib, pkgconfig or cmake directories) into a per-package tree
   WORK/trees/<pkg>/, stripping the install prefix (/usr/include/, /usr/src/, /usr/share/). No license file is
   added that the package does not install.
3. Give each installed file its ground-truth stanza: the glob with the most literal characters that matches a
   suffix of the file's tree path (path components from the right; DEP-5 globs: `*` matches anything
   including `/`, `?` one character); a lone `*` scores 0 (the fallback); ties go to the later stanza.
   Files that no glob matches are "unmatched" and counted neither right nor wrong.
4. Reduce the stanza's License expression to a family: copyleft (GPL*, AGPL*), weak_copyleft (LGPL*, MPL*,
   EPL*, CDDL*, EUPL*), permissive (the names in PERMISSIVE_PREFIXES and EXTRA_PERMISSIVE), or unknown (left
   out of right/wrong). `with ... exception` is stripped; `A or B` takes the most permissive family and
   `A and B` (or a comma list) the strictest.
5. Run `cpp-data build` once over all selected trees, with no `license` key in the sources file (the DEP-5
   answer never reaches the input), using the v6 recipe cut down to the stages collect, license, filter,
   exact_dedup, near_dedup, shards, ledger (plus any stage these read, such as decontaminate).
6. Read the build's provenance ledger and compare, per file that reached the license decision (kept,
   license_refused, exact_duplicate, near_duplicate, and filtered after the license stage: `judged`):
   ours_allowed = decision != license_refused; our family =
   cpp_data.stages.lib.license_match.policy(license_spdx, DEFAULT_ALLOW, allow_copyleft=False)[1].
7. Report per package and overall: judged files, unmatched, truth-unknown, copyleft (strong or weak) files kept
   (target 0), permissive files refused by the default allow-list (target <= 5 %), files whose family differs,
   why permissive files were refused, and the most common (truth license, our license_spdx) disagreements.

Run it with the project's interpreter (it imports cpp_data), from the repository root:

    .venv/bin/python bench/license_accuracy.py --out-md bench/results/license_accuracy.md \
        --out-json bench/results/license_accuracy.json                   # all packages
    .venv/bin/python bench/license_accuracy.py --packages googletest,libzstd-dev
    .venv/bin/python bench/license_accuracy.py --reuse-build              # re-score the last build
    .venv/bin/python bench/license_accuracy.py --extracted DIR            # packages not installed: DIR/<pkg>

tests/test_license_accuracy.py runs a slice of it. The packages must be installed (apt); those of the
default corpus are, after scripts/setup.sh.

Outputs: JSON (--out-json), a Markdown table (stdout and --out-md) and one TSV row per installed file
(WORK/per_file_<tag>.tsv) for diagnosis.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

DEFAULT_PACKAGES = (
    "googletest", "nlohmann-json3-dev", "libpoco-dev", "juce-modules-source-data", "libfmt-dev", "libeigen3-dev",
    "libsigc++-2.0-dev", "libzstd-dev", "libboost1.74-dev", "qtbase5-dev", "libreadline-dev", "libgmp-dev",
    "libabsl-dev", "libcereal-dev", "rapidjson-dev", "libcrypto++-dev", "libssl-dev", "libntl-dev",
    "libopenbabel-dev", "libmysqlcppconn-dev",
)
# A package whose own doc directory holds no copyright file: the package whose copyright file applies instead.
COPYRIGHT_FALLBACK = {"juce-modules-source-data": "juce-modules-source"}

# The stages this benchmark needs; stages they read (e.g. decontaminate, which passes documents through when
# the sources file names no reference) are added from cpp-data's stage registry, in the v6 recipe's order.
WANTED_STAGES = ("collect", "license", "filter", "exact_dedup", "near_dedup", "shards", "ledger")
JUDGED = frozenset({"kept", "license_refused", "exact_duplicate", "near_duplicate"})


def judged(row: dict) -> bool:
    """Whether the license policy decided a ledger row: the decisions in JUDGED, and the files the filter or
    decontamination refused after the license stage had allowed them (they carry its answer); not a file
    refused before it (skipped, undecodable). "Kept" in the report means allowed by the policy: such a file
    counts as kept though the filter dropped it afterwards."""
    return row["decision"] in JUDGED or (row["decision"] == "filtered" and bool(row.get("license_source")))
COPYLEFT_FAMILIES = frozenset({"copyleft", "weak_copyleft"})

# Install prefixes stripped from installed paths (the rest is the tree path); excluded directories.
STRIP_PREFIXES = ("/usr/include/", "/usr/src/", "/usr/share/")
EXCLUDED_PREFIXES = ("/usr/share/doc/", "/usr/share/man/", "/usr/lib/")
EXCLUDED_DIR_NAMES = frozenset({"pkgconfig", "cmake"})

# Debian short names, lower-cased, by prefix. `gpl`/`agpl` are checked after `lgpl`.
WEAK_COPYLEFT_PREFIXES = ("lgpl", "mpl", "epl", "cddl", "eupl")
STRONG_COPYLEFT_PREFIXES = ("gpl", "agpl")
PERMISSIVE_PREFIXES = ("expat", "mit", "bsd", "apache", "bsl", "boost", "isc", "zlib", "public-domain", "cc0",
                       "x11", "openssl", "ssleay", "unicode", "curl", "libpng", "ijg", "ftl", "python", "psf")
# Clearly permissive names met in these packages' copyright files (their texts were read: all-permissive,
# MIT/BSD/HPND-like or attribution-only grants). Lower-cased; matched exactly or, for `permissive-`, by prefix.
EXTRA_PERMISSIVE = {
    "oldboost1": "old Boost notice: use, copy, modify, sell with the notice",
    "oldboost2": "old Boost notice: copy, use, modify, sell, distribute with the notice",
    "oldboost3": "old Boost notice: copy, use, sell, distribute; modified copies marked",
    "jam": "Jam: use and distribute freely, modifications marked",
    "hp": "HP (HPND-like STL notice)",
    "sgi": "SGI (HPND-like STL notice)",
    "nist": "NIST (HPND-like)",
    "kempf": "HPND-like notice",
    "crystalclear": "HPND-like notice",
    "spencer": "Henry Spencer regex license",
    "rsa-md": "RSA MD4/MD5 license",
    "gap": "FSF all-permissive",
    "permissive-": "any name starting with permissive- (e.g. FSF all-permissive autoconf macros)",
    "harfbuzz": "Old-MIT-like",
    "bitstream": "Bitstream Vera font license",
    "libjpeg": "IJG",
    "brg-endian": "Brian Gladman BSD-like",
    "w3c": "W3C software notice",
    "u-of-i-bsd-like": "University of Illinois/NCSA",
    "ncsa": "University of Illinois/NCSA",
    "icc": "ICC profile: copy, distribute, use without restriction",
    "hybrid-bsd": "BSD/zlib hybrid",
    "khronos": "MIT-like",
    "cc-by": "Creative Commons Attribution (any version)",
    "unlicense": "Unlicense",
    "wtfpl": "WTFPL",
}
_FAMILY_ORDER = {"permissive": 0, "weak_copyleft": 1, "copyleft": 2}
_WITH_EXCEPTION = re.compile(r"\s+with\s+.*?exception\b", re.I)


# ---------------------------------------------------------------------------------------------------------
# DEP-5 parsing and ground truth


@dataclass
class Stanza:
    """One `Files:` paragraph: its position, globs and the first line of its License field."""
    index: int
    globs: list[str]
    license: str


@dataclass
class Dep5:
    """A parsed DEP-5 copyright file: whether it declares the format, and its Files stanzas in order."""
    path: Path
    is_dep5: bool
    stanzas: list[Stanza] = field(default_factory=list)


def parse_paragraphs(text: str) -> list[dict[str, str]]:
    """Split deb822 text into paragraphs of {field name: value}; continuation lines (leading space or tab)
    are appended to the field's value with a newline, `#` comment lines are dropped. Field names keep case."""
    paragraphs: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if not line.strip():
            if current:
                paragraphs.append(current)
            current, last = {}, None
            continue
        if line.startswith("#"):
            continue
        if line[0] in " \t":
            if last is not None:
                current[last] += "\n" + line.strip()
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue  # not a field: tolerate and ignore
        last = name.strip()
        current[last] = value.strip()
    if current:
        paragraphs.append(current)
    return paragraphs


def parse_dep5(path: Path) -> Dep5:
    """Parse a copyright file; is_dep5 when its first paragraph has a Format field."""
    paragraphs = parse_paragraphs(path.read_text(encoding="utf-8", errors="replace"))
    dep5 = Dep5(path, bool(paragraphs) and "Format" in paragraphs[0])
    for para in paragraphs:
        if "Files" not in para:
            continue
        license_first = para.get("License", "").split("\n", 1)[0].strip()
        dep5.stanzas.append(Stanza(len(dep5.stanzas), para["Files"].split(), license_first))
    return dep5


def glob_parts(glob: str) -> list[tuple[str, str]]:
    """Tokenize a DEP-5 glob into ("lit", char) / ("star", "*") / ("any", "?"); `\\*`, `\\?` and `\\\\` are
    literal characters. Only `*` and `?` are special in DEP-5 (brackets are literal)."""
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if c == "\\" and i + 1 < len(glob) and glob[i + 1] in "*?\\":
            out.append(("lit", glob[i + 1]))
            i += 2
            continue
        out.append(("star", c) if c == "*" else ("any", c) if c == "?" else ("lit", c))
        i += 1
    return out


class TruthMatcher:
    """Finds the ground-truth stanza of a tree path: the best-scoring glob matching a component suffix.

    Literal globs (no wildcard, most of them) are looked up per suffix in a dict; wildcard globs are compiled
    to `(?:.*/)?<glob>` and full-matched against the whole path, which is the same as matching some suffix
    that starts at a component boundary.

    With relocated=True a glob also matches when the *whole* tree path matches a component suffix of the glob
    whose first component is literal and equal to the path's first component (the score counts only that
    suffix's literal characters): upstream `libs/geometry/include/boost/geometry/x.hpp` or
    `include/cereal/external/base64.hpp` are installed as `boost/geometry/x.hpp`, `cereal/external/base64.hpp`,
    which the plain suffix rule can never reach because the glob is longer than the installed path."""

    def __init__(self, stanzas: list[Stanza], relocated: bool = False):
        self.stanzas = stanzas
        self.literal: dict[str, int] = {}  # glob -> index of the last stanza naming it
        self.wild: list[tuple[int, int, re.Pattern, str]] = []  # (score, stanza, regex, glob)
        self.relocated = relocated
        self.rel_literal: dict[str, tuple[int, str]] = {}  # glob suffix -> (stanza, glob)
        self.rel_wild: dict[str, list[tuple[int, int, re.Pattern, str]]] = defaultdict(list)  # by first component
        for st in stanzas:
            for g in st.globs:
                parts = glob_parts(g)
                score = sum(1 for kind, _ in parts if kind == "lit")
                if all(kind == "lit" for kind, _ in parts):
                    self.literal["".join(c for _, c in parts)] = st.index
                else:
                    self.wild.append((score, st.index, re.compile(r"(?:.*/)?" + self._regex(parts), re.S), g))
                if relocated:
                    self._add_relocated(parts, st.index, g)

    @staticmethod
    def _regex(parts: list[tuple[str, str]]) -> str:
        """Regex body of a tokenized glob."""
        return "".join(re.escape(c) if kind == "lit" else ".*" if kind == "star" else "." for kind, c in parts)

    def _add_relocated(self, parts: list[tuple[str, str]], index: int, glob: str) -> None:
        """Register every proper component suffix of a glob that starts with a literal component."""
        comps: list[list[tuple[str, str]]] = [[]]
        for tok in parts:
            if tok == ("lit", "/"):
                comps.append([])
            else:
                comps[-1].append(tok)
        for k in range(1, len(comps)):
            first = comps[k]
            if not first or any(kind != "lit" for kind, _ in first):
                continue
            kept = [tok for i, comp in enumerate(comps[k:]) for tok in ([("lit", "/")] if i else []) + comp]
            head = "".join(c for _, c in first)
            if all(kind == "lit" for kind, _ in kept):
                self.rel_literal["".join(c for _, c in kept)] = (index, glob)
            else:
                score = sum(1 for kind, _ in kept if kind == "lit")
                self.rel_wild[head].append((score, index, re.compile(self._regex(kept), re.S), glob))

    def match(self, tree_path: str) -> tuple[Stanza, str, int] | None:
        """(stanza, winning glob, score) for a tree-relative path, or None when no glob matches."""
        best: tuple[int, int, str] | None = None
        comps = tree_path.split("/")
        for i in range(len(comps)):
            suffix = "/".join(comps[i:])
            idx = self.literal.get(suffix)
            if idx is not None:
                cand = (len(suffix), idx, suffix)
                if best is None or cand[:2] > best[:2]:
                    best = cand
        for score, idx, rx, g in self.wild:
            if best is not None and (score, idx) <= best[:2]:
                continue
            if rx.fullmatch(tree_path):
                best = (score, idx, g)
        if self.relocated:
            hit = self.rel_literal.get(tree_path)
            if hit is not None and (best is None or (len(tree_path), hit[0]) > best[:2]):
                best = (len(tree_path), hit[0], hit[1])
            for score, idx, rx, g in self.rel_wild.get(comps[0], ()):
                if (best is None or (score, idx) > best[:2]) and rx.fullmatch(tree_path):
                    best = (score, idx, g)
        if best is None:
            return None
        return self.stanzas[best[1]], best[2], best[0]


# ---------------------------------------------------------------------------------------------------------
# License families of Debian short names


def name_family(name: str) -> str | None:
    """Family of one Debian short name: permissive, weak_copyleft, copyleft, unknown; None for a term that is
    an exception rather than a license (e.g. `exception-universal-FOSS`)."""
    n = name.strip().strip("()").strip().lower()
    if not n:
        return "unknown"
    if n.startswith("exception") or n.endswith("-exception") or n.endswith(" exception"):
        return None
    if n.startswith(WEAK_COPYLEFT_PREFIXES):
        return "weak_copyleft"
    if n.startswith(STRONG_COPYLEFT_PREFIXES):
        return "copyleft"
    if n.startswith(PERMISSIVE_PREFIXES):
        return "permissive"
    if n in EXTRA_PERMISSIVE or n.startswith("permissive-") or n.startswith("cc-by"):
        return "permissive"
    return "unknown"


def _combine(families: list[str], op: str) -> str:
    """OR: the most permissive family (unknown only if nothing permissive is on offer and some branch is
    unknown); AND: the strictest (unknown unless a strong copyleft term already decides it)."""
    if not families:
        return "unknown"
    known = [f for f in families if f != "unknown"]
    if op == "or":
        if "permissive" in known:
            return "permissive"
        if len(known) < len(families):
            return "unknown"
        return min(known, key=_FAMILY_ORDER.__getitem__)
    if "copyleft" in known:
        return "copyleft"
    if len(known) < len(families):
        return "unknown"
    return max(known, key=_FAMILY_ORDER.__getitem__)


def _or_of_ands(text: str) -> tuple[str, list[str]]:
    """Family and names of a comma-free expression where `and` binds tighter than `or` (DEP-5)."""
    names: list[str] = []
    branches = []
    for branch in re.split(r"\s+or\s+", text.strip(), flags=re.I):
        terms = []
        for term in re.split(r"\s+and\s+", branch.strip(), flags=re.I):
            fam = name_family(term)
            names.append(term.strip())
            if fam is not None:
                terms.append(fam)
        if terms:
            branches.append(_combine(terms, "and"))
    return _combine(branches, "or"), names


def expression_family(expr: str) -> tuple[str, list[str]]:
    """Family of a DEP-5 License expression and the license names it uses (after stripping `with ...
    exception`). A comma separates groups: `A or B, and C` is (A or B) and C."""
    text = _WITH_EXCEPTION.sub("", expr).replace("(", " ").replace(")", " ")
    chunks = [c.strip() for c in text.split(",") if c.strip()]
    if not chunks:
        return "unknown", []
    family, names = _or_of_ands(chunks[0])
    for chunk in chunks[1:]:
        m = re.match(r"(and|or)\s+(.*)$", chunk, re.I | re.S)
        op, rest = (m.group(1).lower(), m.group(2)) if m else ("and", chunk)
        fam, more = _or_of_ands(rest)
        names += more
        family = _combine([family, fam], op)
    return family, names


# ---------------------------------------------------------------------------------------------------------
# Installed files and trees


def copyright_file(pkg: str) -> Path | None:
    """The package's copyright file, following /usr/share/doc/<pkg> symlinks (and COPYRIGHT_FALLBACK)."""
    for name in (pkg, COPYRIGHT_FALLBACK.get(pkg)):
        if name:
            path = Path("/usr/share/doc", name).resolve() / "copyright"
            if path.is_file():
                return path
    return None


def tree_path(installed: str) -> str:
    """Installed path -> tree-relative path: the first matching STRIP_PREFIXES entry removed (other paths
    lose only their leading slash)."""
    for prefix in STRIP_PREFIXES:
        if installed.startswith(prefix):
            return installed[len(prefix):]
    return installed.lstrip("/")


def is_excluded(installed: str) -> bool:
    """Documentation, manual pages, /usr/lib and pkgconfig/cmake directories are not part of the benchmark."""
    if installed.startswith(EXCLUDED_PREFIXES):
        return True
    dirs = PurePosixPath(installed).parts[1:-1]
    return any(d.lower() in EXCLUDED_DIR_NAMES or d.lower().startswith("cmake-") for d in dirs)


def installed_files(pkg: str) -> tuple[dict[str, str], list[str]]:
    """{tree path: installed path} of the package's regular files after exclusions, and the collisions
    (installed paths whose tree path another file already took)."""
    listing = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True, check=True).stdout
    return _tree_files((line.strip(), Path(line.strip())) for line in listing.splitlines() if line.strip())


def extracted_files(root: Path) -> tuple[dict[str, str], list[str]]:
    """installed_files of a package that is not installed but unpacked (`dpkg-deb -x PKG.deb root`): the same
    selection, read from `root`, with each file's installed path being its path under `root`."""
    return _tree_files(("/" + f.relative_to(root).as_posix(), f) for f in sorted(root.rglob("*")))


def extracted_copyright(root: Path, pkg: str) -> Path | None:
    """An unpacked package's copyright file: usr/share/doc/<pkg>/copyright under `root`, or, where that doc
    directory is a link to another package's (libboost1.74-dev's), the linked package's, unpacked or installed."""
    doc = root / "usr/share/doc" / pkg
    if (doc / "copyright").is_file() and not doc.is_symlink():
        return doc / "copyright"
    if doc.is_symlink():
        name = Path(doc.readlink()).name
        for candidate in (root / "usr/share/doc" / name / "copyright", Path("/usr/share/doc", name, "copyright")):
            if candidate.is_file():
                return candidate
    return copyright_file(pkg)


def _tree_files(entries) -> tuple[dict[str, str], list[str]]:
    """{tree path: file} of (installed path, file on disk) pairs: regular files only, exclusions applied."""
    files: dict[str, str] = {}
    collisions = []
    for installed, p in entries:
        if p.is_symlink() or not p.is_file() or is_excluded(installed):
            continue
        tp = tree_path(installed)
        if tp in files:
            collisions.append(installed)
            continue
        files[tp] = str(p)
    return files, collisions


def build_tree(root: Path, files: dict[str, str]) -> None:
    """(Re)create root holding a real copy of every file (contents, no symlinks)."""
    if root.exists():
        shutil.rmtree(root)
    for tp, src in files.items():
        dest = root / tp
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


# ---------------------------------------------------------------------------------------------------------
# Running cpp-data


def make_recipe(dest: Path) -> list[str]:
    """The v6 recipe cut down to WANTED_STAGES and what they read (pipeline/recipe.cut_recipe); returns the
    stage list."""
    from cpp_data.pipeline.runner.recipe import cut_recipe

    return cut_recipe("v6", list(WANTED_STAGES), dest)


def source_name(pkg: str) -> str:
    """The cpp-data source name of a package: its name, with every character cpp-data does not allow in a
    source name ([A-Za-z0-9._-]) replaced by `_` (libsigc++-2.0-dev -> libsigc__-2.0-dev)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", pkg)


def write_sources(dest: Path, trees: dict[str, Path]) -> None:
    """Sources TOML: one [[source]] per package, name and url only (no license key)."""
    lines = []
    for pkg, root in trees.items():
        lines += ["[[source]]", f"name = {json.dumps(source_name(pkg))}", f"url = {json.dumps(str(root))}", ""]
    dest.write_text("\n".join(lines))
    lock = dest.with_suffix(".lock")
    if lock.exists():  # a stale lock would pin old tree digests
        lock.unlink()


def run_build(cpp_data: str, recipe: Path, sources: Path, out: Path, workers: int, log: Path) -> int:
    """Run `cpp-data build`; returns its exit status (0 or 3 is success). Output goes to log."""
    cmd = [cpp_data, "build", "--recipe", str(recipe), "--sources", str(sources), "--out", str(out),
           "--workers", str(workers), "--no-progress"]
    with log.open("w") as fh:
        fh.write(" ".join(cmd) + "\n")
        fh.flush()
        return subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode


def read_ledger(out: Path, packages: list[str]) -> tuple[str, dict[tuple[str, str], dict], int]:
    """(build name, {(package, path): ledger row}, duplicate keys) of the latest build, for the given
    packages (ledger repo = source_name(package))."""
    from cpp_data.schemas.reader import read_ledger as read_build_ledger

    name = (out / "builds" / "LATEST").read_text().strip()
    table = read_build_ledger(out / "builds" / name / "provenance" / "ledger.parquet",
                              ["source_repo", "source_path", "decision", "reason", "license_spdx", "license_source",
                               "license_evidence"])
    wanted = {source_name(p): p for p in packages}
    rows, dups = {}, 0
    for row in table.to_pylist():
        if row["source_repo"] not in wanted:
            continue
        key = (wanted[row["source_repo"]], row["source_path"])
        dups += key in rows
        rows[key] = row
    return name, rows, dups


# ---------------------------------------------------------------------------------------------------------
# Scoring


def new_stats() -> dict:
    """Zeroed counters of one package (or of the overall row)."""
    return {"installed": 0, "not_in_ledger": 0, "not_judged": 0, "judged": 0, "unmatched": 0,
            "truth_unknown": 0, "truth_from_fallback": 0, "scored": 0, "copyleft_truth": 0, "copyleft_kept": 0,
            "permissive_truth": 0, "permissive_refused": 0, "family_differs": 0, "kept": 0, "refused": 0,
            "not_judged_by": Counter(), "permissive_refused_by": Counter(), "disagreements": Counter(),
            "truth_families": Counter(), "unknown_names": Counter(), "copyleft_kept_by": Counter(),
            "copyleft_kept_files": []}


def score_package(pkg: str, files: dict[str, str], matcher: TruthMatcher, ledger: dict, stats: dict,
                  details: list, policy, allow: frozenset) -> None:
    """Compare every installed file of one package with its ledger row, updating stats and details."""
    for tp in sorted(files):
        stats["installed"] += 1
        row = ledger.get((pkg, tp))
        hit = matcher.match(tp)
        truth_expr = hit[0].license if hit else ""
        truth_family, names = expression_family(truth_expr) if hit else ("", [])
        detail = {"package": pkg, "path": tp, "decision": row["decision"] if row else "",
                  "reason": (row or {}).get("reason") or "", "glob": hit[1] if hit else "",
                  "truth_license": truth_expr, "truth_family": truth_family,
                  "license_spdx": (row or {}).get("license_spdx") or "",
                  "license_source": (row or {}).get("license_source") or "", "our_family": "", "verdict": ""}
        details.append(detail)
        if row is None:
            stats["not_in_ledger"] += 1
            detail["verdict"] = "not_in_ledger"
            continue
        if not judged(row):
            stats["not_judged"] += 1
            stats["not_judged_by"][f'{row["decision"]}:{row["reason"]}'] += 1
            detail["verdict"] = "not_judged"
            continue
        stats["judged"] += 1
        allowed = row["decision"] != "license_refused"
        stats["kept" if allowed else "refused"] += 1
        spdx = row["license_spdx"] or "NOASSERTION"
        ours = policy(spdx, allow, False)[1]
        detail["our_family"] = ours
        if hit is None:
            stats["unmatched"] += 1
            detail["verdict"] = "unmatched"
            continue
        stats["truth_families"][truth_family] += 1
        stats["truth_from_fallback"] += hit[2] == 0
        if truth_family == "unknown":
            stats["truth_unknown"] += 1
            for n in names:
                if name_family(n) == "unknown":
                    stats["unknown_names"][n] += 1
            detail["verdict"] = "truth_unknown"
            continue
        stats["scored"] += 1
        if truth_family in COPYLEFT_FAMILIES:
            stats["copyleft_truth"] += 1
            stats["copyleft_kept"] += allowed
            if allowed:  # for diagnosis: where our answer came from, and the file
                stats["copyleft_kept_by"][f'{row["license_source"]}: {spdx}'] += 1
                stats["copyleft_kept_files"].append(f"{pkg}/{tp} (DEP-5: {truth_expr}; ours: {spdx}, "
                                                    f"{row['license_source']})")
        else:
            stats["permissive_truth"] += 1
            if not allowed:
                stats["permissive_refused"] += 1
                stats["permissive_refused_by"][row["reason"] or "?"] += 1
        same = ours == truth_family
        if not same:
            stats["family_differs"] += 1
            stats["disagreements"][(truth_expr, spdx)] += 1
        detail["verdict"] = ("copyleft_kept" if truth_family in COPYLEFT_FAMILIES and allowed else
                             "permissive_refused" if truth_family == "permissive" and not allowed else
                             "ok" if same else "family_differs")


def pct(num: int, den: int) -> float | None:
    """num/den in percent (one decimal), None when den is 0."""
    return round(100.0 * num / den, 1) if den else None


def merge(into: dict, stats: dict) -> None:
    """Add one package's counters into the overall counters."""
    for k, v in stats.items():
        if isinstance(v, Counter):
            into[k].update(v)
        else:
            into[k] += v


def finish(stats: dict) -> dict:
    """JSON-ready copy of counters with percentages and the top refusal reasons and disagreements."""
    out = {k: v for k, v in stats.items() if not isinstance(v, Counter)}
    out["permissive_refused_pct"] = pct(stats["permissive_refused"], stats["permissive_truth"])
    out["family_differs_pct"] = pct(stats["family_differs"], stats["scored"])
    out["not_judged_by"] = dict(stats["not_judged_by"].most_common())
    out["permissive_refused_by"] = dict(stats["permissive_refused_by"].most_common())
    out["truth_families"] = dict(stats["truth_families"].most_common())
    out["unknown_truth_names"] = dict(stats["unknown_names"].most_common())
    out["copyleft_kept_by"] = dict(stats["copyleft_kept_by"].most_common())
    out["top_disagreements"] = [{"truth_license": t, "license_spdx": s, "files": n}
                                for (t, s), n in stats["disagreements"].most_common(5)]
    return out


def fmt_pct(v: float | None) -> str:
    """Percentage cell: `12.3%` or `-`."""
    return "-" if v is None else f"{v:.1f}%"


def markdown(result: dict) -> str:
    """The Markdown report: the table (per package + overall), then diagnosis sections."""
    head = ["package", "installed", "not judged", "judged", "unmatched", "truth unknown", "scored",
            "copyleft (truth)", "copyleft kept", "permissive (truth)", "permissive refused", "refused %",
            "family differs", "differs %"]
    lines = [f"License accuracy vs Debian DEP-5 (build {result['build']}, {len(result['packages'])} packages, "
             f"glob matching: {result['matching']})", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [(p, s) for p, s in result["packages"].items()] + [("**overall**", result["overall"])]
    for name, s in rows:
        lines.append("| " + " | ".join(str(x) for x in [
            name, s["installed"], s["not_judged"], s["judged"], s["unmatched"], s["truth_unknown"], s["scored"],
            s["copyleft_truth"], s["copyleft_kept"], s["permissive_truth"], s["permissive_refused"],
            fmt_pct(s["permissive_refused_pct"]), s["family_differs"], fmt_pct(s["family_differs_pct"])]) + " |")
    o = result["overall"]
    lines += ["", f"Targets: copyleft kept = 0 (got {o['copyleft_kept']}); permissive refused <= 5% "
                  f"(got {fmt_pct(o['permissive_refused_pct'])}).",
              f"Installed files missing from the ledger: {o['not_in_ledger']}; truth from the `*` fallback stanza: "
              f"{o['truth_from_fallback']} of {o['judged'] - o['unmatched']} matched judged files.", ""]
    if result.get("unpacked_not_installed"):
        lines += ["Read from unpacked .debs (`--extracted`; not installed on the measuring machine): "
                  + ", ".join(result["unpacked_not_installed"]), ""]
    if result["skipped"]:
        lines += ["Skipped packages:", ""] + [f"- {p}: {why}" for p, why in result["skipped"].items()] + [""]
    lines += ["Why permissive files were refused (ledger reason):", ""]
    lines += [f"- {r}: {n}" for r, n in o["permissive_refused_by"].items()] or ["- none"]
    lines += ["", "Copyleft files kept (by DEP-5), with where our answer came from:", ""]
    lines += [f"- {f}" for f in o["copyleft_kept_files"]] or ["- none"]
    lines += ["", "Not judged (decision:reason):", ""]
    lines += [f"- {r}: {n}" for r, n in o["not_judged_by"].items()] or ["- none"]
    lines += ["", "Truth licenses of unknown family (files):", ""]
    lines += [f"- {r}: {n}" for r, n in o["unknown_truth_names"].items()] or ["- none"]
    lines += ["", "Top disagreements (truth license -> our license_spdx: files) per package:", ""]
    for p, s in result["packages"].items():
        if s["top_disagreements"]:
            lines.append(f"- {p}: " + "; ".join(f"`{d['truth_license']}` -> `{d['license_spdx']}`: {d['files']}"
                                               for d in s["top_disagreements"]))
    lines += ["", "Timings (s): " + ", ".join(f"{k} {v}" for k, v in result["timings_s"].items())]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packages", help="comma-separated subset of the packages (default: all %d)"
                    % len(DEFAULT_PACKAGES))
    ap.add_argument("--work", type=Path, default=Path("/tmp/cpp-data-license-accuracy"),
                    help="work directory: trees/, out/, recipe, sources, logs (default: %(default)s)")
    ap.add_argument("--out-json", type=Path, help="write the results as JSON here")
    ap.add_argument("--out-md", type=Path, help="also write the Markdown report here")
    ap.add_argument("--cpp-data", default=str(Path(sys.executable).with_name("cpp-data")),
                    help="the cpp-data CLI (default: the one beside this Python)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--relocated-globs", action="store_true",
                    help="also match a glob longer than the installed path when the whole path matches a suffix "
                         "of the glob starting at a literal component equal to the path's first one (reaches "
                         "upstream paths such as libs/X/include/boost/X/y.hpp installed as boost/X/y.hpp)")
    ap.add_argument("--extracted", type=Path,
                    help="a folder of unpacked packages (DIR/<pkg>, from `dpkg-deb -x <pkg>.deb DIR/<pkg>`): a "
                         "package that is not installed is read from there")
    ap.add_argument("--reuse-build", action="store_true",
                    help="do not copy trees or build: score the latest build under WORK/out again")
    return ap.parse_args(argv)


def _installed(pkg: str) -> bool:
    """Whether dpkg lists the package as installed."""
    return subprocess.run(["dpkg", "-s", pkg], capture_output=True).returncode == 0


def main(argv: list[str] | None = None) -> int:
    """Prepare trees, build, score and report; returns the exit status."""
    args = parse_args(argv)
    from cpp_data.stages.lib.license_match import policy
    from cpp_data.stages.license import DEFAULT_ALLOW

    packages = [p.strip() for p in args.packages.split(",") if p.strip()] if args.packages else list(DEFAULT_PACKAGES)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    skipped, matchers, files_of, collisions = {}, {}, {}, {}
    extracted = []
    for pkg in packages:
        unpacked = args.extracted / pkg if args.extracted and not _installed(pkg) else None
        if unpacked is not None and unpacked.is_dir():
            extracted.append(pkg)
        else:
            unpacked = None
        cfile = extracted_copyright(unpacked, pkg) if unpacked else copyright_file(pkg)
        if cfile is None:
            skipped[pkg] = "no copyright file"
            continue
        dep5 = parse_dep5(cfile)
        if not dep5.is_dep5:
            skipped[pkg] = f"{cfile} is not DEP-5 (no Format field)"
            continue
        if len(dep5.stanzas) < 2:
            skipped[pkg] = f"{cfile} has {len(dep5.stanzas)} Files stanza(s)"
            continue
        try:
            files, coll = extracted_files(unpacked) if unpacked else installed_files(pkg)
        except subprocess.CalledProcessError:
            skipped[pkg] = "not installed (dpkg -L failed)"
            continue
        if not files:
            skipped[pkg] = "installs no benchmarked file"
            continue
        matchers[pkg] = (TruthMatcher(dep5.stanzas, args.relocated_globs), str(cfile), len(dep5.stanzas))
        files_of[pkg], collisions[pkg] = files, coll
    selected = list(files_of)
    if not selected:
        print("no package left to benchmark; skipped: " + json.dumps(skipped), file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    out = args.work / "out"
    tag = "all" if not args.packages else "subset"
    build_rc, stages = None, None
    if not args.reuse_build:
        for pkg in selected:
            build_tree(args.work / "trees" / pkg, files_of[pkg])
        timings["prepare"] = round(time.monotonic() - t0, 1)
        recipe, sources = args.work / "recipe.toml", args.work / f"sources_{tag}.toml"
        stages = make_recipe(recipe)
        write_sources(sources, {p: args.work / "trees" / p for p in selected})
        t1 = time.monotonic()
        build_rc = run_build(args.cpp_data, recipe, sources, out, args.workers, args.work / f"build_{tag}.log")
        timings["build"] = round(time.monotonic() - t1, 1)
        if build_rc not in (0, 3):
            print(f"cpp-data build failed with exit status {build_rc}; see {args.work / f'build_{tag}.log'}",
                  file=sys.stderr)
            return 1
    t2 = time.monotonic()
    build_name, ledger, dup_keys = read_ledger(out, selected)
    absent = sorted(set(selected) - {p for p, _ in ledger})
    if absent:
        print(f"warning: build {build_name} has no ledger rows for {', '.join(absent)} (--reuse-build of a build "
              "over other packages?)", file=sys.stderr)
    allow = frozenset(DEFAULT_ALLOW)
    per_pkg, details, overall = {}, [], new_stats()
    for pkg in selected:
        stats = new_stats()
        score_package(pkg, files_of[pkg], matchers[pkg][0], ledger, stats, details, policy, allow)
        merge(overall, stats)
        per_pkg[pkg] = finish(stats) | {"copyright": matchers[pkg][1], "files_stanzas": matchers[pkg][2],
                                        "path_collisions": collisions[pkg]}
    timings["score"] = round(time.monotonic() - t2, 1)
    timings["total"] = round(time.monotonic() - t0, 1)
    known = {(p, tp) for p in selected for tp in files_of[p]}
    extra = sorted(f"{r}/{p}" for r, p in ledger if (r, p) not in known)
    result = {
        "build": build_name, "build_exit_status": build_rc,
        "matching": "suffix+relocated" if args.relocated_globs else "suffix", "stages": stages,
        "allow": list(DEFAULT_ALLOW),
        "packages": per_pkg, "overall": finish(overall), "skipped": skipped, "unpacked_not_installed": extracted,
        "timings_s": timings,
        "ledger_rows_not_installed": extra[:50], "ledger_rows_not_installed_count": len(extra),
        "ledger_duplicate_keys": dup_keys, "extra_permissive_names": EXTRA_PERMISSIVE,
    }
    if args.out_json:
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")
    with (args.work / f"per_file_{tag}.tsv").open("w") as fh:
        cols = list(details[0])
        fh.write("\t".join(cols) + "\n")
        for d in details:
            fh.write("\t".join(str(d[c]).replace("\t", " ").replace("\n", " ") for c in cols) + "\n")
    md = markdown(result)
    sys.stdout.write(md)
    if args.out_md:
        args.out_md.parent.mkdir(parents=True, exist_ok=True)
        args.out_md.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
