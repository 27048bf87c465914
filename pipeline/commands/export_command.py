"""cpp-data export megatron|packed: a build exported again, with other arguments."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from cpp_data.pipeline.commands.common import (
    check_export_target,
    file_prefix,
    int_at_least,
    number,
    path_arg,
)
from cpp_data.pipeline.foundation.errors import EXIT_NOTHING_TO_DO, EXIT_OK, BadInput
from cpp_data.schemas.launch_spec import MAX_SEQ_LENGTH


def add_parser(sub, leaf, group) -> None:
    ex = group("export", help="export a build for training (Megatron bin/idx, packed rows)")
    em = leaf(ex, "megatron", cmd_export, reads=("build",), help="Megatron bin/idx per split, plus a launch spec",
              description="Write <name>_train and <name>_valid .bin/.idx as megatron-core's IndexedDatasetBuilder does "
                          "(one document per sequence, EOD appended, dtype by megatron-core's rule for the "
                          "vocabulary size; a training prefix per weight group when the sources set weights), "
                          "export.json with each file's SHA-256, arguments.json and a launch.json whose paths are "
                          "relative to it. A v6 build already holds this export under megatron/; use this for "
                          "other names or sequence lengths. Other arguments export into another directory.")
    em.add_argument("build", type=path_arg, help="a build directory, OUT for its latest build, or OUT/builds/PROMOTED")
    em.add_argument("--out", type=path_arg,
                    help="export directory (default OUT/exports/BUILD/megatron-NAME-<hash of the arguments>)")
    em.add_argument("--name", type=file_prefix, default="cpp",
                    help="file prefix of the bin/idx pairs (letters, digits, '.', '_', '-')")
    em.add_argument("--seq-length", type=int_at_least(2, MAX_SEQ_LENGTH), default=2048,
                    help="sequence length written into its launch.json")
    em.add_argument("--lane", help="export this length lane's documents (default: the build's whole documents)")
    em.add_argument("--workers", type=int_at_least(1), default=os.cpu_count() or 1,
                    help="parallel tasks (the CPU count)")
    ep = leaf(ex, "packed", cmd_export, reads=("build",), help="fixed-length packed rows (best-fit-decreasing, FIM)",
              description="Write Parquet rows of --seq-length tokens packed best-fit-decreasing with input_ids, "
                          "target_ids, loss_mask, doc_ids, valid_token_count, num_docs, pack_id and the token "
                          "metadata columns (no FIM: the harness draws it per epoch); the same rows as Megatron "
                          "bin/idx, the training split once per FIM epoch (cpp_packed_train_e<k>), and a "
                          "launch.json for them. Other arguments export into another directory.")
    ep.add_argument("build", type=path_arg, help="a build directory, OUT for its latest build, or OUT/builds/PROMOTED")
    ep.add_argument("--seq-length", type=int_at_least(2, MAX_SEQ_LENGTH), default=4096, help="tokens per packed row")
    ep.add_argument("--fim-rate", type=number(0, 1), default=0.5,
                    help="share of training documents made fill-in-the-middle")
    ep.add_argument("--fim-spm-rate", type=number(0, 1), default=0.5, help="share of FIM documents in SPM order")
    ep.add_argument("--seed", type=int, default=42, help="seed of the FIM choices")
    ep.add_argument("--fim-epochs", type=int_at_least(1, 64), default=1,
                    help="training bin/idx prefixes for Megatron-LM, each with FIM drawn for one more epoch "
                         "(the Parquet rows hold none: the bundled harness draws it per epoch)")
    ep.add_argument("--lane", help="pack this length lane's documents (default: the build's whole documents)")
    ep.add_argument("--workers", type=int_at_least(1), default=os.cpu_count() or 1,
                    help="parallel tasks (the CPU count)")
    ep.add_argument("--out", type=path_arg,
                    help="export directory (default OUT/exports/BUILD/packed-SEQ_LENGTH-<hash of the arguments>)")


def export_directory(build: Path, kind: str, arguments: dict) -> Path:
    """OUT/exports/BUILD/<kind>-<hash of the arguments>: other arguments never meet an earlier export."""
    import hashlib

    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:8]
    return build.parent.parent / "exports" / build.name / f"{kind}-{digest}"


def cmd_export(args) -> int:
    """Export a build again: the documents (a lane's, or the whole files'), the target directory for these
    arguments, the export into DIR.partial, then its launch.json and arguments, sealed as DIR."""
    from cpp_data.pipeline.foundation.fsutil import atomic_write_json, seal
    from cpp_data.schemas.manifest import load_manifest

    documents = _documents(args)
    arguments = _arguments(args)
    out = args.out or export_directory(args.build, _kind(args), arguments)
    if _already_exported(out, arguments):
        print(f"{out}: already exported with these arguments")
        return EXIT_NOTHING_TO_DO
    check_export_target(out)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    manifest = load_manifest(args.build)
    weights = {s["name"]: float(s.get("weight", 1.0)) for s in manifest["sources"]}
    export = _export_megatron if args.export_command == "megatron" else _export_packed
    dataset, meta = export(args, documents, partial, weights)
    _write_export_spec(args, out, partial, dataset, meta, weights)
    atomic_write_json(partial / "arguments.json", arguments)
    out.parent.mkdir(parents=True, exist_ok=True)
    seal(partial, out)
    print(f"wrote {out}")
    return EXIT_OK


def _documents(args) -> Path:
    """The directory of the documents to export: the build's shards, or a lane's rows with --lane."""
    from cpp_data.schemas.reader import require_complete

    require_complete(args.build)
    if not (args.build / "tokenizer" / "cpp_tokenizer.json").is_file():
        raise BadInput(f"{args.build}: this build has no tokenizer (its recipe has no tokenizer stage), so it has no "
                       f"token ids to export; build it with a recipe that tokenizes")
    if args.lane is None:
        return args.build
    documents = args.build / "lanes" / args.lane
    if not (documents / "shards.json").is_file():
        raise BadInput(f"{args.build}: no lane {args.lane!r} (its lanes: "
                       f"{', '.join(p.name for p in sorted((args.build / 'lanes').glob('*'))) or 'none'})")
    return documents


def _arguments(args) -> dict:
    """What names the export: recorded in arguments.json, hashed into its default directory."""
    if args.export_command == "megatron":
        return {"format": "megatron", "name": args.name, "seq_length": args.seq_length, "lane": args.lane}
    return {"format": "packed", "seq_length": args.seq_length, "fim_rate": args.fim_rate,
            "fim_spm_rate": args.fim_spm_rate, "seed": args.seed, "fim_epochs": args.fim_epochs, "lane": args.lane}


def _kind(args) -> str:
    return f"megatron-{args.name}" if args.export_command == "megatron" else f"packed-{args.seq_length}"


def _already_exported(out: Path, arguments: dict) -> bool:
    """True when `out` is an export of these arguments; a sealed directory of anything else is refused."""
    from cpp_data.pipeline.foundation.fsutil import is_sealed

    if not is_sealed(out):
        return False
    recorded = json.loads((out / "arguments.json").read_text()) if (out / "arguments.json").is_file() else None
    if recorded == arguments:
        return True
    if recorded is None:
        raise BadInput(f"--out {out}: a sealed directory that is not an export (a build?); give a new or empty "
                       f"directory")
    raise BadInput(f"{out}: holds an export with other arguments ({recorded}); choose another --out")


def _executor(args):
    """A local datatrove executor of --workers processes, with progress in a terminal."""
    from cpp_data.pipeline.contract.executor import ExecutorConfig
    from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
    from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove

    quiet_datatrove()
    return DatatroveExecutor(ExecutorConfig(workers=args.workers, progress=sys.stderr.isatty()))


def _export_megatron(args, documents: Path, partial: Path, weights: dict) -> tuple[dict, dict]:
    """One document per sequence into partial/; the launch spec's documents dataset and export.json."""
    from cpp_data.schemas.launch_spec import dataset_entry
    from cpp_data.stages.lib.export_megatron import export_shards

    os.environ["RAYON_NUM_THREADS"] = str(args.workers)
    prefixes = export_shards(documents, args.build / "tokenizer", partial, args.name, weights, _executor(args))
    for p, v in prefixes.items():
        print(f"{p:<16} {v['documents']:>9,} documents {v['tokens']:>13,} tokens  {v['dtype']}  "
              f"sha256 {v['bin_sha256'][:16]}")
    meta = json.loads((partial / "export.json").read_text())
    return {"documents": dataset_entry("documents", prefixes, weights)}, meta


