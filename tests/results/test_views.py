from autotune.measure.measurement import Measurement
from autotune.results.views import progress_line
from autotune.tuning.records.progress import Progress


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

    from autotune import _reasons as reasons
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
        return TrialRecord(n, TrialState.COMPLETE, metrics=Measurement.of({"capacity": {
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


def test_ctrl_c_mid_step_names_the_step_it_stops():
    """A Ctrl-C during a capacity step names that step (index, kind, rate) and the trial,
    not the verdict of the step before it, cut at 100 characters inside a figure
    (`e2el_p95_ms 6932.5>25)`); after the last step it says it came after that one."""
    import io
    import logging
    import os
    import signal

    import pytest
    from rich.console import Console

    from autotune.measure.serversearch import STEP, StepNote
    from autotune.results import views

    def interrupted(*records: tuple[str, StepNote | None]) -> str:
        out = io.StringIO()
        logger = logging.getLogger("autotune")
        logger.setLevel(logging.INFO)
        with pytest.raises(KeyboardInterrupt):
            with views.live(Console(file=out, width=200), "test"):
                logger.info("trial 3: vllm serve /m --max-num-seqs 8")
                for text, note in records:
                    logger.info(text, extra={STEP: note} if note else None)
                os.kill(os.getpid(), signal.SIGINT)
        return out.getvalue()

    failed = StepNote("capacity step 2 (expand) at 12 req/s", starts=False)
    verdict = ("capacity step 2 (expand): 12 req/s -> 12 req/s offered, 9.1 achieved, fail: "
               "e2el_p95_ms 6932.5>2500; KV cache: usage 98 %")
    bisect = StepNote("capacity step 3 (bisect) at 9 req/s", starts=True)
    text = interrupted((verdict, failed), ("starting capacity step 3 (bisect) at 9 req/s: "
                                           "180 requests", bisect))
    assert "interrupted (trial 3, capacity step 3 (bisect) at 9 req/s): stopping the engine" \
        in text
    assert text.count("6932.5") == 1  # the verdict's own line, never the interruption's
    assert "starting capacity step 3" not in text  # the status line's, not a printed line
    assert "interrupted (trial 3, after capacity step 2 (expand) at 12 req/s)" in \
        interrupted((verdict, failed))


def test_a_long_phase_is_cut_between_words():
    from autotune.results.views import _cut

    said = _cut("capacity step 2 (expand): " + "fail: e2el_p95_ms 6932.5>2500 " * 4)
    assert len(said) <= 104 and said.endswith(" ...")
    assert all(word in ("...", "fail:", "e2el_p95_ms", "6932.5>2500") for word in
               said.split()[4:])  # every figure whole, or left out
    assert _cut("short") == "short"


def test_a_capacity_has_one_range_in_every_view():
    """The report's table, the ranking and an export's limits give a capacity the range its
    one line gives (`capacitytext.describe`: the interval), never the search's bracket
    beside it: `25 req/s (23.8-27.6)`, not also `25 (25-26.4)`."""
    from autotune.measure import capacitytext
    from autotune.results import show
    from autotune.results.report import tables
    from autotune.results.summary import Summary as Rows
    from autotune.tuning.records.snapshot import records
    from tests.paths import ROOT

    st = show.open_existing(str(ROOT / "studies" / "qwen3-4b-h200.db"))
    cell = next(c for head, c, _ in tables.columns(st)
                if head == "capacity at SLO (interval)")
    shown = [r for r in records(st) if r.capacity is not None and r.capacity.low]
    assert shown
    for r in shown:
        cap = r.capacity
        assert cell(r).startswith(capacitytext.describe(cap))
        assert f"({cap.low:.3g}-{cap.high:.3g})" not in cell(r) or cap.spread == 0
    for row in Rows.of(st).ranking:
        assert f"({row.span}" in row.text  # the ranking's interval is the line's


def test_a_floor_is_open_above_in_every_view():
    """A search whose every rate passed found no failing rate: its interval is `at least`
    its low end wherever it is printed, not a made-up upper end."""
    from optuna.trial import TrialState

    from autotune.measure import capacitytext
    from autotune.results import _limits as limits
    from autotune.results.summary import CapacityRow
    from autotune.tuning.records.trialrecord import TrialRecord

    floor = TrialRecord(0, TrialState.COMPLETE, constraints={"slo": -1.0},
                        metrics=Measurement.of({"capacity": {
                            "request_throughput": 20.0, "low": 20.0, "high": None,
                            "spread": 0.05, "saturated": True}}))
    assert floor.capacity is not None
    assert capacitytext.describe(floor.capacity).startswith("20 req/s (at least 19)")
    row = CapacityRow.of(floor)
    assert row is not None and row.span == "at least 19"
    lim = limits.derive(floor, {"e2el_p95_ms": 2500.0})
    assert "(interval at least 19)" in lim.lines()[0]
    assert capacitytext.span(2.5, 3.25) == "2.5-3.25"
