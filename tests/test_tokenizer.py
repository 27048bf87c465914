"""The C++ tokenizer (issue 5): pinned band ids, exact round trip over a whole real corpus, determinism,
loading through transformers and megatron-core, compression against a generic BPE, token-level columns."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import JUCE, POCO, need, run_cli
from tokenizers import AddedToken, pre_tokenizers

from cpp_data.schemas.manifest import load_manifest, sha256_file
from cpp_data.schemas.reader import iter_build_shards
from cpp_data.stages.lib.token_mirror import add_token_columns
from cpp_data.tokenizer.band import load_band
from cpp_data.tokenizer.evaluate import split_documents
from cpp_data.tokenizer.files import load_tokenizer
from cpp_data.tokenizer.pretokenizer import (
    ASCII_CODE_PATTERN,
    PieceMemo,
    ascii_twin,
    cuts_keep_ids,
    encode_in_parts,
    encoding_parts,
    pieces,
    to_byte_symbols,
)
from cpp_data.tokenizer.train import check_band_pieces, train_cpp_tokenizer

# Revision 1 of the band: its specials and entries in id order. Changing, reordering or inserting an entry moves
# ids that trained models depend on; a new revision may only append (see tokenizer/cpp_band.toml).
BAND_R1_SHA256 = "1d5ed437e3752e18cf2f94f60ca514d11a4188a832bc03463917994abf098a8f"
BAND_R1_SIZE = (32, 700)

EDGE_CASES = [
    "",
    "\tint x;\t// tab\r\n\treturn x;\r\n",
    "// Größe, 日本語のコメント, emoji 🚀, combining é\nint f();\n",
    "auto s = \"" + "a" * 100_000 + "\";\n",
    "const char* marker = \"<|eos|>\"; // special-token text inside a document\n",
    "\r", "\n\n\n", "    ", "x\u00a0y\u2028z\x00\x7f",
]


def test_band_ids_are_pinned():
    band = load_band()
    digest = hashlib.sha256("\n".join(band.specials + band.entries).encode()).hexdigest()
    first_r1 = band.specials + band.entries[: BAND_R1_SIZE[1] - 0]
    assert (len(band.specials), min(len(band.entries), BAND_R1_SIZE[1])) == BAND_R1_SIZE
    if len(band.entries) == BAND_R1_SIZE[1]:
        assert digest == BAND_R1_SHA256, "band ids moved: revision 1 may only be appended to"
    else:  # a later revision: its first entries must still be revision 1's
        assert hashlib.sha256("\n".join(first_r1).encode()).hexdigest() == BAND_R1_SHA256
    assert check_band_pieces(band) == [], "every band entry must be one pre-token, or it can never be used"


def test_bad_band_file_is_one_clear_line(tmp_path):
    bad = tmp_path / "band.toml"
    bad.write_text('specials = ["<p>", "<b>", "<e>", "<u>"]\n[roles]\npad="<p>"\nbos="<b>"\neos="<e>"\nunk="<u>"\n'
                   '[band.k]\nentries = ["while", "while"]\n')
    with pytest.raises(ValueError, match=r"band\.toml: band entry 'while' is listed twice"):
        load_band(bad)


@pytest.mark.slow
def test_vocab_smaller_than_band_is_refused():
    with pytest.raises(ValueError, match="smaller than the fixed band"):
        train_cpp_tokenizer(["int main() { return 0; }\n"] * 10, load_band(), 512)


@pytest.mark.slow
def test_smallest_vocab_size_trains():
    """At the smallest size the recipe accepts, a real training composes: the learned merges give way to the
    band's chains, and every band entry is one token."""
    from cpp_data.tokenizer.train import smallest_vocab_size

    band = load_band()
    size = smallest_vocab_size(band)
    text = "int main() { std::vector<int> v; for (auto& x : v) { return static_cast<int>(x); } }\n" * 50
    tok = train_cpp_tokenizer([text] * 20, band, size)
    assert tok.get_vocab_size() == size
    with pytest.raises(ValueError, match="smaller than the fixed band"):
        train_cpp_tokenizer([text] * 20, band, size - 1)


