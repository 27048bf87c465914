"""cpp-data: pinned C++ repositories in, traceable and reproducible training shards out.

This file is the `cpp_data` package root; the subpackages live in the repository's top-level folders
(pipeline/, stages/, schemas/, tokenizer/, clang_index/) and are mapped under this namespace by pyproject.toml.
"""

__version__ = "0.1.0"


def load_build(path, config: str = "documents", split: str | None = None):
    """A build (or an output directory's latest build) as Hugging Face datasets: config "documents" (the
    shards) or "packed" (packed rows); train and validation splits. Needs the datasets library."""
    from cpp_data.pipeline.load import load_build as _load_build

    return _load_build(path, config, split)
