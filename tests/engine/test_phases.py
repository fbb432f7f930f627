"""The start-up phase clock on real logs: the CPU build's and three H200 trials' (vLLM 0.26,
Qwen3-4B, the start-ups of studies/qwen3-4b-h200-sustained trials 0-2, whose whole logs
the repository does not keep).

Each log is fed line by line at the second its own timestamp says, so the phases must come
out as the differences between the timestamps of the lines that end them."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from autotune.engine.phases import PHASES, PhaseClock
from tests.paths import DATA

LOGS = DATA / "logs"
CPU = LOGS / "cpu-startup-ok.log"
STAMP = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG) (\d\d-\d\d \d\d:\d\d:\d\d)")


def _replay(path: Path, launch_before: float = 3.0) -> tuple[PhaseClock, float]:
    """Feed `path` line by line at its own timestamps (the first stamped line at 0, the
    launch `launch_before` s earlier); the clock and the last stamp."""
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    stamps = [STAMP.search(line) for line in lines]
    first = next(datetime.strptime(m.group(1), "%m-%d %H:%M:%S") for m in stamps if m)
    clock, now = PhaseClock(-launch_before), -launch_before
    for line, m in zip(lines, stamps, strict=True):
        if m:
            now = (datetime.strptime(m.group(1), "%m-%d %H:%M:%S") - first).total_seconds()
        clock.feed(line, now)
    return clock, now


def test_cpu_log_splits_into_every_phase():
    clock, last = _replay(CPU)
    phases = clock.phases(end=last + 0.5)
    # The CPU build shows every marker, worker included, but the compile (--enforce-eager)
    # and CUDA graphs (no GPU): their time folds into the next phase
    assert list(phases) == [p for p in PHASES if p not in ("compile", "graphs")]
    assert phases["imports"] == 3.0  # launch to vLLM's first line
    assert phases["inspect"] == 0.0  # the model inspection was cached
    assert phases["engine_core"] > 0 and phases["worker"] > 0  # the two spawns
    assert phases["first_request"] == 0.5
    assert sum(phases.values()) == pytest.approx(last + 3.5)


def test_a_compiled_cpu_start_shows_its_compile():
    clock, last = _replay(LOGS / "cpu-startup-compiled.log")
    phases = clock.phases(end=last)
    assert list(phases) == [p for p in PHASES if p != "graphs"]
    # "Warming up model for the compilation..." at :16, "Warming up done." at :45... as the
    # log stamps them: weights loaded at 05:18:31, the compile's warm-up done at 05:18:45
    assert phases["compile"] == 14.0
    assert phases["kv_cache"] == 0.0  # sized from VLLM_CPU_KVCACHE_SPACE, no profile
    assert sum(phases.values()) == pytest.approx(last + 3.0)


@pytest.mark.parametrize("trial", ["0", "1", "2"])
def test_h200_log_has_no_worker_phase_and_adds_up(trial):
    log = LOGS / f"h200-startup-trial{trial}.log"
    clock, last = _replay(log)
    phases = clock.phases(end=last)
    # One GPU: the engine core runs its worker in-process, so there is no worker phase.
    assert "worker" not in phases
    assert list(phases) == [p for p in PHASES if p != "worker"]
    assert sum(phases.values()) == pytest.approx(last + 3.0)
    # torch.compile (cold on these trials), the memory profile and the CUDA graphs apart
    assert phases["compile"] > 15 and phases["graphs"] >= 4
    assert 0 < phases["kv_cache"] <= 3
    text = log.read_text(errors="replace")
    # Trial 2 ran several API servers: the launcher's lines carry no process prefix.
    assert ("(APIServer pid=" in text) == (trial != "2")


def test_h200_first_trial_paid_for_model_inspection():
    first = _replay(LOGS / "h200-startup-trial0.log")[0].phases(end=1e9)
    later = _replay(LOGS / "h200-startup-trial1.log")[0].phases(end=1e9)
    assert first["inspect"] == 22.0 and later["inspect"] == 0.0  # vLLM's cache, kept


def test_a_marker_split_across_pieces_is_seen_once_whole():
    clock = PhaseClock(0.0)
    clock.feed("(EngineCore pid=1) INFO 11-30 09:54:3", 1.0)  # half a line: not yet
    assert "engine_core" not in clock.seen
    clock.feed("9 [core.py:116] Initializing\n", 2.0)
    assert clock.seen["engine_core"] == 2.0 and clock.seen["imports"] == 2.0


def test_missing_markers_fold_into_the_next_phase():
    clock = PhaseClock(10.0)
    clock.feed("INFO 11-30 09:54:39 [x.py:1] hi\n", 12.0)
    clock.feed("Starting vLLM server on http://x\n", 30.0)
    assert clock.phases(end=31.0) == {"imports": 2.0, "serve": 18.0, "first_request": 1.0}
    assert PhaseClock(5.0).phases(end=9.0) == {"first_request": 4.0}


def test_a_failed_start_ends_in_a_failed_phase():
    clock = PhaseClock(0.0)
    clock.feed("INFO 11-30 09:54:39 [x.py:1] hi\n(EngineCore pid=7) INFO 11-30 09:54:45 x\n", 6.0)
    assert clock.phases(end=9.0, failed=True) == {"imports": 6.0, "engine_core": 0.0,
                                                  "failed": 3.0}
