"""The code-aware pre-tokenizer: where BPE may merge, and where it may not.

Byte-level BPE only merges inside a pre-token, so the pre-token pattern decides what can ever become one token.
GPT-2's pattern (the generic baseline) cuts `std::vector<` into `std`, `::`, `vector`, `<`, and keeps a line's
indentation apart from its first word. Ours keeps together:
- a line break, its indentation and the first piece of the line (`\\n    return`),
- a qualified name and an opening `<` (`std::vector<`), so `std::vector<std::string>` can be 3 tokens,
- a preprocessor directive (`#include`, `#  define`),
- a number with its suffixes and digit separators (`0xDEADBEEF`, `1'000'000ull`, `1.0f`),
- a run of punctuation (`);`, `->`),
each with at most one leading space, as GPT-2 does for words. Every character falls in some piece (the split is
"isolated": unmatched text stays a piece of its own), and the byte-level step maps bytes one to one, so
decode(encode(x)) == x for any text. On C++ it gives more bytes per token than GPT-2's pattern at the same
vocabulary size (bench/results/tokenizer_eval-debian.json).
"""

from __future__ import annotations

import array
import functools
import re

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

CODE_PATTERN = (
    r"(?:\r?\n[ \t]*)?(?:"
    r"#[ \t]*[A-Za-z_]\w*"
    r"| ?(?:[\p{L}_][\p{L}\p{N}_]*::)*~?[\p{L}_][\p{L}\p{N}_]*<?"
    r"| ?\p{N}[\p{L}\p{N}_.']*"
    r"| ?[^\s\p{L}\p{N}_]+"
    r")"
    r"|\s+(?!\S)|\s+"
)


def code_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CODE_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def empty_code_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE with the code pre-tokenizer and the byte-level decoder."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = code_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    return tok


@functools.cache
def _code_split() -> pre_tokenizers.Split:
    return pre_tokenizers.Split(Regex(CODE_PATTERN), behavior="isolated")


def pieces(text: str) -> list[str]:
    """The pre-tokens of `text` in plain text (for tests and for checking band entries)."""
    return [p for p, _ in _code_split().pre_tokenize_str(text)]


def piece_starts(text: str) -> list[int]:
    """The character offset where each pre-token of `text` starts: the places BPE never merges across."""
    return [a for _, (a, _) in _code_split().pre_tokenize_str(text)]


# A line break whose previous character is printable ASCII other than a space: no pre-token runs across it
# (see encoding_parts).
_CUT = re.compile(r"(?<=[!-~])(?=\r?\n)")


def encoding_parts(text: str, limit: int) -> list[str]:
    """`text` cut into consecutive parts of at most about `limit` characters, only where the pre-tokenizer
    always splits, so encoding the parts one by one gives exactly the ids of encoding `text` whole.

    Why: tokenizers holds several machine words per byte of an input while it encodes it (the alignments of its
    normalized strings), so one large header alone sets a process's peak, however small the batches around it.

    Where: just before a line break (`\n` or `\r\n`) that follows a printable ASCII character other than a
    space. No pre-token of CODE_PATTERN holds a line break after any other character (its alternatives
    take a line break only at their start, or in a run of whitespace), and every printable ASCII character
    falls in some alternative, so the match holding that character ends there and the next starts at the
    break; the pattern looks at nothing before a match, and cuts_keep_ids checks the rest for a tokenizer. A text
    without such a place, or with none within `limit` of the last cut, keeps a longer part (a minified line)."""
    if len(text) <= limit:
        return [text]
    parts, start, last = [], 0, 0
    for m in _CUT.finditer(text):
        at = m.start()
        if at - start > limit and last > start:  # the previous place kept the part under the limit
            parts.append(text[start:last])
            start = last
        last = at
    if len(text) - start > limit and last > start:
        parts.append(text[start:last])
        start = last
    parts.append(text[start:])
    return parts


PART_CHARS = 1 << 16  # a longer document is encoded in parts (encode_in_parts)


