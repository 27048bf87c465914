"""cpp-data validate: a build against its manifest and schemas."""

from __future__ import annotations

from cpp_data.pipeline.commands.store_reads import build_arg
from cpp_data.pipeline.foundation.errors import EXIT_OK, CheckFailed


def add_parser(sub, leaf, group) -> None:
    v = leaf(sub, "validate", cmd_validate, reads=("build",), help="check a build against its manifest and schemas",
             description="Check _COMPLETE, every checksum in the manifest and every shard against its generation's "
                         "schema. Exits 1 naming file, row group and column on the first problem.")
    v.add_argument("build", type=build_arg, help="a build directory (OUT/builds/NAME), OUT for its latest build, "
                                             "or OUT/builds/PROMOTED; or one of these in a store, s3://BUCKET/OUT")


def cmd_validate(args) -> int:
    from cpp_data.schemas.reader import IncompleteBuild
    from cpp_data.schemas.validate import validate_build

    try:
        res = validate_build(args.build)
    except IncompleteBuild as exc:  # for validate, an unsealed build is a failed check, not a wrong argument
        raise CheckFailed(str(exc)) from exc
    print(f"ok: {args.build}: {res['shards']} shards, {res['rows']:,} documents, {res['files']} files checked "
          f"(schema {res['generation']})")
    return EXIT_OK