@pytest.mark.slow
def test_round_trip_every_document_of_the_build(reference_build: Path):
    tok = load_tokenizer(reference_build / "tokenizer")
    checked = 0
    for table in iter_build_shards(reference_build, columns_wanted=["text", "token_ids"]):
        texts, ids = table.column("text").to_pylist(), table.column("token_ids").to_pylist()
        encs = tok.encode_batch(texts, add_special_tokens=False)
        for text, stored, enc in zip(texts, ids, encs):
            assert stored == enc.ids, "token_ids column differs from the build tokenizer's encoding"
            assert tok.decode(stored, skip_special_tokens=False) == text
            checked += 1
    assert checked == load_manifest(reference_build)["totals"]["documents"] > 300
    for text in EDGE_CASES:
        assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text, repr(text[:40])
    eos = tok.token_to_id("<|eos|>")
    assert eos not in tok.encode(EDGE_CASES[4]).ids  # the literal text is not the special token


@pytest.mark.slow
def test_round_trip_whole_juce_and_poco_trees(reference_build: Path):
    """One C/C++ file in two (sorted paths; the suite's time) of two more real trees, refused or not (JUCE has
    non-ASCII comments, CRLF, tabs)."""
    need(JUCE, POCO)
    tok = load_tokenizer(reference_build / "tokenizer")
    files = [p for root in (JUCE, POCO) for p in sorted(root.rglob("*"))
             if p.suffix in (".h", ".hpp", ".cpp", ".c", ".mm") and p.is_file()][::2]
    texts = [p.read_bytes().decode("utf-8", "replace") for p in files]
    assert len(texts) > 1000 and any("\r\n" in t for t in texts) and any(not t.isascii() for t in texts)
    for path, text, enc in zip(files, texts, tok.encode_batch(texts, add_special_tokens=False)):
        assert tok.decode(enc.ids, skip_special_tokens=False) == text, path


