"""Near-dedup quality on a labelled set built from real C++ files (googletest, POCO), run through the real build
(the v6 recipe up to the shards and the ledger: the later stages never change a dedup decision).

Planted near-duplicates (in a vendored copy of the corpus): renamed identifiers, reformatted whitespace, edited
comments, small insertions and deletions, a copy under another path with another license banner, and an
"older version" (a block removed and an identifier renamed). True non-duplicates: distinct short files that
share one license banner, and distinct files generated from one class template.

Ground truth is the exact Jaccard of the shingle sets. Recall is computed on planted pairs with Jaccard >= 0.8;
a removal is correct when the exact Jaccard to its keeper is at least the 0.7 threshold (the stage verifies
candidates with exact Jaccard, so no removal may fall below it).
"""

from __future__ import annotations

import random
import re

import pyarrow.parquet as pq
import pytest
from conftest import GOOGLETEST, POCO, build, build_dir, need, provenance_recipe, write_sources

from cpp_data.stages.lib.shingles import jaccard, shingle_hashes

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

BANNER = (GOOGLETEST / "googletest/src/gtest.cc").read_text().split("\n\n", 1)[0] + "\n\n" \
    if GOOGLETEST.exists() else ""
_IDENT = re.compile(r"\b[a-z][a-z_0-9]{3,}\b")


def _rename(text: str, rng: random.Random, k: int) -> str:
    words = sorted({w for w in _IDENT.findall(text) if w not in ("include", "define", "return", "const", "class",
                                                                  "struct", "namespace", "template", "typename")})
    for w in rng.sample(words, min(k, len(words))):
        text = re.sub(rf"\b{w}\b", w + "_x", text)
    return text


