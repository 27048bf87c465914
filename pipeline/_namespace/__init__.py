"""cpp-data: pinned C++ repositories in, traceable and reproducible training shards out.

This file is the `cpp_data` package root; the subpackages live in the repository's top-level folders
(pipeline/, stages/, schemas/, tokenizer/, clang_index/) and are mapped under this namespace by pyproject.toml.
"""

__version__ = "0.1.0"