def _export_packed(args, documents: Path, partial: Path, weights: dict) -> tuple[dict, dict]:
    """Packed rows and their bin/idx into partial/; the launch spec's packed dataset and packed.json."""
    from cpp_data.schemas.launch_spec import dataset_entry
    from cpp_data.stages.lib.packing import PackedParams, pack_shards

    p = PackedParams(seq_length=args.seq_length, fim_rate=args.fim_rate, fim_spm_rate=args.fim_spm_rate,
                     seed=args.seed, fim_epochs=args.fim_epochs)
    _, telemetry = pack_shards(documents, args.build / "tokenizer", partial, p, weights, _executor(args))
    for s, t in telemetry.items():
        print(f"{s:<6} {t['rows']:>7,} rows  {t['slot_utilization']:.1%} slots used  "
              f"{t['docs_per_row']:.2f} docs/row  {t['cropped_token_share']:.1%} cropped  "
              f"{t['fim_documents']:,} FIM")
    meta = json.loads((partial / "packed.json").read_text())
    rows = {s: [f["path"].split("/", 1)[1] for f in meta["files"] if f["kind"] == "packed" and f["split"] == s]
            for s in ("train", "valid")}
    return {"packed": dataset_entry("packed", meta["prefixes"], weights, rows=rows,
                                    fim={**meta["fim"], "epochs": meta["fim_epochs"]})}, meta


def _write_export_spec(args, out: Path, partial: Path, dataset: dict, meta: dict, weights: dict) -> None:
    """The export's launch.json: one lane, named by its sequence length, with the export's one dataset."""
    from cpp_data.harness.presets import megatron_flags
    from cpp_data.schemas.lanes import RESERVE, lane_name
    from cpp_data.schemas.launch_spec import new_spec, write_launch_spec
    from cpp_data.schemas.manifest import load_manifest

    model_args, train_args = megatron_flags()
    kind = "documents" if args.lane is None else json.loads((args.build / "lanes" / args.lane / "shards.json")
                                                            .read_text())["kind"]
    lane = {"kind": kind, "seq_length": args.seq_length,
            "budget": args.seq_length - RESERVE, "datasets": dataset}
    tokenizer = {"model": os.path.relpath(args.build / "tokenizer", out),
                 "sha256": (load_manifest(args.build).get("tokenizer") or {}).get("sha256")}
    spec = new_spec(args.name if args.export_command == "megatron" else "cpp", {lane_name(args.seq_length): lane},
                    meta["vocab_size"], tokenizer, meta["eod"], meta.get("pad"), weights,
                    [{"build": args.build.name, "path": os.path.relpath(args.build, out), "weight": 1.0}],
                    next(iter(dataset)), model_args=model_args, train_args=train_args)
    write_launch_spec(partial / "launch.json", spec)
