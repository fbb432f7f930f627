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
    from autotune.tuning.record import TrialRecord

    error = ("exited with code 1 during start-up: huggingface_hub.errors."
             "LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder")
    failed = TrialRecord(0, TrialState.PRUNED, reason=reasons.FAILED_TO_START, detail=error)
    assert progress_line(Progress(1, 5, 60.0, None, failed, None)).endswith(
        f"last #0 pruned (failed_to_start: {error})")
    oom = TrialRecord(1, TrialState.PRUNED, reason=reasons.OOM, detail="No available memory")
    assert progress_line(Progress(2, 5, 60.0, None, oom, None)).endswith(
        "last #1 pruned (oom)")
