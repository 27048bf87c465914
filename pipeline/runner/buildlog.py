"""What a build tells its user while it runs: a live display in a terminal, plain lines otherwise, JSON lines
for schedulers, and always a log file under OUT/logs/.

Events come from the runner and the build (`log(text, event=..., **fields)`): a stage instance cached,
running, done, repaired, or a message. Formats:
- text (default): one timestamped line per event on stdout, as `[2026-12-01T03:49:46Z] shards: running`;
- json (`--log-format json`): one JSON object per event on stdout (`time`, `event`, `label`, `index`, `total`,
  `seconds`, `message`), and the build summary as a last `summary` event;
- live (text format in a terminal, unless --no-progress): the same lines, above a bar of stage k/N with the
  stage running now and its elapsed time; stages that run datatrove tasks add a bar of tasks done/total with
  rate and ETA (pipeline/runner/executors/run.py).
Every event is also appended to OUT/logs/build-<UTC time>-<pid>.log (JSON lines when the format is json).
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO


def utc_now() -> str:
    """A log event's time: UTC to the second, as every event of a build log (and the CLI's closing error) has it."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class BuildLog:
    """A callable log: `log(text)` or `log(text, event="stage_start", label=..., index=k, total=n)`."""

    def __init__(self, out: Path, fmt: str = "text", live: bool = False, stream: TextIO | None = None):
        if fmt not in ("text", "json"):
            raise ValueError(f"unknown log format {fmt!r}; use text or json")
        self.fmt, self.stream = fmt, stream or sys.stdout
        self.live = live and fmt == "text"
        logs = Path(out) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.path = logs / f"build-{stamp}-{os.getpid()}.log"
        self.file = open(self.path, "a", encoding="utf-8")
        self.bar = None
        self.started = None

    def __call__(self, text: str, event: str = "message", **fields: Any) -> None:
        record = {"time": utc_now(), "event": event, **fields, "message": text}
        line = json.dumps(record, ensure_ascii=False) if self.fmt == "json" else f"[{record['time']}] {text}"
        self.file.write(line + "\n")
        self.file.flush()
        if self.live:
            self._live(record)
            self._write(line)
        else:
            self._print(line)

    def _print(self, text: str) -> None:
        """Print to the stream; if its reader has gone (`build ... | head`), go on without it: the build is not
        the reader's, and the log file under OUT/logs/ still gets every line."""
        try:
            print(text, file=self.stream, flush=True)
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self.stream.fileno())  # so the interpreter's last flush does not fail either
            except (OSError, ValueError):
                pass
            os.close(devnull)

    def _write(self, line: str) -> None:
        from tqdm import tqdm

        tqdm.write(line, file=self.stream)

    def _live(self, record: dict) -> None:
        from tqdm import tqdm

        total = record.get("total")
        if total and self.bar is None:
            self.bar = tqdm(total=total, desc="stages", unit="stage", position=0, leave=False,
                            bar_format="{desc} |{bar:20}| {elapsed}", file=sys.stderr)
        if self.bar is None:
            return
        if record["event"] in ("stage_start", "stage_repaired"):
            self.started = time.monotonic()
            self.bar.set_description(f"stage {record['index']}/{total} · {record['label']} running")
        elif record["event"] in ("stage_done", "stage_cached"):
            self.bar.update(1)
            self.bar.set_description(f"stage {record['index']}/{total} · {record['label']} "
                                     f"{'cached' if record['event'] == 'stage_cached' else 'done'}")

    def summary(self, summary: dict, text: str) -> None:
        """The end of the build: the summary as text (or a JSON event), in the stream and the log file."""
        self.close_bar()
        if self.fmt == "json":
            line = json.dumps({"time": utc_now(), "event": "summary", "summary": summary}, ensure_ascii=False,
                              default=str)
            self._print(line)
            self.file.write(line + "\n")
        else:
            self._print(text)
            self.file.write(text + "\n")
        self.file.flush()

    def close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def close(self) -> None:
        self.close_bar()
        self.file.close()
