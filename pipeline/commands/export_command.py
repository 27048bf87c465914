"""cpp-data export megatron|packed: a build exported again, with other arguments."""

from __future__ import annotations

import json
import os
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
    import shutil

    from cpp_data.pipeline.foundation.fsutil import atomic_write_json, is_sealed, seal
    from cpp_data.schemas.reader import require_complete

    require_complete(args.build)
    if not (args.build / "tokenizer" / "cpp_tokenizer.json").is_file():
        raise BadInput(f"{args.build}: this build has no tokenizer (its recipe has no tokenizer stage), so it has no "
                       f"token ids to export; build it with a recipe that tokenizes")
    documents = args.build
    if args.lane is not None:
        documents = args.build / "lanes" / args.lane
        if not (documents / "shards.json").is_file():
            raise BadInput(f"{args.build}: no lane {args.lane!r} (its lanes: "
                           f"{', '.join(p.name for p in sorted((args.build / 'lanes').glob('*'))) or 'none'})")
    if args.export_command == "megatron":
        os.environ["RAYON_NUM_THREADS"] = str(args.workers)
        arguments = {"format": "megatron", "name": args.name, "seq_length": args.seq_length, "lane": args.lane}
        out = args.out or export_directory(args.build, f"megatron-{args.name}", arguments)
    else:
        arguments = {"format": "packed", "seq_length": args.seq_length, "fim_rate": args.fim_rate,
                     "fim_spm_rate": args.fim_spm_rate, "seed": args.seed, "fim_epochs": args.fim_epochs,
                     "lane": args.lane}
        out = args.out or export_directory(args.build, f"packed-{args.seq_length}", arguments)
    if is_sealed(out):
        recorded = json.loads((out / "arguments.json").read_text()) if (out / "arguments.json").is_file() else None
        if recorded == arguments:
            print(f"{out}: already exported with these arguments")
            return EXIT_NOTHING_TO_DO
        if recorded is None:
            raise BadInput(f"--out {out}: a sealed directory that is not an export (a build?); give a new or empty "
                           f"directory")
        raise BadInput(f"{out}: holds an export with other arguments ({recorded}); choose another --out")
    check_export_target(out)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    from cpp_data.schemas.launch_spec import dataset_entry
    from cpp_data.schemas.manifest import load_manifest

    manifest = load_manifest(args.build)
    weights = {s["name"]: float(s.get("weight", 1.0)) for s in manifest["sources"]}
    if args.export_command == "megatron":
        from cpp_data.pipeline.contract.executor import ExecutorConfig
        from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
        from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove
        from cpp_data.stages.lib.export_megatron import export_shards

        quiet_datatrove()

        prefixes = export_shards(documents, args.build / "tokenizer", partial, args.name, weights,
                                 DatatroveExecutor(ExecutorConfig(workers=args.workers,
                                                                     progress=sys.stderr.isatty())))
        for p, v in prefixes.items():
            print(f"{p:<16} {v['documents']:>9,} documents {v['tokens']:>13,} tokens  {v['dtype']}  "
                  f"sha256 {v['bin_sha256'][:16]}")
        meta = json.loads((partial / "export.json").read_text())
        dataset = {"documents": dataset_entry("documents", prefixes, weights)}
    else:
        from cpp_data.pipeline.contract.executor import ExecutorConfig
        from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
        from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove
        from cpp_data.stages.lib.packing import PackedParams, pack_shards

        quiet_datatrove()

        p = PackedParams(seq_length=args.seq_length, fim_rate=args.fim_rate, fim_spm_rate=args.fim_spm_rate,
                         seed=args.seed, fim_epochs=args.fim_epochs)
        _, telemetry = pack_shards(documents, args.build / "tokenizer", partial, p, weights,
                                   DatatroveExecutor(ExecutorConfig(workers=args.workers,
                                                                     progress=sys.stderr.isatty())))
        for s, t in telemetry.items():
            print(f"{s:<6} {t['rows']:>7,} rows  {t['slot_utilization']:.1%} slots used  "
                  f"{t['docs_per_row']:.2f} docs/row  {t['cropped_token_share']:.1%} cropped  "
                  f"{t['fim_documents']:,} FIM")
        meta = json.loads((partial / "packed.json").read_text())
        rows = {s: [f["path"].split("/", 1)[1] for f in meta["files"] if f["kind"] == "packed" and f["split"] == s]
                for s in ("train", "valid")}
        dataset = {"packed": dataset_entry("packed", meta["prefixes"], weights, rows=rows,
                                           fim={**meta["fim"], "epochs": meta["fim_epochs"]})}
    _write_export_spec(args, out, partial, dataset, meta, weights)
    atomic_write_json(partial / "arguments.json", arguments)
    out.parent.mkdir(parents=True, exist_ok=True)
    seal(partial, out)
    print(f"wrote {out}")
    return EXIT_OK


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
