"""`cpp-data tokenizer eval`: compression of the build's tokenizer against a generic byte-level BPE.

Both tokenizers see the same training documents (the build's training split minus the tokenizer's held-out
files) and the same vocabulary size; the generic one is HF's ByteLevelBPETokenizer with default settings
(GPT-2 pre-tokenizer). Bytes per token are computed on the held-out set (held-out training files plus the
validation split), per repo and overall, with a table of C++ idioms. The target of issue 5: at least 8% fewer
tokens than the generic BPE, and `std::vector<std::string>` in at most 3 tokens
(bench/results/tokenizer_eval-debian.json).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.schemas.manifest import load_manifest
from cpp_data.schemas.reader import iter_build_shards
from cpp_data.tokenizer import sample
from cpp_data.tokenizer.files import load_tokenizer
from cpp_data.tokenizer.train import train_generic_tokenizer

IDIOMS = [
    "std::vector<std::string>",
    "#include <unordered_map>",
    "0xDEADBEEF",
    "co_await",
    "template <typename T>",
    "std::unique_ptr<Foo> p = std::make_unique<Foo>();",
    "\n        return nullptr;",
    "\n\t\tif (x) {",
]
TARGET_FEWER_TOKENS = 0.08
TARGET_VECTOR_STRING = 3


def _rows(build: Path, split: str) -> Iterator[dict]:
    for table in iter_build_shards(build, split=split, columns_wanted=["text", "source_repo", "source_path"]):
        yield from table.to_pylist()


def split_documents(build: Path) -> tuple[Iterator[str], list[tuple[str, str]]]:
    """(training texts as a stream, held-out (repo, text) pairs) for a build, as its tokenizer stage split them."""
    manifest = load_manifest(build)
    frac = manifest["recipe"]["params"].get("tokenizer", {}).get("heldout_fraction", 0.05)
    heldout = [(r["source_repo"], r["text"]) for r in _rows(build, "valid")]
    heldout += [(r["source_repo"], r["text"]) for r in _rows(build, "train")
                if sample.tokenizer_heldout(r["source_repo"], r["source_path"], frac)]
    train = (r["text"] for r in _rows(build, "train")
             if not sample.tokenizer_heldout(r["source_repo"], r["source_path"], frac))
    return train, heldout


def _bytes_per_token(tok, docs: list[tuple[str, str]]) -> tuple[dict[str, float], float, int]:
    by_repo_bytes: dict[str, int] = defaultdict(int)
    by_repo_tokens: dict[str, int] = defaultdict(int)
    encs = tok.encode_batch([t for _, t in docs], add_special_tokens=False)
    for (repo, text), e in zip(docs, encs):
        by_repo_bytes[repo] += len(text.encode("utf-8"))
        by_repo_tokens[repo] += len(e.ids)
    total_b, total_t = sum(by_repo_bytes.values()), sum(by_repo_tokens.values())
    return ({r: by_repo_bytes[r] / max(1, by_repo_tokens[r]) for r in sorted(by_repo_bytes)},
            total_b / max(1, total_t), total_t)


def evaluate(build: Path) -> dict:
    """Everything `cpp-data tokenizer eval` prints, as a dict."""
    build = Path(build)
    manifest = load_manifest(build)
    if not manifest.get("tokenizer"):
        raise BadInput(f"{build}: this build has no tokenizer (its recipe has no tokenizer stage)")
    ours = load_tokenizer(build / manifest["tokenizer"]["path"])
    vocab = manifest["tokenizer"]["vocab_size"]
    train, heldout = split_documents(build)
    if not heldout:
        raise BadInput(f"{build}: the held-out set is empty (too few documents to evaluate)")
    t0 = time.monotonic()
    generic = train_generic_tokenizer(train, vocab)
    seconds = time.monotonic() - t0
    ours_repo, ours_all, ours_tokens = _bytes_per_token(ours, heldout)
    gen_repo, gen_all, gen_tokens = _bytes_per_token(generic, heldout)
    idioms = [{"text": s, "ours": ours.encode(s, add_special_tokens=False).tokens,
               "generic": generic.encode(s, add_special_tokens=False).tokens} for s in IDIOMS]
    fewer = 1 - ours_tokens / gen_tokens
    vs = next(i for i in idioms if i["text"] == "std::vector<std::string>")
    return {
        "build": build.name, "vocab_size": vocab, "tokenizer_sha256": manifest["tokenizer"]["sha256"],
        "heldout_documents": len(heldout), "heldout_bytes": sum(len(t.encode("utf-8")) for _, t in heldout),
        "generic_train_seconds": round(seconds, 2),
        "bytes_per_token": {"ours": ours_all, "generic": gen_all},
        "tokens": {"ours": ours_tokens, "generic": gen_tokens}, "fewer_tokens": fewer,
        "per_repo": {r: {"ours": ours_repo[r], "generic": gen_repo[r]} for r in ours_repo},
        "idioms": idioms,
        "targets": {"fewer_tokens_at_least": TARGET_FEWER_TOKENS, "fewer_tokens_met": fewer >= TARGET_FEWER_TOKENS,
                    "vector_string_at_most": TARGET_VECTOR_STRING,
                    "vector_string_met": len(vs["ours"]) <= TARGET_VECTOR_STRING},
    }


def format_eval(r: dict) -> str:
    lines = [f"tokenizer eval: {r['build']} (vocab {r['vocab_size']:,}; held-out {r['heldout_documents']:,} "
             f"documents, {r['heldout_bytes'] / 1e6:.2f} MB)", "",
             f"  {'repo':<24} {'ours B/tok':>10} {'generic':>10} {'fewer tokens':>13}"]
    for repo, v in r["per_repo"].items():
        lines.append(f"  {repo:<24} {v['ours']:>10.3f} {v['generic']:>10.3f} {1 - v['generic'] / v['ours']:>12.1%}")
    b = r["bytes_per_token"]
    lines.append(f"  {'overall':<24} {b['ours']:>10.3f} {b['generic']:>10.3f} {r['fewer_tokens']:>12.1%}")
    lines += ["", f"  {'idiom':<52} {'ours':>5} {'generic':>8}"]
    for i in r["idioms"]:
        lines.append(f"  {i['text']!r:<52} {len(i['ours']):>5} {len(i['generic']):>8}")
    t = r["targets"]
    lines += ["", f"  target: >= {t['fewer_tokens_at_least']:.0%} fewer tokens than generic BPE: "
              f"{'met' if t['fewer_tokens_met'] else 'NOT met'}",
              f"  target: std::vector<std::string> in <= {t['vector_string_at_most']} tokens: "
              f"{'met' if t['vector_string_met'] else 'NOT met'}"]
    return "\n".join(lines)
