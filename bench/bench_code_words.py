"""The code-aware word tokenizer given to datatrove's MinHash in bench/dedup_vs_datatrove.py: our C++ lexer,
so both sides shingle the same tokens (datatrove's default needs spaCy and drops punctuation)."""

from datatrove.utils.word_tokenizers import WordTokenizer

from cpp_data.stages.lib.shingles import strip_license_header, tokens


class CodeWordTokenizer(WordTokenizer):
    def word_tokenize(self, text: str) -> list[str]:
        return tokens(strip_license_header(text))

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [(0, len(text))]
