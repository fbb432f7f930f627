"""The GPU machine's scripts (scripts/gpu/), run here end to end without a GPU.

`boxes.sh` runs two time boxes side by side as it does on a two-GPU machine, each
`box.sh` runs a real `autotune tune` into its own study database, and `fetch-back.sh`
puts what came back in place. The scenario prunes every trial before launch (its fixed
max-model-len is shorter than the workload's requests), so no engine starts: what is
tested is the scripts' plumbing, not vLLM.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli._tune import NO_ANSWER
from autotune.engine.info import cache_path, engine_info
from tests.paths import ROOT


def _trials(db: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT number, state FROM trials ORDER BY number").fetchall()


def _checkout(root: Path, tiny_model: Path) -> Path:
    """A checkout whose code is this one's and whose studies/ is its own."""
    root.mkdir()
    for name in ("scripts", "autotune"):
        (root / name).symlink_to(ROOT / name)
    spaces = root / "search_spaces"
    spaces.mkdir()
    for study in ("box-a", "box-b"):
        (spaces / f"{study}.yaml").write_text(f"""
name: {study}
model: {{path: {tiny_model}}}
engine: {{flags: {{max-model-len: 64, enforce-eager: true}}}}
space:
  max-num-seqs: {{choices: [1, 4]}}
workload: {{input_len: 64, output_len: 32, num_requests: 8}}
objective: {{mode: weighted, latency: e2el_p95, slos: {{e2el_p95_ms: 800}}}}
""")
    return root


def _seed_flags(cache: Path) -> None:
    """The installed engine's flags, read once here, in a box's fresh cache: otherwise each
    box reads them from vLLM's parser (an import of vLLM, 3-5 s of a CPU), which is the
    engine's business, not the scripts'."""
    info = engine_info()
    known = cache_path(info.distribution, info.version)
    (cache / "autotune").mkdir(parents=True, exist_ok=True)
    shutil.copy(known, cache / "autotune" / known.name)


