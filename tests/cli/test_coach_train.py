"""`mappa coach-train` and `mappa export pairs` through the real CLI: bad input is one line and writes
nothing; a run on the tiny model writes a judge folder with its held-out tasks."""
from __future__ import annotations

import json

import pytest

from mappa_cli.main import main
from tests.train.coach_training.conftest import chain_transcripts  # noqa: F401 (a fixture)


def fails(argv: list[str], capsys) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc in (1, 2), err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, chain_transcripts):  # noqa: F811
    out = tmp_path / "judge"
    assert "no labels" in fails(["coach-train", "--out", str(out)], capsys)
    assert "--steps" in fails(["coach-train", "--transcripts", str(chain_transcripts), "--steps", "0",
                               "--out", str(out)], capsys)
    assert "--heldout" in fails(["coach-train", "--transcripts", str(chain_transcripts), "--heldout", "1.5",
                                 "--out", str(out)], capsys)
    assert "give it with --full" in fails(["coach-train", "--transcripts", str(chain_transcripts), "--top-layers", "2",
                                           "--out", str(out)], capsys)
    assert "does not exist" in fails(["coach-train", "--transcripts", str(tmp_path / "nothing"), "--out", str(out)],
                                     capsys)
    assert "not a labels dataset" in fails(["coach-train", "--labels", str(tmp_path), "--out", str(out)], capsys)
    assert "--model" in fails(["coach-train", "--transcripts", str(chain_transcripts), "--model", "no-such-model",
                               "--out", str(out)], capsys)
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert "not an empty folder" in fails(["coach-train", "--transcripts", str(chain_transcripts), "--out", str(out)],
                                          capsys)
    assert "not an empty folder" in fails(["export", "pairs", str(chain_transcripts), "--out", str(out)], capsys)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert "does not exist" in fails(["export", "pairs", str(chain_transcripts), "--db", str(tmp_path / "x.sqlite"),
                                      "--out", str(tmp_path / "pairs")], capsys)


def test_export_pairs_prints_what_it_wrote(tmp_path, capsys, chain_transcripts):  # noqa: F811
    assert main(["export", "pairs", str(chain_transcripts.parent), "--out", str(tmp_path / "pairs")]) == 0
    assert "6 preference pairs" in capsys.readouterr().out


@pytest.mark.slow
def test_coach_train_on_transcripts_writes_a_judge_folder(tmp_path, capsys, chain_transcripts, tiny_model_dir):  # noqa: F811
    out = tmp_path / "judge"
    assert main(["coach-train", "--transcripts", str(chain_transcripts), "--model", tiny_model_dir, "--steps", "2",
                 "--batch-size", "2", "--max-tokens", "128", "--heldout", "0.3", "--seed", "1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "serve_judge.sh 8123 --model" in printed
    record = json.loads((out / "judge_training.json").read_text())
    assert record["config"]["lora"] is True
    assert record["heldout_tasks"] >= 1
    assert record["sources"] == ["rule"]
    assert (out / "model.safetensors").is_file()
    assert (out / "heldout").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["judge", "run"]  # nothing left aside
