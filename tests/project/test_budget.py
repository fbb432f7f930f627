"""The report of tests over a minute (`tests/budget.py`): names as the report gives them,
newcomers flagged, and the report printed by a real pytest run; and the dealing of the
pinned `alone` phase's groups (`tests/conftest.py`)."""

from __future__ import annotations

import subprocess
import sys

from tests import budget
from tests.conftest import ALONE_PLAN, ALONE_S, SHARED, dealt
from tests.paths import ROOT


def test_xdist_groups_are_left_out_of_the_name():
    assert budget.name("tests/test_a.py::test_b@cpu_study") == "tests/test_a.py::test_b"
    assert budget.name("tests/test_a.py::test_b[x@y]") == "tests/test_a.py::test_b[x@y]"


def test_a_slow_test_without_a_reason_is_flagged_as_new():
    known = next(iter(budget.REASONS))
    slow = budget.over({known: 90.0, "tests/t.py::new": 75.0, "tests/t.py::quick": 3.0})
    assert [t for t, _, _ in slow] == [known, "tests/t.py::new"]
    assert slow[0][2] == budget.REASONS[known]
    assert slow[1][2].startswith("NEW: no reason recorded")


def test_a_run_prints_the_report(tmp_path):
    root = ROOT
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(root)!r})\n"
        "from tests import budget\nbudget.LIMIT_S = 0.2\n"
        "from tests.budget import pytest_runtest_logreport, pytest_terminal_summary\n")
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_slow():\n"
                                           "    time.sleep(0.3)\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-p", "no:xdist", str(tmp_path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout
    assert "tests over 0 s (tests/budget.py)" in proc.stdout
    assert "test_slow.py::test_slow: NEW: no reason recorded" in proc.stdout


def test_every_reason_names_a_test_that_exists():
    root = ROOT
    for test in budget.REASONS:
        path, _, func = test.partition("::")
        assert f"def {func.split('[')[0]}(" in (root / path).read_text(), test


def test_the_alone_groups_are_dealt_as_planned_and_the_rest_to_the_least_loaded_worker():
    shares = dealt(set(ALONE_S) | {"tests.new_engine"}, 2)
    assert set(shares.values()) == {"pinned-0", "pinned-1"}
    assert all(shares[g] == f"pinned-{w}" for g, w in ALONE_PLAN.items())
    load = {s: sum(ALONE_S.get(g, 60.0) for g in shares if shares[g] == s) for s in
            shares.values()}
    # no move of one group from the fuller worker to the other would shorten the phase
    assert all(ALONE_S.get(g, 60.0) >= abs(load["pinned-0"] - load["pinned-1"])
               for g in shares)
    assert set(dealt(set(ALONE_S), 1).values()) == {"pinned-0"}
    assert set(dealt(set(ALONE_S), 3).values()) == {"pinned-0", "pinned-1", "pinned-2"}


def test_the_readme_block_is_over_before_the_warm_restart_checks_compiles():
    """Each worker runs its groups in path order: the README's block (first on its worker)
    must take less time than what precedes the warm-restart check on the other."""
    shares = dealt(set(ALONE_S), 2)
    paths = {g: next((ROOT / "tests").rglob(f"{g}.py")) for g in ALONE_S if g not in SHARED}
    readme, check = "test_readme_engine", "test_warmcheck_engine"
    assert shares[readme] != shares[check]
    before = [g for g in paths if shares[g] == shares[check] and paths[g] < paths[check]]
    assert not [g for g in paths if shares[g] == shares[readme] and paths[g] < paths[readme]]
    assert ALONE_S[readme] < sum(ALONE_S[g] for g in before)


def test_every_timed_alone_group_is_one_that_exists():
    """`ALONE_S` names groups as `tests/conftest.py` makes them: a shared engine's fixture, or
    an engine test module's `__name__`, its file name (the test folders are no packages)."""
    assert not (ROOT / "tests" / "__init__.py").exists()
    for group in set(ALONE_S) - set(SHARED):
        (path,) = (ROOT / "tests").rglob(f"{group}.py")
        assert "pytest.mark.alone" in path.read_text(), group
