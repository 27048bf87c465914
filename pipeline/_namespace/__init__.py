"""cpp-data: pinned C++ repositories in, traceable and reproducible training shards out.

This file is the `cpp_data` package root; the subpackages live in the repository's top-level folders
(pipeline/, stages/, schemas/, tokenizer/, clang_index/) and are mapped under this namespace by pyproject.toml.
"""

from cpp_data.pipeline.foundation.version import __version__

__all__ = ["__version__", "load_build"]


def load_build(path, config: str = "documents", split: str | None = None, verify: bool = True,
               storage_options: dict | None = None, format: str = "auto"):
    """A build (or an output directory's latest build), on disk or in an object store (`s3://bucket/out`), as
    Hugging Face datasets (or, without the `datasets` package or with format="arrow", pyarrow datasets): config
    "documents" (the shards), "lane_<lane>" or "packed_<lane>"; train and validation splits. Only a sealed
    build is read, and each file loaded is checked against the manifest first (`verify=False` skips that).
    schemas/load.py says more."""
    from cpp_data.schemas.load import load_build as _load_build

    return _load_build(path, config, split, verify, storage_options, format)
