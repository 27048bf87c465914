"""The fixed band of the C++ tokenizer: load `cpp_band.toml`, expand it into id-ordered entries, propose std names.

The band file is data, versioned in the repository; this module only reads it. Ids: specials first (0..S-1),
then the 256 byte symbols of byte-level BPE, then the band entries in file order. `python -m
cpp_data.tokenizer.band propose BUILD` prints the most frequent `std::NAME` of a build's training split, which
is how the `[band.std]` list was chosen.
"""

from __future__ import annotations

import argparse
import collections
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

BAND_FILE = "cpp_band.toml"


@dataclass(frozen=True)
class Band:
    revision: int
    specials: tuple[str, ...]
    roles: dict[str, str]
    entries: tuple[str, ...]  # plain text, in id order (first id = len(specials) + 256)
    sections: dict[str, tuple[str, ...]]

    def role_id(self, role: str) -> int:
        return self.specials.index(self.roles[role])


def load_band(path: Path | None = None) -> Band:
    """Read and check the band file (the packaged one by default); ValueError names the file and the problem."""
    if path is None:
        text = resources.files("cpp_data.tokenizer").joinpath(BAND_FILE).read_text(encoding="utf-8")
        where = BAND_FILE
    else:
        text, where = Path(path).read_text(encoding="utf-8"), str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}: not valid TOML ({exc})") from None
    specials = tuple(data.get("specials", ()))
    roles = dict(data.get("roles", {}))
    for role, tok in roles.items():
        if tok not in specials:
            raise ValueError(f"{where}: role {role} names {tok!r}, which is not in specials")
    for needed in ("pad", "bos", "eos", "unk"):
        if needed not in roles:
            raise ValueError(f"{where}: roles.{needed} is missing")
    entries: list[str] = []
    sections: dict[str, tuple[str, ...]] = {}
    for name, sec in data.get("band", {}).items():
        expanded = []
        for e in sec.get("entries", []):
            if len(e.encode("utf-8")) > 1:  # a one-byte entry is already a byte symbol; only its spaced form is new
                expanded.append(e)
            if sec.get("spaced", False):
                expanded.append(" " + e)
        sections[name] = tuple(expanded)
        entries.extend(expanded)
    seen: set[str] = set()
    for e in entries:
        if e in seen or e in specials:
            raise ValueError(f"{where}: band entry {e!r} is listed twice")
        seen.add(e)
    return Band(int(data.get("revision", 0)), specials, roles, tuple(entries), sections)


def propose_std_names(texts, top: int = 96) -> list[tuple[str, int, float]]:
    """(name, count, share used with `<`) of the most frequent `std::NAME` in `texts`."""
    count: collections.Counter[str] = collections.Counter()
    templ: collections.Counter[str] = collections.Counter()
    for text in texts:
        for m in re.finditer(r"std::(\w+)(<?)", text):
            count[m.group(1)] += 1
            templ[m.group(1)] += bool(m.group(2))
    return [(n, c, templ[n] / c) for n, c in count.most_common(top)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cpp_data.tokenizer.band",
                                 description="Print the most frequent std:: names of a build's training split.")
    ap.add_argument("command", choices=["propose"])
    ap.add_argument("build", type=Path)
    ap.add_argument("--top", type=int, default=96)
    args = ap.parse_args(argv)
    from cpp_data.schemas.reader import iter_build_shards

    texts = (t for tb in iter_build_shards(args.build, split="train", columns_wanted=["text"])
             for t in tb.column("text").to_pylist())
    for name, n, share in propose_std_names(texts, args.top):
        print(f"std::{name:<32} {n:>8}  {'<' if share > 0.5 else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
