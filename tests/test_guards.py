"""The guards behind the hostile cases (tests/test_hostile.py), one by one and without a build: the output lock
held on OUT itself, outputs that must account for their inputs, URL spellings of an opt-out, secrets in paths."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cpp_data.pipeline.foundation.errors import UnexplainedOutput
from cpp_data.pipeline.runner.exclusions import canonical_url
from cpp_data.pipeline.runner.outlock import BuildLocked, LockLost, OutputLock
from cpp_data.stages.lib import dt_io
from cpp_data.stages.lib.scrub import SECRET, scrub_path


def test_the_output_lock_holds_when_its_file_is_deleted(tmp_path):
    out = tmp_path / "out"
    with OutputLock(out):
        (out / ".lock").unlink()
        with pytest.raises(BuildLocked):
            OutputLock(out).__enter__()
    assert not (out / ".lock").exists()  # released: no file naming a dead process is left behind
    with OutputLock(out):
        pass


def test_a_replaced_output_directory_is_noticed_before_sealing(tmp_path):
    out = tmp_path / "out"
    with OutputLock(out) as lock:
        lock.check()
        out.rename(tmp_path / "moved")
        out.mkdir()
        with pytest.raises(LockLost, match="removed or replaced"):
            lock.check()


def test_a_forked_child_does_not_hold_the_lock(tmp_path):
    out = tmp_path / "out"
    with OutputLock(out) as lock:
        held = lock._fd
        pid = os.fork()
        if pid == 0:  # the child: the lock's descriptor is closed as it starts, so it cannot keep OUT locked
            try:
                os.fstat(held)
            except OSError:
                os._exit(0)
            os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        os.fstat(held)  # the parent still holds it


def _part(path: Path, rows: int) -> None:
    pq.write_table(pa.table({"reason": pa.array(["quality:too_small"] * rows, pa.string())}), path)


def test_an_output_that_does_not_account_for_its_input_is_refused(tmp_path):
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    _part(inputs / "part-00000.parquet", 5)
    _part(out / "part-00000.parquet", 2)
    _part(out / "rejected-quality-00000.parquet", 3)
    counts = dt_io.output_counts(out, 1, {}, [inputs / "part-00000.parquet"])
    assert counts["documents_in"] == 5 and counts["documents_out"] == 2
    (out / "rejected-quality-00000.parquet").unlink()  # a task's output lost, its completion marker kept
    with pytest.raises(UnexplainedOutput, match="5 documents in, but 2 kept and 0 rejected") as caught:
        dt_io.output_counts(out, 1, {}, [inputs / "part-00000.parquet"])
    assert caught.value.directory == str(out)


@pytest.mark.parametrize("entry", ["lib", "./lib/", "file://{base}/lib", "{base}/lib.git"])
def test_opt_out_urls_match_as_sources_are_resolved(tmp_path, entry):
    base = tmp_path
    source_url = os.path.abspath(base / "lib")  # what load_sources makes of url = "lib"
    assert canonical_url(entry.format(base=base), base) == canonical_url(source_url, base)


@pytest.mark.parametrize("a,b", [("https://github.com/Org/repo.git", "git@github.com:Org/repo"),
                                 ("ssh://git@GitHub.com/Org/repo/", "https://github.com/Org/repo")])
def test_remote_urls_match_in_any_of_gits_spellings(a, b):
    assert canonical_url(a, Path("/")) == canonical_url(b, Path("/"))


def test_a_secret_in_a_path_is_replaced_segment_by_segment():
    assert scrub_path("src/AKIAIOSFODNN7EXAMPLE.h") == f"src/{SECRET}.h"
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    assert scrub_path(f"keys/{token}/x.cc") == f"keys/{SECRET}/x.cc"
    for plain in ("docs/home/index.cpp", "third_party/v1.2.3.4/x.h", "include/nlohmann/json.hpp"):
        assert scrub_path(plain) == plain
