from autotune.results.views import progress_line
from autotune.tuning.study import Progress


def test_progress_line_estimates_what_is_left():
    assert progress_line(Progress(2, 5, 120.0, None, None, None)) == \
        "trial 2/5 | 2m00s elapsed, ~3m00s left"
    # a time box shorter than the estimate wins
    assert progress_line(Progress(2, 5, 120.0, 150.0, None, None)) == \
        "trial 2/5 | 2m00s elapsed, ~0m30s left"
    assert progress_line(Progress(5, 5, 300.0, None, None, None)) == "trial 5/5 | 5m00s elapsed"
