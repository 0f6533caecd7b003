"""`mappa export` (issue 27): an intermediate checkpoint becomes a Hugging Face model folder in one
command, and transcripts become a `datasets` dataset. Through the real CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.test_train import SPREAD_SCORES, TINY

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    dist_vars = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {**{k: v for k, v in os.environ.items() if k not in dist_vars}, "DS_ACCELERATOR": "cpu",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mappa_cli", *argv], capture_output=True, text=True, env=env,
                          timeout=1200)


def last_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_a_folder_that_is_no_run(tmp_path):
    result = run_cli("export", "checkpoint", str(tmp_path), "--out", str(tmp_path / "x"))
    assert result.returncode == 2
    assert last_line(result) == f"mappa export: {tmp_path} is not a `mappa train` output folder (no config.json)"


def test_a_step_that_was_not_kept(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    for step in (3, 4):
        folder = tmp_path / "checkpoints" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        (folder / "state.json").write_text(json.dumps({"step": step}))
    result = run_cli("export", "checkpoint", str(tmp_path), "--step", "1", "--out", str(tmp_path / "x"))
    assert result.returncode == 2
    assert last_line(result) == (f"mappa export: {tmp_path} has no checkpoint of step 1; it has steps [3, 4] "
                                 "(keep_checkpoints decides how many stay)")


def test_eval_transcripts_become_a_dataset_of_actions(tmp_path):
    import datasets

    assert run_cli("eval", "--team", "scripted:0.5", "--name", "noisy", "--sets", "synthetic:3", "--k", "2",
                   "--out", str(tmp_path), "--no-plots", "--no-progress", "--preimport", "").returncode == 0
    transcripts = tmp_path / "noisy" / "transcripts.jsonl"
    records = [json.loads(line) for line in transcripts.read_text().splitlines()]
    result = run_cli("export", "transcripts", str(transcripts), "--out", str(tmp_path / "ds"))
    assert result.returncode == 0, result.stderr
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    assert ds.num_rows == sum(len(r["actions"]) for r in records)
    first = ds[0]
    action = records[0]["actions"][0]
    assert (first["task_id"], first["role"], first["text"]) == (records[0]["task_id"], action["role"], action["text"])
    assert first["seen"] == action["seen"]  # mappa eval records the prompt the agent last saw
    assert first["coach_score"] == action["coach"]["score"]
    assert first["correct"] == records[0]["outcome"]["correct"]
    assert set(ds["set"]) == {"synthetic:3"}


def test_recorder_transcripts_keep_the_whole_chat(tmp_path):
    import datasets

    import mappa_envs
    from mappa_envs.wrappers import TranscriptRecorder

    path = tmp_path / "t.jsonl"
    env = TranscriptRecorder(mappa_envs.make("MathChat-v0", tasks="synthetic", num_tasks=4, sandbox="local"), path)
    env.reset(seed=0)
    for _ in env.agent_iter():
        _, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else "The answer is \\boxed{3}.")
    env.close()
    record = json.loads(path.read_text().splitlines()[0])
    result = run_cli("export", "transcripts", str(path), "--out", str(tmp_path / "ds"))
    assert result.returncode == 0, result.stderr
    row = datasets.load_from_disk(str(tmp_path / "ds"))[0]
    assert row["messages"] == [{"role": m["role"], "content": m["content"]} for m in record["actions"][0]["messages"]]
    assert row["seen"] == record["actions"][0]["messages"][-1]["content"]
    # the recorder keeps the text as "action" and the env's record under "record": both reach the row
    assert row["text"] == "The answer is \\boxed{3}."
    assert row["coach_score"] == record["actions"][0]["record"]["coach"]["score"] is not None
    assert json.loads(row["checks"]) == record["actions"][0]["record"]["checks"]


def test_a_torn_transcript_line_is_named(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"actions": []}\n{"actions": [\n')
    result = run_cli("export", "transcripts", str(path), "--out", str(tmp_path / "ds"))
    assert result.returncode == 2
    assert "line 2 is not JSON" in last_line(result)


GOOD = {"env_id": "MathChat-v0", "task_id": "t0", "seed": 3, "outcome": {"score": 1.0, "correct": True},
        "actions": [{"role": "solver", "text": "x", "reward": 1.0, "coach": {"score": 7.0, "ok": True},
                     "messages": [{"role": "user", "content": "q"}]}]}
MALFORMED = {  # a field of another type -> the line and the field, never a traceback
    "action_not_object": ({"actions": [1]}, "actions[0] is int, not an object"),
    "outcome_not_object": ({"outcome": "won"}, "outcome is str"),
    "episode_text": ({"episode": "x"}, 'episode is "x", expected an integer'),
    "seed_float": ({"seed": 1.5}, "seed is 1.5, expected an integer"),
    "reward_text": ({"actions": [{"role": "a", "reward": "high"}]}, 'actions[0].reward is "high", expected a number'),
    "coach_list": ({"actions": [{"coach": [1]}]}, "actions[0].coach is list"),
    "correct_text": ({"outcome": {"correct": "yes"}}, "outcome.correct is str"),
    "messages_text": ({"actions": [{"messages": "hi"}]}, "actions[0].messages is str"),
    "message_not_object": ({"actions": [{"messages": ["hi"]}]}, "actions[0].messages holds something other"),
    "huge_score": ({"outcome": {"score": 10**400}}, "outcome.score is"),
}


def export_main(*argv: str) -> tuple[int, str]:
    """`mappa export ...` in this process: (exit status, last line of stderr)."""
    import contextlib
    import io

    from mappa_cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["export", *argv])
    return status, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else ""


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_transcript_row_is_one_line_naming_its_field(tmp_path, case):
    pytest.importorskip("datasets")
    change, expected = MALFORMED[case]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, **change}) + "\n")
    status, line = export_main("transcripts", str(path), "--out", str(tmp_path / "ds"))
    assert status == 2
    assert line.startswith(f"mappa export: {path}: line 2: {expected}"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]  # nothing written


def test_an_export_never_writes_into_an_existing_folder(tmp_path):
    """Pointed at a checkpoint (or any folder holding files), an export refuses and changes nothing."""
    pytest.importorskip("datasets")
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "state.json").write_text('{"step": 3}')
    status, line = export_main("transcripts", str(path), "--out", str(ckpt))
    assert status == 2
    assert line == (f"mappa export: --out {ckpt} already exists and is not an empty folder; an export writes a new "
                    "folder only: choose another --out")
    assert [p.name for p in ckpt.iterdir()] == ["state.json"]
    assert (ckpt / "state.json").read_text() == '{"step": 3}'
    assert export_main("transcripts", str(path), "--out", str(path))[0] == 2  # a file is no folder either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "t.jsonl"]
    (tmp_path / "empty").mkdir()  # an empty folder (made for it) is fine
    assert export_main("transcripts", str(path), "--out", str(tmp_path / "empty"))[0] == 0
    assert (tmp_path / "empty" / "dataset_info.json").is_file()


def test_an_export_that_fails_midway_leaves_nothing(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")

    def save_then_fail(self, folder, **kwargs):
        Path(folder, "data-00000-of-00001.arrow").write_bytes(b"half")
        raise OSError(28, "No space left on device", folder)

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", save_then_fail)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    status, line = export_main("transcripts", str(path), "--out", str(tmp_path / "ds"))
    assert status == 2
    assert "no space left on device" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]  # neither ds nor its temporary folder


def test_a_training_episode_log_says_where_transcripts_come_from(tmp_path):
    path = tmp_path / "train_episodes.jsonl"
    path.write_text(json.dumps({"step": 1, "task_id": "t0", "answer": "3", "correct": True, "score": 1.0}) + "\n")
    result = run_cli("export", "transcripts", str(path), "--out", str(tmp_path / "ds"))
    assert result.returncode == 2
    assert last_line(result) == (
        f"mappa export: {path}: line 1 is not an episode record (no 'actions' list); `mappa train` logs only "
        "outcomes there: `mappa eval --team run:OUT_DIR` plays the trained team and writes transcripts.jsonl")


def test_a_lora_checkpoint_exports_each_adapter_merged_into_the_base(tiny_model_dir, tmp_path):
    """A LoRA run's checkpoint holds one peft adapter per group; the export is the base with it merged in."""
    import torch
    from transformers import AutoModelForCausalLM

    from mappa_train.config import load_config, to_dict
    from mappa_train.lora import add_adapters, save_adapter

    run = tmp_path / "run"
    cfg = load_config(None, [f"model.path={tiny_model_dir}", "model.policies=lora", "lora.rank=4", f"out_dir={run}"])
    ckpt = run / "checkpoints" / "step_000001"
    peft = add_adapters(AutoModelForCausalLM.from_pretrained(tiny_model_dir), cfg.lora, ["solver", "checkers"])
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:  # a trained adapter: B is no longer 0
                p.normal_(0, 0.5)
    for adapter in ("solver", "checkers"):
        save_adapter(peft, adapter, ckpt / adapter)
    (ckpt / "state.json").write_text(json.dumps({"step": 1}))
    (run / "config.json").write_text(json.dumps(to_dict(cfg)))
    result = run_cli("export", "checkpoint", str(run), "--out", str(tmp_path / "step1"))
    assert result.returncode == 0, result.stderr[-3000:]
    ids = torch.tensor([[5, 9, 13, 17, 21, 40]])
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)(ids).logits
    for adapter in ("solver", "checkers"):
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "step1" / adapter)
        peft.set_adapter(adapter)
        with torch.no_grad():
            assert torch.allclose(merged(ids).logits, peft(input_ids=ids).logits, atol=1e-4)
            assert not torch.allclose(merged(ids).logits, base, atol=1e-4)
        assert (tmp_path / "step1" / adapter / "tokenizer_config.json").is_file()
    assert json.loads((tmp_path / "step1" / "export.json").read_text())["policies"] == ["checkers", "solver"]


