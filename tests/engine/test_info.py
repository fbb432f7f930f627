"""What the installed engine accepts, read from vLLM's own parser and kept per version."""

from __future__ import annotations

import json

from autotune.engine import info


def test_a_fresh_cache_reads_the_flags_from_vllm_and_keeps_them(tmp_path, monkeypatch):
    """The read (an import of vLLM in a child process, 5 s of a CPU: once here, while the
    GPU scripts' dry runs are given the shared cache) is written where the next command
    finds it; the answer is the one every other test reads from the shared cache."""
    shared = info.engine_info()
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    fresh = info.engine_info()
    path = info.cache_path(fresh.distribution, fresh.version)
    assert path.parent == tmp_path and path.is_file()
    assert fresh == shared
    assert fresh.knows("max-num-seqs") and fresh.knows("no-enable-prefix-caching")
    assert "fp8" in (fresh.choices("kv-cache-dtype") or [])
    assert "max-num-seqs" in json.loads(path.read_text())  # plain JSON, one entry a flag
    # The parser takes any --block-size; the CPU build's attention kernels say which work.
    if fresh.device == "cpu":
        assert fresh.flags["block-size"].multiple_of == {"cpu": [32]}
        assert fresh.multiples("block-size") == [32]
