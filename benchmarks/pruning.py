"""Benchmark: the same short CPU study with and without early pruning.

Runs `autotune tune search_spaces/cpu-pressure.yaml` twice, one after the other, in
fresh study folders: once as shipped (memory model, probe phase, median pruner) and
once with `prune.enabled: false`. Prints wall time, outcomes, and the time per useful
trial with the ratio. A useful trial is a new configuration measured in full that is safe
to deploy: completed, feasible, and free of preemptions (a preempting configuration
completes without pruning, but it is exactly what pruning exists to reject).
Takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

SCENARIO = Path(__file__).resolve().parent.parent / "search_spaces" / "cpu-pressure.yaml"


def run(prune: bool, trials: int) -> dict:
    raw = yaml.safe_load(SCENARIO.read_text())
    raw.setdefault("prune", {})["enabled"] = prune
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cpu-pressure.yaml"
        path.write_text(yaml.safe_dump(raw))
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "autotune", "tune", str(path), "--trials",
                        str(trials), "--studies-dir", tmp], check=True, capture_output=True)
        wall = time.monotonic() - t0
        study = optuna.load_study(study_name="cpu-pressure",
                                  storage=f"sqlite:///{tmp}/cpu-pressure.db")
        trials_ = study.get_trials()
    useful = [t for t in trials_ if t.state.name == "COMPLETE" and t.user_attrs.get("feasible")
              and t.user_attrs.get("duplicate_of") is None
              and not (t.user_attrs.get("metrics") or {}).get("probes", {}).get("preemptions")]
    outcomes: dict[str, int] = {}
    for t in trials_:
        key = t.state.name.lower() + (f":{t.user_attrs.get('reason')}"
                                      if t.user_attrs.get("reason") else "")
        if (t.user_attrs.get("metrics") or {}).get("probes", {}).get("preemptions"):
            key += ":preempted"
        if t.user_attrs.get("duplicate_of") is not None:
            key += " (copy)"
        outcomes[key] = outcomes.get(key, 0) + 1
    return {"wall_s": wall, "trials": len(trials_), "useful": len(useful), "outcomes": outcomes}


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    with_p = run(True, trials)
    without = run(False, trials)
    print(f"cpu-pressure, {trials} trials each, run one after the other on this machine")
    for name, r in (("with pruning", with_p), ("without pruning", without)):
        per = r["wall_s"] / r["useful"] if r["useful"] else float("inf")
        print(f"{name:16s} wall {r['wall_s']:6.0f} s  useful {r['useful']}/{r['trials']}  "
              f"{per:6.0f} s per useful trial  {r['outcomes']}")
    a = with_p["wall_s"] / max(with_p["useful"], 1)
    b = without["wall_s"] / max(without["useful"], 1)
    print(f"time per useful trial, without / with pruning: {b / a:.2f}x")
    print(f"whole study wall time, without / with pruning: "
          f"{without['wall_s'] / with_p['wall_s']:.2f}x")


if __name__ == "__main__":
    main()
