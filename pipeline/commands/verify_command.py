"""cpp-data verify: the promotion gates of a build."""

from __future__ import annotations

import os
from pathlib import Path

from cpp_data.pipeline.commands.common import number
from cpp_data.pipeline.commands.store_reads import build_arg, origin
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput, CheckFailed


def add_parser(sub, leaf, group) -> None:
    vf = leaf(sub, "verify", cmd_verify, reads=("build",), help="run the promotion gates on a build",
              description="Run every gate: files and checksums, counts across manifest/shards/bin-idx, "
                          "max(token_id) < vocab_size, first documents decode exactly, empty-document ratio, "
                          "megatron-core IndexedDataset and GPTDataset over the export, packed rows, and one "
                          "training step of the bundled harness. Exits 1 naming each failed gate; on success writes "
                          "OUT/verify/BUILD.json and points OUT/builds/PROMOTED at the build.")
    vf.add_argument("build", type=build_arg, help="a build directory (OUT/builds/NAME), OUT for its latest build, "
                                              "or OUT/builds/PROMOTED; or one of these in a store, s3://BUCKET/OUT "
                                              "(the receipt and PROMOTED are written there)")
    vf.add_argument("--max-empty-ratio", type=number(0, 1), default=0.001, help="largest share of empty documents")
    vf.add_argument("--no-train-step", action="store_true", help="skip the training-step gate")


def cmd_verify(args) -> int:
    from cpp_data.pipeline.commands.verify import promote, record_failure, verify

    out = args.build.parent.parent  # the receipt goes to OUT/verify/, PROMOTED to OUT/builds/: say so before the gates
    for place in (out, args.build.parent):
        if not os.access(place, os.W_OK):
            raise BadInput(f"{place}: not writable, and verify writes its receipt under OUT/verify/ and "
                           f"OUT/builds/PROMOTED; run it where the output directory can be written")
    print(f"verify {args.build}")
    ok, gates = verify(args.build, max_empty_ratio=args.max_empty_ratio, train_step=not args.no_train_step)
    if not ok:
        record_failure(args.build, gates)
        raise CheckFailed(f"verify: failed gate(s): {', '.join(g.name for g in gates if not g.ok)}; the build is "
                          f"not promoted")
    receipt: object = promote(args.build, gates)
    stored = origin(args.build)
    if stored is not None:  # a build read from a store is promoted there
        from cpp_data.pipeline.runner.store_publish import promote_in_store

        promote_in_store(stored, Path(str(receipt)))
        receipt = f"{stored.out_url}/verify/{stored.name}.json"
    print(f"all {len(gates)} gates passed; promoted {args.build.name} (receipt {receipt})")
    return EXIT_OK
