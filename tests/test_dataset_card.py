"""The dataset card (issue 17, point 4): a build's README.md lets the Hugging Face datasets library load the
documents (the default config), each lane's rows and each lane's packed rows by the build's path alone, with the
splits and row counts the manifest records; `cpp_data.load_build` gives the same from the manifest; a copied
build still loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

datasets = pytest.importorskip("datasets")
yaml = pytest.importorskip("yaml")


def _rows(manifest: dict, folder: str, split: str) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(f).num_rows for f in manifest["_dir"].glob(f"{folder}/{split}*.parquet"))


@pytest.fixture(scope="module")
def copied_build(reference_build: Path, tmp_path_factory) -> Path:
    """The reference build copied elsewhere: the card's paths are relative, so the copy must load alone."""
    dest = tmp_path_factory.mktemp("card") / "build"
    shutil.copytree(reference_build, dest)
    return dest


def test_card_front_matter_names_every_config(reference_build: Path):
    text = (reference_build / "README.md").read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    configs = {c["config_name"]: c for c in front["configs"]}
    lanes = ("4k", "16k", "64k")
    assert set(configs) == {"documents", *(f"lane_{x}" for x in lanes), *(f"packed_{x}" for x in lanes)}
    assert configs["documents"].get("default") is True
    assert configs["packed_4k"]["data_files"][0]["path"] == "packed/4k/train*.parquet"
    for c in configs.values():
        assert {f["split"] for f in c["data_files"]} == {"train", "validation"}
        assert all(not f["path"].startswith("/") for f in c["data_files"])
    assert front["license"] and front["size_categories"]
    manifest = json.loads((reference_build / "manifest.json").read_text())
    card = next(f for f in manifest["files"] if f["path"] == "README.md")
    assert card["kind"] == "card"
    for source in manifest["sources"]:  # the body names every source and its pin
        assert source["name"] in text and source["commit"][:16] in text


def test_datasets_loads_documents_and_packed_rows_by_path(copied_build: Path):
    manifest = json.loads((copied_build / "manifest.json").read_text())
    manifest["_dir"] = copied_build
    docs = datasets.load_dataset(str(copied_build))
    assert docs["train"].num_rows == _rows(manifest, "shards", "train") == manifest["totals"]["train_documents"]
    assert docs["validation"].num_rows == manifest["totals"]["valid_documents"]
    assert "text" in docs["train"].column_names and "source_repo" in docs["train"].column_names
    chunks = datasets.load_dataset(str(copied_build), "lane_4k")
    assert chunks["train"].num_rows == _rows(manifest, "lanes/4k", "train") >= docs["train"].num_rows
    assert {"chunk_index", "context_length", "token_ids"} <= set(chunks["train"].column_names)
    packed = datasets.load_dataset(str(copied_build), "packed_16k")
    assert packed["train"].num_rows == _rows(manifest, "packed/16k", "train") > 0
    assert "input_ids" in packed["train"].column_names
    assert len(packed["train"][0]["input_ids"]) == 16384


def test_load_build_reads_an_output_directory(reference_build: Path):
    import cpp_data

    out = reference_build.parent.parent  # OUT: its latest build
    docs = cpp_data.load_build(out)
    manifest = json.loads((reference_build / "manifest.json").read_text())
    assert docs["train"].num_rows == manifest["totals"]["train_documents"]
    packed = cpp_data.load_build(reference_build, "packed_4k", split="validation")
    assert packed.num_rows >= 1
    from cpp_data.pipeline.foundation.errors import BadInput

    with pytest.raises(BadInput, match="no config 'tokens'; this build has documents, lane_16k"):
        cpp_data.load_build(reference_build, "tokens")


def test_card_license_list_names_every_term_of_every_expression():
    """The card's `license:` had left out every expression of several terms, so a build whose one MIT file was
    `(GPL-3.0-or-later OR LicenseRef-...) AND MIT` listed no MIT; keys off the SPDX list become the Hub's other."""
    from cpp_data.schemas.dataset_card import license_keys

    assert license_keys("(GPL-3.0-or-later OR LicenseRef-scancode-commercial-license) AND MIT") == \
        ["GPL-3.0-or-later", "MIT"]
    assert license_keys("Apache-2.0 WITH LLVM-exception") == ["Apache-2.0"]
    assert license_keys("NOASSERTION") == [] and license_keys("LicenseRef-scancode-public-domain") == []
