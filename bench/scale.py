"""How a v6 build scales with corpus size and workers: MB/s and peak RSS of the process tree, per stage.

For each scale (1x: the default corpus of sources/debian.toml; 2x and 4x: the same plus Debian's Qt 5, Eigen
and Boost headers (apt-get install qtbase5-dev libeigen3-dev libboost-dev), copied into one extra directory
source until the corpus is that many times larger, or, with --extra-repo-mb N, into sources of at most N MB
each, as a corpus grows by repositories) and each worker count, it runs `cpp-data build --version v6` into a
fresh output directory (with any --set overrides) and watches it:

- the build's own events (`--log-format json`: stage_start, stage_done) say which stage runs when;
- a sampler reads /proc every 0.2 s for every process descended from the build (Ray's and a browser's
  processes left out) and records, per stage, the peak RSS of the whole tree and of its largest process, and
  the CPU seconds of the tree; and, for the whole build, the largest high-water mark (VmHWM) any process
  reached: the kernel keeps it exactly, so a spike between two samples still counts (the headline memory
  figure; the sampled per-stage peaks say which stage it was). While the tokenizer trains beside structure,
  the samples go to "structure+tokenizer".

MB/s is megabytes of C/C++ collected (the build summary's bytes) over the stage's seconds; "all but semantics"
is the issue's speed figure, over the build's own wall time less the semantics stage's, since libclang's time
depends on how many translation units a project has and not on corpus bytes: semantics is reported as TUs per
second per worker instead. googletest's CMake project is
configured only when --semantics is given (its TUs make that the slowest part of a run).

    .venv/bin/python bench/scale.py --scales 1 2 4 --workers 1 2 [--semantics] [--work /tmp/scale]
        [--extra-repo-mb 16] [--set tokenizer.sample_bytes=8000000 ...] [--name NAME]

Writes bench/results/<--name>.{json,md,png} (scale by default), with each run's output digest (the published
files' SHA-256 digests, README.md aside), so the runs of one scale show whether the worker count changed a
byte, and the cost of each stage per GB of C/C++ collected (docs/SCALING.md's table). `--render RUNS.json` writes
the .md and .png again from a results file, without building (for a table added after the runs).
Times are wall seconds of the machine that ran them, with nothing else running; compare runs of one invocation
only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = [("googletest", "/usr/src/googletest", "BSD-3-Clause"), ("nlohmann-json", "/usr/include/nlohmann", None),
           ("poco", "/usr/include/Poco", None), ("juce", "/usr/share/juce/modules", None)]
EXTRA_TREES = ["/usr/include/x86_64-linux-gnu/qt5", "/usr/include/eigen3", "/usr/include/boost"]
SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".h++", ".inl", ".ipp", ".tcc")
LEFT_OUT = ("ray", "raylet", "gcs_server", "chrome", "chromium")


def tree_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs
               if f.lower().endswith(SUFFIXES) and not os.path.islink(os.path.join(d, f)))


def extra_corpus(dest: Path, want: int, repo_bytes: int = 0) -> int:
    """Copy C/C++ files of EXTRA_TREES, in sorted path order, into dest until `want` bytes; returns bytes. With
    `repo_bytes`, the files go into subdirectories part-NN of at most that many bytes each, one source apiece
    (sources_file), as a corpus that grows by repositories; else into one directory, one source."""
    if dest.exists():
        shutil.rmtree(dest)
    got, part, in_part = 0, 0, 0
    for root in EXTRA_TREES:
        for d, dirs, fs in sorted(os.walk(root)):
            dirs.sort()
            for f in sorted(fs):
                src = os.path.join(d, f)
                if got >= want:
                    return got
                if not f.lower().endswith(SUFFIXES) or os.path.islink(src):
                    continue
                size = os.path.getsize(src)
                if repo_bytes and in_part and in_part + size > repo_bytes:
                    part, in_part = part + 1, 0
                base = dest / f"part-{part:02d}" if repo_bytes else dest
                target = base / Path(root).name / os.path.relpath(src, root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, target)
                got += size
                in_part += size
    return got


def default_bytes() -> int:
    """Bytes of C/C++ in the default corpus's trees (the 1x corpus)."""
    return sum(tree_bytes(url) for _, url, _ in DEFAULT)


def check_extra_trees() -> None:
    """Exit naming the Debian packages when the 2x and 4x corpora's trees are missing."""
    missing = [t for t in EXTRA_TREES if not os.path.isdir(t)]
    if missing:
        raise SystemExit(f"{', '.join(missing)} missing: apt-get install qtbase5-dev libeigen3-dev libboost-dev")


