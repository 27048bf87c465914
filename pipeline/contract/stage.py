"""The stage contract.

A stage has a `name`, a `version` (bumped whenever its output bytes would change for the same input), a
parameter dataclass filled from the recipe, the names of the stages it reads (`inputs`), a scope (`source`: one
instance per source, keyed by that source's pin; `corpus`: one instance over every source) and a `run` that
writes its artifact into a fresh directory and returns counts. Stages never talk to each other except through
these artifacts.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from cpp_data.pipeline.contract.executor import Executor, SourceTasks
from cpp_data.pipeline.contract.source import LockedSource

# Markers a stage's `inputs` may hold in place of stage names, resolved against the recipe (resolve_inputs):
# DOCUMENTS is the last per-document stage before the stage (its parts hold the documents every check kept,
# with every column those stages filled in), PER_DOCUMENT every per-document stage before it, in recipe order.
# So a per-document stage added to a recipe needs only its module (Stage.per_document) and its recipe line.
# SHARDS is the last stage before it that publishes shards (the generation's documents with every column added
# so far: structure's, context_graph's, dependency_documents'), FIRST_SHARDS the first such stage (the documents
# as first written). A stage reads a marked input with ctx.input(MARKER).
DOCUMENTS = "<documents>"
PER_DOCUMENT = "<per-document>"
SHARDS = "<shards>"
FIRST_SHARDS = "<first-shards>"


@dataclass(frozen=True)
class Artifact:
    """A sealed stage output: its directory, fingerprint and the stage.json written with it."""

    stage: str
    source: str | None
    fingerprint: str
    path: Path

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads((self.path / "stage.json").read_text())

    @property
    def counts(self) -> dict[str, Any]:
        return self.meta.get("counts", {})


@dataclass
class StageContext:
    """What a running stage gets: where to write, what to read, which source, how to run per-document work."""

    out: Path
    inputs: dict[str, list[Artifact]]
    source: LockedSource | None
    executor: Executor
    label: str
    sources: list[LockedSource] = field(default_factory=list)
    documents: str | None = None  # the stage DOCUMENTS resolved to, when the stage reads it
    per_document: tuple[str, ...] = ()  # the stages PER_DOCUMENT resolved to
    markers: dict[str, str] = field(default_factory=dict)  # SHARDS, FIRST_SHARDS: the stage each resolved to
    # A directory every build and stage instance of the output directory shares, for caches finer than a stage
    # instance (semantics' per-TU cache, OUT/shared/tus/); None: nothing is shared
    shared: Path | None = None

    @property
    def pin(self) -> LockedSource:
        """The source of a per-source stage instance (a corpus stage has none: ValueError)."""
        if self.source is None:
            raise ValueError(f"{self.label}: a corpus stage has no source of its own")
        return self.source

    def input(self, name: str) -> Artifact:
        """The single artifact of input stage `name`, or of the stage a marker (SHARDS) resolved to."""
        name = self.markers.get(name, name)
        arts = self.inputs[name]
        if len(arts) != 1:
            raise ValueError(f"{self.label}: input {name} has {len(arts)} artifacts, expected one")
        return arts[0]


class Stage(ABC):
    name: ClassVar[str]
    version: ClassVar[int]
    scope: ClassVar[str]  # "source" | "corpus"
    inputs: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type]
    # A per-source stage that writes the documents it keeps as part-*.parquet and those it refuses, each with its
    # rule, as rejected-*.parquet (the markers DOCUMENTS and PER_DOCUMENT name such stages).
    per_document: ClassVar[bool] = False
    # Keep a killed run's finished datatrove tasks (their outputs are whole files named by rank).
    resumable_tasks: ClassVar[bool] = False
    # Its work runs in a process of its own, so the driver thread that runs it only waits: the runner starts it
    # as soon as its inputs are done and goes on with the stages after it that do not read its output, joining
    # it before the first one that does (pipeline/runner/dag.py). The tokenizer's training runs beside structure.
    runs_beside: ClassVar[bool] = False
    # Installed distributions whose version shapes this stage's output bytes (part of its fingerprint).
    libraries: ClassVar[tuple[str, ...]] = ("pyarrow", "numpy")
    # What the build summary takes from this stage's counts: {summary field: counts key}. A source-scoped
    # stage's values are added up over sources (numbers, and dicts of numbers key by key); "per_source:KEY"
    # gives {source: counts[KEY]} and "per_source:*" {source: counts}. Where several stages of a recipe give a
    # field, the latest in recipe order wins (a missing key then gives the field's default).
    summary_counts: ClassVar[dict[str, str]] = {}
    # What a build publishes of this stage's artifact (pipeline/runner/build.py): "shards" (the files its shards.json
    # lists; of several such stages the latest in recipe order is published), "tokenizer" (its tokenizer/
    # directory, recorded in the manifest), "ledger" (ledger.parquet, as provenance/ledger.parquet), or an
    # export directory ("megatron", "packed") whose files are copied as they are; "." copies the files at the
    # artifact's root to the build's root.
    publishes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: Any):
        self.params = params

    def settings(self, source: LockedSource | None, sources: list[LockedSource]) -> dict[str, Any] | None:
        """Source settings outside the pins that shape this stage's bytes, part of its fingerprint (the
        sources' blend weights for the exports; a source's decontamination reference): None when there are
        none. `source` is the task's source (None for corpus stages)."""
        return None

    def source_tasks(self, ctx: StageContext) -> SourceTasks | None:
        """A per-source stage whose work is datatrove tasks returns them here, unstarted, so that the runner
        runs the tasks of every source that has to run as one executor run (pipeline/runner/executors/source_batch.py);
        such a
        stage's `run` is `self.source_tasks(ctx).run(ctx.executor, ctx.label)`. None: the runner calls `run`."""
        return None

    @abstractmethod
    def run(self, ctx: StageContext) -> dict[str, Any]:
        """Write the artifact into ctx.out; return counts for stage.json and the build summary."""


