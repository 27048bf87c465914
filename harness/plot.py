"""Plot a run's loss curve (train loss per logged step, validation loss where evaluated) from its log.jsonl,
or compare runs' validation loss against tokens seen.

    python -m cpp_data.harness.plot RUN_DIR [OUT.png]
    python -m cpp_data.harness.plot --compare OUT.png LABEL=LOG.jsonl LABEL=LOG.jsonl ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def plot_run(run: Path, out: Path, title: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [json.loads(x) for x in (Path(run) / "log.jsonl").read_text().splitlines() if x.strip()]
    summary = json.loads((Path(run) / "summary.json").read_text()) if (Path(run) / "summary.json").is_file() else {}
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    ax.plot([r["step"] for r in recs], [r["loss"] for r in recs], label="train loss", lw=1.2)
    val = [(r["step"], r["valid_loss"]) for r in recs if r.get("valid_loss") is not None]
    if val:
        ax.plot(*zip(*val), "o-", label="validation loss", lw=1.2, ms=3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    if title is None and summary:
        title = (f"{summary.get('model')} ({summary.get('parameters', 0) / 1e6:.0f}M params), seq "
                 f"{summary.get('seq_length')}, batch {summary.get('batch_size')}, {summary.get('precision')}, "
                 f"{summary.get('device_name')}; {summary.get('tokens_per_s_mean', 0):,.0f} tok/s")
    ax.set_title(title or str(run), fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    return out


def compare_runs(logs: dict[str, Path], out: Path, title: str = "") -> Path:
    """Validation loss (and train loss, faint) against tokens seen, one line per run: runs trained on the
    same number of tokens and evaluated on the same validation set compare at equal tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for i, (label, log) in enumerate(logs.items()):
        recs = [json.loads(x) for x in Path(log).read_text().splitlines() if x.strip()]
        color = f"C{i}"
        ax.plot([r["tokens"] / 1e6 for r in recs], [r["loss"] for r in recs], color=color, alpha=0.3, lw=1,
                label=f"{label}: train loss")
        val = [(r["tokens"] / 1e6, r["valid_loss"]) for r in recs if r.get("valid_loss") is not None]
        if val:
            ax.plot(*zip(*val), "o-", color=color, lw=1.6, ms=4, label=f"{label}: validation loss")
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        pairs = dict(a.split("=", 1) for a in sys.argv[3:])
        print(compare_runs({k: Path(v) for k, v in pairs.items()}, Path(sys.argv[2])))
        sys.exit(0)
    run = Path(sys.argv[1])
    print(plot_run(run, Path(sys.argv[2]) if len(sys.argv) > 2 else run / "loss.png"))
