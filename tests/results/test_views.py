from autotune.measure.summary import Summary
from autotune.results.views import progress_line
from autotune.tuning.study import Progress


def test_progress_line_estimates_what_is_left():
    assert progress_line(Progress(2, 5, 120.0, None, None, None)) == \
        "trial 2/5 | 2m00s elapsed, ~3m00s left"
    # a time box shorter than the estimate wins
    assert progress_line(Progress(2, 5, 120.0, 150.0, None, None)) == \
        "trial 2/5 | 2m00s elapsed, ~0m30s left"
    assert progress_line(Progress(5, 5, 300.0, None, None, None)) == "trial 5/5 | 5m00s elapsed"


def test_a_trial_that_failed_to_start_says_why_in_the_progress_line():
    """The reason's name alone does not say what went wrong: the engine's last error does."""
    from optuna.trial import TrialState

    from autotune import reasons
    from autotune.tuning.records.trialrecord import TrialRecord

    error = ("exited with code 1 during start-up: huggingface_hub.errors."
             "LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder")
    failed = TrialRecord(0, TrialState.PRUNED, reason=reasons.FAILED_TO_START, detail=error)
    assert progress_line(Progress(1, 5, 60.0, None, failed, None)).endswith(
        f"last #0 pruned (failed_to_start: {error})")
    oom = TrialRecord(1, TrialState.PRUNED, reason=reasons.OOM, detail="No available memory")
    assert progress_line(Progress(2, 5, 60.0, None, oom, None)).endswith(
        "last #1 pruned (oom)")


def test_the_live_line_gives_capacities_as_show_does():
    """The best so far and the last trial by their capacity, in `capacitytext.describe`'s
    figures, the best as a ratio to vLLM's defaults with its interval."""
    from optuna.trial import TrialState

    from autotune.measure.capacityrecord import CapacityRecord
    from autotune.tuning.records.trialrecord import DEFAULTS, TrialRecord

    def rec(n: int, low: float, high: float, **kw) -> TrialRecord:
        return TrialRecord(n, TrialState.COMPLETE, metrics=Summary.of({"capacity": {
            "request_throughput": low, "low": low, "high": high, "spread": 0.0}}),
                           constraints={"slo": -1.0}, **kw)

    defaults, best = rec(0, 10.0, 11.0, baseline=DEFAULTS), rec(1, 20.0, 21.0)
    line = progress_line(Progress(2, 5, 60.0, None, best, best, defaults))
    assert "best #1 20 req/s, 2.00x defaults (1.82-2.10x)" in line
    assert line.endswith("last #1 ok: 20 req/s (20-21)")
    assert "best #0 10 req/s (vLLM's defaults)" in progress_line(
        Progress(1, 5, 60.0, None, defaults, defaults, defaults))
    assert isinstance(best.capacity, CapacityRecord)


def test_ctrl_c_says_at_once_what_it_stops(capsys):
    """The first Ctrl-C names what it interrupts before the engine's teardown runs, then
    interrupts as before; the run's own progress lines go to its log only once."""
    import io
    import logging
    import os
    import signal

    import pytest
    from rich.console import Console

    from autotune.results import views

    out = io.StringIO()
    console = Console(file=out, width=200)
    logger = logging.getLogger("autotune")
    logger.setLevel(logging.INFO)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with views.live(console, "test"):
            logger.info("trial 3: vllm serve /m --max-num-seqs 8")
            logger.info("printed by the command", extra={views.PRINTED: True})
            os.kill(os.getpid(), signal.SIGINT)  # handled at once, in this thread
    text = out.getvalue()
    assert "interrupted (trial 3: starting the engine and waiting for it to serve): stopping " \
           "the engine" in text
    assert "printed by the command" not in text  # the narrator does not echo it
    assert signal.getsignal(signal.SIGINT) is before  # restored
