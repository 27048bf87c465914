"""Train the hybrid C++ tokenizer: the fixed band at pinned ids, learned byte-level BPE for the rest.

HF `tokenizers` does the learning (BpeTrainer over the code pre-tokenizer). What it has no option for, and this
module adds, is the id layout of docs/DESIGN.md section 8: specials at 0..S-1, the 256 byte symbols next, then every
band entry at the id the band file gives it, whatever the corpus, so ids never move between revisions; learned
tokens fill the remaining ids in merge order up to `vocab_size` exactly.

Band entries are ordinary vocabulary entries, not added tokens, so they merge with their neighbours like any
learned token. A band entry the trainer learned keeps the trainer's merges (only its id moves). One it did not
learn is made reachable by a chain of merges appended after all learned merges (lowest priority: they only join
what the learned merges left apart, so they never split a learned token); the chain's intermediate pieces take
ids from the learned region. Learned merges are cut from the tail to make room.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from tokenizers import AddedToken, Tokenizer, models, trainers
from tokenizers import pre_tokenizers as pt

from cpp_data.pipeline.foundation.allocator import give_back_freed_memory
from cpp_data.tokenizer.band import Band
from cpp_data.tokenizer.pretokenizer import byte_symbols, empty_code_tokenizer, pieces, to_byte_symbols


def _bpe(vocab: dict[str, int], merges: list[tuple[str, str]]) -> models.BPE:
    return models.BPE(vocab=vocab, merges=merges)


def smallest_vocab_size(band: Band) -> int:
    """The smallest vocab_size this band composes into: its fixed ids plus the merge chains that make every band
    entry one token when no learned merge helps: 2,874 for the bundled band, whose specials, 256 byte symbols and
    entries take 988 ids. Any size from here up composes: `_compose` can always drop every learned merge."""
    return len(band.specials) + len(_reach_entries(band, [])[0])


def _reach_entries(band: Band, merges: list[tuple[str, str]]) -> tuple[dict[str, int], list]:
    """Vocabulary (ids from len(specials)) and merges: the fixed ids, `merges` with their products, then the
    merge chains that make each band entry a single token."""
    s = len(band.specials)
    fixed = byte_symbols() + [to_byte_symbols(e) for e in band.entries]
    vocab = {t: s + i for i, t in enumerate(fixed)}
    used = list(merges)
    for a, b in used:
        vocab.setdefault(a + b, s + len(vocab))
    chains: list[tuple[str, str]] = []
    chain_set: set[tuple[str, str]] = set()
    for _round in range(8):  # a chain of one entry can reroute another's: repeat until all are reached
        model = _bpe(vocab, used + chains)
        missing = [e for e in fixed[256:] if len(model.tokenize(e)) != 1]
        if not missing:
            break
        for entry in missing:
            parts = [t.value for t in model.tokenize(entry)]
            acc = parts[0]
            for p in parts[1:]:
                if (acc, p) not in chain_set:
                    chain_set.add((acc, p))
                    chains.append((acc, p))
                acc += p
                vocab.setdefault(acc, s + len(vocab))
    else:
        raise ValueError(f"band entries stay unreachable: {missing[:5]}")
    if len(set(vocab.values())) != len(vocab):
        raise AssertionError("tokenizer ids collide")
    return vocab, used + chains


def _compose(band: Band, merges: list[tuple[str, str]], vocab_size: int) -> tuple[dict[str, int], list]:
    """Vocabulary (ids from len(specials)) and merges with the band at fixed ids and `vocab_size` entries: as
    many learned merges as fit beside the band and its chains, in the trainer's order."""
    if (size := smallest_vocab_size(band)) > vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the fixed band with its merge chains "
                         f"({size} ids)")
    s, keep = len(band.specials), len(merges)
    for _ in range(32):
        vocab, used = _reach_entries(band, merges[:keep])
        overflow = s + len(vocab) - vocab_size
        if overflow <= 0:
            return vocab, used
        keep = max(keep - overflow, 0)  # with no learned merge the band fits (smallest_vocab_size)
    raise ValueError("could not fit the band into the vocabulary")


PAD_PREFIX = "<|unused_"


def train_cpp_tokenizer(texts: Iterable[str], band: Band, vocab_size: int, length: int | None = None,
                        min_frequency: int = 2, show_progress: bool = False,
                        cap_to_corpus: bool = False) -> Tokenizer:
    """Train on `texts` (streamed once) and return the composed tokenizer of exactly `vocab_size` entries.

    A corpus too small to learn `vocab_size` entries leaves the vocabulary short; the rest is padding
    (`<|unused_N|>`, never produced by encoding). With `cap_to_corpus`, the size is instead what the corpus
    filled, rounded up to a multiple of 128 (and never above `vocab_size`), so a small build does not carry
    thousands of dead embedding rows; a corpus that fills `vocab_size` keeps it.
    Deterministic: the same texts in the same order give the same tokenizer.json bytes."""
    tok = empty_code_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(band.specials),
        initial_alphabet=pt.ByteLevel.alphabet(), show_progress=show_progress)
    tok.train_from_iterator(texts, trainer=trainer, length=length)
    trained = json.loads(tok.to_str())
    # The trainer keeps every pre-token it counted for as long as it lives, and the trained tokenizer is in
    # `trained` from here on: both go before the composition builds its Python dicts and lists, and the freed
    # heap goes back to the kernel (the trainer's pre-tokens are most of the process's memory at this point).
    del trainer, tok
    give_back_freed_memory()
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in trained["model"]["merges"]]
    vocab, all_merges = _compose(band, merges, vocab_size)
    # a tiny corpus can leave the vocabulary short: pad with unused entries so the size is exact
    n = len(band.specials) + len(vocab)
    if cap_to_corpus and n < vocab_size:
        vocab_size = min(vocab_size, -(-n // 128) * 128)
    full = {t: i for i, t in enumerate(band.specials)} | vocab
    full |= {f"{PAD_PREFIX}{i}|>": n + i for i in range(vocab_size - n)}
    final = empty_code_tokenizer()
    # ignore_merges: a pre-token that is itself a vocabulary entry is emitted whole, without running merges: the
    # same tokens, encoded faster (long code pre-tokens such as "\n    return" are mostly whole entries).
    final.model = models.BPE(vocab=full, merges=all_merges, ignore_merges=True)
    final.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in band.specials])
    return final


def padding_ids(tok: Tokenizer) -> int:
    """How many ids of `tok` are padding (`<|unused_N|>`): ids the corpus did not fill."""
    return sum(1 for t in tok.get_vocab() if t.startswith(PAD_PREFIX))


def train_generic_tokenizer(texts: Iterable[str], vocab_size: int, length: int | None = None) -> Tokenizer:
    """The baseline: byte-level BPE with GPT-2's pre-tokenizer and HF defaults, same vocabulary size."""
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(texts, vocab_size=vocab_size, length=length, show_progress=False)
    return tok._tokenizer


def check_band_pieces(band: Band) -> list[str]:
    """Band entries the pre-tokenizer never yields as one piece (they could never be used); should be empty."""
    return [e for e in band.entries if pieces(e) != [e]]


def iter_texts(tables: Iterator) -> Iterator[str]:
    for table in tables:
        yield from table.column("text").to_pylist()
