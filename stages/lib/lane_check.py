"""The lanes' guarantee, checked against the whole documents (verify's `lanes` gate and the tests): every
document is in its lane once, a chunked document's bodies put back in chunk order are its text byte for byte,
a group's text is its files' texts under their header lines, no row is over the lane's budget, and the first
rows' token_ids are their text encoded."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from cpp_data.stages.lib.lane_rows import file_header
from cpp_data.tokenizer.files import load_tokenizer
from cpp_data.tokenizer.pretokenizer import encode_in_parts

_LANE_COLUMNS = ["doc_id", "source_repo", "text", "token_ids", "chunk_index", "chunk_count", "chunk_kind",
                 "context_chars"]


class WholeDocuments:
    """The build's whole documents: their texts, found by doc_id or by (repository, header path)."""

    def __init__(self, files: list[Path]):
        self.texts: list[str] = []
        self.by_id: dict[str, list[int]] = defaultdict(list)
        self.by_path: dict[tuple[str, str], list[int]] = defaultdict(list)
        for f in files:
            t = pq.read_table(f, columns=["doc_id", "source_repo", "source_path", "text"])
            for doc_id, repo, path, text in zip(*(t.column(c).to_pylist() for c in t.column_names)):
                k = len(self.texts)
                self.texts.append(text)
                self.by_id[doc_id].append(k)
                self.by_path[(repo, file_header(path))].append(k)
        self.seen = [False] * len(self.texts)

    def mark(self, k: int, where: str) -> None:
        if self.seen[k]:
            raise ValueError(f"{where}: a document is in the lane twice")
        self.seen[k] = True


def _group_members(docs: WholeDocuments, repo: str, text: str, where: str) -> None:
    """Walk a group's text: header line, then one of the documents of that path, then the next header."""
    pos = 0
    while pos < len(text):
        end = text.find("\n", pos) + 1
        header = text[pos:end]
        if not header.startswith("// File: ") or end == 0:
            raise ValueError(f"{where}: no file header at character {pos}")
        match = next((k for k in docs.by_path.get((repo, header), [])
                      if not docs.seen[k] and text.startswith(docs.texts[k], end)), None)
        if match is None:
            raise ValueError(f"{where}: the text after {header.strip()!r} is no document of that path")
        docs.mark(match, where)
        pos = end + len(docs.texts[match])
        if not docs.texts[match].endswith("\n"):
            if text[pos:pos + 1] != "\n":
                raise ValueError(f"{where}: no line break after {header.strip()!r}'s file")
            pos += 1


def check_lane(whole: list[Path], lane_files: list[Path], budget: int, tokenizer: Path, first: int) -> str:
    """Check one lane (see the module docstring); ValueError names the file and the problem."""
    docs = WholeDocuments(whole)
    tok = load_tokenizer(tokenizer)
    chunks: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    rows = encoded = 0
    for f in lane_files:
        t = pq.read_table(f, columns=_LANE_COLUMNS)
        lengths = pc.list_value_length(t.column("token_ids")).to_pylist()
        cols = {c: t.column(c).to_pylist() for c in _LANE_COLUMNS if c != "token_ids"}
        for r in range(t.num_rows):
            where = f"{f.name} row {r}"
            if lengths[r] > budget:
                raise ValueError(f"{where}: {lengths[r]:,} tokens, over the lane's budget of {budget:,}")
            if cols["chunk_kind"][r] == "files":
                _group_members(docs, cols["source_repo"][r], cols["text"][r], where)
            else:
                chunks[cols["doc_id"][r]].append((cols["chunk_index"][r], cols["chunk_count"][r],
                                                  cols["text"][r][cols["context_chars"][r]:]))
            if r < first:
                if encode_in_parts(tok, [cols["text"][r]])[0] != t.column("token_ids")[r].as_py():
                    raise ValueError(f"{where}: token_ids are not its text encoded")
                encoded += 1
            rows += 1
    _check_chunks(docs, chunks)
    missing = docs.seen.count(False)
    if missing:
        raise ValueError(f"{missing} document(s) are in no row of the lane")
    return f"{len(docs.texts):,} documents in {rows:,} rows, exact ({encoded} re-encoded)"


def _check_chunks(docs: WholeDocuments, chunks: dict[str, list[tuple[int, int, str]]]) -> None:
    for doc_id, parts in chunks.items():
        owners = docs.by_id.get(doc_id, [])
        if len(owners) != 1:
            raise ValueError(f"chunks of doc_id {doc_id}: {len(owners)} whole documents have that id")
        parts.sort()
        count = parts[0][1]
        if [p[0] for p in parts] != list(range(count)) or any(p[1] != count for p in parts):
            raise ValueError(f"doc_id {doc_id}: chunk indices {[p[0] for p in parts]} of {count}")
        if "".join(p[2] for p in parts) != docs.texts[owners[0]]:
            raise ValueError(f"doc_id {doc_id}: its chunks' bodies do not put its text back together")
        docs.mark(owners[0], f"doc_id {doc_id}")
