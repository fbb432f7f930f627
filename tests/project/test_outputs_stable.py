"""Every committed study's `show` (80 and 200 columns), `show --json`, report and exports, and
each command's exit code and stderr, are byte for byte those recorded in
tests/golden/outputs.json: a change of the code that changes what users read fails here
(scripts/outputs.py, docs/testing.md). `make setup` installs the libraries that shape them
at the versions they were recorded with (tests/golden/versions.txt), so the check always
runs: a difference fails, and names any library whose installed version is not the
recorded one."""

from __future__ import annotations

import json

from packaging.requirements import Requirement

from scripts.outputs import GOLDEN, HOW, LIBRARIES, check
from tests.paths import ROOT

PINS = ROOT / "tests" / "golden" / "versions.txt"


def pinned() -> dict[str, str]:
    """The versions tests/golden/versions.txt pins, by distribution name."""
    found = {}
    for line in PINS.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{PINS}: {line!r} is not an exact pin"
            found[req.name] = spec.version
    return found


def test_every_committed_study_gives_the_recorded_outputs(tmp_path):
    changed, libraries = check(tmp_path)
    assert not changed, "\n".join([
        f"{len(changed)} output(s) of the committed studies differ from "
        "tests/golden/outputs.json:", *changed,
        *(f"note: {line} (make setup installs tests/golden/versions.txt's)"
          for line in libraries), HOW])


def test_setup_pins_the_versions_the_outputs_were_recorded_with():
    """The pins and the recorded versions are one list: re-recording the outputs with a new
    release of plotly (scripts/outputs.py --update) fails here until versions.txt says so."""
    recorded = json.loads(GOLDEN.read_text())["versions"]
    pins = pinned()
    assert set(pins) <= set(LIBRARIES)
    assert {name: recorded[name] for name in pins} == pins
    assert set(LIBRARIES) - set(pins) == {"numpy"}  # left to vLLM's resolver (numba caps it)
