"""Which sampler seed makes `search_spaces/cpu-pressure.yaml` show every outcome: the shipped
study's own sampler, relief moves and pruner replayed with canned engines (no vLLM, a few
seconds a seed).

The example promises, within its 8 trials, every outcome the README names: completed trials,
`kv_too_small (not launched)`, `preemption`, a relief move for it, `behind` and a repeat
copied. Whether a configuration fits or preempts is arithmetic (the memory model's KV
capacity against 16 requests of 384 tokens), so the canned engines say it as vLLM does.
`behind` is not: it is Optuna's median pruner comparing one trial's probe score with
another's, measured minutes apart. With `max-num-seqs` 4 against 16 the real study went
either way (normalised probe scores -0.10 against -0.19 in a run with no trial behind,
2026-12-06). So a seed qualifies only where the trial pruned `behind` serves one sequence at
a time while every searched trial that completed before it served 16 (the real study then
gave -0.85 against +0.04 and -0.81 against +0.27 in two pinned runs): a gap that no noise
seen on these machines closes.

    .venv/bin/python scripts/pressure_seeds.py               # the shipped seed: ok or why not
    .venv/bin/python scripts/pressure_seeds.py --seeds 0-120  # which seeds of a range qualify

`tests/tuning/test_prune.py` runs the first; the real study is `tests/tuning/test_prune_engine.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import math
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from autotune.config import Scenario  # noqa: E402
from autotune.measure.measurement import Measurement  # noqa: E402
from autotune.tuning import trial as trial_mod  # noqa: E402
from autotune.tuning.policy import prune  # noqa: E402

SHIPPED = ROOT / "search_spaces" / "cpu-pressure.yaml"
OUTCOMES = ("preemption", "kv_too_small", "behind")


@dataclass(frozen=True)
class Row:
    """One trial of the replayed study."""

    number: int
    origin: str  # baseline, sampler, relief
    flags: dict[str, Any]  # those the scenario's engine flags do not fix
    state: str  # COMPLETE, PRUNED
    reason: str
    copy_of: int | None

    def __str__(self) -> str:
        flags = " ".join(f"{k}={v}" for k, v in sorted(self.flags.items())) or "(defaults)"
        copy = f" copy of #{self.copy_of}" if self.copy_of is not None else ""
        return f"#{self.number} {self.origin}: {flags}: {self.state.lower()} {self.reason}{copy}"


def _canned(scenario: Scenario, model: str, flags: dict[str, Any], trial_dir: Path,
            guard: Any = None, intermediate: Any = None, anchor: Any = None
            ) -> trial_mod.Outcome:
    """A trial without an engine: the real memory model before launch, preemption where the
    workload's requests in flight need more KV cache than it holds, else a throughput that
    grows with the sequences served at once."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    facts = trial_mod.EngineRun(flags, trial_mod.command_line(model, flags), "canned")
    estimate = prune.predict(scenario, model, flags, scenario.engine.env)
    if why := prune.before_launch(estimate, scenario.prune):
        reason, _, facts.detail = why.partition(": ")
        facts.launched = False
        return trial_mod.Outcome(trial_mod.PRUNED, reason, facts=facts)
    work = scenario.workload
    in_flight = min(int(flags.get("max-num-seqs", 128)), work.max_concurrency or 1)
    probe = math.ceil(work.num_requests * scenario.prune.probe_fraction)
    probed = {"completed": probe, "failed": 0, "output_throughput": 100.0 * math.sqrt(in_flight),
              "p95_tpot_ms": 10.0}
    if estimate is not None and in_flight * (work.input_len + work.output_len) \
            > estimate.kv_capacity_tokens:
        return trial_mod.Outcome(trial_mod.PRUNED, prune.PREEMPTION, Measurement.of(probed), facts)
    if intermediate is not None and (why := intermediate(Measurement.of(probed))):
        return trial_mod.Outcome(trial_mod.PRUNED, why, Measurement.of(probed), facts)
    return trial_mod.Outcome(trial_mod.COMPLETE, "", Measurement.of(
        {**probed, "completed": work.num_requests}), facts)


def replay(raw: dict[str, Any], seed: int) -> list[Row]:
    """The trials `autotune tune` runs for this scenario with this sampler seed, canned. The
    command runs in this process, as one process runs one `tune`: what it sets for the
    process (its log file, the log level, its SIGTERM handler) is put back after it."""
    import optuna

    from autotune.cli.main import main
    from autotune.tuning.records.snapshot import records

    raw = {**raw, "sampler": {**raw.get("sampler", {}), "seed": seed}}
    real, logger = trial_mod.run_trial, logging.getLogger("autotune")
    handlers, level, term = list(logger.handlers), logger.level, signal.getsignal(signal.SIGTERM)
    trial_mod.run_trial = _canned
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "scenario.yaml"
            path.write_text(yaml.safe_dump(raw))
            said = io.StringIO()
            with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
                code = main(["tune", str(path), "--studies-dir", tmp])
            if code != 0:
                raise RuntimeError(f"seed {seed}: tune exited {code}: {said.getvalue()[-2000:]}")
            study = optuna.load_study(study_name=raw["name"],
                                      storage=f"sqlite:///{tmp}/{raw['name']}.db")
            fixed = raw.get("engine", {}).get("flags", {})
            return [Row(r.number, r.origin_kind or "-",
                        {k: v for k, v in r.flags.items() if fixed.get(k) != v},
                        r.state.name, r.reason, r.duplicate_of) for r in records(study)]
    finally:
        trial_mod.run_trial = real
        for handler in set(logger.handlers) - set(handlers):
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(level)
        signal.signal(signal.SIGTERM, term)


def fault(rows: list[Row]) -> str | None:
    """Why this replay does not show every outcome with a `behind` no noise can undo, or None."""
    first = {reason: next((r for r in rows if r.reason == reason and r.copy_of is None), None)
             for reason in OUTCOMES}
    if missing := [reason for reason, row in first.items() if row is None]:
        return "no trial " + ", ".join(missing)
    if not any(r.copy_of is not None for r in rows):
        return "no repeat copied"
    preempting = first["preemption"]
    assert preempting is not None
    after = rows[preempting.number + 1] if preempting.number + 1 < len(rows) else None
    if after is None or after.origin != "relief":
        return f"the trial after #{preempting.number} (preemption) is no relief move"
    behind = first["behind"]
    assert behind is not None
    if behind.flags.get("max-num-seqs") != 1:
        return f"#{behind.number} is behind with max-num-seqs {behind.flags.get('max-num-seqs')}"
    close = [r for r in rows[:behind.number] if r.origin != "baseline" and r.copy_of is None
             and r.state == "COMPLETE" and r.flags.get("max-num-seqs") != 16]
    if close:
        return f"#{close[0].number} completed before #{behind.number} with fewer sequences than 16"
    return None


def _seeds(text: str) -> range:
    low, _, high = text.partition("-")
    return range(int(low), int(high or low) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", help="a range such as 0-120 (default: the shipped seed)")
    parser.add_argument("--scenario", type=Path, default=SHIPPED)
    args = parser.parse_args(argv)
    raw = yaml.safe_load(args.scenario.read_text())
    if args.seeds is None:
        rows = replay(raw, raw["sampler"]["seed"])
        print("\n".join(map(str, rows)))
        why = fault(rows)
        print("ok" if why is None else f"not ok: {why}")
        return 0 if why is None else 1
    for seed in _seeds(args.seeds):
        if fault(rows := replay(raw, seed)) is None:
            print(f"seed {seed}: " + " | ".join(map(str, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