def corpus(scale: int, base: int, work: Path, semantics: bool = False, repo_bytes: int = 0) -> Path:
    """The sources file of the `scale`x corpus under `work`: the default corpus, plus for scale > 1 an extra
    source (extra_corpus) of (scale - 1) * `base` bytes (check_extra_trees first)."""
    extra = None
    if scale > 1:
        check_extra_trees()
        extra = work / f"extra-{scale}x"
        got = extra_corpus(extra, (scale - 1) * base, repo_bytes)
        print(f"{scale}x: extra source of {got / 1e6:.1f} MB", flush=True)
    sources = work / f"sources-{scale}x.toml"
    sources.parent.mkdir(parents=True, exist_ok=True)
    sources_file(sources, extra, semantics)
    return sources


def sources_file(path: Path, extra: Path | None, semantics: bool) -> None:
    lines = []
    for name, url, lic in DEFAULT:
        lines += ["[[source]]", f'name = "{name}"', f'url = "{url}"']
        if lic:
            lines.append(f'license = "{lic}"')
        if name == "googletest" and not semantics:
            lines.append("configure = false")
        lines.append("")
    parts = sorted(extra.glob("part-*")) if extra is not None else []
    for part in parts:  # a corpus grown by repositories (--extra-repo-mb)
        lines += ["[[source]]", f'name = "extra-{part.name}"', f'url = "{part}"', ""]
    if extra is not None and not parts:
        lines += ["[[source]]", 'name = "extra"', f'url = "{extra}"', ""]
    path.write_text("\n".join(lines))


def _rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of one process in KiB: its resident size now and its high-water mark so far, which the
    kernel keeps exactly, so a spike between two samples still counts (0, 0 once it is gone)."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


def _cpu_ticks(pid: int) -> int:
    """utime + stime of one process, in clock ticks (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def _idle_ticks() -> int:
    """The machine's idle + iowait time over all cores since boot, in clock ticks (/proc/stat's cpu line)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[4]) + int(fields[5])


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
        names[int(entry)] = name
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if any(n in names.get(pid, "").lower() for n in LEFT_OUT):
            continue
        out.append(pid)
        todo += children.get(pid, [])
    return out


class Sampler(threading.Thread):
    """Peak RSS (tree and largest process, KiB), CPU seconds of the process tree and idle core-seconds of the
    machine per stage label, the label set from the build's events. CPU is the growth of each live process's
    utime + stime between samples, so the last 0.2 s of a process that exits is missed (task processes live as
    long as their stage's run). Idle is the growth of the machine's idle and iowait time (/proc/stat), so it
    says where the build left cores waiting, as long as nothing else runs on the machine."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.stage, self.peaks, self.stop = pid, "startup", {}, threading.Event()
        self.running: list[str] = []  # stages running now: the tokenizer runs beside structure
        self.cpu: dict[str, float] = {}
        self.idle: dict[str, float] = {}
        self._ticks: dict[int, int] = {}
        self.high_water: dict[int, int] = {}  # pid -> VmHWM KiB, the last value read while it lived
        self.high_water_at: dict[int, str] = {}  # pid -> the stage label of the sample that saw its VmHWM rise

    def started(self, name: str) -> None:
        self.running.append(name)
        self.stage = self._label()

    def finished(self, name: str) -> None:
        if name in self.running:
            self.running.remove(name)
        self.stage = self._label() or "between stages"

    def _label(self) -> str:
        """The stages running now, each named once: a per-source stage starts once per source and runs them
        together, so its sources' events must not read as an overlap of the stage with itself."""
        return "+".join(sorted(set(self.running)))

    def run(self) -> None:
        hz = os.sysconf("SC_CLK_TCK")
        idle_before = _idle_ticks()
        while not self.stop.is_set():
            pids = _descendants(self.pid)
            both = [_rss_kb(p) for p in pids]
            sizes = [rss for rss, _ in both]
            for p, (_, hwm) in zip(pids, both):
                if hwm > self.high_water.get(p, 0):
                    self.high_water[p] = hwm
                    self.high_water_at[p] = self.stage
            tree, largest = sum(sizes), max(sizes, default=0)
            old = self.peaks.get(self.stage, (0, 0))
            self.peaks[self.stage] = (max(old[0], tree), max(old[1], largest))
            ticks = {p: _cpu_ticks(p) for p in pids}
            grown = sum(max(0, t - self._ticks.get(p, 0)) for p, t in ticks.items())
            self._ticks = ticks
            self.cpu[self.stage] = self.cpu.get(self.stage, 0.0) + grown / hz
            idle_now = _idle_ticks()
            self.idle[self.stage] = self.idle.get(self.stage, 0.0) + (idle_now - idle_before) / hz
            idle_before = idle_now
            time.sleep(0.2)


