"""How a trial's launch shares compiled code (`trial.engine`): the study's cache folder, the
flags that hold the compile key and the environment, on this machine's installed engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.config import Scenario
from autotune.engine import compilecache
from autotune.engine.info import installed
from autotune.tuning import trial as trial_mod


def scenario(**engine: Any) -> Scenario:
    return Scenario.model_validate({
        "model": {"tiny": "tiny"}, "engine": {"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, **engine},
        "space": {"max-num-batched-tokens": {"choices": [256, 2048]}}})


def test_the_study_folder_places_the_cache(tmp_path):
    sc = trial_mod.with_study_folder(scenario(), tmp_path / "s")
    assert sc.engine.compile_cache == str((tmp_path / "s" / "compile-cache").resolve())
    mine = trial_mod.with_study_folder(scenario(compile_cache="rel/cache"), tmp_path)
    assert mine.engine.compile_cache == str(Path("rel/cache").resolve())
    own = scenario(compile_cache="vllm")
    assert trial_mod.with_study_folder(own, tmp_path) is own


def test_a_cpu_launch_gets_the_studys_inductor_cache_and_its_bound(tmp_path):
    sc = trial_mod.with_study_folder(scenario(compile_key="bounded"), tmp_path)
    eng = trial_mod.engine(sc, "/m", {"max-num-batched-tokens": 256}, tmp_path / "e.log")
    dist, version = installed()
    folder = tmp_path / "compile-cache" / f"{dist}-{version}-cpu"
    assert eng.warm.cache == str(folder.resolve())
    assert eng.warm.flags == {"max-num-batched-tokens": 2048, "max-num-scheduled-tokens": 256}
    assert eng.flags["max-num-batched-tokens"] == 2048  # what vLLM is given
    assert eng.server.env[compilecache.ROOT] == eng.warm.cache
    assert eng.server.env[compilecache.AOT] == "0"  # the CPU build: Inductor's own cache
    assert compilecache.START_METHOD not in eng.server.env  # the CPU build always spawns
    assert eng.server.fallback_env is None
    assert eng.server.env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the scenario's env kept


def test_vllms_own_launch_adds_nothing(tmp_path):
    sc = scenario(compile_cache="vllm", compile_key="vllm")
    eng = trial_mod.engine(sc, "/m", {"max-num-batched-tokens": 256}, tmp_path / "e.log")
    assert eng.warm == compilecache.WarmLaunch({}, None, {})
    assert eng.flags == {"max-num-batched-tokens": 256}
    assert compilecache.ROOT not in eng.server.env


def test_an_unplaced_study_cache_is_vllms_own(tmp_path):
    """run_trial without a study (bench, a test) has no folder to place `study` in."""
    eng = trial_mod.engine(scenario(), "/m", {}, tmp_path / "e.log")
    assert eng.warm.cache is None and compilecache.ROOT not in eng.server.env
