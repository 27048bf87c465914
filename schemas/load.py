"""`cpp_data.load_build`: a build as Hugging Face datasets (or pyarrow datasets), from its manifest.

The same data `datasets.load_dataset(BUILD)` finds through the dataset card, but from manifest.json's file
list, so it also loads builds published before the card existed, an output directory (its latest build), and a
build in an object store (`s3://bucket/out`, `s3://bucket/out/builds/NAME`: schemas/store.py), read there
through fsspec. Like every reader of builds it reads only a sealed one (`_COMPLETE`), and it checks each file it
loads against the manifest's SHA-256 first (`verify=False` skips that: a read of every byte, which on a large
build takes a while; `cpp-data validate` checks the same once for all).

`format="auto"` gives Hugging Face datasets where the `datasets` package is installed and pyarrow datasets
(`pyarrow.dataset.Dataset`, lazy: `.to_table(columns=...)`, `.to_batches()`, `.count_rows()`) where it is not:
pyarrow is a dependency of the base install, `datasets` a convenience on top."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpp_data.pipeline.foundation.errors import BadInput, CheckFailed
from cpp_data.schemas.dataset_card import SPLIT_NAMES as SPLITS
from cpp_data.schemas.dataset_card import config_files


def _config(where, files: list[dict], config: str) -> list[dict]:
    configs = config_files(files)
    if config not in configs:
        raise BadInput(f"{where}: no config {config!r}; this build has {', '.join(configs) or 'none'}")
    return configs[config]


def _by_split(files: list[dict], place) -> dict[str, list[str]]:
    """{datasets split: [the place of each file]}: `place(path in the build)` is a local path or a URL."""
    return {SPLITS[s]: [place(f["path"]) for f in files if f["split"] == s]
            for s in SPLITS if any(f["split"] == s for f in files)}


def _local(path: Path, config: str, verify: bool) -> dict[str, list[str]]:
    from cpp_data.schemas.manifest import load_manifest, sha256_file
    from cpp_data.schemas.reader import require_complete, resolve_build

    build = require_complete(resolve_build(Path(path)))
    files = _config(build, load_manifest(build)["files"], config)
    for f in files if verify else ():
        if not (build / f["path"]).is_file() or sha256_file(build / f["path"]) != f.get("sha256"):
            raise CheckFailed(f"{build / f['path']}: missing or not the file the manifest lists (damaged after the "
                              f"build); cpp-data validate {build} checks every file")
    return _by_split(files, lambda rel: str(build / rel))


def _stored(url: str, config: str, verify: bool, storage_options: dict | None) -> tuple[Any, dict[str, list[str]]]:
    """(the store's fsspec filesystem, {split: [URL]}) of a sealed build in a store."""
    from cpp_data.schemas.store import locate_build, read_manifest, require_sealed
    from cpp_data.schemas.store_objects import sha256_object

    build = require_sealed(locate_build(url, storage_options))
    files = _config(build.url, read_manifest(build)[0]["files"], config)
    for f in files if verify else ():
        if not build.fs.exists(build.path(f["path"])) or sha256_object(build.fs, build.path(f["path"])) != f.get(
                "sha256"):
            raise CheckFailed(f"{build.url_of(f['path'])}: missing or not the file the manifest lists (damaged in "
                              f"the store); cpp-data validate {build.url} checks every file")
    return build.fs, _by_split(files, build.url_of)


FORMATS = ("auto", "datasets", "arrow")


def _arrow(data_files: dict[str, list[str]], fs, split: str | None):
    """{split: pyarrow.dataset.Dataset} (one Dataset when `split` is given) over the listed files alone."""
    import pyarrow.dataset as pads

    if split is not None and split not in data_files:
        raise BadInput(f"no split {split!r}; this config has {', '.join(data_files)}")
    filesystem = None
    if fs is not None:  # a store: fsspec's filesystem seen by pyarrow, paths without the scheme
        import pyarrow.fs as pafs

        filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(fs))
        data_files = {s: [f.split("://", 1)[1] for f in files] for s, files in data_files.items()}
    sets = {s: pads.dataset(files, format="parquet", filesystem=filesystem) for s, files in data_files.items()}
    return sets[split] if split is not None else sets


def _format(format: str) -> str:
    import importlib.util

    if format not in FORMATS:
        raise BadInput(f"format {format!r}: use {', '.join(FORMATS)}")
    if format == "auto":
        return "datasets" if importlib.util.find_spec("datasets") is not None else "arrow"
    return format


def load_build(path: str | Path, config: str = "documents", split: str | None = None, verify: bool = True,
               storage_options: dict | None = None, format: str = "auto"):
    """A dataset of the build as a datasets.DatasetDict with train and validation splits (one Dataset when
    `split` is given): `documents` (the whole documents, one row per file), `lane_<lane>` (a length lane's rows,
    `lane_4k`) or `packed_<lane>` (its packed rows). `path`: a build, or an output directory (its latest build),
    on disk or in a store (`storage_options` go to fsspec). `format`: "datasets", "arrow" (a dict of
    pyarrow.dataset.Dataset by split) or "auto" (datasets where it is installed). CheckFailed names a file that
    does not match the manifest."""
    from cpp_data.schemas.store import is_url

    how = _format(format)
    fs = None
    if is_url(path):
        fs, data_files = _stored(str(path), config, verify, storage_options)
    else:
        data_files = _local(Path(path), config, verify)
    if how == "arrow":
        return _arrow(data_files, fs, split)
    import datasets

    # a copy: datasets adds its own keys to the dict it is given, which then break the caller's next fsspec call
    options = {"storage_options": dict(storage_options or {})} if fs is not None else {}
    return datasets.load_dataset("parquet", data_files=data_files, split=split, **options)
