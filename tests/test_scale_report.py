"""bench/scale.py's cost-per-GB table (docs/SCALING.md quotes it): the arithmetic on two made-up runs, and a
results file rendered again without building."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _scale():
    spec = importlib.util.spec_from_file_location("scale_bench", ROOT / "bench" / "scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(scale: int, workers: int, mb: float, stages: dict, cpu: dict, wall: float) -> dict:
    return {"scale": scale, "workers": workers, "mb_collected": mb, "stage_seconds": stages, "cpu_seconds": cpu,
            "wall_seconds": wall + 1, "summary": {"wall_seconds": wall}, "idle_core_seconds": {},
            "peak_rss_mib": {k: [100, 50] for k in cpu}, "high_water_mib_any_process": 50,
            "high_water_stage": "filter", "mb_per_s_all_but_semantics": 1.0, "peak_rss_mib_any_process": 50,
            "peak_rss_mib_tree": 100, "output_digest": "x"}


def test_cost_per_gb_rows():
    runs = [_run(1, 1, 500.0, {"filter": 10.0, "structure": 20.0, "tokenizer": 5.0, "exact_dedup": 0.05},
                 {"filter": 10.0, "structure": 12.0, "structure+tokenizer": 8.0, "startup": 1.0}, 40.0),
            _run(2, 2, 250.0, {"filter": 4.0, "structure": 9.0, "tokenizer": 6.0},
                 {"filter": 7.5, "structure": 3.0, "structure+tokenizer": 9.0, "tokenizer": 1.0}, 20.0)]
    rows = {line.split(" | ")[0].lstrip("| "): line.rstrip(" |").split(" | ")[1:]
            for line in _scale()._cost_table(runs) if line.startswith("| ") and "---" not in line}
    assert rows["filter"] == ["20 (20)", "16 (30)"]  # 10 s and 10 CPU-s per 0.5 GB; 4 s and 7.5 per 0.25 GB
    # structure and the tokenizer: wall apart, CPU together (structure + overlap + the trainer alone)
    assert rows["structure"] == ["40", "36"] and rows["tokenizer"] == ["10", "24"]
    assert rows["structure + tokenizer, CPU"] == ["(40)", "(52)"]
    assert rows["exact_dedup"] == ["0 (0)", "- (0)"]  # no CPU sample: under the sampler's 0.2 s
    assert rows["startup"] == ["- (2)", "- (0)"]
    assert rows["whole build"] == ["80 (62)", "80 (82)"]  # the build's own wall time, not the watcher's


def test_render_writes_the_table_from_a_results_file(tmp_path):
    runs = [_run(1, 1, 500.0, {"filter": 10.0}, {"filter": 10.0}, 40.0)]
    (tmp_path / "r.json").write_text(json.dumps({"runs": runs, "cpus": 2}))
    subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--render", str(tmp_path / "r.json"),
                    "--results", str(tmp_path / "out"), "--name", "again"], check=True, capture_output=True)
    md = (tmp_path / "out" / "again.md").read_text()
    assert "| filter | 20 (20) |" in md and (tmp_path / "out" / "again.png").stat().st_size > 0
