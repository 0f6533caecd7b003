"""`mappa export checkpoint RUN_DIR [--step N] --out DIR` / `mappa export transcripts FILE --out DIR` /
`mappa export labels DB --out DIR` / `mappa export pairs RUN --out DIR`."""
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
    pairs = sub.add_parser("pairs", help="DPO preference pairs and SFT rows from corrected or differing verdicts")
    pairs.add_argument("run", type=Path, help="a run folder or transcripts file (mappa run / mappa eval)")
    pairs.add_argument("--db", type=Path, help="human verdicts (default: review.sqlite in RUN, when there)")
    pairs.add_argument("--coach", help="a stronger coach spec whose verdicts overrule the recorded ones")
    pairs.add_argument("--margin", type=float, default=3.0, help="how far apart two verdicts must be to count")
    pairs.add_argument("--out", type=Path, required=True, help="a new (absent or empty) folder: OUT/pairs, OUT/sft")


def run(args: argparse.Namespace) -> int:
    if args.what == "labels":
        return export_labels(args)
    if args.what == "pairs":
        return export_pairs(args)
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


def export_pairs(args: argparse.Namespace) -> int:
    from mappa_envs.coach import make_coach
    from mappa_train.coach_training.pairs import export_pairs as write_pairs

    coach = make_coach(args.coach) if args.coach else None
    pairs, sft = write_pairs(args.run, args.out, args.db, coach, args.margin)
    print(f"{pairs} preference pairs -> {args.out / 'pairs'}, {sft} SFT rows -> {args.out / 'sft'} "
          "(datasets.load_from_disk; TRL DPOTrainer / SFTTrainer)")
    return 0
