"""license: the license cascade and allow-list policy of docs/DESIGN.md section 4, per document.

It is the first stage to read collect's files: each is decoded and normalized (stages/lib/decode.py) and then
judged, so the filter's scans never run on a file the policy refuses and every file that decodes has a license
answer in the ledger (docs/DESIGN.md section 2).

The repository-level LICENSE/COPYING files that collect found are identified once per source (askalono), and
for a history walk once per license state of the tree, so a version is judged by the licenses of its commit.
The document tasks do that (`source_license_states`), not the driver: a source's first task in a worker
process identifies the files and writes the result beside the source's output, or reads what another task of
the source wrote there. Done in the driver, source after source before any task starts, it would be serial work
growing with the repositories, since pyaskalono loads its license store again for every text it identifies
(`license_match` caches results by normalized text, so a text seen before costs nothing).
The source's first tasks usually start together, one per worker: each then goes through the files from its own
point (`identified_in_turn`: task j starts at the j-th fraction of the van der Corput sequence), claims a file
before identifying it and records the answer in the stage's work directory, passing over what another task has
claimed or recorded, so W workers identify each file about once between them instead of once each. Each task
then runs the cascade on its documents and refuses what the policy does not allow, recording the rule
(no_license, unrecognized_spdx_tag, license_not_allowed, copyleft_not_opted_in, eula_source_available) and the
confidence of the license it found.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Callable, ClassVar

import pyarrow.parquet as pq
from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter

from cpp_data.pipeline.contract.executor import SourceTasks
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.pipeline.foundation.worker_cache import worker_cache
from cpp_data.stages.lib import dt_io
from cpp_data.stages.lib.decode import DecodeNormalize
from cpp_data.stages.lib.license_match import (
    LicenseAnswer,
    classify,
    expression_family,
    identify_license_file,
    is_primary_license_file,
    offers_choice,
    parse_spdx,
    policy,
)
from cpp_data.stages.lib.license_pointers import SELF, find_pointer, identify_sidecar, resolve, target_answer
from cpp_data.stages.lib.quality import vendored_root
from cpp_data.stages.lib.shard_tasks import WORK, clean_work
from cpp_data.stages.lib.submodules import SUBMODULES, Submodule

DEFAULT_ALLOW = ("MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "BSL-1.0", "Zlib",
                 "Apache-2.0 WITH LLVM-exception", "Unlicense", "CC0-1.0", "LicenseRef-scancode-public-domain")


@dataclass(frozen=True)
class LicenseParams:
    bounds: ClassVar[dict] = {"header_min_chars": (0, None)}
    allow: tuple[str, ...] = DEFAULT_ALLOW
    allow_copyleft: bool = False  # GPL-family code is kept only when a recipe opts in (then tagged per document)
    header_min_chars: int = 400  # header comments shorter than this are not sent to askalono

    def check(self) -> str | None:
        """Each allow entry is one license id (or `ID WITH EXCEPTION`) as the SPDX list spells it: the policy
        compares the ids of a file's expression with these strings, so 'Apache 2.0' or 'apache-2.0' would
        never match and every such file would be refused as license_not_allowed."""
        for entry in self.allow:
            spelled = parse_spdx(entry)
            if spelled is None:
                return f"allow: {entry!r} is not an SPDX license id (for example Apache-2.0, BSD-3-Clause)"
            if spelled != entry:  # a case slip of an SPDX id, or a LicenseRef- alias license-expression knows
                how = ("license-expression's name for that alias" if entry.lower().startswith("licenseref-")
                       else "as the SPDX list spells it")
                return f"allow: write {entry!r} as {spelled!r}, {how} (files' expressions are recorded so)"
            if " AND " in spelled or " OR " in spelled:
                return f"allow: {entry!r} is an expression; list each license on its own"
        return None


Identify = Callable[[str], "tuple[str, float] | None"]


def repo_licenses(rows: list[dict], identify: Identify = identify_license_file,
                  identify_side: Identify = identify_sidecar) -> dict[str, tuple[str, float, str]]:
    """Directory -> (spdx, score, evidence) for every directory holding an identifiable primary license file;
    such a file governs its directory's subtree (a bundled dependency with its own COPYING included).

    Only primary files decide (LICENSE, COPYING, LICENSE-MIT, COPYING.LESSER, ...): a file naming a component
    or an exception (LICENSE.OpenSSL, LICENSE-THIRD-PARTY, COPYING.RUNTIME) is listed in the evidence but never
    turns the license into a choice. Several primary licenses combine with AND (every one applies) unless a
    text offers the choice ("at your option", "dual licensed", an SPDX OR), and then with OR. `identify` names
    one primary file's text (`identify_license_file`, or what `identified_in_turn` recorded).

    A directory with no identifiable primary file takes its sidecars instead: license texts of other names
    (fmt.license.rst beside spdlog's bundled fmt, LICENSE.fmt) that askalono recognises (`identify_side`)."""
    found: dict[str, list[tuple[str, float, str, bool]]] = {}
    secondary: dict[str, list[tuple[str, str]]] = {}
    for row in sorted(rows, key=lambda r: r["source_path"]):
        path = PurePosixPath(row["source_path"])
        directory = str(path.parent)
        text = row["content"].decode("utf-8", "replace")
        if not is_primary_license_file(path.name):
            secondary.setdefault(directory, []).append((path.name, text))
            continue
        hit = identify(text)
        if hit:
            found.setdefault(directory, []).append((hit[0], hit[1], path.name, offers_choice(text)))
    out = _sidecar_licenses(secondary, set(found), identify_side)
    for directory, hits in found.items():
        exprs = list(dict.fromkeys(h[0] for h in hits))
        files = ", ".join(f"{h[2]} ({h[0]})" for h in hits)
        if len(exprs) == 1:
            expr, how = exprs[0], "license file" if len(hits) == 1 else "license files agree"
        else:
            op = "OR" if any(h[3] for h in hits) else "AND"
            expr = parse_spdx(f" {op} ".join(f"({e})" for e in exprs)) or " AND ".join(exprs)
            how = ("a license text offers the choice: OR" if op == "OR"
                   else "several primary license files: AND")
        where = "" if directory == "." else f"{directory}/: "
        evidence = f"{where}{files}; {how}"
        if secondary.get(directory):
            evidence += f"; not deciding: {', '.join(name for name, _ in secondary[directory])}"
        out[directory] = (expr, min(h[1] for h in hits), evidence)
    return out


def _sidecar_licenses(secondary: dict[str, list[tuple[str, str]]], decided: set[str], identify_side: Identify
                      ) -> dict[str, tuple[str, float, str]]:
    """Directory -> (spdx, score, evidence) from the sidecar license files of each directory without a primary
    license file of its own (`decided`): agreeing sidecars decide, disagreeing ones all apply (AND)."""
    out = {}
    for directory, files in secondary.items():
        if directory in decided:
            continue
        hits = [(hit[0], hit[1], name) for name, text in files if (hit := identify_side(text))]
        if not hits:
            continue
        exprs = list(dict.fromkeys(h[0] for h in hits))
        expr = exprs[0] if len(exprs) == 1 else (parse_spdx(" AND ".join(f"({e})" for e in exprs))
                                                 or " AND ".join(exprs))
        where = "" if directory == "." else f"{directory}/: "
        named = ", ".join(f"{h[2]} ({h[0]})" for h in hits)
        out[directory] = (expr, min(h[1] for h in hits), f"{where}sidecar {named}; no primary license file")
    return out


def license_states(license_files: Path, ids_dir: Path | None = None, start: float = 0.0) -> dict:
    """License state (None at a pin) -> repo_licenses of that state's license files, from collect's
    license_files.parquet. With `ids_dir`, the files are identified through `identified_in_turn` from `start`
    (primary files and sidecars each with their own identification, recorded apart)."""
    rows = pq.read_table(license_files).to_pylist()
    identify, identify_side = identify_license_file, identify_sidecar
    if ids_dir is not None:
        texts: dict[bool, list[str]] = {True: [], False: []}
        for row in rows:
            texts[is_primary_license_file(PurePosixPath(row["source_path"]).name)].append(
                row["content"].decode("utf-8", "replace"))
        hits = identified_in_turn(texts[True], ids_dir, start)
        side_hits = identified_in_turn(texts[False], ids_dir / "sidecars", start, identify_sidecar)

        def identify(text: str) -> tuple[str, float] | None:
            return hits[_text_key(text)]

        def identify_side(text: str) -> tuple[str, float] | None:
            return side_hits[_text_key(text)]
    by_state: dict = {}
    for row in rows:
        by_state.setdefault(row.get("state"), []).append(row)
    return {state: repo_licenses(state_rows, identify, identify_side) for state, state_rows in by_state.items()}


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def identified_in_turn(texts: list[str], ids_dir: Path, start: float, identify_one: Identify | None = None
                       ) -> dict[str, tuple[str, float] | None]:
    """`identify_one` (`identify_license_file` unless given) of each distinct text, keyed by its SHA-256, shared
    with the tasks running beside this one through `ids_dir`: one small JSON record per text, written atomically.

    Going through the texts (ordered by key) from the fraction `start` of the way round, a recorded text is read,
    a text another task has claimed (`<key>.claim`, created exclusively) is passed over until the end, and any
    other claimed, identified and recorded. At the end a passed-over text is read, or identified here if it is
    still unrecorded (its claimer may have died). Tasks that start together at spread points (`turn_start`)
    each identify about their share and read the rest: askalono's cost per call is fixed whatever the text, and
    tasks starting at once from the same point would each identify all of the source's files. Whichever task
    identified a text, the answer is the same; the records live and go with the stage's work directory."""
    ids_dir = Path(ids_dir)
    ids_dir.mkdir(parents=True, exist_ok=True)
    keyed = {_text_key(t): t for t in texts}
    keys = sorted(keyed)
    first = int(start * len(keys)) % len(keys) if keys else 0
    out: dict[str, tuple[str, float] | None] = {}
    passed: list[str] = []

    def recorded(key: str) -> bool:
        try:
            hit = json.loads((ids_dir / f"{key}.json").read_text())
            out[key] = (str(hit[0]), float(hit[1])) if hit else None
        except (OSError, ValueError, TypeError, IndexError, KeyError):  # none yet, or one this code cannot read
            return False
        return True

    def identify(key: str) -> None:
        hit = (identify_one or identify_license_file)(keyed[key])
        atomic_write_json(ids_dir / f"{key}.json", list(hit) if hit else None, durable=False)
        out[key] = hit

    for key in keys[first:] + keys[:first]:
        if recorded(key):
            continue
        try:
            os.close(os.open(ids_dir / f"{key}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            passed.append(key)
            continue
        identify(key)
    for key in passed:
        if not recorded(key):
            identify(key)
    return out


def turn_start(rank: int) -> float:
    """Task `rank`'s starting fraction for `identified_in_turn`: the van der Corput sequence (0, 1/2, 1/4, 3/4,
    1/8, ...), so any number of consecutive tasks start evenly spread."""
    fraction, weight = 0.0, 0.5
    while rank:
        fraction += weight * (rank & 1)
        rank >>= 1
        weight /= 2
    return fraction


def write_license_states(path: Path, states: dict) -> None:
    """license_states as JSON (states in order, a pin's as null), for the document tasks to read."""
    atomic_write_json(path, [{"state": st, "directories": dl}
                             for st, dl in sorted(states.items(), key=lambda x: str(x[0]))], durable=False)


def read_license_states(path: Path) -> dict:
    """What write_license_states wrote, as license_states returned it."""
    return {e["state"]: {d: tuple(v) for d, v in e["directories"].items()} for e in json.loads(Path(path).read_text())}


def source_license_states(license_files: Path, states_file: Path, start: float = 0.0) -> dict:
    """A source's license_states: read from `states_file` where a task of the source wrote them, else
    identified (sharing the files with the tasks beside it: `identified_in_turn` from `start`, recording under
    `states_file`'s directory) and written there (atomically: two tasks writing at once write the same bytes)."""
    try:
        return read_license_states(states_file)
    except FileNotFoundError:
        states = license_states(license_files, Path(states_file).parent / "license_file_ids", start)
        write_license_states(states_file, states)
        return states


def nearest(directory_licenses: dict, path: str, top: str | None = None):
    """The license of the nearest directory above `path` that holds license files (repo_licenses), looking no
    higher than `top` when given."""
    parent = PurePosixPath(path).parent
    while True:
        hit = directory_licenses.get(str(parent))
        if hit or str(parent) in (".", "/", "", top):
            return hit
        parent = parent.parent


def file_license(text: str, path: str, directory_licenses: dict, declared: str | None,
                 header_min_chars: int, tree: CollectedTree | None = None, commit: str | None = None,
                 submodules: tuple[Submodule, ...] = ()) -> LicenseAnswer:
    """The license cascade (license_match.classify) for the file at `path`, with a license pointer of its
    header followed in `tree` (`follow_pointer`). A file of vendored code (quality.vendored_root:
    third_party/eigen/...) or of a submodule takes a license file only from its own component's directories,
    and never the sources file's declared license: both speak for the host project, not for the code it bundles.
    Without a notice, a pointer or a license file of its own it is NOASSERTION, refused. A submodule's file says
    so in its evidence (`submodule PATH at COMMIT: ...`).

    Why: LightGBM bundles Eigen (MPL-2.0) as external_libs/eigen/ with no license file; most of its files carry
    the MPL header, and the ones without it would otherwise take LightGBM's MIT and be kept."""
    sub = next((m for m in sorted(submodules, key=lambda m: -len(m.path)) if path.startswith(m.path + "/")), None)
    tops = [t for t in (vendored_root(path), sub.path if sub else None) if t]
    root = max(tops, key=len) if tops else None  # the innermost component
    answer = classify(text, nearest(directory_licenses, path, root), declared if root is None else None,
                      header_min_chars)
    if root is not None and answer.source == "unknown":
        what = "the submodule" if sub is not None and root == sub.path else f"vendored code under {root}/"
        answer = replace(answer, evidence=f"{what} with no license notice or license file of its own (the "
                                          f"repository's license does not cover it)")
    if tree is not None and answer.source in ("repo_file", "declared", "unknown"):
        answer = follow_pointer(answer, text, path, tree, commit, root)
    if sub is not None:
        answer = replace(answer, evidence=f"submodule {sub.path} at {sub.commit[:12]}: {answer.evidence}")
    return answer


def follow_pointer(answer: LicenseAnswer, text: str, path: str, tree: CollectedTree, commit: str | None,
                   root: str | None = None) -> LicenseAnswer:
    """The answer of the file that the header's license pointer names ("For the license information refer to
    format.h", "See Copyright Notice in lua.h"; license_pointers), found in the source's own tree, in place of
    an inherited, declared or missing answer. A pointer never lets copyleft code in: an inherited or declared
    answer of a copyleft (or unknown, proprietary) family stays, the pointer only noted. The evidence says what
    was followed, or why nothing was."""
    pointer = find_pointer(text)
    if pointer is None:
        return answer
    _, words, target = pointer
    where = path if target == SELF else resolve(path, target, tree.paths_by_name(commit), root)
    hit = None if where is None else target_answer(where, text if where == path else tree.read(where, commit))
    if hit is None:
        why = f"no {target} in the source tree" if where is None else f"{where} states no license"
        return replace(answer, evidence="; ".join(filter(None, [answer.evidence, f"pointer {words!r}: {why}"])))
    followed = f"pointer {words!r} -> {where} ({hit[2]})"
    if answer.spdx != "NOASSERTION" and expression_family(answer.spdx) != "permissive":
        return replace(answer, evidence=f"{answer.evidence}; not overriding it: {followed}")
    return LicenseAnswer(hit[0], "pointer", round(0.9 * hit[1], 4), followed)


class CollectedTree:
    """The paths and texts of one source's collected files (collect's parts and license files), read only
    when a document's pointer needs them: the names a pointer is resolved among, and a named file's text. In a
    history walk a pointer is followed among the files collected at the document's commit."""

    def __init__(self, collected: Path):
        self.collected = Path(collected)
        self._where: dict[tuple[str | None, str], Path] | None = None  # (commit, path) -> part; None: license file
        self._by_name: dict[str | None, dict[str, list[str]]] = {}
        self._texts: dict[tuple[str | None, str], str] = {}

    def _index(self) -> dict[tuple[str | None, str], Path]:
        if self._where is None:
            self._where = {}
            for part in sorted(self.collected.glob("files-*.parquet")):
                cols = pq.read_table(part, columns=["source_commit", "source_path"]).to_pydict()
                self._where.update({(c, p): part for c, p in zip(cols["source_commit"], cols["source_path"])})
            license_files = self.collected / "license_files.parquet"
            for p in pq.read_table(license_files, columns=["source_path"]).column(0).to_pylist():
                self._where.setdefault((None, p), license_files)
        return self._where

    def paths_by_name(self, commit: str | None) -> dict[str, list[str]]:
        """File name -> the paths holding that name among the files at `commit` and the license files."""
        if commit not in self._by_name:
            by_name: dict[str, list[str]] = {}
            for c, p in self._index():
                if c in (commit, None):
                    by_name.setdefault(PurePosixPath(p).name, []).append(p)
            self._by_name[commit] = {name: sorted(set(paths)) for name, paths in by_name.items()}
        return self._by_name[commit]

    def read(self, path: str, commit: str | None) -> str:
        """The text of the file at `path` (a C/C++ file at `commit`, else a license file)."""
        key = (commit, path) if (commit, path) in self._index() else (None, path)
        if key not in self._texts:
            filters = [("source_path", "==", path)] + ([("source_commit", "==", commit)] if key[0] else [])
            table = pq.read_table(self._index()[key], columns=["content"], filters=filters)
            content = table["content"][0].as_py() if table.num_rows else b""
            self._texts[key] = content.decode("utf-8", "replace").replace("\r\n", "\n")
        return self._texts[key]


def read_submodules(collected: Path) -> tuple[Submodule, ...]:
    """The submodules collect walked for a source (its submodules.json; none where it wrote no such file)."""
    try:
        rows = json.loads((collected / SUBMODULES).read_text())
    except FileNotFoundError:
        return ()
    return tuple(Submodule(r["path"], r["url"], r["commit"]) for r in rows)


class LicenseStep(BaseFilter):
    name = "license"

    def __init__(self, params: LicenseParams, license_files: Path, states_file: Path | None, declared: str | None,
                 exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.p = params
        self.collected = str(Path(license_files).parent)  # where a pointer's target is looked up
        self.allow = frozenset(params.allow)
        self.license_files = str(license_files)
        self.states_file = str(states_file) if states_file else None  # None: the source has no license files
        self.declared = declared
        self.rank = 0

    def run(self, data, rank: int = 0, world_size: int = 1):
        self.rank = rank  # where this task starts through the source's license files (`turn_start`)
        yield from super().run(data, rank, world_size)

    def license_states(self) -> dict:
        return source_license_states(Path(self.license_files), Path(str(self.states_file)), turn_start(self.rank))

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        meta = doc.metadata
        state = (meta.get("history") or {}).get("license_state")
        states = worker_cache(self.states_file, self.license_states, kind="license_states", keep=16) \
            if self.states_file else {}
        tree = worker_cache(self.collected, lambda: CollectedTree(Path(self.collected)), kind="collected_tree",
                            keep=16)
        submodules = worker_cache(self.collected, lambda: read_submodules(Path(self.collected)), kind="submodules",
                                  keep=16)
        answer = file_license(doc.text, meta["source_path"], states.get(state, {}), self.declared,
                              self.p.header_min_chars, tree, meta.get("source_commit"), submodules)
        allowed, fam, rule = policy(answer.spdx, self.allow, self.p.allow_copyleft)
        if rule == "no_license" and answer.source == "spdx_tag":
            rule = "unrecognized_spdx_tag"  # it names a license, in words no SPDX list knows
        meta.update(license_spdx=answer.spdx, license_source=answer.source, license_confidence=answer.confidence,
                    license_family=fam, license_evidence=answer.evidence)
        self.stat_update(f"source_{answer.source}")
        if not allowed:
            meta["decision"] = "license_refused"
            return False, rule
        return True


class License(Stage):
    name = "license"
    libraries = ('pyarrow', 'datatrove', 'license-expression', 'pyaskalono', 'detect-secrets')
    version = 7
    scope = "source"
    inputs = ("collect",)
    Params = LicenseParams
    per_document = True
    resumable_tasks = True

    def run(self, ctx: StageContext) -> dict:
        return self.source_tasks(ctx).run(ctx.executor, ctx.label)

    def source_tasks(self, ctx: StageContext) -> SourceTasks:
        collected = ctx.input("collect").path
        license_files = collected / "license_files.parquet"
        has_files = pq.read_metadata(license_files).num_rows > 0
        states_file = ctx.out / WORK / "license_states.json" if has_files else None
        tasks = dt_io.count_parts(collected, "files-*.parquet")
        pipeline = [
            dt_io.reader(collected, "files-*.parquet"),
            DecodeNormalize(exclusion_writer=dt_io.rejections_writer(ctx.out, "decode")),
            LicenseStep(self.params, license_files, states_file, ctx.pin.license,
                        exclusion_writer=dt_io.rejections_writer(ctx.out, "license")),
            dt_io.documents_writer(ctx.out),
        ]
        return SourceTasks(pipeline, tasks, ctx.out / "_datatrove",
                           lambda stats: self._counts(ctx, tasks, stats, license_files, states_file))

    @staticmethod
    def _counts(ctx: StageContext, tasks: int, stats: dict, license_files: Path, states_file: Path | None) -> dict:
        # what the tasks wrote; identified here only when no task ran (a source without documents)
        directory_licenses = source_license_states(license_files, states_file) if states_file else {}
        clean_work(ctx)
        counts = dt_io.output_counts(ctx.out, tasks, stats, sorted(ctx.input("collect").path.glob("files-*.parquet")))
        counts["license_sources"] = {k.split(".source_", 1)[1]: int(v) for k, v in stats.items()
                                     if ".source_" in k}
        counts["repo_license_files"] = {d: v[0] for d, v in sorted(directory_licenses.get(None, {}).items())}
        if len(directory_licenses) > 1 or None not in directory_licenses:
            counts["license_states"] = {st: {d: v[0] for d, v in sorted(dl.items())}
                                        for st, dl in sorted(directory_licenses.items(), key=lambda x: str(x[0]))}
        return counts