def encode_in_parts(tok: Tokenizer, texts: list[str], part_chars: int | None = PART_CHARS) -> list[list[int]]:
    """Each text's ids (no special tokens added), the ids `tok.encode(text, add_special_tokens=False)` gives.

    ASCII texts go through the tokenizer's piece memo where it has one (PieceMemo: its pre-tokens split here
    and each distinct one encoded once, about a third less CPU than tokenizers' own encode). The others are
    encoded with `encode_batch_fast`, which skips character offsets (faster for the export's ids), an
    ASCII one by the tokenizer's ASCII twin (`ascii_twin`). A text longer than `part_chars` goes in
    encoding_parts' parts, either way (through tokenizers when `tok` allows it: cuts_keep_ids, asked once per
    tokenizer), its parts' ids joined: the ids of the whole text, without the memory for the whole input at once.
    `part_chars` None: every text whole."""
    memo = _piece_memo_cached(tok)
    if memo is None:
        return _encode_in_parts(tok, texts, part_chars)
    out: list[list[int] | None] = [memo.encode_in_parts(t, part_chars) if memo.takes(t) else None for t in texts]
    rest = [k for k, ids in enumerate(out) if ids is None]
    if rest:
        for k, ids in zip(rest, _encode_in_parts(tok, [texts[k] for k in rest], part_chars)):
            out[k] = ids
    return [ids if ids is not None else [] for ids in out]


def _encode_in_parts(tok: Tokenizer, texts: list[str], part_chars: int | None) -> list[list[int]]:
    """encode_in_parts through tokenizers alone: the long texts cut where cuts_keep_ids allows."""
    if not (part_chars and any(len(t) > part_chars for t in texts) and _cuts_keep_ids_cached(tok)):
        return _encode_batch(tok, texts)
    pieces, owner = [], []
    for k, text in enumerate(texts):
        cut = encoding_parts(text, part_chars)
        pieces += cut
        owner += [k] * len(cut)
    out: list[list[int]] = [[] for _ in texts]
    for k, ids in zip(owner, _encode_batch(tok, pieces)):
        out[k] += ids
    return out


# CODE_PATTERN as it reads ASCII text, for Python's `re`: \p{L} is [A-Za-z], \p{N} is [0-9], \w is [A-Za-z0-9_],
# and \s is Oniguruma's ASCII white space, spelled out (tab, line feed, vertical tab, form feed, carriage return,
# space), since Python's \s also takes the separators 0x1c-0x1f. Every ASCII character starts a match of some
# alternative (white space, a letter, digit or underscore, or any other character), so the matches cover the
# text with no gap, as the tokenizer's "isolated" Split does. tests/test_tokenizer.py holds the two splits equal.
_S = r"\t\n\x0b\x0c\r "
ASCII_CODE_PATTERN = (
    r"(?:\r?\n[ \t]*)?(?:"
    r"#[ \t]*[A-Za-z_][A-Za-z0-9_]*"
    r"| ?(?:[A-Za-z_][A-Za-z0-9_]*::)*~?[A-Za-z_][A-Za-z0-9_]*<?"
    r"| ?[0-9][A-Za-z0-9_.']*"
    rf"| ?[^{_S}A-Za-z0-9_]+"
    r")"
    rf"|[{_S}]+(?![^{_S}])|[{_S}]+"
)
_ASCII_SPLIT = re.compile(ASCII_CODE_PATTERN)

PIECE_MEMO_ENTRIES = 1 << 16  # distinct pre-tokens a memo keeps before it starts again (a few MB of memo; a
# larger memo encodes a build's training file no faster, a smaller one slower)


