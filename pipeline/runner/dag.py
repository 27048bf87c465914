"""The DAG runner: plans stage instances, fingerprints them, skips sealed ones, runs the rest, publishes.

Cache layout (shared by every build in OUT):
    cache/<stage>/<fingerprint>/            sealed output (stage.json + _COMPLETE + the artifact)
    cache/<stage>/<fingerprint>.partial/    a run in progress; deleted on the next run unless the stage keeps
                                            finished datatrove tasks (resumable_tasks)
A fingerprint is the SHA-256 of (stage name, stage version, the digest of the stage's code and of the libraries
that shape its bytes (pipeline/runner/code_digest.py), parameters, the source pin for per-source stages, and the
checksums of its inputs' outputs). A sealed entry's stage.json records a checksum of every output file
(pipeline/runner/cache.py); an entry is verified before it is reused, and a damaged one runs again. A rerun with the
same sources and recipe therefore does no work; a moved pin reruns that source's per-source stages.

Early cutoff: because a stage hashes what its inputs hold rather than how they were made, a stage that runs
again (its code was edited, its entry was damaged) and writes the same bytes leaves everything downstream
cached. The price is that a stage's fingerprint is known only once its inputs are sealed: the runner
fingerprints each stage instance just before its turn, and `cpp-data plan` can only say of a stage after one
that runs "runs unless its input comes out the same".
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import shutil
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.source import LockedSource
from cpp_data.pipeline.contract.stage import (
    DOCUMENTS,
    PER_DOCUMENT,
    Artifact,
    Stage,
    StageContext,
    per_document_before,
    resolve_inputs,
    shard_markers,
)
from cpp_data.pipeline.foundation.errors import BadInput, CheckFailed, UnexplainedOutput
from cpp_data.pipeline.foundation.fsutil import atomic_write_json, is_sealed, seal
from cpp_data.pipeline.foundation.version import __version__
from cpp_data.pipeline.runner.cache import checksum_outputs, damage, outputs_digest
from cpp_data.pipeline.runner.code_digest import code_digest
from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
from cpp_data.pipeline.runner.executors.local import start_worker_server
from cpp_data.pipeline.runner.executors.source_batch import run_sources
from cpp_data.pipeline.runner.recipe import Recipe


class StageFailed(CheckFailed):
    """A stage raised; the message names the stage instance and the cause."""


def stage_failed(what: str, exc: BaseException, out: Path) -> CheckFailed | BadInput:
    """StageFailed for `what` ("stage X") raising `exc`; a stage refusing what it was given (BadInput: a lane
    left without a training document) stays bad input, exit 2. A full disk says so and what to do, whichever layer
    raised it (Python's OSError and pyarrow's both carry errno ENOSPC, also after crossing from a worker): it
    is the machine, not the stage. An output that does not account for its input is removed here, so that the
    next run starts that stage afresh instead of resuming its finished tasks."""
    if isinstance(exc, BadInput):
        return BadInput(f"{what}: {exc}")
    if isinstance(exc, UnexplainedOutput):
        shutil.rmtree(exc.directory, ignore_errors=True)
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StageFailed(f"{what}: no space left on device under {out} (free some space or give --out a "
                           f"larger disk, then run the same command again: it resumes from the finished tasks)")
    return StageFailed(f"{what}: {type(exc).__name__}: {exc}")


@dataclass
class Task:
    stage: Stage
    source: LockedSource | None
    inputs: dict[str, list["Task"]]
    fingerprint: str | None = None  # None until every input is sealed (Runner.resolve)
    payload: dict[str, Any] = field(default_factory=dict)  # what the fingerprint hashes
    settings: Any = None  # Stage.settings, computed once when the build is planned
    documents: str | None = None  # what the input markers resolved to (contract/stage.resolve_inputs)
    per_document: tuple[str, ...] = ()
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def label(self) -> str:
        return f"{self.name}[{self.source.name}]" if self.source else self.name

    def directory(self, out: Path) -> Path:
        if self.fingerprint is None:
            raise RuntimeError(f"{self.label}: not fingerprinted yet (an input is not sealed)")
        return Path(out) / "cache" / self.name / self.fingerprint

    @property
    def fp(self) -> str:
        """The fingerprint of a task whose inputs are sealed (RuntimeError before)."""
        if self.fingerprint is None:
            raise RuntimeError(f"{self.label}: not fingerprinted yet (an input is not sealed)")
        return self.fingerprint

    def artifact(self, out: Path) -> Artifact:
        return Artifact(self.name, self.source.name if self.source else None, self.fp, self.directory(out))


def fingerprint_payload(stage: Stage, source: LockedSource | None, inputs: dict[str, list[str]],
                        settings: Any) -> dict[str, Any]:
    """What a stage instance's fingerprint hashes; stage.json keeps it (`fingerprint_of`) so that `cpp-data
    plan` can say which part changed. `inputs` maps each input stage to the digests of its instances' sealed
    outputs (cache.outputs_digest); `settings` is the stage's Stage.settings (None: it has none)."""
    payload = {
        "stage": stage.name,
        "version": stage.version,
        "code": code_digest(type(stage).__module__, tuple(type(stage).libraries)),
        "params": dataclasses.asdict(stage.params),
        "source": source.pin() if source else None,
        "inputs": {k: list(v) for k, v in sorted(inputs.items())},
    }
    if settings is not None:  # only then, so the fingerprints of stages without settings stay as they were
        payload["settings"] = settings
    return payload


def fingerprint(payload: dict[str, Any]) -> str:
    """The fingerprint of a stage instance: SHA-256 of its payload (fingerprint_payload) as sorted JSON."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass
class RunReport:
    ran: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # sealed entries found damaged and run again
    seconds: float = 0.0
    build_dir: Path | None = None
    new_build: bool = False


class Runner:
    def __init__(self, out: Path, recipe: Recipe, sources: list[LockedSource], executor: ExecutorConfig,
                 only: str | None = None, from_stage: str | None = None, force: bool = False,
                 guard: Callable[[], None] | None = None):
        from cpp_data.stages import STAGES

        self.out = Path(out)
        self.recipe = recipe
        self.sources = sorted(sources, key=lambda s: s.name)
        self.executor = executor
        for flag, value in (("--only", only), ("--from", from_stage)):
            if value is not None and value not in recipe.stages:
                raise BadInput(f"{flag} {value}: not a stage of recipe {recipe.version} "
                                 f"({', '.join(recipe.stages)})")
        self.only, self.from_stage, self.force = only, from_stage, force
        # called before anything is sealed: raises when this run has lost its hold on OUT (OutputLock.check)
        self.guard = guard or (lambda: None)
        self.tasks = self._plan(STAGES)

    def _plan(self, registry: dict[str, type[Stage]]) -> list[Task]:
        by_stage: dict[str, list[Task]] = {}
        tasks: list[Task] = []
        for name in self.recipe.stages:
            cls = registry[name]
            stage = cls(self.recipe.params[name])
            reads = resolve_inputs(cls, self.recipe.stages, registry)
            instances = []
            if cls.scope == "source":
                for src in self.sources:
                    inputs = {}
                    for dep in reads:
                        dep_tasks = by_stage[dep]
                        inputs[dep] = [t for t in dep_tasks if t.source and t.source.name == src.name] or dep_tasks
                    instances.append(Task(stage, src, inputs))
            else:
                instances.append(Task(stage, None, {dep: by_stage[dep] for dep in reads}))
            per_document = per_document_before(name, self.recipe.stages, registry)
            for task in instances:
                task.documents = per_document[-1] if DOCUMENTS in cls.inputs else None
                task.per_document = per_document if PER_DOCUMENT in cls.inputs else ()
                task.markers = {k: v for k, v in shard_markers(name, self.recipe.stages, registry).items()
                                if k in cls.inputs}
            for task in instances:  # now, so that a bad setting (a frozen tokenizer that is not one) fails the
                task.settings = stage.settings(task.source, list(self.sources))  # plan, not a stage hours later
            by_stage[name] = instances
            tasks.extend(instances)
        for task in tasks:  # as far as sealed inputs go; the rest get theirs during run()
            self.resolve(task)
        return tasks

    def resolve(self, task: Task) -> bool:
        """Fingerprint `task` from its inputs' sealed outputs; False (fingerprint None) while an input is
        unfingerprinted or unsealed. Reads each input's stage.json, not its bytes: run() verified those bytes
        against the same record before it reached this task."""
        task.fingerprint = None
        digests: dict[str, list[str]] = {}
        for dep, dep_tasks in task.inputs.items():
            digests[dep] = []
            for t in dep_tasks:
                if t.fingerprint is None or not is_sealed(t.directory(self.out)):
                    return False
                try:
                    recorded = t.artifact(self.out).meta["outputs"]
                except (OSError, ValueError, KeyError):  # unreadable, or sealed by an older cpp-data
                    return False
                digests[dep].append(outputs_digest(recorded))
        task.payload = fingerprint_payload(task.stage, task.source, digests, task.settings)
        task.fingerprint = fingerprint(task.payload)
        return True

    def build_fingerprint(self) -> str:
        if any(t.fingerprint is None for t in self.tasks):
            raise RuntimeError("build_fingerprint before every stage instance was fingerprinted")
        return hashlib.sha256("".join(t.fp for t in self.tasks).encode()).hexdigest()

    def after_only(self, task: Task) -> bool:
        """Whether --only leaves `task` out: it comes after the stage --only names (run and plan both ask)."""
        order = self.recipe.stages
        return self.only is not None and order.index(task.name) > order.index(self.only)

    def forced(self, task: Task) -> bool:
        """Whether `task` reruns although sealed. --only and --from name what reruns, so --force beside them
        adds nothing: `--only X --force` reruns X, not every input of X (the whole build up to X)."""
        if self.only is not None:
            return task.name == self.only
        if self.from_stage is not None:
            return self.recipe.stages.index(task.name) >= self.recipe.stages.index(self.from_stage)
        return self.force

    def clean_temporaries(self, finished: bool = False) -> None:
        """Delete what killed runs left: .old dirs, and .partial dirs, except those of stages that resume
        finished tasks (resumable_tasks), which go only once a run has finished (`finished`) and no stage
        instance of this build names them: before that, a stage's fingerprint may not be known yet."""
        resumable = {t.name for t in self.tasks if t.stage.resumable_tasks}
        keep = {f"{t.fingerprint}.partial" for t in self.tasks if t.fingerprint is not None}
        cache = self.out / "cache"
        if not cache.is_dir():
            return
        for stage_dir in cache.iterdir():
            for entry in stage_dir.iterdir():
                stale_partial = entry.name.endswith(".partial") and (
                    stage_dir.name not in resumable or (finished and entry.name not in keep))
                if stale_partial or ".old-" in entry.name:
                    shutil.rmtree(entry, ignore_errors=True)

    def run(self, log=None) -> RunReport:
        """Run every stage instance that is not sealed, in recipe order; except that a stage instance that runs
        beside the others (Stage.runs_beside) starts, in a thread of its own, as soon as the instances it reads
        are done, and is waited for before the first instance that reads it and at the end (not with --only).
        `log(text, event=..., **fields)` hears of each one: stage_cached, stage_repaired, stage_start,
        stage_done (pipeline/runner/buildlog.py); calls to it never overlap."""
        log = _one_at_a_time(log or print_log)
        report = RunReport()
        t0 = time.monotonic()
        self.clean_temporaries()
        todo = [t for t in self.tasks if not self.after_only(t)]
        index = {id(t): k for k, t in enumerate(todo, 1)}  # --only never runs what comes after the stage
        done: set[int] = set()  # id() of the instances whose output is sealed and checked
        beside: dict[int, _Beside] = {}
        try:
            for task in todo:
                if id(task) in beside or id(task) in done:
                    continue
                group = self._source_group(task, todo)
                for dep in (d for t in group for d in _input_tasks(t)):
                    if id(dep) in beside and id(dep) not in done:
                        beside[id(dep)].join()
                        done.add(id(dep))
                if len(group) > 1:
                    self._visit_group(group, index, len(todo), log, report)
                else:
                    self._visit(task, index[id(task)], len(todo), log, report)
                done.update(id(t) for t in group)
                for later in todo if self.only is None else ():
                    if (later.stage.runs_beside and id(later) not in done and id(later) not in beside
                            and all(id(d) in done for d in _input_tasks(later))):
                        beside[id(later)] = _Beside(self, later, index[id(later)], len(todo), log, report)
            for key, b in beside.items():
                if key not in done:
                    b.join()
                    done.add(key)
        except Exception:
            for b in beside.values():  # a stage failed: one running beside still finishes and seals its
                b.wait()               # output, so the next run reuses it (an interrupt does not wait)
            raise
        self.clean_temporaries(finished=True)
        report.seconds = time.monotonic() - t0
        return report

    def _visit(self, task: Task, k: int, total: int, log, report: RunReport, beside: bool = False) -> None:
        """Reuse `task`'s sealed output once it is checked, else run it (inputs already done)."""
        where = {"label": task.label, "index": k, "total": total}
        if self._reusable(task, where, log, report):
            return
        self._run_task(task, log, where, beside)
        report.ran.append(task.label)

    def _reusable(self, task: Task, where: dict, log, report: RunReport) -> bool:
        """True when `task`'s sealed output is checked and reused; False when it has to run (a damaged entry is
        logged as such). Raises when an input is missing, or an input of --only is unbuilt or damaged."""
        if not self.resolve(task):  # recipe order: every input ran or was verified before
            raise StageFailed(f"{task.label}: an input has no sealed output")
        final = task.directory(self.out)
        input_of_only = self.only is not None and task.name != self.only
        if is_sealed(final) and not self.forced(task):
            problem = self.entry_damage(task)  # checked once per task: it reads every cached byte
            if problem is None:
                report.cached.append(task.label)
                log(f"{task.label}: cached", event="stage_cached", **where)
                return True
            if input_of_only:
                raise StageFailed(f"--only {self.only}: its input {task.label} is damaged ({problem}); "
                                  f"run the build without --only to rebuild it")
            log(f"{task.label}: cached output damaged ({problem}); running it again", event="stage_repaired",
                **where)
            report.repaired.append(task.label)
        elif input_of_only and not is_sealed(final):  # a usage problem, exit 2: no stage failed
            raise BadInput(f"--only {self.only}: its input {task.label} is not built yet; "
                           f"run the build without --only first")
        return False

    def _source_group(self, task: Task, todo: list[Task]) -> list[Task]:
        """The instances of `task`'s stage in `todo` when it is a per-source stage that hands its tasks to the
        runner (Stage.source_tasks), run together by _visit_group; else just `task`."""
        if task.stage.scope != "source" or type(task.stage).source_tasks is Stage.source_tasks:
            return [task]
        return [t for t in todo if t.name == task.name]

    def _visit_group(self, group: list[Task], index: dict[int, int], total: int, log, report: RunReport) -> None:
        """Visit the instances of one per-source stage: reuse the sealed ones, then run the datatrove tasks of
        all the others as one executor run (pipeline/runner/executors/source_batch.py), and seal each source's output
        as its
        tasks' counts come in. The run's seconds are shared out by task count (stage.json keeps the whole)."""
        pending = []
        for task in group:
            where = {"label": task.label, "index": index[id(task)], "total": total}
            if not self._reusable(task, where, log, report):
                pending.append((task, where))
        if len(pending) <= 1:
            for task, where in pending:
                self._run_task(task, log, where)
                report.ran.append(task.label)
            return
        begun = []
        for task, where in pending:
            partial, ctx = self._begin(task, log, where)
            try:
                unit = task.stage.source_tasks(ctx)
                assert unit is not None  # _source_group takes only stages that hand their tasks over
                begun.append((task, where, partial, unit))
            except Exception as exc:
                raise stage_failed(f"stage {task.label}", exc, self.out) from exc
        name, units = group[0].name, [b[3] for b in begun]
        batch = hashlib.sha256("".join(t.fp for t, *_ in begun).encode()).hexdigest()
        logging_dir = self.out / "cache" / name / f"batch-{batch[:16]}.partial" / "_datatrove"
        started = time.monotonic()
        try:
            counts = run_sources(self.executor, units, logging_dir, f"{name}[{len(units)} sources]")
        except Exception as exc:
            raise stage_failed(f"stage {name} ({len(units)} sources run together)", exc, self.out) from exc
        finally:
            release_freed_heap()
        seconds = time.monotonic() - started
        tasks = sum(u.tasks for u in units) or 1
        ran_with = {"sources": len(units), "tasks": tasks, "seconds": round(seconds, 3)}
        for (task, where, partial, unit), c in zip(begun, counts):
            self._seal(task, partial, c, round(seconds * unit.tasks / tasks, 3), log, where, ran_with)
            report.ran.append(task.label)

    def entry_damage(self, task: Task) -> str | None:
        """None when a sealed entry holds exactly the outputs it was sealed with; else what is wrong."""
        try:
            recorded = task.artifact(self.out).meta.get("outputs")
        except (OSError, ValueError) as exc:
            return f"stage.json unreadable: {exc}"
        return damage(task.directory(self.out), recorded)

    def _run_task(self, task: Task, log, where: dict, beside: bool = False) -> None:
        partial, ctx = self._begin(task, log, where, beside)
        started = time.monotonic()
        try:
            counts = task.stage.run(ctx)
        except Exception as exc:
            raise stage_failed(f"stage {task.label}", exc, self.out) from exc
        finally:
            release_freed_heap()
        self._seal(task, partial, counts, round(time.monotonic() - started, 3), log, where)

    def _begin(self, task: Task, log, where: dict, beside: bool = False) -> tuple[Path, StageContext]:
        """The instance's fresh (or resumed) .partial directory and the context it runs with; logs its start."""
        partial = task.directory(self.out).with_name(task.fp + ".partial")
        if partial.exists() and not task.stage.resumable_tasks:
            shutil.rmtree(partial)
        resumed = partial.exists()
        partial.mkdir(parents=True, exist_ok=True)
        start_worker_server(self.executor)  # its imports overlap this stage's driver work (executors.py)
        ctx = StageContext(
            out=partial,
            inputs={k: [t.artifact(self.out) for t in v] for k, v in task.inputs.items()},
            source=task.source,
            executor=DatatroveExecutor(dataclasses.replace(self.executor, progress=False) if beside else self.executor),
            label=task.label,
            sources=self.sources,
            documents=task.documents,
            per_document=task.per_document,
            markers=task.markers,
            shared=self.out / "shared",
        )
        log(f"{task.label}: running{' (resuming finished tasks)' if resumed else ''}"
            f"{' beside the next stages' if beside else ''}", event="stage_start", **where)
        return partial, ctx

    def _seal(self, task: Task, partial: Path, counts: dict, seconds: float, log, where: dict,
              ran_with: dict | None = None) -> None:
        """Record stage.json (with the output checksums) in `partial` and seal it as the instance's entry. A
        partial directory that is gone (another process sealed or removed it) fails the stage: writing the record
        would make an empty one and seal it as this stage's output."""
        if not partial.is_dir():
            raise StageFailed(f"stage {task.label}: its output directory {partial} disappeared while it ran (another "
                              f"process working in {self.out}?); nothing was sealed, run the build again")
        atomic_write_json(partial / "stage.json", {
            "stage": task.name,
            "source": task.source.name if task.source else None,
            "fingerprint": task.fingerprint,
            "version": task.stage.version,
            "params": dataclasses.asdict(task.stage.params),
            "inputs": {k: [t.fingerprint for t in v] for k, v in task.inputs.items()},
            "fingerprint_of": task.payload,
            "counts": counts,
            "outputs": checksum_outputs(partial),
            "seconds": seconds,
            **({"ran_with": ran_with} if ran_with else {}),  # the sources whose tasks ran as one executor run
            "finished_at": _now(),
            "cpp_data_version": __version__,
        }, durable=False)
        self.guard()
        seal(partial, task.directory(self.out), durable=False)  # verified before reuse (pipeline/runner/cache.py)
        together = f" (its share of {ran_with['sources']} sources run together in {ran_with['seconds']:.1f}s)" \
            if ran_with else ""
        log(f"{task.label}: done in {seconds:.1f}s{together}", event="stage_done", seconds=seconds, **where)

    def artifacts(self, stage: str) -> list[Artifact]:
        return [t.artifact(self.out) for t in self.tasks if t.name == stage]

    def all_sealed(self) -> bool:
        return all(t.fingerprint is not None and is_sealed(t.directory(self.out)) for t in self.tasks)

    def stage_records(self) -> list[dict[str, Any]]:
        records = []
        for t in self.tasks:
            meta = t.artifact(self.out).meta
            records.append({k: meta.get(k) for k in ("stage", "source", "fingerprint", "version", "params",
                                                    "counts", "seconds", "finished_at", "fingerprint_of")})
        return records


def _input_tasks(task: Task) -> list[Task]:
    return [t for ts in task.inputs.values() for t in ts]


class _Beside:
    """A stage instance visited in a thread of its own (Stage.runs_beside); join() waits for it and raises
    what it raised. A daemon thread: an interrupted build does not wait for it, and the process the stage
    started dies with the thread (tokenizer_training binds it to the thread's life)."""

    def __init__(self, runner: Runner, task: Task, k: int, total: int, log, report: RunReport):
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._visit, args=(runner, task, k, total, log, report),
                                       name=f"cpp-data {task.label}", daemon=True)
        self.thread.start()

    def _visit(self, runner: Runner, task: Task, k: int, total: int, log, report: RunReport) -> None:
        try:
            runner._visit(task, k, total, log, report, beside=True)
        except BaseException as exc:  # raised again by join(), in the runner's thread
            self.error = exc

    def wait(self) -> None:
        self.thread.join()

    def join(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def _one_at_a_time(log):
    """`log` behind a lock: a stage running beside the others logs from its own thread."""
    lock = threading.Lock()

    def locked(text: str, **event) -> None:
        with lock:
            log(text, **event)
    return locked


def release_freed_heap() -> None:
    """Hand the heap a stage freed back to the OS (glibc's malloc_trim; nothing elsewhere). What a stage
    allocated in the driver (the tokenizer's trainer, a graph or join run in this process) stays in glibc's
    free lists after it is released, so without the trim the driver's RSS keeps the peak of every stage so
    far."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def print_log(text: str, **_event) -> None:
    print(f"[{_now()}] {text}", flush=True)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")



