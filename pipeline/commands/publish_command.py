"""cpp-data publish: a sealed local build copied into an object store, checked there, then sealed."""

from __future__ import annotations

import argparse
import re

from cpp_data.pipeline.commands.common import path_arg
from cpp_data.pipeline.foundation.errors import EXIT_NOTHING_TO_DO, EXIT_OK, BadInput
from cpp_data.schemas.store import refuse_scheme, url_scheme


def store_url(text: str) -> str:
    """An argparse type: the URL of an output directory in a store (s3://BUCKET/PREFIX)."""
    if url_scheme(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL; give the store's output directory, "
                                         f"s3://BUCKET/PREFIX")
    try:
        refuse_scheme(text)
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if re.search(r"/builds(/[^/]*)?/*$", text):
        raise argparse.ArgumentTypeError(f"{text} names builds/ in the store; give the output directory above it "
                                         f"(the build goes to PREFIX/builds/NAME)")
    return text.rstrip("/")


def add_parser(sub, leaf, group) -> None:
    p = leaf(sub, "publish", cmd_publish, reads=("build",), help="copy a sealed build into an object store",
             description="Validate the build, upload its files to URL/builds/NAME, read every object back and check "
                         "its size and SHA-256 against the manifest, then write _COMPLETE there last: readers "
                         "trust only a sealed prefix. Then URL/builds/LATEST names the build (unless "
                         "--no-latest), a build this output directory promoted is promoted there too, and "
                         "URL/README.md follows. The endpoint and keys come from the usual AWS settings "
                         "(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...). Exits 3 when the same build is already "
                         "published there; docs/FORMATS.md (Object storage) says more.",
             epilog="example: cpp-data publish out s3://team-data/cpp && cpp-data validate s3://team-data/cpp")
    p.add_argument("build", type=path_arg, help="a local build directory (OUT/builds/NAME), OUT for its latest build, "
                                            "or OUT/builds/PROMOTED")
    p.add_argument("url", type=store_url, help="the output directory in the store: s3://BUCKET/PREFIX")
    p.add_argument("--no-latest", action="store_true", help="leave URL/builds/LATEST where it is")


def cmd_publish(args) -> int:
    from cpp_data.pipeline.runner.store_publish import publish_build

    result = publish_build(args.build, args.url, latest=not args.no_latest)
    moved = f"; wrote {', '.join(result.pointers)}" if result.pointers else ""
    if not result.new:
        print(f"{result.url}: already published (sealed, same manifest){moved}")
        return EXIT_NOTHING_TO_DO
    print(f"published {args.build.name} to {result.url}: {result.files} objects, {result.bytes / 1e6:.1f} MB, "
          f"each read back and checked against the manifest, then sealed{moved}")
    return EXIT_OK