class PieceMemo:
    """The ids of ASCII texts through a tokenizer's ASCII twin, one pre-token at a time, each distinct pre-token
    encoded once by the twin's BPE model and remembered.

    Why: tokenizers spends about half of an encode on its own bookkeeping per pre-token (normalized strings
    with alignments, the split's offsets), whatever the model. C++ repeats its pre-tokens: a build's training
    file holds a few dozen pre-tokens for each distinct one. Splitting them here (Python's `re`) and asking the
    BPE model only for the distinct ones, token_columns' `add_token_columns` takes about a third less CPU than
    through the twin's `encode_batch_fast`, with the same columns. No library offers this: tokenizers has no call
    that encodes pre-tokens it is given, beyond `Model.tokenize` for one.

    Same ids: BPE merges inside a pre-token only, and the twin's encode is the model's tokens of each piece of
    its Split, so pieces equal to the Split's give equal ids; ASCII_CODE_PATTERN is CODE_PATTERN for ASCII.
    A text holding an added token's literal is not taken (`takes`), since tokenizers matches those before it
    splits. The memo is bounded (PIECE_MEMO_ENTRIES; cleared when full), and what it holds never changes an id."""

    def __init__(self, twin: Tokenizer, entries: int = PIECE_MEMO_ENTRIES):
        self._tokenize = twin.model.tokenize
        self._ids: dict[str, bytes] = {}  # a pre-token's ids as int32 bytes: a third of a list's memory
        self._entries = entries
        self._added = tuple(t.content for t in twin.get_added_tokens_decoder().values() if t.content)
        self._heads = tuple({a[:2] for a in self._added})  # one search per distinct head, most texts stop there

    def takes(self, text: str) -> bool:
        """Whether `text` is ASCII and holds no added token's literal."""
        return text.isascii() and not (any(h in text for h in self._heads) and any(a in text for a in self._added))

    def encode(self, text: str) -> list[int]:
        """`text`'s ids (a text `takes` accepts)."""
        pieces = _ASCII_SPLIT.findall(text)
        memo = self._ids
        new = set(pieces).difference(memo)
        if new:
            if len(memo) + len(new) > self._entries:
                memo.clear()
                new = set(pieces)
            tokenize = self._tokenize
            for piece in new:
                memo[piece] = array.array("i", [t.id for t in tokenize(piece)]).tobytes()
        return array.array("i", b"".join(map(memo.__getitem__, pieces))).tolist()

    def encode_in_parts(self, text: str, part_chars: int | None) -> list[int]:
        """`encode`, a text longer than `part_chars` one encoding_parts part at a time (the same pre-tokens:
        the cuts fall where every split ends one), so that its list of pre-tokens is a part's, not the whole
        text's: hundreds of thousands of strings for one large Boost header."""
        if not part_chars or len(text) <= part_chars:
            return self.encode(text)
        ids: list[int] = []
        for part in encoding_parts(text, part_chars):
            ids += self.encode(part)
        return ids


@functools.lru_cache(maxsize=2)  # keyed by the object, like the twin it holds
def _piece_memo_cached(tok: Tokenizer) -> PieceMemo | None:
    twin = _ascii_twin_cached(tok)
    return PieceMemo(twin) if twin is not None else None


