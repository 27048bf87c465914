"""cpp-data tokenizer eval: a build's tokenizer against a generic BPE."""

from __future__ import annotations

from cpp_data.pipeline.commands.common import (
    path_arg,
)
from cpp_data.pipeline.foundation.errors import EXIT_FAILED, EXIT_OK


def add_parser(sub, leaf, group) -> None:
    tk = group("tokenizer", help="measure a build's tokenizer")
    te = leaf(tk, "eval", cmd_tokenizer_eval, reads=("build",),
              help="bytes per token against a generic BPE, and C++ idioms",
              description="Train a generic byte-level BPE (HF defaults, GPT-2 pre-tokenizer) of the build "
                          "tokenizer's vocabulary size on the same training documents, then compare bytes per token "
                          "on the held-out set (the tokenizer's held-out training files plus the validation split), "
                          "per repo and overall, and the tokens of C++ idioms. Exits 1 when a target of "
                          "docs/DESIGN.md is not met (>= 8% fewer tokens; std::vector<std::string> in <= 3).")
    te.add_argument("build", type=path_arg, help="a build directory whose recipe has a tokenizer, or OUT")
    te.add_argument("--json", type=path_arg, help="also write the full result as JSON here")


def cmd_tokenizer_eval(args) -> int:
    from cpp_data.pipeline.foundation.fsutil import atomic_write_json
    from cpp_data.tokenizer.evaluate import evaluate, format_eval

    result = evaluate(args.build)
    print(format_eval(result))
    if args.json:
        atomic_write_json(args.json, result)
    return EXIT_OK if all(v for k, v in result["targets"].items() if k.endswith("_met")) else EXIT_FAILED
