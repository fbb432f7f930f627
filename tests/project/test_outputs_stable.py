"""Every committed study's `show` (80 and 200 columns), `show --json`, report and exports, and
each command's exit code and stderr, are byte for byte those recorded in
tests/golden/outputs.json: a change of the code that changes what users read fails here
(scripts/outputs.py, docs/testing.md)."""

from __future__ import annotations

import pytest

from scripts.outputs import HOW, check


def test_every_committed_study_gives_the_recorded_outputs(tmp_path):
    changed, libraries = check(tmp_path)
    if changed and libraries:
        # A release of plotly, rich or Optuna redraws outputs with no change of autotune's
        # code: the recorded digests are then the library's, not ours, to judge.
        pytest.skip("recorded with other library versions (" + "; ".join(libraries)
                    + "): run scripts/outputs.py --update on the commit before a change")
    assert not changed, "\n".join([
        f"{len(changed)} output(s) of the committed studies differ from "
        "tests/golden/outputs.json:", *changed,
        *(f"note: {line}" for line in libraries), HOW])
