"""A tokenizer directory on disk: what transformers, megatron-core and our own stages load.

Layout (all deterministic bytes, no timestamps):
  tokenizer.json           the HF `tokenizers` model (pretty JSON)
  tokenizer_config.json    for transformers.PreTrainedTokenizerFast and megatron-core's HuggingFace path:
                           bos/eos/pad/unk and the other specials, model_max_length
  special_tokens_map.json  the same roles, as transformers writes them
  tokenizer_metadata.json  megatron-core's MegatronTokenizer: {"library": "huggingface", ...}
  cpp_tokenizer.json       ours: band revision, vocab size, the ids of every role
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from cpp_data.pipeline.foundation.fsutil import atomic_write_text
from cpp_data.tokenizer.band import Band

TOKENIZER_JSON = "tokenizer.json"


def _json(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def save_tokenizer(tok: Tokenizer, band: Band, directory: Path, max_length: int = 1_000_000) -> Path:
    """Write the tokenizer directory; returns the path of tokenizer.json."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(directory / TOKENIZER_JSON, tok.to_str(pretty=True) + "\n")
    roles = {f"{r}_token": band.roles[r] for r in ("bos", "eos", "pad", "unk")}
    extra = [t for r, t in sorted(band.roles.items()) if r not in ("bos", "eos", "pad", "unk")]
    atomic_write_text(directory / "tokenizer_config.json", _json({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
        "clean_up_tokenization_spaces": False, "add_bos_token": False, "add_eos_token": False,
        "additional_special_tokens": extra, **roles}))
    atomic_write_text(directory / "special_tokens_map.json", _json({**roles, "additional_special_tokens": extra}))
    atomic_write_text(directory / "tokenizer_metadata.json", _json({"library": "huggingface"}))
    atomic_write_text(directory / "cpp_tokenizer.json", _json({
        "band_revision": band.revision, "vocab_size": tok.get_vocab_size(),
        "roles": {r: band.role_id(r) for r in band.roles}, "first_band_id": len(band.specials) + 256,
        "band_entries": len(band.entries)}))
    return directory / TOKENIZER_JSON


def load_tokenizer(directory_or_file: Path) -> Tokenizer:
    """Load for encoding documents: special-token strings inside a document are encoded as plain text (so a
    file that happens to contain `<|eos|>` still round-trips); specials are only ever inserted by id."""
    path = Path(directory_or_file)
    if path.is_dir():
        path = path / TOKENIZER_JSON
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ValueError(f"{path}: not a loadable tokenizer ({exc})") from None
    tok.encode_special_tokens = True
    return tok


def tokenizer_info(directory: Path) -> dict:
    """Our metadata of a saved tokenizer (vocab size, role ids); ValueError naming the file if absent."""
    path = Path(directory) / "cpp_tokenizer.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: missing; {directory} is not a cpp-data tokenizer directory") from None
