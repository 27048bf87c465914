"""The CLI teaches: every subcommand has a --help with examples or explanations; recipes fail clearly."""

from __future__ import annotations

import re

import pytest
from conftest import run_cli


@pytest.mark.parametrize("args,words", [
    ((), ["build", "validate", "status", "sources", "diff", "report", "exit codes"]),
    (("build",), ["--version", "--sources", "--out", "--executor", "--only", "--from", "--force", "--set", "examples"]),
    (("recipes", "show"), ["--resolved", "--set", "example"]),
    (("validate",), ["_COMPLETE", "checksum", "row group"]),
    (("status",), ["current.json", "changelog"]),
    (("sources", "lock"), ["commit", "lock"]),
])
def test_help_texts(args, words):
    proc = run_cli(*args, "--help")
    for w in words:
        assert w in proc.stdout, (args, w)


@pytest.mark.parametrize("args,message", [
    (("train", "--launch-spec", "x", "--out", "y", "--batch-size", "0"), "argument --batch-size: must be at least 1"),
    (("train", "--launch-spec", "x", "--out", "y", "--steps", "-1"), "argument --steps: must be at least 1"),
    (("train", "--launch-spec", "x", "--out", "y", "--lr", "nan"), "argument --lr: must be above 0"),
    (("export", "megatron", "x", "--seq-length", "-3"), "argument --seq-length: must be at least 2"),
    (("export", "packed", "x", "--fim-rate", "1.5"), "argument --fim-rate: must be at least 0 and at most 1"),
    (("build", "--sources", "s", "--out", "o", "--workers", "0"), "argument --workers: must be at least 1"),
    # an empty path is the working directory to pathlib: `--out "$OUT"` with OUT unset built into the cwd
    (("build", "--sources", "s", "--out", ""), "argument --out: is empty (an unset variable?)"),
    (("validate", " "), "argument build: is empty"),
])
def test_numeric_options_out_of_range_are_usage_errors(args, message):
    """Out-of-range numbers (a batch size of 0, which would divide by zero; a negative export length, which would
    reach launch.json) are refused with argparse's one-line error (exit 2)."""
    proc = run_cli(*args, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and message in lines[-1], proc.stderr
    # one line, like every other error (argparse printed its usage block above it), saying where the help is
    assert len(lines) == 1 and lines[0].endswith(f"(see cpp-data {args[0]}"
                                                 f"{' ' + args[1] if args[0] == 'export' else ''} --help)"), lines


def test_every_exit_code_is_in_the_help_and_the_readme():
    """The exit-code table is one contract: each EXIT_* of pipeline/foundation/errors.py is explained by `cpp-data
    --help`
    and is a row of the README's table."""
    import re
    from pathlib import Path

    from cpp_data.pipeline.foundation import errors

    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    helped = " ".join(run_cli("--help").stdout.split())
    readme = Path(__file__).resolve().parents[1].joinpath("README.md").read_text()
    rows = {int(m) for m in re.findall(r"^\| (\d+) \|", readme, re.M)}
    assert len(codes) >= 7
    for code in sorted(codes):
        assert re.search(rf"(^|[ ,:]){code} [a-z(]", helped), (code, "cpp-data --help")
    assert rows == codes, (rows, codes)


@pytest.mark.slow
def test_unimplemented_generation_names_missing_stages(tmp_path):
    src = tmp_path / "s.toml"
    src.write_text(f"[[source]]\nname = 'a'\nurl = '{tmp_path}'\n")
    recipe = tmp_path / "r.toml"
    recipe.write_text('schema_generation = "v6"\nstages = ["collect", "fancy_documents"]\n')
    proc = run_cli("build", "--recipe", str(recipe), "--sources", str(src), "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2
    assert "fancy_documents" in proc.stderr and "not implemented" in proc.stderr
    proc = run_cli("build", "--version", "v9", "--sources", str(src), "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2 and "available: v2, v3, v4, v5, v6" in proc.stderr


@pytest.mark.slow
def test_bad_recipe_parameter_is_named(tmp_path):
    from importlib import resources

    text = (resources.files("cpp_data.pipeline.recipes") / "v6.toml").read_text()
    bad = tmp_path / "r.toml"
    bad.write_text(text.replace("max_line_length = 1000", "max_line_lenght = 1000"))
    src = tmp_path / "s.toml"
    src.write_text(f"[[source]]\nname = 'a'\nurl = '{tmp_path}'\n")
    proc = run_cli("build", "--recipe", str(bad), "--sources", str(src), "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2 and "max_line_lenght" in proc.stderr and str(bad) in proc.stderr
    # an unknown generation failed in the shards stage, several stages in; a stage listed twice ran twice
    for broken, words in ((text.replace('schema_generation = "v6"', 'schema_generation = "v9"'), "'v9' is not one of"),
                          (text.replace('"shards",', '"shards", "shards",', 1), "'shards' is listed more than once")):
        bad.write_text(broken)
        proc = run_cli("build", "--recipe", str(bad), "--sources", str(src), "--out", str(tmp_path / "o"),
                       "--dry-run", check=False)
        assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.slow
def test_status_writes_current_and_changelog(reference_build, tmp_path):
    import shutil

    out = tmp_path / "out"  # a copy: the reference output directory is shared by the whole session
    shutil.copytree(reference_build.parent.parent, out, symlinks=True)
    proc = run_cli("status", "--out", str(out))
    assert reference_build.name in proc.stdout
    assert (out / "status" / "current.json").is_file() and (out / "status" / "current.md").is_file()
    run_cli("status", "--out", str(out))
    lines = (out / "status" / "changelog.jsonl").read_text().splitlines()
    assert len(lines) == 1  # unchanged status appends nothing
    source = tmp_path / "a-source"  # any other directory (a source tree, say) is refused, not written into
    source.mkdir()
    proc = run_cli("status", "--out", str(source), check=False)
    assert proc.returncode == 2 and "not an output directory" in proc.stderr and not (source / "status").exists()


def test_recipes_list_and_show():
    listed = run_cli("recipes", "list").stdout
    for version in ("v2", "v3", "v4", "v5", "v6"):
        assert f"{version}  schema {version}" in listed
    shown = run_cli("recipes", "show", "v6").stdout
    from importlib import resources

    assert shown == (resources.files("cpp_data.pipeline.recipes") / "v6.toml").read_text()
    import json

    resolved = json.loads(run_cli("recipes", "show", "v6", "--resolved").stdout)
    assert resolved["params"]["lanes"]["lanes"] == ["4k", "16k", "64k"] and resolved["overrides"] == {}


@pytest.mark.parametrize("setting,message", [
    ("packed_rows.fim_epoch=2", "unknown parameter(s) ['fim_epoch']"),
    ("packed_rows.fim_epochs=abc", "fim_epochs must be an integer, got 'abc'"),
    ("fancy.seed=1", "'fancy' is not a stage of this recipe"),
    ("seq_length=2048", "expected STAGE.PARAM=VALUE"),
    # values out of range, refused before any stage runs (a negative length had failed in packed_rows, a
    # threshold of 7 had silently removed no near duplicate)
    ("packed_rows.fim_epochs=-5", "fim_epochs must be between 1 and 64, got -5"),
    ('lanes.lanes=["4x"]', "lane '4x': a lane is named by its sequence length"),
    ('lanes.chunked=["8k"]', "chunked lane(s) ['8k'] are not among lanes"),
    ('lanes.lanes=["80"]', "lane 80: a budget of 76 tokens leaves 57 for a chunk's body"),
    ("near_dedup.threshold=7", "threshold must be between 0 and 1, got 7.0"),
    ("shards.valid_fraction=2", "valid_fraction must be between 0 and 0.5, got 2.0"),
    ("near_dedup.bands=32", "bands x rows = 256 exceeds num_perm = 128"),
    ("filter.min_bytes=2000000", "min_bytes (2000000) is above max_bytes (1000000)"),
    ('license.allow=["MIT", "Apache 2.0"]', "allow: 'Apache 2.0' is not an SPDX license id"),
    ('license.allow=["apache-2.0"]', "allow: write 'apache-2.0' as 'Apache-2.0', as the SPDX list spells it"),
    # a LicenseRef- alias of license-expression (CGAL's tags): not the SPDX list's spelling, which has neither
    ('license.allow=["LicenseRef-Commercial"]', "allow: write 'LicenseRef-Commercial' as "
                                                 "'LicenseRef-scancode-commercial-license', license-expression's name "
                                                 "for that alias"),
    ('license.allow=["MIT OR Apache-2.0"]', "is an expression; list each license on its own"),
    ("tokenizer.vocab_size=500", "vocab_size 500 is smaller than the tokenizer's fixed band with its merge chains "
                                 "(2874 ids)"),
    ("tokenizer.vocab_size=2000", "vocab_size 2000 is smaller than the tokenizer's fixed band with its merge "
                                  "chains (2874 ids)"),
    ('tokenizer.band_file="/nonexistent/band.toml"', "band_file: [Errno 2] No such file or directory"),
    # TOML's nan and inf: a nan threshold compared false and switched near-dedup off, and the manifest then held
    # NaN, which is not JSON
    ("near_dedup.threshold=nan", "threshold must be a finite number, got nan"),
    ("filter.max_byte_entropy=inf", "max_byte_entropy must be a finite number, got inf"),
    # a codec pyarrow refuses only when the first shard is written, eight stages in; levels it takes silently
    ('shards.compression="bogus"', "compression must be one of zstd, snappy, gzip, brotli, lz4, lz4_raw, none, "
                                   "got 'bogus'"),
    ("shards.compression_level=999", "compression_level of zstd must be between -131072 and 22, got 999"),
    ("token_columns.compression_level=23", "compression_level of zstd must be between -131072 and 22, got 23"),
    # sizes that would make the trainer abort with a Rust backtrace, the packer ask for memory no machine has
    ("tokenizer.vocab_size=99999999999", "vocab_size must be between 1 and 4194304, got 99999999999"),
])
def test_set_overrides_are_checked_like_the_recipe(setting, message):
    proc = run_cli("recipes", "show", "v6", "--set", setting, check=False)
    line = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and message in line
    key = setting.split("=", 1)[0]
    if "." in key and not key.startswith("fancy."):  # the error names the flag, not only the recipe file
        # one parameter's problem blames its flag; a problem across parameters names the recipe's stage table
        # with the flag (the combination is at fault)
        stage = key.split(".")[0]
        assert (line.startswith(f"cpp-data: error: --set {key} (over recipe v6 (")
                or re.match(rf"cpp-data: error: recipe v6 \(.*\) \[params\.{stage}\] with --set {key}: ", line)), line


def test_a_codec_without_levels_is_taken_and_written_without_one(tmp_path):
    """snappy and none have no compression levels: the recipe's level (3) is dropped for them, where pyarrow
    refused to write with it, and every Parquet codec name is accepted in any case."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cpp_data.schemas.shard_writer import open_writer

    for codec in ("snappy", "none", "ZSTD"):
        assert run_cli("recipes", "show", "v6", "--set", f'shards.compression="{codec}"', check=False).returncode == 0
        with open_writer(tmp_path / f"{codec}.parquet", pa.schema([("a", pa.int64())]), codec, 3) as writer:
            writer.write_table(pa.table({"a": [1, 2]}))
        assert pq.read_table(tmp_path / f"{codec}.parquet").column("a").to_pylist() == [1, 2]


def test_seq_length_arguments_have_an_upper_bound():
    for args in (["export", "packed", "x", "--seq-length", "99999999999"],
                 ["export", "megatron", "x", "--seq-length", "99999999999"]):
        proc = run_cli(*args, check=False)
        assert proc.returncode == 2 and "must be at most 16,777,216, got 99999999999" in proc.stderr


def test_the_recipe_and_the_trainer_agree_on_the_smallest_vocabulary():
    """The recipe's check and the trainer's composition use one smallest size: the size the recipe refuses is
    the size the trainer refuses, and the size it accepts composes, learned merges or none."""
    import pytest

    from cpp_data.stages.tokenizer import TokenizerParams
    from cpp_data.tokenizer.band import load_band
    from cpp_data.tokenizer.train import _compose, smallest_vocab_size

    band = load_band()
    smallest = smallest_vocab_size(band)
    fixed = len(band.specials) + 256 + len(band.entries)
    assert smallest > fixed  # the entries' merge chains take ids of their own
    assert TokenizerParams(vocab_size=smallest).check() is None
    assert "smaller than the tokenizer's fixed band" in TokenizerParams(vocab_size=smallest - 1).check()
    assert "smaller than the tokenizer's fixed band" in TokenizerParams(vocab_size=fixed).check()
    with pytest.raises(ValueError, match="smaller than the fixed band"):
        _compose(band, [], smallest - 1)
    vocab, _ = _compose(band, [], smallest)
    assert len(band.specials) + len(vocab) == smallest
    learned = [("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("i", "n"), ("in", "t")]  # merges a trainer would have learned
    vocab, _ = _compose(band, learned, smallest)  # they give way to the band
    assert len(band.specials) + len(vocab) <= smallest


def test_every_recipe_default_is_within_its_bounds():
    """The bounds describe the defaults too: every bundled recipe loads with its own values, and each Params
    class's defaults pass its bounds and check (a bound tighter than a default would refuse every build)."""
    import dataclasses

    from cpp_data.pipeline.runner.recipe import available_versions, build_params, load_recipe
    from cpp_data.stages import STAGES

    for version in available_versions():
        load_recipe(version)
    bounded = 0
    for name, stage in STAGES.items():
        params = getattr(stage, "Params", None)
        if params is None or not dataclasses.is_dataclass(params):
            continue
        build_params(params, {}, name)
        for key in getattr(params, "bounds", {}):
            assert key in {f.name for f in dataclasses.fields(params)}, (name, key)
            bounded += 1
    assert bounded >= 40, bounded


@pytest.mark.slow
def test_set_override_reaches_the_fingerprint_and_the_manifest(reference_build, tmp_path):
    """--set packed_rows.fim_epochs=2 on the reference build's cache: only the packed rows and what reads
    them run again; the manifest records the override, and the launch spec the two epochs' prefixes."""
    import json
    import shutil

    from conftest import build

    out = tmp_path / "out"
    shutil.copytree(reference_build.parent.parent, out, symlinks=True)
    shutil.rmtree(out / "builds")
    sources = reference_build.parent.parent.parent / "sources.toml"
    proc = build(sources, out, "--set", "packed_rows.fim_epochs=2")
    assert "packed_rows: running" in proc.stdout and "shards: running" not in proc.stdout
    assert "megatron_export: running" not in proc.stdout and "lanes: running" not in proc.stdout
    latest = out / "builds" / (out / "builds" / "LATEST").read_text().strip()
    manifest = json.loads((latest / "manifest.json").read_text())
    assert manifest["recipe"]["overrides"] == {"packed_rows": {"fim_epochs": 2}}
    assert manifest["recipe"]["params"]["packed_rows"]["fim_epochs"] == 2
    spec = json.loads((latest / "launch.json").read_text())
    train = spec["lanes"]["4k"]["datasets"]["packed"]["blend_per_split"]["train"]
    assert [p.rsplit("_", 1)[1] for _, p in train] == ["e0", "e1"]


@pytest.mark.parametrize("code,rc,words", [(13, 2, "change its permissions"), (30, 2, "change its permissions"),
                                           (28, 1, "free space and run the same command again")])
def test_a_file_system_refusal_is_one_line_with_the_right_exit_code(tmp_path, monkeypatch, capsys, code, rc, words):
    """A read-only or full output directory: status, gc, report and export had all exited 1 with the generic
    'OSError: [Errno 30] ...' line; a path the user must change is exit 2, a full disk exit 1, both say which."""
    import os

    import cpp_data.pipeline.commands.status as status
    from cpp_data.pipeline.cli import main

    target = str(tmp_path / "out" / "status" / "current.json")

    def refuse(out):
        raise OSError(code, os.strerror(code), target)

    monkeypatch.setattr(status, "write_status", refuse)
    (tmp_path / "out" / "builds").mkdir(parents=True)
    assert main(["status", "--out", str(tmp_path / "out")]) == rc
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and target in err[0] and words in err[0], err


def test_an_unreachable_ray_address_is_refused_not_waited_on(tmp_path):
    """ray.init retried a head that was not there for minutes, printing 'Failed to connect to GCS'; the build
    is refused in one line before any stage."""
    pytest.importorskip("ray")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text("int main() { return 0; }\n")
    sources = tmp_path / "s.toml"
    sources.write_text(f"[[source]]\nname = 'a'\nurl = '{src}'\nlicense = 'MIT'\n")
    proc = run_cli("build", "--sources", str(sources), "--out", str(tmp_path / "o"), "--executor", "ray",
                   "--ray-address", "127.0.0.1:1", check=False, timeout=120)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and "no Ray head answers there" in err, err


def test_build_options_that_contradict_or_misname_are_one_line_errors(tmp_path):
    """Control flags that contradict each other or name the wrong thing are one-line errors that blame the option
    given, never taken silently."""
    from importlib import resources

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text("int main() { return 0; }\n")
    sources = tmp_path / "s.toml"
    sources.write_text(f"[[source]]\nname = 'a'\nurl = '{src}'\nlicense = 'MIT'\n")
    v4 = str(resources.files("cpp_data.pipeline.recipes") / "v4.toml")
    base = ("build", "--sources", str(sources), "--out", str(tmp_path / "o"), "--dry-run")
    for extra, words in ((("--slurm-time", "banana"), "is not a Slurm time"),  # it went into the job script
                         (("--recipe", v4, "--version", "v5"), "the recipe file is the recipe"),
                         (("--tokenizer", str(tmp_path / "none"), "--set", "tokenizer.vocab_size=4000"),
                          "a frozen tokenizer keeps its own vocabulary"),
                         (("--tokenizer", str(tmp_path / "none")), "with --tokenizer: frozen")):  # not "--set"
        proc = run_cli(*base, *extra, check=False)
        err = proc.stderr.strip()
        assert proc.returncode == 2 and len(err.splitlines()) == 1 and words in err, (extra, err)