def _installed_pack(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(parts, site, out): a pack already installed on the machine, and the $OUT folder."""
    parts, site, out = tmp_path / "parts", tmp_path / "site", tmp_path / "out"
    parts.mkdir()
    site.mkdir()
    (parts / "at-site.sha256").write_text("0" * 64 + "  at-site.tar.xz\n")
    (parts / "at-site.nparts").write_text("1\n")
    (site / ".at-site-ok").write_text((parts / "at-site.sha256").read_text())
    return parts, site, out


@pytest.fixture
def checkout(tmp_path: Path, tiny_model: Path) -> Path:
    """The checkout as the GPU machine gets it."""
    return _checkout(tmp_path / "device", tiny_model)


def test_two_boxes_side_by_side_then_fetch_back(checkout: Path, tmp_path: Path,
                                                tiny_model: Path):
    parts, site, out = _installed_pack(tmp_path)
    for i in range(2):
        _seed_flags(tmp_path / f"cache-gpu{i}")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "BOX_NGPU": "2", "BOX_MODEL": "none", "BOX_PARTS": str(parts),
           "BOX_SITE": str(site), "BOX_BACKUP": str(tmp_path / "backup"),
           "BOX_CACHE_ROOT": str(tmp_path / "cache"), "OUT": str(out), "BOX_LIMIT_S": "300"}
    run = subprocess.run(
        ["bash", "scripts/gpu/boxes.sh", "search_spaces/box-a.yaml --trials 2",
         "search_spaces/box-b.yaml --trials 3"],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    log = run.stdout + run.stderr
    # every trial is pruned before launch (max-model-len 64): a study with no answer, which
    # `tune` exits with (4, `autotune.cli._tune.NO_ANSWER`) and the boxes pass on
    assert run.returncode == NO_ANSWER, log
    assert "[boxes] INSTALLED" in log and f"[boxes] done, exit {NO_ANSWER}" in log
    for i, study, n in ((0, "box-a", 2), (1, "box-b", 3)):
        assert re.search(rf"^\[gpu{i}\] \[box \+\d+s\] GPU {i}: ", log, re.M), log
        got = {p.name for p in (out / f"gpu{i}").iterdir()}
        assert got == {"box-summary.json", "box.log", f"{study}-files.tar.gz", f"{study}.db"}
        trials = _trials(out / f"gpu{i}" / f"{study}.db")
        assert len(trials) == n and {s for _, s in trials} == {"PRUNED"}, trials
        summary = json.loads((out / f"gpu{i}" / "box-summary.json").read_text())
        assert summary["study"] == study and summary["box"]["tune_rc"] == NO_ANSWER
        assert (tmp_path / f"cache-gpu{i}" / "autotune").is_dir()  # each GPU its own caches
    # here: the databases, trial files and box logs land in studies/
    here = _checkout(tmp_path / "here", tiny_model)
    for i, study, n in ((0, "box-a", 2), (1, "box-b", 3)):
        back = subprocess.run(["bash", "scripts/gpu/fetch-back.sh", str(out / f"gpu{i}")],
                              cwd=here, capture_output=True, text=True, timeout=120,
                              env={**env, "PYTHON": sys.executable})
        assert back.returncode == 0, back.stderr
        assert f"studies/{study}.db: 0 -> {n} trials" in back.stdout
        assert len(_trials(here / "studies" / f"{study}.db")) == n
        assert (here / "studies" / study / "tune.log").is_file()
        assert len(list((here / "studies" / study / "boxes").glob("*.json"))) == 1
    # the same box fetched again within the second keeps both records (no overwrite)
    for _ in range(2):
        subprocess.run(["bash", "scripts/gpu/fetch-back.sh", str(out / "gpu1")], cwd=here,
                       capture_output=True, text=True, timeout=120, check=True,
                       env={**env, "PYTHON": sys.executable})
    assert len(list((here / "studies" / "box-b" / "boxes").glob("*.log"))) == 3
    # the next call's checkout carries those databases, and its box resumes the study
    (checkout / "studies" / "box-a.db").unlink()
    (checkout / "studies" / "box-a.db").write_bytes((here / "studies" / "box-a.db").read_bytes())
    again = subprocess.run(["bash", "scripts/gpu/boxes.sh", "search_spaces/box-a.yaml --trials 1"],
                           cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == NO_ANSWER, again.stdout + again.stderr
    assert "study box-a: 2 trial(s) so far" in again.stdout
    assert len(_trials(out / "gpu0" / "box-a.db")) == 3


def test_more_boxes_than_gpus_is_refused(checkout: Path):
    run = subprocess.run(["bash", "scripts/gpu/boxes.sh", "a", "b"], cwd=checkout,
                         env={**os.environ, "BOX_NGPU": "1"}, capture_output=True, text=True)
    assert run.returncode == 2 and "2 boxes for 1 GPU(s)" in run.stderr


def test_a_job_longer_than_a_call_runs_from_its_own_copy(checkout: Path, tmp_path: Path):
    """`BOX_VERB=job`: the job starts once under setsid from a copy of the checkout; a call
    that ends before it leaves it running, a later one waits for it and returns its study,
    its log and its exit code. Here the job is the last phases of `tune`
    (`scripts/gpu/lastphases.py`) on a study whose every trial was pruned: both phases are
    skipped, saying why, and it exits 1."""
    parts, site, out = _installed_pack(tmp_path)
    _seed_flags(tmp_path / "cache")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "BOX_MODEL": "none", "BOX_PARTS": str(parts), "BOX_SITE": str(site),
           "BOX_BACKUP": str(tmp_path / "backup"), "BOX_CACHE": str(tmp_path / "cache"),
           "OUT": str(out), "BOX_LIMIT_S": "300", "BOX_JOBDIR": str(tmp_path / "job")}
    first = subprocess.run(["bash", "scripts/gpu/box.sh", "search_spaces/box-a.yaml",
                            "--trials", "1"], cwd=checkout, env=env, capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == NO_ANSWER, first.stdout + first.stderr
    job = {**env, "BOX_VERB": "job", "BOX_JOB": "scripts/gpu/lastphases.py studies/box-a.db"}
    run = subprocess.run(["bash", "scripts/gpu/box.sh", "search_spaces/box-a.yaml"],
                         cwd=checkout, env=job, capture_output=True, text=True, timeout=300)
    log = run.stdout + run.stderr
    assert "job started (pid" in log and "job finished with rc 1" in log, log
    assert run.returncode == 1
    said = (out / "job.log").read_text()
    assert "explain: skipped, no feasible trial to explain" in said
    assert "re-check: skipped" in said
    assert (out / "box-a.db").is_file() and (tmp_path / "job" / "rc").read_text().strip() == "1"


def test_fetch_back_files_a_box_without_a_database_under_its_study(tmp_path: Path):
    """A job's first call can end while its first step (a check) runs: the box returns its
    log and the study's files but no database yet. Its log goes to that study's boxes/,
    named by the files, not to `unknown`."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "scripts").symlink_to(ROOT / "scripts")
    back = tmp_path / "back"
    (back / "study-x" / "warm-check").mkdir(parents=True)
    (back / "study-x" / "warm-check" / "check.json").write_text("[]")
    subprocess.run(["tar", "-czf", str(back / "study-x-files.tar.gz"), "-C", str(back),
                    "study-x"], check=True)
    shutil.rmtree(back / "study-x")
    (back / "box.log").write_text("[box +0s] job started\n")
    run = subprocess.run(["bash", "scripts/gpu/fetch-back.sh", str(back)], cwd=here,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHON": sys.executable})
    assert run.returncode == 0, run.stderr
    assert (here / "studies" / "study-x" / "warm-check" / "check.json").is_file()
    logs = list((here / "studies" / "study-x" / "boxes").glob("*.log"))
    assert [p.read_text() for p in logs] == ["[box +0s] job started\n"]
    assert not (here / "studies" / "unknown").exists()