@pytest.mark.slow
def test_an_intermediate_checkpoint_exports_as_the_model_it_was(tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "run"
    trained = run_cli("train", *TINY, SPREAD_SCORES, f"out_dir={out}", "steps=2", "eval_every=0", "keep_checkpoints=2",
                      "log.tensorboard=false", "log.plot=false")
    assert trained.returncode == 0, trained.stderr[-3000:]
    newest = run_cli("export", "checkpoint", str(out), "--out", str(tmp_path / "step2"))
    assert newest.returncode == 0, newest.stderr[-3000:]
    first = run_cli("export", "checkpoint", str(out), "--step", "1", "--out", str(tmp_path / "step1"))
    assert first.returncode == 0, first.stderr[-3000:]
    final = load_file(out / "final" / "shared" / "model.safetensors")
    step2 = load_file(tmp_path / "step2" / "shared" / "model.safetensors")
    step1 = load_file(tmp_path / "step1" / "shared" / "model.safetensors")
    assert set(step2) == set(final)
    assert all(step2[k].equal(final[k]) for k in final)  # the last checkpoint is the final model
    assert not all(step1[k].equal(final[k]) for k in final)  # step 1 is an earlier model
    assert (tmp_path / "step1" / "shared" / "tokenizer_config.json").is_file()
    assert json.loads((tmp_path / "step1" / "export.json").read_text())["step"] == 1
    # and it is a model mappa eval loads by path
    played = run_cli("eval", "--team", f"hf:{tmp_path / 'step1' / 'shared'}", "--name", "s1", "--sets", "synthetic:1",
                     "--max-new-tokens", "8", "--out", str(tmp_path / "eval"), "--no-plots", "--no-progress",
                     "--preimport", "")
    assert played.returncode == 0, played.stderr[-3000:]