def run_build(sources: Path, out: Path, workers: int, settings: list[str] = (), env: dict | None = None) -> dict:
    """One watched `cpp-data build --version v6` (this checkout's, or with `env` another package's: the
    PYTHONPATH of bench/speed_ab.py)."""
    cmd = [str(REPO / ".venv" / "bin" / "cpp-data"), "build", "--version", "v6", "--sources", str(sources),
           "--out", str(out), "--workers", str(workers), "--log-format", "json", "--no-progress",
           *[x for kv in settings for x in ("--set", kv)]]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    sampler = Sampler(proc.pid)
    sampler.start()
    stages: dict[str, float] = {}
    summary = None
    for line in proc.stdout:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        kind = event.get("event")
        if kind == "stage_start":
            sampler.started(event["label"].split("[")[0])
        elif kind == "stage_done":
            name = event["label"].split("[")[0]
            stages[name] = stages.get(name, 0.0) + float(event.get("seconds", 0.0))
            sampler.finished(name)
        elif kind == "summary":
            summary = event["summary"]
    err = proc.stderr.read()
    proc.wait()
    wall = time.monotonic() - t0  # the build's, not the sampler's last sleep (up to 0.2 s) that join waits out
    sampler.stop.set()
    sampler.join()
    if proc.returncode not in (0, 3):
        raise SystemExit(f"build failed ({proc.returncode}): {err[-2000:]}")
    return {"wall_seconds": round(wall, 1), "stage_seconds": {k: round(v, 2) for k, v in stages.items()},
            "peak_rss_mib": {k: [round(a / 1024), round(b / 1024)] for k, (a, b) in sampler.peaks.items()},
            "cpu_seconds": {k: round(v, 1) for k, v in sampler.cpu.items()},
            "idle_core_seconds": {k: round(v, 1) for k, v in sampler.idle.items()},
            "high_water_mib_any_process": round(max(sampler.high_water.values(), default=0) / 1024),
            # where the largest process reached it: the stage of the sample that first saw its mark (a spike
            # between two samples is put on the stage of the next)
            "high_water_stage": sampler.high_water_at.get(max(sampler.high_water, key=sampler.high_water.get))
            if sampler.high_water else None,
            "summary": summary}


def output_digest(out: Path) -> str | None:
    """SHA-256 over the published build's (path, SHA-256) pairs from its manifest, the dataset card (README.md,
    kind "card") left out: it holds the build's own timings. Equal digests, byte-identical outputs."""
    import hashlib

    manifests = sorted((out / "builds").glob("v6-*/manifest.json"))
    if not manifests:
        return None
    files = json.loads(manifests[-1].read_text())["files"]
    pairs = sorted((f["path"], f["sha256"]) for f in files if f.get("kind") != "card")
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]


