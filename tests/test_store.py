"""Builds in an object store (issue 61, point 1): `--out` with a URL is refused in one line; `cpp-data publish`
uploads a sealed build, reads every object back against the manifest and writes `_COMPLETE` last; validate,
show, diff and `cpp_data.load_build` read it back from the store; a damaged or unsealed prefix is refused. The
store is a real S3-compatible server (moto's server mode) started on localhost by these tests."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pytest
from conftest import provenance_build, run_bounded, run_cli

BUCKET = "cpp-data-test"


def _tiny_tree(root: Path) -> Path:
    """Six small MIT-tagged C++ files: a build of them takes seconds."""
    (root / "lib").mkdir(parents=True)
    for k in range(1, 7):
        (root / "lib" / f"f{k}.cc").write_text(
            f"// SPDX-License-Identifier: MIT\n#include <vector>\nint f{k}(int x) {{\n"
            f"  std::vector<int> v(x);\n  return static_cast<int>(v.size()) * {k};\n}}\n")
    return root


def _sources(tmp: Path) -> Path:
    tree = _tiny_tree(tmp / "tree")
    (tmp / "sources.toml").write_text(f'[[source]]\nname = "tiny"\nurl = "{tree}"\nlicense = "MIT"\n')
    return tmp / "sources.toml"


@pytest.fixture(scope="module")
def store():
    """(environment for the CLI, storage_options for fsspec) of a moto S3 server on a free localhost port."""
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is not installed (the test extra has it)")
    pytest.importorskip("s3fs", reason="s3fs is not installed (the test extra and the s3 extra have it)")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1"}
    options = {"key": "test", "secret": "test", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    import boto3  # moto's own dependency

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").create_bucket(Bucket=BUCKET)
    yield env, options
    server.stop()


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    """OUT of a provenance build (shards and ledger) of the tiny tree."""
    tmp = tmp_path_factory.mktemp("store-build")
    provenance_build(_sources(tmp), tmp / "out")
    return tmp / "out"


def _fs(options: dict):
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, **options)


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_url_for_out_is_refused_before_anything_runs(tmp_path: Path):
    """`--out s3://...` built into a local folder named `s3:`; now it is one line, exit 2, and nothing is made."""
    sources = _sources(tmp_path)
    for url in ("s3://bucket/prefix", "gs://bucket/prefix"):
        proc = run_cli("build", "--version", "v6", "--sources", str(sources), "--out", url, "--no-progress",
                       check=False, cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "publish" in _one_line(proc.stderr) and url in proc.stderr
    assert not (tmp_path / "s3:").exists() and not (tmp_path / "gs:").exists()


def test_unsupported_schemes_are_refused_in_one_line(tmp_path: Path):
    for args in (("validate", "ftp://host/out"), ("show", "gs://bucket/out"), ("publish", str(tmp_path), "gs://b/o"),
                 ("diff", "s3://bucket/out", "hdfs://host/out")):
        proc = run_cli(*args, check=False, cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "is not a store cpp-data reads or writes" in _one_line(proc.stderr)


def test_the_check_after_upload_names_each_object_that_differs(store):
    """What publish runs before it seals: every object read back, sizes and SHA-256 against the manifest."""
    import hashlib

    from cpp_data.schemas.store_objects import object_problems

    _, options = store
    fs = _fs(options)
    root = f"{BUCKET}/check/builds/b1"
    good, bad = b"kept bytes", b"other bytes"
    for rel, data in (("shards/a.parquet", good), ("shards/b.parquet", bad), ("stray.txt", b"x")):
        fs.pipe_file(f"{root}/{rel}", data)
    digest = hashlib.sha256(good).hexdigest()
    expected = {"shards/a.parquet": (len(good), digest), "shards/b.parquet": (len(bad), digest),
                "shards/c.parquet": (1, digest)}
    problems = object_problems(fs, root, expected)
    assert any(p.startswith("shards/b.parquet: SHA-256") for p in problems), problems
    assert "shards/c.parquet: missing" in problems and "stray.txt: in the store but not in the manifest" in problems
    assert not any(p.startswith("shards/a.parquet") for p in problems)


@pytest.mark.slow
def test_publish_then_read_back_from_the_store(store, out: Path):
    env, options = store
    url = f"s3://{BUCKET}/team"
    build = next(p for p in (out / "builds").iterdir() if (p / "_COMPLETE").is_file())
    proc = run_cli("publish", str(out), url, env=env)
    assert "each read back and checked" in proc.stdout, proc.stdout
    fs = _fs(options)
    remote = f"{BUCKET}/team/builds/{build.name}"
    local_files = sorted(str(p.relative_to(build)) for p in build.rglob("*") if p.is_file())
    assert sorted(p[len(remote) + 1:] for p in fs.find(remote)) == local_files
    assert fs.cat_file(f"{BUCKET}/team/builds/LATEST").decode().strip() == build.name
    assert fs.cat_file(f"{remote}/manifest.json") == (build / "manifest.json").read_bytes()
    assert f"builds/{build.name}/shards/" in fs.cat_file(f"{BUCKET}/team/README.md").decode()

    again = run_cli("publish", str(out), url, check=False, env=env)
    assert again.returncode == 3 and "already published" in again.stdout, again.stdout + again.stderr

    proc = run_cli("validate", url, env=env)
    assert proc.stdout.startswith(f"ok: {url}/builds/{build.name}"), proc.stdout
    proc = run_cli("show", url, "-n", "1", "--json", env=env)
    assert json.loads(proc.stdout)[0]["source_path"].startswith("lib/f")
    proc = run_cli("diff", url, str(build), "--json", env=env)
    assert json.loads(proc.stdout)["documents"]["unchanged"] == 6

    import cpp_data

    totals = json.loads((build / "manifest.json").read_text())["totals"]
    docs = cpp_data.load_build(url, storage_options=options)
    assert docs["train"].num_rows == totals["train_documents"]
    arrow = cpp_data.load_build(f"{url}/builds/LATEST", split="train", storage_options=options, format="arrow")
    assert arrow.count_rows() == totals["train_documents"]
    datasets = pytest.importorskip("datasets")
    shards = datasets.load_dataset("parquet", data_files=f"s3://{remote}/shards/train-*.parquet",
                                   storage_options=dict(options), split="train")  # datasets adds keys to it
    assert shards.num_rows == totals["train_documents"]


@pytest.mark.slow
def test_a_damaged_or_unsealed_prefix_is_refused(store, out: Path, tmp_path: Path):
    env, options = store
    url = f"s3://{BUCKET}/damaged"
    run_cli("publish", str(out), url, env=env)
    fs = _fs(options)
    name = fs.cat_file(f"{BUCKET}/damaged/builds/LATEST").decode().strip()
    remote = f"{BUCKET}/damaged/builds/{name}"
    shard = sorted(fs.find(f"{remote}/shards"))[0]
    original = fs.cat_file(shard)
    fs.pipe_file(shard, original[:-1] + bytes([original[-1] ^ 1]))
    proc = run_cli("validate", url, check=False, env=env)
    assert proc.returncode == 1 and shard.rsplit("/", 1)[1] in _one_line(proc.stderr), proc.stderr

    from cpp_data.pipeline.foundation.errors import CheckFailed

    with pytest.raises(CheckFailed, match="damaged in the store"):
        import cpp_data

        cpp_data.load_build(url, storage_options=options, format="arrow")
    fs.rm_file(f"{remote}/_COMPLETE")
    proc = run_cli("show", url, check=False, env=env)
    assert proc.returncode != 0 and "_COMPLETE" in _one_line(proc.stderr), proc.stderr
    proc = run_cli("publish", str(out), url, env=env)  # an unsealed prefix is uploaded again, then sealed
    assert fs.cat_file(shard) == original and fs.exists(f"{remote}/_COMPLETE")


@pytest.mark.slow
def test_a_damaged_build_is_never_uploaded(store, out: Path, tmp_path: Path):
    import shutil

    env, options = store
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    build = next(p for p in (copy / "builds").iterdir() if (p / "_COMPLETE").is_file())
    shard = next((build / "shards").glob("train-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-8])
    proc = run_cli("publish", str(copy), f"s3://{BUCKET}/never", check=False, env=env)
    assert proc.returncode == 1 and shard.name in _one_line(proc.stderr), proc.stderr
    assert not _fs(options).exists(f"{BUCKET}/never")


# a reader's process where `datasets` cannot be imported, as on an install without it
NO_DATASETS = r'''
import sys
sys.modules["datasets"] = None
import cpp_data
sets = cpp_data.load_build(sys.argv[1])
print(type(sets["train"]).__module__, sets["train"].count_rows())
'''


@pytest.mark.slow
def test_an_output_directory_loads_as_users_try_it(out: Path):
    """`datasets.load_dataset(OUT)` reads the card at OUT (the promoted build, else the latest), not cache/;
    `cpp_data.load_build` works where `datasets` is not installed, with pyarrow datasets."""
    datasets = pytest.importorskip("datasets")
    build = out / "builds" / (out / "builds" / "LATEST").read_text().strip()
    totals = json.loads((build / "manifest.json").read_text())["totals"]
    assert f"builds/{build.name}" in (out / "README.md").read_text()
    docs = datasets.load_dataset(str(out))
    assert docs["train"].num_rows == totals["train_documents"]
    assert docs["validation"].num_rows == totals["valid_documents"]
    proc = run_bounded([sys.executable, "-c", NO_DATASETS, str(out)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["pyarrow._dataset", str(totals["train_documents"])]


@pytest.mark.slow
def test_verify_of_a_build_in_the_store_promotes_it_there(store, tiny_reference):
    """verify s3://.../builds/NAME runs every gate on a checked local copy, then writes the receipt,
    builds/PROMOTED and the card in the store."""
    env, options = store
    _, build = tiny_reference
    url = f"s3://{BUCKET}/verified"
    run_cli("publish", str(build), url, "--no-latest", env=env)
    proc = run_cli("verify", f"{url}/builds/{build.name}", "--no-train-step", env=env)
    assert f"receipt {url}/verify/{build.name}.json" in proc.stdout, proc.stdout
    fs = _fs(options)
    assert fs.cat_file(f"{BUCKET}/verified/builds/PROMOTED").decode().strip() == build.name
    assert not fs.exists(f"{BUCKET}/verified/builds/LATEST")
    assert json.loads(fs.cat_file(f"{BUCKET}/verified/verify/{build.name}.json"))["passed"] is True
    assert f"builds/{build.name}/shards/" in fs.cat_file(f"{BUCKET}/verified/README.md").decode()
