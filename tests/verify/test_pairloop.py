"""The loop every re-measurement runs its pairs through (`pairloop.run_pairs`)."""

from __future__ import annotations

from autotune._remeasurements import PairRun


def test_every_re_measurement_runs_its_pairs_through_one_loop():
    """`pairloop.run_pairs`: baseline then candidate, pair after pair, on one device; on two,
    each pair's runs at once with the candidate's device swapped every pair; the device
    waited for before each launch, the progress after each run."""
    import threading

    from optuna.trial import TrialState

    from autotune.tuning.records.trialrecord import TrialRecord
    from autotune.verify import _pairloop as pairloop
    from autotune.verify import validate

    cand, base = (TrialRecord(number=n, state=TrialState.COMPLETE) for n in (5, 0))
    order = validate.schedule(2)
    seen, waited, progress = [], [], []
    lock = threading.Lock()

    def measure(run: pairloop.Run) -> PairRun:
        with lock:
            seen.append(run)
        return PairRun(figure=run.trial.number * 10 + run.pair)

    runs = pairloop.run_pairs(order, cand, base, measure, wait=waited.append,
                           on_run=lambda done, total, r: progress.append((done, total)))
    assert [(r.role, r.pair, r.trial, r.figure) for r in runs] == [
        ("baseline", 0, 0, 0), ("candidate", 0, 5, 50), ("baseline", 1, 0, 1),
        ("candidate", 1, 5, 51)]
    assert [s.index for s in seen] == [1, 2, 3, 4] and waited == [None] * 4
    assert progress == [(1, 4), (2, 4), (3, 4), (4, 4)]
    seen.clear()
    waited.clear()
    side = pairloop.run_pairs(order, cand, base, measure, devices=[0, 1], wait=waited.append)
    placed = {(s.pair, s.role): (s.device, s.slot, s.index) for s in seen}
    assert placed == {(0, "candidate"): (0, (0, 2), 2), (0, "baseline"): (1, (1, 2), 1),
                      (1, "candidate"): (1, (1, 2), 4), (1, "baseline"): (0, (0, 2), 3)}
    assert [r.role for r in side] == ["baseline", "candidate"] * 2
    assert sorted(waited) == [0, 0, 1, 1]
