"""The shipped scenarios load and are valid for the installed engine (the GPU ones as it
reads on a GPU machine)."""

import dataclasses

import pytest

from autotune import config
from autotune.engine.info import engine_info
from autotune.tuning.policy import space
from tests.paths import ROOT

SHIPPED = sorted((ROOT / "search_spaces").glob("*.yaml"))


@pytest.fixture(autouse=True)
def any_hub_id(monkeypatch):
    """A Hugging Face id is taken as it is: whether this machine can fetch the model (no
    network here) says nothing of the file (`config.hub_problem`, tests/basics/test_hub.py)."""
    monkeypatch.setattr(config, "hub_problem", lambda *args, **kwargs: None)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_scenario_is_valid(path):
    scenario = config.load(path)
    assert scenario.name == path.stem
    info = engine_info()
    if not path.stem.startswith("cpu-"):  # a GPU's kernels take other block sizes (16)
        info = dataclasses.replace(info, device="cuda")
    space.check_against_engine(scenario, info, path)


def test_article_baselines_use_corrected_flags():
    scenario = config.load(ROOT / "search_spaces/qwen3-4b-4090d.yaml")
    names = [b.name for b in scenario.baselines]
    assert names == ["article-000", "article-001", "article-004"]
    flags = {b.name: b.flags for b in scenario.baselines}
    assert flags["article-000"]["kv-cache-dtype"] == "fp8"  # "int8" does not exist
    assert flags["article-000"]["speculative-config"]["method"] == "ngram"
    assert not any("swap-space" in f for f in flags.values())