def _encode_batch(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """`tok`'s ids of each text, the ASCII ones encoded by its twin (when it has one), in the texts' order."""
    twin = _ascii_twin_cached(tok)
    ascii_ = [t.isascii() for t in texts] if twin is not None else []  # O(1) per str in CPython
    if not any(ascii_):
        return [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]
    assert twin is not None  # some text is ASCII, so the twin exists
    if all(ascii_):
        return [e.ids for e in twin.encode_batch_fast(texts, add_special_tokens=False)]
    fast = iter(twin.encode_batch_fast([t for t, a in zip(texts, ascii_) if a], add_special_tokens=False))
    slow = iter(tok.encode_batch_fast([t for t, a in zip(texts, ascii_) if not a], add_special_tokens=False))
    return [next(fast if a else slow).ids for a in ascii_]


def ascii_twin(tok: Tokenizer) -> Tokenizer | None:
    """A tokenizer that gives ASCII text exactly `tok`'s ids, without the byte-level step; None where `tok` is
    not a byte-level BPE over this module's pre-tokenizer (no normalizer, no dropout or affixes).

    Why: tokenizers' ByteLevel pre-tokenizer rewrites every pre-token into byte symbols with per-character
    alignments, and that takes a fifth to a third of encoding C++ (bench/tokenizer_throughput.py, identical ids
    either way: bench/results/tokenizer_throughput-2x-twin.json). On ASCII text the byte-level step is a fixed
    one-to-one map of characters (byte b -> byte_symbols()[b]), so the same BPE with the symbols of ASCII bytes
    renamed back to the characters themselves, after the same Split, makes the same merges and emits the same
    ids. The renaming is one character for another (the symbols of non-ASCII bytes stay), so every entry keeps
    its id and every merge its rank; entries and merges holding a non-ASCII byte's symbol are never reached by
    ASCII input. It is done on tokenizer.json's text (each symbol, two UTF-8 bytes that never occur inside
    another character, -> the character's JSON escape), not on parsed Python objects: parsing the vocabulary and
    its merges would raise an encoding process's peak by about twice the twin's own size, where the text
    rewrite costs about the twin's size, once per process. Added (special) tokens are matched on the raw text
    before pre-tokenization by both. No library offers this: tokenizers has no option to run byte-level BPE
    without the per-piece rewrite."""
    model = tok.model
    if (tok.normalizer is not None or not _is_code_pre_tokenizer(tok) or not isinstance(model, models.BPE)
            or model.dropout is not None or model.byte_fallback or model.continuing_subword_prefix
            or model.end_of_word_suffix
            or any(_RENAMED.intersection(t.content) for t in tok.get_added_tokens_decoder().values())):
        return None
    text = tok.to_str().encode("utf-8")
    for symbol, escaped in _renaming():  # bytes.replace: about twice as fast as str.translate here
        text = text.replace(symbol, escaped)
    try:
        twin = Tokenizer.from_str(text.decode("utf-8"))
    except Exception:  # a vocabulary with raw control characters or spaces could collide with a renamed entry
        return None
    if twin.get_vocab_size(with_added_tokens=False) != tok.get_vocab_size(with_added_tokens=False):
        return None  # the same collision, resolved by tokenizers keeping one of the two
    twin.pre_tokenizer = _code_split()  # the Split alone
    twin.encode_special_tokens = tok.encode_special_tokens  # a setting its JSON does not carry
    return twin


_RENAMED = frozenset(chr(256 + k) for k in range(34))  # the byte symbols of ASCII bytes 0-32 and 127


@functools.cache
def _renaming() -> tuple[tuple[bytes, bytes], ...]:
    """(symbol, character) in UTF-8 for each ASCII byte that byte-level BPE renames, the character as it is
    written inside a JSON string."""
    import json

    pairs = tuple((sym.encode("utf-8"), json.dumps(chr(b))[1:-1].encode("ascii"))
                  for b, sym in enumerate(byte_symbols()) if b < 128 and sym != chr(b))
    if {sym.decode("utf-8") for sym, _ in pairs} != _RENAMED:
        raise AssertionError("byte_symbols() no longer renames exactly ASCII bytes 0-32 and 127")
    return pairs


def _is_code_pre_tokenizer(tok: Tokenizer) -> bool:
    """Whether `tok`'s pre-tokenizer is this module's, compared as the pre-tokenizers' own JSON."""
    import json

    return tok.pre_tokenizer is not None and \
        json.loads(tok.pre_tokenizer.__getstate__()) == json.loads(empty_code_tokenizer().pre_tokenizer.__getstate__())


@functools.lru_cache(maxsize=2)  # keyed by the object, like _cuts_keep_ids_cached; a twin is tens of MB, so few
def _ascii_twin_cached(tok: Tokenizer) -> Tokenizer | None:
    return ascii_twin(tok)


@functools.lru_cache(maxsize=8)
def _cuts_keep_ids_cached(tok: Tokenizer) -> bool:  # keyed by the object: a worker loads its tokenizer once
    return cuts_keep_ids(tok)


def cuts_keep_ids(tok: Tokenizer) -> bool:
    """Whether encoding_parts' cuts give `tok` the ids of the whole text: its pre-tokenizer is this module's
    (a tokenizer trained by another revision could split otherwise) and none of its added tokens holds a line
    break (one could straddle a cut)."""
    # the pre-tokenizers' own JSON (their pickled state), not the whole tokenizer's: serializing and parsing the
    # whole vocabulary would cost every process that encodes a pass over tens of thousands of entries
    return _is_code_pre_tokenizer(tok) and not any("\n" in t.content or "\r" in t.content
                                                   for t in tok.get_added_tokens_decoder().values())


def byte_symbols() -> list[str]:
    """The 256 symbols byte-level BPE uses for bytes 0..255, in byte order (GPT-2's printable remapping).

    tokenizers exposes the alphabet only as an unordered set; the byte order is what fixes their ids."""
    return list(_byte_symbols())


@functools.cache
def _byte_symbols() -> tuple[str, ...]:  # made once: training spells every band entry with it
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return tuple(table[b] for b in range(256))


def to_byte_symbols(text: str) -> str:
    """`text` as byte-level BPE spells it in its vocabulary (`" return"` -> `"Ġreturn"`)."""
    sym = _byte_symbols()
    return "".join(sym[b] for b in text.encode("utf-8"))
