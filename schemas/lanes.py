"""Length lanes: the training units of a build, one lane per sequence length (docs/CHUNKS.md).

A lane is named by its sequence length in units of 1,024 tokens: "4k" is 4,096, "16k" 16,384, "64k" 65,536; or
by a plain count of tokens ("512", for small models and tests).
Its documents are at most `budget(lane)` tokens, the sequence length less RESERVE (the EOD that ends every
document and the three sentinels FIM adds when the harness or an export draws it), so a document never
crosses a packed row and FIM never pushes one out of it. Two kinds of lane:
  chunks   every document cut into semantic chunks of the build's tokenizer (stages/lib/chunking.py)
  files    whole files grouped, per repository and license, with what they include, definitions before their
           uses (stages/lib/lane_groups.py); a file longer than the budget is cut into chunks at the budget
On disk a lane is a folder of shards like the build's, `lanes/<lane>/{train,valid}-NNNNN.parquet` with
lanes/<lane>/lane.json, and its exports are `megatron/<lane>/` and `packed/<lane>/`.
"""

from __future__ import annotations

import re
from pathlib import Path

from cpp_data.pipeline.foundation.errors import BadInput

RESERVE = 4  # EOD + <fim_prefix>, <fim_suffix>, <fim_middle>
KINDS = ("chunks", "files")
LANE_FORMAT = "cpp-data-lane/1"
_NAME = re.compile(r"([1-9][0-9]*)(k?)")


def seq_length(lane: str) -> int:
    """The sequence length a lane name stands for; BadInput for a name that is not `<N>k`."""
    m = _NAME.fullmatch(lane)
    if m is None:
        raise BadInput(f"lane {lane!r}: a lane is named by its sequence length, in units of 1,024 tokens (4k, 16k, "
                       f"64k) or in tokens (512)")
    return int(m.group(1)) * (1024 if m.group(2) else 1)


def lane_name(seq: int) -> str:
    """The name of the lane of sequence length `seq`: 4k for 4,096, 512 for 512."""
    return f"{seq // 1024}k" if seq % 1024 == 0 else str(seq)


def budget(lane: str) -> int:
    """The most tokens one document of the lane may have."""
    return seq_length(lane) - RESERVE


def ordered(lanes: list[str]) -> list[str]:
    """Lanes in curriculum order: shortest first."""
    return sorted(lanes, key=seq_length)


def lane_dir(lane: str) -> str:
    return f"lanes/{lane}"


def lanes_of(directory: Path) -> list[str]:
    """The lanes a lanes stage output (or a build) holds, in curriculum order."""
    root = Path(directory) / "lanes"
    found = [d.name for d in root.iterdir() if (d / "shards.json").is_file()] if root.is_dir() else []
    return ordered(found)
