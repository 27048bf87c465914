"""cpp-data: pinned C++ repositories in, traceable and reproducible training shards out.

This file is the `cpp_data` package root; the subpackages live in the repository's top-level folders
(pipeline/, stages/, schemas/, tokenizer/, clang_index/) and are mapped under this namespace by pyproject.toml.
"""

from cpp_data.pipeline.foundation.version import __version__

__all__ = ["__version__", "load_build"]


def load_build(path, config: str = "documents", split: str | None = None, verify: bool = True):
    """A build (or an output directory's latest build) as Hugging Face datasets: config "documents" (the
    shards) or "packed" (packed rows); train and validation splits. Only a sealed build is read, and each file
    loaded is checked against the manifest first (`verify=False` skips that). schemas/load.py says more."""
    from cpp_data.schemas.load import load_build as _load_build

    return _load_build(path, config, split, verify)
