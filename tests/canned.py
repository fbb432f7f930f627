"""Canned trials for tests of several workers on one study: no engine, milliseconds each.

`Canned` stands in for `autotune.tuning.trial.run_trial` (the name `study.tune` reads for
its default runner): throughput grows with max-num-seqs, the
guardrail is emulated (a trial given no reference makes one, as the real trial does), and
every launch is noted, in memory and in a JSON-lines file, with its trial, flags, process,
GPU and times, so a test can tell which worker launched what and when.

Run as a script, `python tests/canned.py ARGS...` is `autotune ARGS...` with every trial
canned, and the workers that `tune --gpus` starts run this same script (`canned.py worker
ARGS...` is the worker's entry point, `python -m autotune.cli.worker ARGS...`). The environment
sets it up: CANNED_LOG (the launch file), CANNED_SLEEP (seconds a trial takes), CANNED_HANG
and CANNED_HANG_GPU (the worker on that GPU takes CANNED_HANG seconds per trial: long
enough to be killed in the middle of one).
`python tests/canned.py loop URL DIR WORKER HOST` runs one study loop as worker WORKER of
host HOST (a host name other than this one's hides the process: only its heartbeat tells).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from autotune.config import Scenario
from autotune.measure.measurement import Measurement
from autotune.tuning import trial as trial_mod
from autotune.tuning.quality.guard import Guard, make_guard
from autotune.tuning.quality.reference import Reference
from autotune.tuning.quality.verdict import DRIFT_FLOOR, Quality

SCENARIO = """
name: shared
model: {tiny: tiny}
engine: {flags: {enforce-eager: true}}
space:
  max-num-seqs: {choices: [2, 8, 32]}
  block-size: {choices: [32, 128]}
workload: {kind: random, num_requests: 16, input_len: 32, output_len: 16}
objective:
  mode: weighted
  latency: ttft_p95
  weights: {throughput: 1.0, latency: 0.0, memory: 0.0}
  slos: {ttft_p95_ms: 500}
baselines:
  - {name: half, flags: {max-num-seqs: 8}}
budget: {trials: 6}
sampler: {name: random, seed: 0}
"""
DEFAULT_SEQS = 16  # what Canned measures for a trial that leaves max-num-seqs unset


def scenario(**changes: Any) -> Scenario:
    raw = yaml.safe_load(SCENARIO)
    raw.update(changes)
    return Scenario.model_validate(raw)


def throughput(flags: dict[str, Any]) -> float:
    return 100.0 + flags.get("max-num-seqs", DEFAULT_SEQS) + flags.get("block-size", 0) / 100


class Canned:
    def __init__(self, sleep_s: float = 0.0, log_path: str | None = None,
                 hang_s: float = 0.0, hang_gpu: str | None = None):
        self.sleep_s, self.log_path, self.hang_s, self.hang_gpu = \
            sleep_s, log_path, hang_s, hang_gpu
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @classmethod
    def from_env(cls) -> Canned:
        return cls(float(os.environ.get("CANNED_SLEEP", "0")), os.environ.get("CANNED_LOG"),
                   float(os.environ.get("CANNED_HANG", "0")), os.environ.get("CANNED_HANG_GPU"))

    def _note(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append(entry)
            if self.log_path:
                with open(self.log_path, "a") as f:
                    f.write(json.dumps(entry) + "\n")

    def __call__(self, scenario: Scenario, model: str, flags: dict[str, Any], trial_dir: Path,
                 guard: Guard | None = None, **_: Any) -> trial_mod.Outcome:
        number = int(Path(trial_dir).name)
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
        made = guard is not None and guard.reference is None
        start = time.time()
        self._note({"event": "launch", "trial": number, "flags": flags, "pid": os.getpid(),
                    "gpu": gpu, "thread": threading.current_thread().name,
                    "made_reference": made, "start": start})
        time.sleep(self.hang_s if self.hang_gpu is not None and gpu == self.hang_gpu
                   else self.sleep_s)
        facts = trial_mod.EngineRun(flags, trial_mod.command_line(model, flags), "vllm-test",
                                {"name": "cpu", "visible": gpu}, timings={"startup_s": 0.0})
        summary = {"completed": 16, "failed": 0, "output_throughput": throughput(flags),
                   "p95_ttft_ms": 10.0}
        quality = None
        new_reference = None
        checked_against = None  # the trial whose reference it was checked against
        if guard is not None:
            thresholds = {"drift": DRIFT_FLOOR, "agreement": 0.5}
            verdict = {"drift": 0.0, "agreement": 1.0, "thresholds": thresholds,
                       "passed": True}
            if made:
                new_reference = Reference(
                    guard.prompts, guard.spec.max_tokens, [], {"drift": 0.0, "agreement": 1.0},
                    thresholds, {"trial": number})
                verdict["made_reference"] = True
            else:
                checked_against = guard.reference.context.get("trial")
            quality = Quality.from_dict(verdict)
        self._note({"event": "end", "trial": number, "end": time.time(),
                    "checked_against": checked_against})
        return trial_mod.Outcome(trial_mod.COMPLETE, "", Measurement.of(summary), facts, quality,
                                 new_reference)


def _loop(url: str, study_dir: str, worker_id: str, host: str) -> None:
    """One worker's study loop, as `host` (heartbeat every second, grace 2 s)."""
    import psutil

    from autotune.tuning import study
    from autotune.tuning.sharing import heartbeat

    sc = scenario()
    me = heartbeat.Worker(worker_id, host, os.getpid(), psutil.Process().create_time())
    shared = study.open_study(sc, url, worker=me, heartbeat_s=1, grace_s=2)
    study.loop(study.RunContext(shared, sc, "/m", Path(study_dir),
                                make_guard(sc, Path(study_dir)), Canned.from_env()),
               trials=6)


if __name__ == "__main__":
    # `kill -USR1 PID` prints every thread's stack to the worker's log: how a test that
    # hangs shows where.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if sys.argv[1] == "loop":
        _loop(*sys.argv[2:6])
        sys.exit(0)
    from autotune.cli import worker
    from autotune.cli.main import main
    from autotune.tuning.sharing import workers

    trial_mod.run_trial = Canned.from_env()
    workers.ENTRY = [sys.executable, str(Path(__file__).resolve()), "worker"]
    sys.exit(worker.main(sys.argv[2:]) if sys.argv[1] == "worker" else main())
