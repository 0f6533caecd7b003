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
    assert "already exists" in fails(["coach-train", "--transcripts", str(chain_transcripts), "--out", str(out)],
                                     capsys)
    assert "already exists" in fails(["export", "pairs", str(chain_transcripts), "--out", str(out)], capsys)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert "does not exist" in fails(["export", "pairs", str(chain_transcripts), "--db", str(tmp_path / "x.sqlite"),
                                      "--out", str(tmp_path / "pairs")], capsys)


def hostile(tmp_path, transcripts, name: str, change) -> str:
    """The fixture's transcripts with its first episode changed by `change` (a dict edit, or a str: a raw line
    appended)."""
    lines = transcripts.read_text().splitlines()
    if isinstance(change, str):
        lines.append(change)
    else:
        first = json.loads(lines[0])
        change(first)
        lines[0] = json.dumps(first)
    path = tmp_path / name / "transcripts.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("name, change, message", [
    ("cut", '{"env_id": "Chain-v0", "actions": [{"role": "ad', "was the file cut short"),
    ("foreign", lambda e: e.update(env_id="Nope-v9"), "not a registered env"),
    ("no_env", lambda e: e.pop("env_id"), "no env_id"),
    ("no_role", lambda e: e["actions"][0].pop("role"), "without a role"),
    ("score", lambda e: e["actions"][0]["coach"].update(score=float("inf")), "outside 0-10"),
])
def test_damaged_transcripts_are_refused_not_trained_on(tmp_path, capsys, chain_transcripts, name, change, message):  # noqa: F811
    path = hostile(tmp_path, chain_transcripts, name, change)
    if name != "foreign":  # pairs need no env: only what would invent a verdict is refused
        assert message in fails(["export", "pairs", path, "--out", str(tmp_path / "pairs")], capsys)
    assert message in fails(["coach-train", "--transcripts", path, "--model", "tiny", "--out", str(tmp_path / "j")],
                            capsys)
    assert not (tmp_path / "pairs").exists()
    assert not (tmp_path / "j").exists()


def test_a_killed_runs_cut_curves_do_not_block_its_transcripts(tmp_path, chain_transcripts):  # noqa: F811
    from mappa_train.coach_training.examples import from_transcripts

    (chain_transcripts.parent / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "lo')
    assert len(from_transcripts([chain_transcripts.parent])) == 12


def test_settings_and_places_that_cannot_work_are_refused_before_training(tmp_path, capsys, chain_transcripts):  # noqa: F811
    run = ["coach-train", "--transcripts", str(chain_transcripts), "--model", "tiny"]
    assert "--lr" in fails(run + ["--lr", "inf", "--out", str(tmp_path / "j")], capsys)
    assert "held out none of the 6 tasks" in fails(run + ["--heldout", "0.01", "--out", str(tmp_path / "j")], capsys)
    (tmp_path / "a-file").write_text("mine")
    assert "is a file, not a folder" in fails(run + ["--out", str(tmp_path / "a-file" / "j")], capsys)
    assert "cannot create a folder in /proc" in fails(run + ["--out", "/proc/mappa-judge"], capsys)
    for margin in ("nan", "-1", "0"):
        assert "--margin" in fails(["export", "pairs", str(chain_transcripts), "--margin", margin,
                                    "--out", str(tmp_path / "p")], capsys)
    assert (tmp_path / "a-file").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "run"]


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
