"""Every committed study's `show` (80 and 200 columns), `show --json`, report and exports, and
each command's exit code and stderr, are byte for byte those recorded in
tests/golden/outputs.json: a change of the code that changes what users read fails here
(scripts/outputs.py, docs/testing.md)."""

from __future__ import annotations

from scripts.outputs import HOW, check


def test_every_committed_study_gives_the_recorded_outputs(tmp_path):
    changed, libraries = check(tmp_path)
    assert not changed, "\n".join([
        f"{len(changed)} output(s) of the committed studies differ from "
        "tests/golden/outputs.json:", *changed,
        *(f"note: {line}" for line in libraries), HOW])
