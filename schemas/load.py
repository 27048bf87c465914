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
from cpp_data.schemas.dataset_card import SPLIT_NAMES as SPLITS
from cpp_data.schemas.dataset_card import config_files


def load_build(path: str | Path, config: str = "documents", split: str | None = None, verify: bool = True):
    """A dataset of the build as a datasets.DatasetDict with train and validation splits (one Dataset when
    `split` is given): `documents` (the whole documents, one row per file), `lane_<lane>` (a length lane's rows,
    `lane_4k`) or `packed_<lane>` (its packed rows). `path`: a build, or an output directory (its latest build).
    CheckFailed names a file that does not match the manifest."""
    import datasets

    from cpp_data.schemas.manifest import load_manifest, sha256_file
    from cpp_data.schemas.reader import require_complete, resolve_build

    build = require_complete(resolve_build(Path(path)))
    configs = config_files(load_manifest(build)["files"])
    if config not in configs:
        raise BadInput(f"{build}: no config {config!r}; this build has {', '.join(configs) or 'none'}")
    files = configs[config]
    for f in files if verify else ():
        if not (build / f["path"]).is_file() or sha256_file(build / f["path"]) != f.get("sha256"):
            raise CheckFailed(f"{build / f['path']}: missing or not the file the manifest lists (damaged after the "
                              f"build); cpp-data validate {build} checks every file")
    data_files = {SPLITS[s]: [str(build / f["path"]) for f in files if f["split"] == s]
                  for s in SPLITS if any(f["split"] == s for f in files)}
    return datasets.load_dataset("parquet", data_files=data_files, split=split)
