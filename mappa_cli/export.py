"""`mappa export checkpoint RUN_DIR [--step N] --out DIR` / `mappa export transcripts FILE --out DIR` /
`mappa export labels DB --out DIR`."""
from __future__ import annotations

import argparse
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", metavar="WHAT", required=True)
    ckpt = sub.add_parser("checkpoint", help="a training checkpoint as Hugging Face model folders, one per policy")
    ckpt.add_argument("run", type=Path, help="a `mappa train` out_dir")
    ckpt.add_argument("--step", type=int, help="the checkpoint's step (default: the newest)")
    ckpt.add_argument("--out", type=Path, required=True,
                      help="a new (absent or empty) folder: OUT/<policy>/ per policy")
    tr = sub.add_parser("transcripts", help="transcripts (JSON lines) as a `datasets` dataset, one row per action")
    tr.add_argument("file", type=Path, help="transcripts.jsonl of mappa eval / mappa run / TranscriptRecorder")
    tr.add_argument("--out", type=Path, required=True,
                    help="a new (absent or empty) folder for datasets' save_to_disk")
    labels = sub.add_parser("labels", help="human verdicts of `mappa review` as a `datasets` dataset")
    labels.add_argument("db", type=Path, help="the verdicts database (review.sqlite beside the reviewed run)")
    labels.add_argument("--out", type=Path, required=True, help="new folder for datasets' save_to_disk")


def run(args: argparse.Namespace) -> int:
    if args.what == "labels":
        return export_labels(args)
    from mappa_train.export import export_checkpoint, export_transcripts

    if args.what == "checkpoint":
        written = export_checkpoint(args.run, args.step, args.out)
        for policy, folder in written.items():
            print(f"{policy}: {folder}  (mappa eval --team hf:{folder})")
        return 0
    dataset = export_transcripts(args.file, args.out)
    print(f"{dataset.num_rows} actions of {len(set(dataset['episode']))} episodes -> {args.out} "
          "(datasets.load_from_disk)")
    return 0


def export_labels(args: argparse.Namespace) -> int:
    from mappa_train.review.labels import export_labels

    dataset = export_labels(args.db, args.out)
    print(f"{dataset.num_rows} verdicts by {len(set(dataset['reviewer']))} reviewer(s) -> {args.out} "
          "(datasets.load_from_disk; mappa coach-eval --labels)")
    return 0
