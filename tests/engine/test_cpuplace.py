"""Where side-by-side CPU engines compute: one share of the physical cores each."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engine import cpuplace


def _sysfs(root: Path, layout: dict[int, tuple[int, int]]) -> Path:
    """A /sys/devices/system/cpu tree: logical CPU -> (package, core)."""
    for cpu, (package, core) in layout.items():
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{package}\n")
        (topo / "core_id").write_text(f"{core}\n")
    return root


def test_one_logical_cpu_per_physical_core_the_highest_sibling(tmp_path):
    # 4 cores with 2 threads each, siblings numbered n and n+4 (the usual x86 layout)
    layout = {cpu: (0, cpu % 4) for cpu in range(8)}
    assert cpuplace.physical_cores(range(8), _sysfs(tmp_path, layout)) == [4, 5, 6, 7]
    # only the CPUs this process may use count
    assert cpuplace.physical_cores([0, 1, 5], _sysfs(tmp_path / "b", layout)) == [0, 5]


def test_two_packages_with_the_same_core_ids_are_different_cores(tmp_path):
    layout = {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}
    assert cpuplace.physical_cores(range(4), _sysfs(tmp_path, layout)) == [0, 1, 2, 3]


def test_without_a_topology_every_logical_cpu_is_a_core(tmp_path):
    assert cpuplace.physical_cores([3, 1, 2], tmp_path / "none") == [1, 2, 3]


@pytest.mark.parametrize(("cores", "slots", "want"), [
    ([0, 1], 2, ["0", "1"]),  # the 2-core test host: a core each
    (list(range(16)), 2, ["0,1,2,3,4,5,6", "8,9,10,11,12,13,14"]),  # 7 and 7, 7 and 15 left
    (list(range(8)), 3, ["0", "2", "4"]),  # runs of 2, less one each; 6 and 7 unused
    ([0, 1], 3, ["0", "1", "0"]),  # more engines than cores: in turn
    ([4, 5, 6, 7], 4, ["4", "5", "6", "7"]),
])
def test_each_engine_gets_its_own_run_of_cores(cores, slots, want):
    got = [cpuplace.bind(slot, slots, cores) for slot in range(slots)]
    assert got == want
    if len(cores) >= slots:  # no core bound twice
        ids = [c for text in got for c in text.split(",")]
        assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("slot", "slots", "cores"), [(2, 2, [0, 1]), (-1, 2, [0, 1]),
                                                       (0, 2, [])])
def test_a_slot_outside_the_run_is_refused(slot, slots, cores):
    with pytest.raises(ValueError):
        cpuplace.bind(slot, slots, cores)


def test_placement_keeps_a_binding_the_user_chose(monkeypatch):
    monkeypatch.delenv(cpuplace.VAR, raising=False)
    # the CPU build is what is installed here
    assert cpuplace.placement(1, 2, {}, cores=[0, 1]) == {cpuplace.VAR: "1"}
    assert cpuplace.placement(0, 1, {}, cores=[0, 1]) == {}  # alone: vLLM's own `auto`
    assert cpuplace.placement(1, 2, {cpuplace.VAR: "nobind"}, cores=[0, 1]) == {}
    monkeypatch.setenv(cpuplace.VAR, "0-1")
    assert cpuplace.placement(1, 2, {}, cores=[0, 1]) == {}


def test_a_gpu_build_is_not_placed(monkeypatch):
    monkeypatch.delenv(cpuplace.VAR, raising=False)
    monkeypatch.setattr(cpuplace.info, "installed", lambda: ("vllm", "0.26.0"))
    assert cpuplace.placement(1, 2, {}, cores=[0, 1]) == {}
