"""A stage that runs beside the others (Stage.runs_beside: the tokenizer's training beside structure).

Made-up stages on the real Runner: `a`, then `slow` (runs beside; reads a), `b` (reads a) and `c` (reads slow
and b), in that recipe order. `slow` waits for `b` to start: serially it would wait in vain, so the build's
success shows the two overlapped; `c` shows the runner waited for `slow` before a stage that reads it. A
failure on either side names its stage, and what the other side finished stays sealed for the next run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

import cpp_data.stages
from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.pipeline.foundation.fsutil import is_sealed
from cpp_data.pipeline.runner.dag import Runner, StageFailed
from cpp_data.pipeline.runner.recipe import Recipe

B_STARTED = threading.Event()
FAIL: set[str] = set()  # stage names whose run raises


@dataclass(frozen=True)
class NoParams:
    pass


class _Writes(Stage):
    version = 1
    scope = "corpus"
    Params = NoParams

    def run(self, ctx: StageContext) -> dict:
        if self.name in FAIL:
            raise ValueError(f"{self.name} was told to fail")
        for name, arts in ctx.inputs.items():  # an input is read only once it is sealed
            assert all(is_sealed(a.path) for a in arts), name
        (ctx.out / "out.txt").write_text(self.name)
        return {"wrote": self.name}


class A(_Writes):
    name = "a"


class Slow(_Writes):
    name = "slow"
    inputs = ("a",)
    runs_beside = True

    def run(self, ctx: StageContext) -> dict:
        if not B_STARTED.wait(timeout=20):
            raise AssertionError("b never started while slow ran: the two did not overlap")
        return super().run(ctx)


class B(_Writes):
    name = "b"
    inputs = ("a",)

    def run(self, ctx: StageContext) -> dict:
        B_STARTED.set()
        return super().run(ctx)


class C(_Writes):
    name = "c"
    inputs = ("slow", "b")


@pytest.fixture
def runner(monkeypatch, tmp_path):
    monkeypatch.setattr(cpp_data.stages, "STAGES", {s.name: s for s in (A, Slow, B, C)}, raising=False)
    B_STARTED.clear()
    FAIL.clear()
    recipe = Recipe(version="t", schema_generation="v6", description="", stages=["a", "slow", "b", "c"],
                    params={n: NoParams() for n in ("a", "slow", "b", "c")}, path="", sha256="")

    def make() -> Runner:
        return Runner(tmp_path / "out", recipe, [], ExecutorConfig(workers=1, progress=False))
    return make


def _events(run) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    run(lambda text, event="message", **f: seen.append((event, f.get("label", ""))))
    return seen


def test_beside_stage_overlaps_and_is_joined_before_its_readers(runner):
    r = runner()
    events = _events(r.run)
    assert r.all_sealed()
    at = events.index
    assert at(("stage_done", "a")) < at(("stage_start", "slow"))
    assert at(("stage_start", "b")) < at(("stage_done", "slow"))  # b started while slow ran
    assert at(("stage_done", "slow")) < at(("stage_start", "c"))  # c waited for slow
    # a second run reuses all four
    again = _events(runner().run)
    assert sorted(label for event, label in again if event == "stage_cached") == ["a", "b", "c", "slow"]


def _failing(runner, stage: str) -> Runner:
    """A run in which `stage` raises: the build fails naming it; returns the runner to look into."""
    FAIL.add(stage)
    r = runner()
    with pytest.raises(StageFailed, match=f"stage {stage}: ValueError: {stage} was told to fail"):
        r.run(lambda *a, **k: None)
    return r


def _sealed(r: Runner, stage: str) -> bool:
    return is_sealed(next(t for t in r.tasks if t.name == stage).directory(r.out))


def test_failure_beside_names_its_stage_and_keeps_the_other_side(runner):
    r = _failing(runner, "slow")
    assert _sealed(r, "b")  # b finished while slow failed
    assert not (r.out / "cache" / "c").exists()  # c reads slow: it never started


def test_failure_in_the_runner_thread_waits_for_the_stage_beside(runner):
    r = _failing(runner, "b")
    assert _sealed(r, "slow")  # sealed before the failure was raised: the next run reuses it
    FAIL.clear()
    events = _events(runner().run)
    assert ("stage_cached", "slow") in events and ("stage_done", "b") in events


def test_the_build_trains_its_tokenizer_beside_structure(reference_build):
    """In a real build's log: the tokenizer starts beside the next stages, structure starts before the
    tokenizer is done, and token_columns (which reads both) only after both are done."""
    (log,) = sorted((reference_build.parent.parent / "logs").glob("build-*.log"))[:1]
    lines = [ln.split("] ", 1)[1] for ln in log.read_text().splitlines() if "] " in ln]
    at = lines.index
    start = next(ln for ln in lines if ln.startswith("tokenizer: running"))
    assert start == "tokenizer: running beside the next stages"
    done = {s: next(i for i, ln in enumerate(lines) if ln.startswith(f"{s}: done")) for s in ("tokenizer", "structure")}
    assert at("structure: running") < done["tokenizer"]
    assert max(done.values()) < at("token_columns: running")