def test_documents_encoded_in_parts_get_the_ids_of_the_whole(reference_build: Path):
    """token_columns encodes a long document in parts cut where the pre-tokenizer always splits
    (encoding_parts); the tokenizer encoding each whole text is the judge, over real files of two trees (CRLF,
    tabs, non-ASCII) and the edge cases, with parts of a few hundred characters so that every file is cut."""
    need(JUCE, POCO)
    tok = load_tokenizer(reference_build / "tokenizer")
    files = [p for root in (JUCE, POCO) for p in sorted(root.rglob("*"))
             if p.suffix in (".h", ".hpp", ".cpp", ".c", ".mm") and p.is_file()][::6]
    hostile = ["x;  \n\ty;\n", "a;\r\n\r\n b", "f();\n<|endoftext|>\n}", "é\nz;\n", "a\u00a0\nb\x1c\nc"]
    texts = [p.read_bytes().decode("utf-8", "replace") for p in files] + EDGE_CASES + [h * 50 for h in hostile]
    cut = 0
    for text in texts:
        parts = encoding_parts(text, 200)
        assert "".join(parts) == text
        cut += len(parts) > 1
        split = [i for e in tok.encode_batch_fast(parts, add_special_tokens=False) for i in e.ids]
        assert split == tok.encode(text, add_special_tokens=False).ids, text[:80]
    assert cut > 300
    assert cuts_keep_ids(tok)
    other = load_tokenizer(reference_build / "tokenizer")
    other.add_special_tokens([AddedToken("}\n#", special=True)])  # could straddle a cut: documents stay whole
    assert not cuts_keep_ids(other)
    for pre in (pre_tokenizers.ByteLevel(add_prefix_space=False), None):  # another revision's pre-tokenizer
        other = load_tokenizer(reference_build / "tokenizer")
        other.pre_tokenizer = pre
        assert not cuts_keep_ids(other)
    assert encode_in_parts(tok, texts, 200) == [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    table = pa.table({"text": texts[:40]})
    assert add_token_columns(table, tok, "v6", part_chars=200).column("token_ids").to_pylist() == \
        [e.ids for e in tok.encode_batch(texts[:40], add_special_tokens=False)]


def test_ascii_twin_gives_the_tokenizers_ids(reference_build: Path):
    """encode_in_parts encodes ASCII texts with the tokenizer's ASCII twin (no byte-level step); the tokenizer
    itself is the judge, over every ASCII C/C++ file of two real trees in four, seeded random text over all 128
    ASCII characters (control characters, a special token's literal), and mixed batches in order."""
    import random

    need(JUCE, POCO)
    tok = load_tokenizer(reference_build / "tokenizer")
    twin = ascii_twin(tok)
    assert twin is not None
    files = [p for root in (JUCE, POCO) for p in sorted(root.rglob("*"))
             if p.suffix in (".h", ".hpp", ".cpp", ".c", ".mm") and p.is_file()][::4]
    texts = [t for t in (p.read_bytes().decode("utf-8", "replace") for p in files) if t.isascii()]
    rng = random.Random(7)
    pieces = ["std::vector<", "\n    return ", "#include <", "0x1F'FFull", "<|eos|>", "<|pad|>", "->", " ", "\t",
              "\r\n", "\x0b", "\x0c", "\x00", "\x7f", "\x1c"]
    texts += ["".join(rng.choice(pieces) if rng.random() < 0.3 else chr(rng.randrange(128))
                      for _ in range(rng.randrange(1, 400))) for _ in range(500)]
    assert len(texts) > 800 and all(t.isascii() for t in texts)
    want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert [e.ids for e in twin.encode_batch(texts, add_special_tokens=False)] == want
    mixed = [x for pair in zip(texts[:200], EDGE_CASES * 30) for x in pair]  # ASCII and not, interleaved
    assert encode_in_parts(tok, mixed) == [e.ids for e in tok.encode_batch(mixed, add_special_tokens=False)]
    for pre in (pre_tokenizers.ByteLevel(add_prefix_space=False), None):  # not this module's pre-tokenizer
        other = load_tokenizer(reference_build / "tokenizer")
        other.pre_tokenizer = pre
        assert ascii_twin(other) is None
    other = load_tokenizer(reference_build / "tokenizer")
    other.add_special_tokens([AddedToken("<|Ġsep|>", special=True)])  # renamed, it would match ASCII text
    assert ascii_twin(other) is None


def test_piece_memo_gives_the_tokenizers_ids(reference_build: Path):
    """encode_in_parts encodes ASCII texts through PieceMemo: ASCII_CODE_PATTERN splits them with Python's `re`
    and each distinct pre-token is encoded once. The tokenizer is the judge of both steps: its own Split of
    every ASCII C/C++ file of two real trees in five and of seeded random text over all 128 ASCII characters
    (white space, the separators 0x1c-0x1f that Python's \\s would take, lines of indentation only), and its
    ids, with the memo cleared every few texts, and for texts holding a special token's literal, which the
    memo leaves to tokenizers."""
    import random
    import re

    need(JUCE, POCO)
    tok = load_tokenizer(reference_build / "tokenizer")
    files = [p for root in (JUCE, POCO) for p in sorted(root.rglob("*"))
             if p.suffix in (".h", ".hpp", ".cpp", ".c", ".mm") and p.is_file()][::5]
    texts = [t for t in (p.read_bytes().decode("utf-8", "replace") for p in files) if t.isascii()]
    rng = random.Random(11)
    bits = ["std::vector<", "\n    return ", "#  define X", "0x1F'FFull", "1.5e-3f", "~Foo", "a::b::~c<", "->",
            " ", "\t", "\r\n", "\n", "\r", "  \n", " \t\n  x", "\x0b", "\x0c", "\x00", "\x7f", "\x1c", "\x1f",
            "<|pad", "|>"]
    texts += ["".join(rng.choice(bits) if rng.random() < 0.5 else chr(rng.randrange(128))
                      for _ in range(rng.randrange(0, 300))) + ("<|eos|>" if k % 10 == 0 else "") for k in range(2000)]
    assert len(texts) > 2500 and all(t.isascii() for t in texts)
    split = re.compile(ASCII_CODE_PATTERN)
    for text in texts:
        assert split.findall(text) == pieces(text), repr(text[:80])
    memo = PieceMemo(ascii_twin(tok), entries=50)  # cleared again and again: never changes an id
    want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert [memo.encode(t) if memo.takes(t) else w for t, w in zip(texts, want)] == want
    assert sum(memo.takes(t) for t in texts) > 2000
    assert not memo.takes("int x; // <|eos|>\n") and memo.takes("a <| b |> c\n") and not memo.takes("é;\n")
    mixed = [x for pair in zip(texts[:300], EDGE_CASES * 40) for x in pair]  # ASCII and not, interleaved
    assert encode_in_parts(tok, mixed) == [e.ids for e in tok.encode_batch(mixed, add_special_tokens=False)]


@pytest.mark.slow
def test_band_sits_at_its_ids_and_vocab_is_exact(reference_build: Path):
    band = load_band()
    manifest = load_manifest(reference_build)
    tok = load_tokenizer(reference_build / "tokenizer")
    size = manifest["tokenizer"]["vocab_size"]
    # the small reference corpus cannot fill the recipe's 65,536: what it learned, rounded up to 128
    assert tok.get_vocab_size() == size == manifest["tokenizer"]["learned_ids"] + manifest["tokenizer"]["padding_ids"]
    assert size % 128 == 0 and manifest["tokenizer"]["padding_ids"] < 128 <= size <= 65_536
    assert sha256_file(reference_build / "tokenizer" / "tokenizer.json") == manifest["tokenizer"]["sha256"]
    vocab = tok.get_vocab()
    assert sorted(vocab.values()) == list(range(size))
    for i, s in enumerate(band.specials):
        assert vocab[s] == i
    first = len(band.specials) + 256
    for i, entry in enumerate(band.entries):
        assert vocab[to_byte_symbols(entry)] == first + i, entry
        assert tok.encode(entry).ids == [first + i], f"band entry {entry!r} is not reached by merges"


@pytest.mark.slow
def test_training_is_deterministic(reference_build: Path):
    texts = list(split_documents(reference_build)[0])[:400]
    band = load_band()
    a = train_cpp_tokenizer(iter(texts), band, 4096).to_str()
    b = train_cpp_tokenizer(iter(texts), band, 4096).to_str()
    assert a == b
    assert json.loads(a)["model"]["vocab"]["<|eos|>"] == band.role_id("eos")


@pytest.mark.slow
def test_loads_in_transformers_and_megatron_core(reference_build: Path):
    from transformers import PreTrainedTokenizerFast

    band = load_band()
    directory = reference_build / "tokenizer"
    hf = PreTrainedTokenizerFast.from_pretrained(str(directory))
    assert (hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (
        band.role_id("bos"), band.role_id("eos"), band.role_id("pad"))
    text = "template <typename T>\nstd::vector<std::string> f(T t) {\n    return {};\n}\n"
    ours = load_tokenizer(directory)
    assert hf(text)["input_ids"] == ours.encode(text).ids
    assert hf.decode(hf(text)["input_ids"]) == text

    from megatron.core.tokenizers import MegatronTokenizer

    mt = MegatronTokenizer.from_pretrained(tokenizer_path=str(directory))  # reads tokenizer_metadata.json
    assert mt.vocab_size == ours.get_vocab_size() and mt.eod == band.role_id("eos")
    assert list(mt.tokenize(text)) == ours.encode(text).ids
    assert mt.detokenize(mt.tokenize(text)) == text


@pytest.mark.slow
def test_eval_beats_generic_bpe(reference_build: Path, tmp_path: Path):
    proc = run_cli("tokenizer", "eval", str(reference_build), "--json", str(tmp_path / "eval.json"), check=False)
    result = json.loads((tmp_path / "eval.json").read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["fewer_tokens"] >= 0.08
    assert result["tokens"]["ours"] < result["tokens"]["generic"]
    idioms = {i["text"]: i for i in result["idioms"]}
    assert len(idioms["std::vector<std::string>"]["ours"]) <= 3
    assert "overall" in proc.stdout and "std::vector<std::string>" in proc.stdout


@pytest.mark.slow
def test_token_mirrors_of_character_columns(reference_build: Path):
    tok = load_tokenizer(reference_build / "tokenizer")
    text = "int f() {\n    return g(1);\n}\n"
    body = text.index("{")
    structure = [2 if i < body else 3 for i in range(len(text))]  # FUNC_SIGNATURE then FUNC_BODY
    depth = [i % 7 for i in range(len(text))]
    # byte-level tokens that split a character (2-, 3- and 4-byte UTF-8), special tokens' literals (encoded as
    # text), CRLF, an empty document: token starts are taken from byte lengths, tokenizers' offsets are the judge
    others = ["// naïve café ✓ 日本語 \U0001F600 λx\nint ü = 0;\n", "", "<|endoftext|><|eos|>\r\n\tx = \"é\";"]
    texts = [text, *others]
    structures = [structure] + [[(7 * i) % 11 for i in range(len(t))] for t in others]
    depths = [depth] + [[i % 5 for i in range(len(t))] for t in others]
    table = pa.table({"text": texts, "structure_ids": pa.array(structures, pa.list_(pa.uint8())),
                      "ast_depth": pa.array(depths, pa.list_(pa.int8()))})
    out = add_token_columns(table, tok, "v6")
    for k, t in enumerate(texts):
        enc = tok.encode(t, add_special_tokens=False)
        assert out.column("token_ids").to_pylist()[k] == enc.ids
        assert out.column("token_structure_ids").to_pylist()[k] == [structures[k][s] for s, _ in enc.offsets]
        assert out.column("token_ast_depth").to_pylist()[k] == [depths[k][s] for s, _ in enc.offsets]
    assert any(len(tok.decode([i])) == 0 or "\ufffd" in tok.decode([i])  # a token inside a character exists
               for i in out.column("token_ids").to_pylist()[1])
    first = out.column("token_structure_ids").to_pylist()[0]
    assert 2 in first and 3 in first
    # token starts come from the ids' byte lengths: a tokenizer whose tokens do not spell the bytes is refused
    from cpp_data.stages.lib.token_mirror import token_byte_lengths

    wrong = token_byte_lengths(tok)
    wrong[wrong > 1] -= 1
    with pytest.raises(ValueError, match="do not spell their documents' bytes"):
        add_token_columns(table, tok, "v6", wrong)


def test_training_sample_is_bounded_seeded_and_nested(tmp_path):
    """Over its byte budget the tokenizer trains on a keyed-hash sample: about the budget, the same documents on
    every run and in any file order, a larger budget keeping every document of a smaller one, another seed
    another sample; under the budget, every candidate document."""
    import pyarrow.parquet as pq

    from cpp_data.stages.lib.tokenizer_training import candidate_bytes, training_texts

    rows = [{"text": f"int f{i}() {{ return {i}; }}\n" * (1 + i % 7), "doc_id": f"d{i}", "source_repo": f"r{i % 3}",
             "source_path": f"src/f{i}.cc", "source_commit": "c0"} for i in range(3000)]
    for r in rows:
        r["size_bytes"] = len(r["text"].encode())
    files = [tmp_path / "train-00000.parquet", tmp_path / "train-00001.parquet"]
    pq.write_table(pa.Table.from_pylist(rows[:1500]), files[0])
    pq.write_table(pa.Table.from_pylist(rows[1500:]), files[1])
    n, total = candidate_bytes(files, 0.05)
    assert 2700 < n < 3000 and total < sum(r["size_bytes"] for r in rows)  # the held-out files are no candidates

    def sample(budget: int, seed: int = 42, order=files) -> set[str]:
        taken: list = []
        texts = list(training_texts(order, 0.05, min(1.0, budget / total), seed, taken))
        assert len(texts) == len(taken)
        return {d for d, _ in taken}

    small, large = sample(total // 5), sample(total // 2)
    assert small < large  # nested
    got = sum(r["size_bytes"] for r in rows if r["doc_id"] in small)
    assert 0.8 * total / 5 < got < 1.2 * total / 5  # about the budget
    assert sample(total // 5, order=files[::-1]) == small  # whatever the order
    assert sample(total // 5, seed=7) != small
    assert len(sample(total)) == n  # under the budget: everything
