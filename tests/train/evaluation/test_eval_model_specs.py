"""`mappa eval --team hf:MODEL` takes every model `mappa train model.path=MODEL` takes: one resolver, one
vocabulary (issue 27). Through the real CLI, in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FAST = ["--no-plots", "--preimport", "", "--no-progress", "--max-new-tokens", "8", "--sets", "synthetic:1"]


def run_cli(*argv: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "mappa_cli", *argv], capture_output=True, text=True, env=environ,
                          timeout=900)


def test_hf_tiny_is_the_resolvers_tiny_model(tmp_path):
    result = run_cli("eval", "--team", "hf:tiny", "--name", "tiny", "--out", str(tmp_path), *FAST,
                     MAPPA_CACHE=str(tmp_path / "cache"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cache" / "models" / "tiny-seed0" / "config.json").is_file()
    results = json.loads((tmp_path / "tiny" / "results.json").read_text())
    assert results["team"] == "hf:tiny"
    assert [s["episodes"] for s in results["sets"].values()] == [1]


def test_a_word_the_resolver_does_not_know_lists_what_it_knows(tmp_path):
    result = run_cli("eval", "--team", "hf:smollm3", "--out", str(tmp_path), *FAST, HF_HUB_OFFLINE="1")
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("mappa eval: team spec hf:smollm3 is not a model directory, a .gguf file, a hub id")
    assert "built-in model (tiny, smollm2-135m)" in line


def test_missing_gguf_file(tmp_path):
    result = run_cli("eval", "--team", f"vllm:{tmp_path}/m.gguf", "--out", str(tmp_path), *FAST)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"mappa eval: team spec vllm:{tmp_path}/m.gguf: no such GGUF file {tmp_path}/m.gguf")


@pytest.mark.realmodel
def test_hf_smollm2_is_the_built_in_real_model(tmp_path):
    """docs/real-models.md: `smollm2-135m` is the built-in real model, by that name in `mappa eval` too."""
    result = run_cli("eval", "--team", "hf:smollm2-135m", "--name", "smol", "--out", str(tmp_path), *FAST)
    assert result.returncode == 0, result.stderr
    results = json.loads((tmp_path / "smol" / "results.json").read_text())
    assert [s["episodes"] for s in results["sets"].values()] == [1]
    transcript = json.loads((tmp_path / "smol" / "transcripts.jsonl").read_text().splitlines()[0])
    assert transcript["actions"][0]["text"].strip()  # the real model wrote something