def per_document_before(name: str, order: list[str], registry: dict[str, type[Stage]]) -> tuple[str, ...]:
    """The per-document stages listed before stage `name` in `order` (a recipe), in order."""
    before = order[:order.index(name)] if name in order else list(order)
    return tuple(n for n in before if n in registry and registry[n].per_document)


def shard_markers(name: str, order: list[str], registry: dict[str, type[Stage]]) -> dict[str, str]:
    """{SHARDS: the last stage before `name` in `order` that publishes shards, FIRST_SHARDS: the first}, or {}
    when there is none."""
    before = order[:order.index(name)] if name in order else list(order)
    found = [n for n in before if n in registry and "shards" in registry[n].publishes]
    return {SHARDS: found[-1], FIRST_SHARDS: found[0]} if found else {}


def resolve_inputs(cls: type[Stage], order: list[str], registry: dict[str, type[Stage]]) -> tuple[str, ...]:
    """`cls.inputs` with the markers replaced by stage names, against the stages of `order` (a recipe) listed
    before `cls`; ValueError when a marker has no stage to name."""
    per_document = per_document_before(cls.name, order, registry)
    shards = shard_markers(cls.name, order, registry)
    out: list[str] = []
    for dep in cls.inputs:
        if dep in (SHARDS, FIRST_SHARDS):
            if not shards:
                raise ValueError(f"stage {cls.name!r} reads the documents' shards, but no stage that writes them "
                                 f"(shards, structure, ...) is listed before it")
            out.append(shards[dep])
        elif dep == DOCUMENTS:
            if not per_document:
                raise ValueError(f"stage {cls.name!r} reads the kept documents, but no per-document stage "
                                 f"(license, filter, ...) is listed before it")
            out.append(per_document[-1])
        elif dep == PER_DOCUMENT:
            out += per_document
        else:
            out.append(dep)
    return tuple(out)