def _variants(text: str, rng: random.Random) -> dict[str, str]:
    lines = text.split("\n")
    n = len(lines)
    delete = set(rng.sample(range(n), max(1, n // 40)))
    inserted = []
    for i, line in enumerate(lines):
        if i not in delete:
            inserted.append(line)
        if i % 50 == 25:
            inserted.append(f"  // note {i}: kept for compatibility")
    older = lines[: n // 3] + lines[n // 3 + max(3, n // 12):]
    return {
        "renamed": _rename(text, rng, 2),
        "reformatted": "\n".join(("\t" + ln.lstrip()) if ln.startswith("  ") else ln for ln in lines).replace(
            ") {", ")\n{"),
        "comments": re.sub(r"//([^\n]*)", lambda m: "//" + m.group(1).replace("the", "a"), text),
        "edited": "\n".join(inserted),
        "vendored": "// Vendored copy, MIT License, Copyright (c) 2020 Somebody Else\n" + text.split("\n\n", 1)[-1],
        "older": _rename("\n".join(older), rng, 1),
    }


def _template(i: int, rng: random.Random) -> str:
    name = f"Widget{i}"
    methods = rng.sample(["open", "close", "read", "write", "flush", "seek", "tell", "reset", "size", "clear",
                          "begin", "end", "find", "insert", "erase", "swap", "lock", "unlock", "wait", "notify"], 6)
    body = "\n".join(f"  int {m}(int {m}_arg{i}) {{ return {m}_arg{i} * {rng.randint(2, 999)} + {name.lower()}_{m}; }}"
                     for m in methods)
    fields = "\n".join(f"  long {name.lower()}_{m} = {rng.randint(0, 10**6)};" for m in methods)
    return f"#pragma once\nnamespace lib{i} {{\nclass {name} {{\n public:\n{body}\n private:\n{fields}\n}};\n}}\n"


def test_near_dedup_quality_on_labelled_real_files(tmp_path):
    need(GOOGLETEST, POCO)
    rng = random.Random(7)
    base = sorted(p for p in list((GOOGLETEST / "googletest").rglob("*.cc")) + list((POCO / "Net").glob("*.h"))
                  if 3_000 < p.stat().st_size < 60_000)[:90]
    upstream, vendor = tmp_path / "upstream", tmp_path / "vendor"
    planted = []  # (upstream path, vendor path, kind)
    for i, src in enumerate(base):
        text = src.read_text()
        rel = f"lib/{i:03d}_{src.name}"
        (upstream / rel).parent.mkdir(parents=True, exist_ok=True)
        (upstream / rel).write_text(text)
        for kind, variant in _variants(text, rng).items():
            if (i + len(kind)) % 3:  # two thirds of the variants, so clusters vary in size
                vrel = f"third_party/{kind}/{i:03d}_{src.name}"
                (vendor / vrel).parent.mkdir(parents=True, exist_ok=True)
                (vendor / vrel).write_text(variant)
                planted.append((rel, vrel, kind))
    bodies = [p for p in sorted((GOOGLETEST / "googletest/samples").glob("*.cc"))]
    banner_files = []
    for i, p in enumerate(bodies):  # distinct short bodies sharing one banner
        body = "\n".join(p.read_text().split("\n")[-25:])
        rel = f"banner/{i:02d}.cc"
        (upstream / rel).parent.mkdir(parents=True, exist_ok=True)
        (upstream / rel).write_text(BANNER + body)
        banner_files.append(rel)
    for i in range(20):
        rel = f"family/widget{i}.h"
        (upstream / rel).parent.mkdir(parents=True, exist_ok=True)
        (upstream / rel).write_text(_template(i, rng))

    sources = write_sources(tmp_path / "s.toml", [
        {"name": "upstream", "url": str(upstream), "license": "BSD-3-Clause"},
        {"name": "vendor", "url": str(vendor), "license": "BSD-3-Clause"},
    ])
    out = tmp_path / "out"
    proc = build(sources, out, "--recipe", str(provenance_recipe(tmp_path / "recipe")))
    ledger = pq.read_table(build_dir(out) / "provenance" / "ledger.parquet").to_pylist()
    keeper = {(r["source_repo"], r["source_path"]): (r["keeper_repo"], r["keeper_path"]) for r in ledger
              if r["decision"] in ("near_duplicate", "exact_duplicate")}
    present = {(r["source_repo"], r["source_path"]) for r in ledger
               if r["decision"] in ("kept", "near_duplicate", "exact_duplicate")}

    def root(key):
        return keeper.get(key, key)

    def shingles(key):
        repo_dir = upstream if key[0] == "upstream" else vendor
        return shingle_hashes((repo_dir / key[1]).read_text())

    high = [(("upstream", a), ("vendor", b), kind) for a, b, kind in planted
            if ("upstream", a) in present and ("vendor", b) in present
            and jaccard(shingles(("upstream", a)), shingles(("vendor", b))) >= 0.8]
    found = [p for p in high if root(p[0]) == root(p[1])]
    recall = len(found) / len(high)
    missed = sorted({kind for a, b, kind in high if (a, b, kind) not in set(found)})

    removed = [(k, v) for k, v in keeper.items() if k not in [(r["source_repo"], r["source_path"]) for r in ledger
                                                              if r["decision"] == "exact_duplicate"]]
    correct = [k for k, v in removed if jaccard(shingles(k), shingles(v)) >= 0.7]
    precision = len(correct) / len(removed) if removed else 1.0
    banner_merged = [f for f in banner_files if ("upstream", f) in keeper]
    family_merged = [k for k in keeper if k[1].startswith("family/")]
    print(f"planted pairs with J>=0.8: {len(high)}, recall {recall:.3f}; removals {len(removed)}, "
          f"precision {precision:.3f}; banner merges {len(banner_merged)}")
    assert len(high) >= 150, len(high)
    assert recall >= 0.95, (recall, missed)
    assert precision >= 0.99, precision
    assert banner_merged == [] and family_merged == []
    assert all(v[0] == "upstream" for k, v in keeper.items() if k[0] == "vendor" and root(k)[0] == "upstream")
    assert "near duplicates" in proc.stdout
    near = [r for r in ledger if r["decision"] == "near_duplicate"]
    for r in near:  # the recorded similarity is the exact Jaccard to the keeper (of the scrubbed text the stage
        # saw, hence the small tolerance against the raw files); the cluster is the keeper's
        exact = jaccard(shingles((r["source_repo"], r["source_path"])), shingles((r["keeper_repo"], r["keeper_path"])))
        assert abs(r["similarity"] - exact) < 0.01 and r["similarity"] >= 0.7
    by_keeper = {}
    for r in near:
        by_keeper.setdefault((r["keeper_repo"], r["keeper_path"]), set()).add(r["cluster_id"])
    assert all(len(ids) == 1 for ids in by_keeper.values())
    assert len({r["cluster_id"] for r in near}) == len(by_keeper)


def test_vendored_source_loses_to_upstream_even_in_a_larger_repo(tmp_path):
    need(GOOGLETEST)
    from conftest import NLOHMANN

    need(NLOHMANN)
    app = tmp_path / "app"
    (app / "include").mkdir(parents=True)
    json_hpp = (NLOHMANN / "json.hpp").read_text()
    (app / "include" / "json.hpp").write_text(json_hpp)                       # exact copy, no vendor directory
    (app / "include" / "json_fwd.hpp").write_text(
        (NLOHMANN / "json_fwd.hpp").read_text().replace("namespace", "namespace /*patched*/"))  # near copy
    for p in sorted(GOOGLETEST.rglob("*")):                                # makes app the larger repo
        if p.suffix in (".cc", ".h") and p.is_file():
            (app / "src" / p.relative_to(GOOGLETEST)).parent.mkdir(parents=True, exist_ok=True)
            (app / "src" / p.relative_to(GOOGLETEST)).write_bytes(p.read_bytes())
    base = [{"name": "nlohmann", "url": str(NLOHMANN)}, {"name": "app", "url": str(app), "license": "MIT"}]

    def keepers(sources, out):
        build(write_sources(tmp_path / f"{out}.toml", sources), tmp_path / out, "--recipe",
              str(provenance_recipe(tmp_path / "recipe")))
        rows = pq.read_table(build_dir(tmp_path / out) / "provenance" / "ledger.parquet").to_pylist()
        return {r["source_path"]: (r["decision"], r["keeper_repo"]) for r in rows
                if r["source_repo"] in ("app", "nlohmann")
                and r["source_path"] in ("include/json.hpp", "json.hpp", "include/json_fwd.hpp", "json_fwd.hpp")}

    unflagged = keepers(base, "unflagged")  # the larger repo (app, several times nlohmann's bytes) wins the tie-break
    assert unflagged["json.hpp"] == ("exact_duplicate", "app")
    flagged = keepers([base[0], {**base[1], "vendored": True}], "flagged")
    assert flagged["include/json.hpp"] == ("exact_duplicate", "nlohmann")
    assert flagged["include/json_fwd.hpp"] == ("near_duplicate", "nlohmann")
    assert flagged["json.hpp"][0] == "kept" and flagged["json_fwd.hpp"][0] == "kept"
