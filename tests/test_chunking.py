"""The chunker (stages/lib/chunking.py) on real code: files of six repositories beyond Debian's
(tests/fixtures/real_repos) and of the Debian trees the corpus is built from, at several budgets.

For every file and budget: the bodies put back together are the file byte for byte; every chunk's ids are
its text encoded by the tokenizer, within the budget; a chunk after a file's first carries the file's includes
(where there are any before it and the budget leaves room) in a context prefix that its context_tokens cover;
no cut falls inside a string or character literal unless the cut is forced (a literal longer than a chunk's
room).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cpp_data.stages.lib import syntax
from cpp_data.stages.lib.chunking import FileChunker, NoCutZones, TextOffsets
from cpp_data.stages.lib.token_mirror import token_byte_lengths
from cpp_data.tokenizer.band import load_band
from cpp_data.tokenizer.files import load_tokenizer, save_tokenizer
from cpp_data.tokenizer.pretokenizer import encode_in_parts
from cpp_data.tokenizer.train import train_cpp_tokenizer

REAL = Path(__file__).parent / "fixtures" / "real_repos"
SUFFIXES = (".h", ".cc", ".cpp", ".hpp", "span")
DEBIAN = [Path("/usr/include/nlohmann/detail/input/lexer.hpp"), Path("/usr/include/Poco/Net/HTTPRequest.h"),
          Path("/usr/src/googletest/googletest/src/gtest.cc"),
          Path("/usr/share/juce/modules/juce_core/text/juce_String.cpp"),
          Path("/usr/include/eigen3/Eigen/src/Core/Matrix.h")]


def real_files() -> list[Path]:
    return sorted(p for p in REAL.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    """A tokenizer of the build's kind (the code pre-tokenizer, the band), trained on the real files."""
    texts = [p.read_text() for p in real_files()]
    save_tokenizer(train_cpp_tokenizer(texts * 2, load_band(), 8192), load_band(), tmp_path_factory.mktemp("tok"))
    return load_tokenizer(tmp_path_factory.getbasetemp() / "tok0")


def _check(text: str, tok, budget: int, where: str) -> int:
    ids = encode_in_parts(tok, [text])[0]
    lengths = token_byte_lengths(tok)
    chunker = FileChunker(text, ids, tok, lengths)
    chunks = chunker.chunks(budget)
    assert "".join(c.body for c in chunks) == text, where
    at = TextOffsets(text, ids, lengths)
    zones = NoCutZones(syntax.parse(at.src).root_node, at) if len(chunks) > 1 else None
    found = re.search(r"^#include", text, re.M)  # the first include at the start of a line
    first_include = found.start() if found else -1
    for k, c in enumerate(chunks):
        assert len(c.ids) <= budget, (where, k, len(c.ids))
        assert c.ids == encode_in_parts(tok, [c.text])[0], (where, k)
        assert (c.context == "") == (k == 0) or c.context == "", (where, k)
        if k and 0 <= first_include < c.start and budget >= 4092:  # a smaller cap may keep only the openers
            assert "#include" in c.context, (where, k)
        if c.context:
            assert 0 < c.context_tokens <= len(c.ids) and c.context_tokens <= int(0.25 * budget)
        if k and c.level != "forced" and chunks[k - 1].level != "forced":
            assert not NoCutZones.inside(zones.literals, c.start), (where, k, c.start)
    return len(chunks)


@pytest.mark.parametrize("budget", [128, 512, 4092])
def test_real_files_come_back_whole_within_budget(tok, budget):
    files = real_files() + [p for p in DEBIAN if p.is_file()]
    assert len(files) >= 14
    cut = sum(_check(p.read_text(encoding="utf-8"), tok, budget, f"{p}@{budget}") > 1 for p in files)
    assert cut >= (len(files) // 2 if budget < 4092 else 3)  # the large files are cut, at every budget


def test_a_fitting_file_is_one_chunk_without_a_parse(tok):
    text = "int add(int a, int b) { return a + b; }\n"
    ids = encode_in_parts(tok, [text])[0]
    [c] = FileChunker(text, ids, tok).chunks(4092)
    assert (c.kind, c.body, c.context, c.ids, c.level) == ("file", text, "", ids, "end")


def test_cuts_prefer_declarations_and_name_what_they_hold(tok):
    funcs = "".join(f"int f{i}(int x) {{\n  int y = x * {i};\n  return y + {i};\n}}\n\n" for i in range(40))
    text = '#include <vector>\n\nnamespace ns {\n\n' + funcs + "}  // namespace ns\n"
    chunks = FileChunker(text, encode_in_parts(tok, [text])[0], tok).chunks(128)
    assert len(chunks) > 3
    assert all(c.level in ("declaration", "end") for c in chunks), [c.level for c in chunks]
    later = chunks[1:]
    assert all(c.context.startswith("#include <vector>") and "namespace ns {" in c.context for c in later)
    assert {c.kind for c in later} <= {"function", "namespace_part"} and any(c.name.startswith("ns::f")
                                                                            for c in later)


def test_a_function_longer_than_the_budget_is_cut_between_statements(tok):
    body = "".join(f"  total += values[{i}] * {i};\n" for i in range(200))
    text = f"int sum(const int* values) {{\n  int total = 0;\n{body}  return total;\n}}\n"
    chunks = FileChunker(text, encode_in_parts(tok, [text])[0], tok).chunks(256)
    assert len(chunks) > 3 and "".join(c.body for c in chunks) == text
    assert all(c.level in ("statement", "end") for c in chunks)
    assert all(c.context.startswith("int sum(const int* values) {") for c in chunks[1:])
    assert all(c.kind == "function_part" and c.name == "sum" for c in chunks[1:])


def test_a_literal_longer_than_a_chunk_is_the_only_forced_cut(tok):
    text = 'const char* kBlob = "' + "abcdefgh " * 400 + '";\nint after = 1;\n'
    chunks = FileChunker(text, encode_in_parts(tok, [text])[0], tok).chunks(128)
    assert "".join(c.body for c in chunks) == text and all(len(c.ids) <= 128 for c in chunks)
    assert {c.level for c in chunks} <= {"token", "forced", "end", "line"}


@pytest.mark.parametrize("text", [
    "",  # nothing
    "x" * 5000,  # one line, no spaces: only forced cuts
    "int a;\r\nint b;\r\n" * 300,  # CRLF line ends
    "/* " + "comment " * 2000 + "*/\n",  # one block comment
    "#define BIG(x) \\\n" + "  do_something(x); \\\n" * 300 + "  done()\n",  # a multi-line macro
    "}}}{{{ ((( int\n" * 200,  # unbalanced: tree-sitter's ERROR nodes
    "auto s = u8\"ünïcödé ☃ 𝔘\";\n" * 300,  # multi-byte characters, some split over two tokens
])
def test_hostile_texts_come_back_whole_within_budget(tok, text):
    assert _check(text, tok, 96, repr(text[:20])) >= (1 if len(text) < 100 else 2)


def test_a_budget_without_room_for_a_body_is_refused(tok):
    text = "int f();\n" * 200
    with pytest.raises(ValueError, match="leaves 48 for a body after a context of up to 16; give at least 64"):
        FileChunker(text, encode_in_parts(tok, [text])[0], tok).chunks(64)