def measure(sources: Path, out: Path, workers: int, settings: list[str], collected_guess: int,
            env: dict | None = None) -> dict:
    """run_build into a fresh `out` (deleted after), with the issue's speed figure (MB/s of C/C++ collected over
    the build's own time less semantics), the per-stage MB/s, the peaks and the output digest added."""
    shutil.rmtree(out, ignore_errors=True)
    r = run_build(sources, out, workers, settings, env)
    collected = (r["summary"] or {}).get("cpp_bytes_collected") or collected_guess
    secs = r["stage_seconds"]
    # the build's own time less semantics: the stage seconds added up would count the tokenizer's training
    # twice, since it runs beside structure
    not_sem = ((r["summary"] or {}).get("wall_seconds") or r["wall_seconds"]) - secs.get("semantics", 0.0)
    r.update(workers=workers, mb_collected=round(collected / 1e6, 1),
             mb_per_s_all_but_semantics=round(collected / 1e6 / not_sem, 3) if not_sem else None,
             mb_per_s_per_stage={k: round(collected / 1e6 / v, 2) for k, v in secs.items() if v > 0.05},
             peak_rss_mib_any_process=max((v[1] for v in r["peak_rss_mib"].values()), default=0),
             peak_rss_mib_tree=max((v[0] for v in r["peak_rss_mib"].values()), default=0))
    sem = [s for s in (r["summary"] or {}).get("semantic_coverage", {}).values()] if r["summary"] else []
    tus = sum((s or {}).get("tus", 0) for s in sem if isinstance(s, dict))
    index_s = sum((s or {}).get("index_seconds", 0) for s in sem if isinstance(s, dict))
    if tus and (index_s or secs.get("semantics")):  # the TU tasks' wall time, without the configure run
        r["semantics_tus"] = tus
        r["semantics_tus_per_s_per_worker"] = round(tus / (index_s or secs["semantics"]) / workers, 3)
    r["settings"] = list(settings)
    r["output_digest"] = output_digest(out)
    shutil.rmtree(out, ignore_errors=True)
    return r


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--semantics", action="store_true", help="configure googletest and index its TUs")
    ap.add_argument("--work", type=Path, default=Path("/tmp/cpp-data-scale"))
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--name", default="scale", help="results file stem (scale-semantics for a --semantics run)")
    ap.add_argument("--extra-repo-mb", type=float, default=0,
                    help="cut the extra text into sources of at most this many MB each (default: one source)")
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="STAGE.PARAM=VALUE",
                    help="a recipe override for every build (cpp-data build --set), repeatable")
    ap.add_argument("--render", type=Path, metavar="RUNS.json",
                    help="write <--name>.md and .png from this results file instead of building")
    a = ap.parse_args(argv)
    if a.render:
        _reports(json.loads(a.render.read_text())["runs"], a.results, a.name)
        return
    base = default_bytes()
    if max(a.scales) > 1:
        check_extra_trees()  # before the 1x runs, not after them
    runs = []
    for scale in a.scales:
        sources = corpus(scale, base, a.work, a.semantics, int(a.extra_repo_mb * 1e6))
        for workers in a.workers:
            r = measure(sources, a.work / f"out-{scale}x-w{workers}", workers, a.settings, base * scale)
            r.update(scale=scale)
            runs.append(r)
            print(f"{scale}x w{workers}: {r['mb_collected']} MB, all but semantics "
                  f"{r['mb_per_s_all_but_semantics']} MB/s, high-water mark {r['high_water_mib_any_process']} MiB, "
                  f"peak RSS sampled {r['peak_rss_mib_any_process']} MiB "
                  f"(tree {r['peak_rss_mib_tree']}), wall {r['wall_seconds']} s", flush=True)
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / f"{a.name}.json").write_text(json.dumps({"runs": runs, "cpus": os.cpu_count()}, indent=1) + "\n")
    _reports(runs, a.results, a.name)


def _reports(runs: list[dict], results: Path, name: str) -> None:
    """<name>.md and <name>.png under `results` from the runs."""
    results.mkdir(parents=True, exist_ok=True)
    _markdown(runs, results / f"{name}.md")
    _plot(runs, results / f"{name}.png")


def _markdown(runs: list[dict], path: Path) -> None:
    stages = sorted({k for r in runs for k in r["stage_seconds"]}, key=lambda k: -max(
        r["stage_seconds"].get(k, 0) for r in runs))
    # samples taken while two stages ran (the tokenizer beside structure) have a label of their own
    stages += sorted({k for r in runs for k in r["peak_rss_mib"] if "+" in k})
    # and so do the samples before the first stage and between two stages
    stages += [k for k in ("startup", "between stages") if any(k in r["peak_rss_mib"] for r in runs)]
    head = ("| stage | " + " | ".join(f"{r['scale']}x w{r['workers']} s (CPU s, idle core-s, peak MiB)" for r in runs)
            + " |")
    lines = [f"# v6 build scaling ({os.cpu_count()} CPUs)", "",
             "| run | MB collected | MB/s all but semantics | high-water mark of any process MiB (stage) "
             "| peak RSS any process, sampled MiB | peak RSS tree MiB | wall s |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['scale']}x w{r['workers']} | {r['mb_collected']} | {r['mb_per_s_all_but_semantics']} | "
                     f"{r.get('high_water_mib_any_process', '')} ({r.get('high_water_stage') or '?'}) | "
                     f"{r['peak_rss_mib_any_process']} | "
                     f"{r['peak_rss_mib_tree']} | {r['wall_seconds']} |")
    for scale in sorted({r["scale"] for r in runs}):
        digests = {r["workers"]: r.get("output_digest") for r in runs if r["scale"] == scale}
        if len(digests) > 1:
            same = len(set(digests.values())) == 1 and None not in digests.values()
            lines.append(f"\n{scale}x: output digest per worker count {digests}: "
                         f"{'identical' if same else 'DIFFERENT'}")
    sem = [r for r in runs if r.get("semantics_tus_per_s_per_worker")]
    if sem:
        lines += ["", "| run | TUs | TUs/s per worker |", "|---|---|---|"]
        lines += [f"| {r['scale']}x w{r['workers']} | {r['semantics_tus']} | {r['semantics_tus_per_s_per_worker']} |"
                  for r in sem]
    lines += ["", head, "|---|" + "---|" * len(runs)]
    for k in stages:
        cells = []
        for r in runs:
            peak = r["peak_rss_mib"].get(k, [0, 0])[1]
            cpu = r.get("cpu_seconds", {}).get(k, 0)
            idle = r.get("idle_core_seconds", {}).get(k, 0)
            secs = (f"{r['stage_seconds'][k]:.1f}" if k in r["stage_seconds"] else "overlap" if "+" in k
                    else "no stage")
            cells.append(f"{secs} ({cpu:.1f}, {idle:.1f}, {peak})")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    idle = [(r, sum(r.get("idle_core_seconds", {}).values())) for r in runs]
    lines += ["", "Idle core-seconds of the machine over each whole build, and their share of cores x wall time: "
              + "; ".join(f"{r['scale']}x w{r['workers']} {s:.1f} ({s / (r['wall_seconds'] * os.cpu_count()):.0%})"
                          for r, s in idle)]
    lines += ["", *_cost_table(runs)]
    path.write_text("\n".join(lines) + "\n")


