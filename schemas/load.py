"""`cpp_data.load_build`: a build as Hugging Face datasets, from its manifest.

The same data `datasets.load_dataset(BUILD)` finds through the dataset card, but from manifest.json's file
list, so it also loads builds published before the card existed, and an output directory (its latest build).
Like every reader of builds it reads only a sealed one (`_COMPLETE`), and it checks each file it loads against
the manifest's SHA-256 first (`verify=False` skips that: a read of every byte, which on a large build takes a
while; `cpp-data validate` checks the same once for all).
"""

from __future__ import annotations

from pathlib import Path

from cpp_data.pipeline.foundation.errors import BadInput, CheckFailed
from cpp_data.schemas.dataset_card import CONFIGS
from cpp_data.schemas.dataset_card import SPLIT_NAMES as SPLITS


def load_build(path: str | Path, config: str = "documents", split: str | None = None, verify: bool = True):
    """The build's `documents` (shards, one row per file) or `packed` (packed rows) as a datasets.DatasetDict
    with train and validation splits (one Dataset when `split` is given). `path`: a build, or an output
    directory (its latest build). CheckFailed names a file that does not match the manifest."""
    import datasets

    from cpp_data.schemas.manifest import load_manifest, sha256_file
    from cpp_data.schemas.reader import require_complete, resolve_build

    if config not in CONFIGS:
        raise BadInput(f"unknown config {config!r}; a build has {', '.join(CONFIGS)}")
    build = require_complete(resolve_build(Path(path)))
    files = [f for f in load_manifest(build)["files"] if f.get("kind") == CONFIGS[config][0]]
    if not files:
        raise BadInput(f"{build}: the build has no {config} data (its recipe wrote none)")
    for f in files if verify else ():
        if not (build / f["path"]).is_file() or sha256_file(build / f["path"]) != f.get("sha256"):
            raise CheckFailed(f"{build / f['path']}: missing or not the file the manifest lists (damaged after the "
                              f"build); cpp-data validate {build} checks every file")
    data_files = {SPLITS[s]: [str(build / f["path"]) for f in files if f["split"] == s]
                  for s in SPLITS if any(f["split"] == s for f in files)}
    return datasets.load_dataset("parquet", data_files=data_files, split=split)