# the tokenizer trains beside structure, so the CPU of the samples taken meanwhile cannot be split between them
_BOTH = "structure + tokenizer"
_TOGETHER = {k: _BOTH for k in ("structure", "tokenizer", "structure+tokenizer")}


def _cost_table(runs: list[dict]) -> list[str]:
    """Markdown lines: each stage's wall seconds and CPU seconds per GB of C/C++ collected, per run.

    One denominator for every stage (the bytes collected, not what each stage reads) so the rows add up to the
    build and a corpus size in collected bytes multiplies straight through (docs/SCALING.md's 1 TB plan).
    With one worker a stage's CPU s/GB is its core-seconds per GB. Structure and the tokenizer share a row for
    CPU: the trainer runs beside structure and their samples overlap; their wall seconds stay apart."""
    wall: dict[str, dict[int, float]] = {}
    cpu: dict[str, dict[int, float]] = {}
    for i, r in enumerate(runs):
        gb = r["mb_collected"] / 1000
        for k, v in r["stage_seconds"].items():
            wall.setdefault(k, {})[i] = v / gb
        for k, v in r.get("cpu_seconds", {}).items():
            row = cpu.setdefault(_TOGETHER.get(k, k), {})
            row[i] = row.get(i, 0.0) + v / gb
    names = sorted((set(wall) | set(cpu)) - {_BOTH},
                   key=lambda k: -max([*wall.get(k, {}).values(), *cpu.get(k, {}).values()]))
    out = ["Cost per GB of C/C++ collected: wall s/GB, then CPU s/GB of the build's processes (with one worker, "
           "core-seconds per GB; structure and the tokenizer share their CPU row, the trainer running beside "
           "structure).", "",
           "| stage | " + " | ".join(f"{r['scale']}x w{r['workers']} wall s/GB (CPU s/GB)" for r in runs) + " |",
           "|---|" + "---|" * len(runs)]
    for k in names:
        cells = []
        for i in range(len(runs)):
            w = f"{wall[k][i]:.0f}" if i in wall.get(k, {}) else "-"
            # a stage of its own has a CPU figure (0 where no sample fell in it: under 0.2 s)
            cells.append(w if k in _TOGETHER else f"{w} ({cpu.get(k, {}).get(i, 0.0):.0f})")
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    out.append(f"| {_BOTH}, CPU | " + " | ".join(f"({cpu.get(_BOTH, {}).get(i, 0):.0f})" for i in range(len(runs)))
               + " |")
    out.append("| whole build | " + " | ".join(
        f"{(r.get('summary') or {}).get('wall_seconds', r['wall_seconds']) / (r['mb_collected'] / 1000):.0f} "
        f"({sum(r.get('cpu_seconds', {}).values()) / (r['mb_collected'] / 1000):.0f})" for r in runs) + " |")
    return out


def _plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for w in sorted({r["workers"] for r in runs}):
        rs = sorted((r for r in runs if r["workers"] == w), key=lambda r: r["scale"])
        xs = [r["mb_collected"] for r in rs]
        ax1.plot(xs, [r["mb_per_s_all_but_semantics"] for r in rs], "o-", label=f"{w} worker(s)")
        ax2.plot(xs, [r["high_water_mib_any_process"] for r in rs], "o-", label=f"{w} worker(s)")
    ax1.set(xlabel="MB of C/C++ collected", ylabel="MB/s (every stage but semantics)", title="speed")
    ax2.set(xlabel="MB of C/C++ collected", ylabel="MiB", title="high-water mark of the largest process")
    ax2.axhline(2048, color="grey", ls="--", lw=1)
    for ax in (ax1, ax2):
        ax.legend()
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
