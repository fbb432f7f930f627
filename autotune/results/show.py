"""Read a study back: open it by file, name or URL, and tabulate its trials."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.errors import ConfigError
from autotune.measure import capacity
from autotune.tuning import crosscheck
from autotune.tuning import ranking as ranked
from autotune.tuning.objective import gain
from autotune.tuning.paired import compact
from autotune.tuning.record import DEFAULTS, TrialRecord, records


def open_existing(target: str, study_name: str | None = None,
                  root: Path = Path("studies")) -> optuna.Study:
    """A study from a .db file, a study name under `root`, or a storage URL."""
    if "://" in target:
        url = target
    else:
        path = Path(target)
        if not path.exists() and (root / f"{target}.db").exists():
            path = root / f"{target}.db"
            study_name = study_name or target
        if not path.exists():
            raise ConfigError(f"no study database {target!r} (nor {root / (target + '.db')})")
        url = f"sqlite:///{path}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        names = optuna.get_all_study_names(storage=url)
    except Exception as err:  # noqa: BLE001 - any storage error is the user's input here
        raise ConfigError(f"cannot open study storage {url}: {err}") from None
    if study_name is None:
        if len(names) != 1:
            raise ConfigError(f"{url} holds {len(names)} studies ({', '.join(names)}); "
                              "choose one with --study")
        study_name = names[0]
    if study_name not in names:
        raise ConfigError(f"no study {study_name!r} in {url}; it holds: {', '.join(names)}")
    return optuna.load_study(study_name=study_name, storage=url)


def outcome(r: TrialRecord) -> str:
    if r.state == TrialState.COMPLETE:
        return "ok" if r.feasible else "infeasible"
    if r.state == TrialState.PRUNED:
        return "pruned"
    if r.state == TrialState.FAIL:
        return r.outcome or "fail"
    return r.state.name.lower()


def reason(r: TrialRecord) -> str:
    if r.duplicate_of is not None:
        return f"same as #{r.duplicate_of}"
    if outcome(r) == "infeasible":
        why = []
        q = r.quality or {}
        if q and not q.get("passed", True):
            why.append(f"quality (drift {q.get('drift', 0):.3f})")
        if r.metrics.get("failed"):
            why.append("failed requests")
        return ", ".join(why) or "SLO missed"
    return f"{r.reason} (not launched)" if r.launched is False else r.reason


def trial_row(r: TrialRecord, fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """One trial as plain data: for the table and for `--json` (`fixed` flags left out)."""
    m = r.measures or {}
    return {
        "number": r.number,
        "name": r.name,
        "outcome": outcome(r),
        "reason": reason(r),
        "flags": {k: v for k, v in r.flags.items() if k not in (fixed or {})},
        "throughput": m.get("throughput"),
        "latency_ms": m.get("latency_ms"),
        "memory_mib": m.get("memory_mib"),
        "values": list(r.values) if r.values is not None else None,
        "gain": r.gain,
        "startup_s": r.startup_s,
        "capacity": _capacity(r),
        "detail": r.detail,
        "quality": {k: (r.quality or {}).get(k) for k in ("passed", "drift", "agreement")},
        "validation": compact(r.validation),
        "validation_vllm": crosscheck.compact(r.validation_vllm),
    }


def _capacity(r: TrialRecord) -> dict[str, Any] | None:
    """Capacity at SLO, its interval and its uncertainty (capacity mode only)."""
    cap = r.capacity
    if cap is None:
        return None
    lo, hi = capacity.interval(cap)
    return {k: cap.get(k) for k in ("request_throughput", "output_throughput", "low", "high",
                                    "uncertainty", "saturated", "stopped")} | {
        "interval": [lo, hi], "steps": len(cap.get("steps") or []),
        "text": capacity.describe(cap), "bottleneck": capacity.limit_text(cap)}


def ranking(trials: list[TrialRecord], defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """Feasible capacity-mode trials by capacity, highest first; `tied` marks those within
    the leader's noise, and `overrides` counts flags set to other than `defaults` (vLLM's
    parser defaults and the scenario's fixed flags)."""
    done = [r for r in trials if r.feasible and r.capacity and r.duplicate_of is None]
    done.sort(key=lambda r: -r.capacity["request_throughput"])
    return [{"number": r.number, "name": r.name, "overrides": ranked.overrides(r, defaults),
             "tied": capacity.tied(r.capacity, done[0].capacity), **(_capacity(r) or {})}
            for r in done]


def summary(study: optuna.Study) -> dict[str, Any]:
    """Every trial, the baseline, and the best feasible trial or the feasible Pareto set."""
    trials = records(study)
    fixed = ranked.fixed_flags(study)
    rows = [trial_row(r, fixed) for r in trials]
    feasible = [r for r in trials if r.feasible]
    base = next((r for r in rows if r["name"] == DEFAULTS and r["outcome"] != "pruned"), None)
    out: dict[str, Any] = {"study": study.study_name, "directions":
                           [d.name.lower() for d in study.directions], "trials": rows,
                           "baseline": base}
    launched = [r for r in trials if r.duplicate_of is None]
    errors = [r.memory_estimate["kv_capacity_tokens"] / r.kv_capacity_reported - 1
              for r in launched
              if (r.memory_estimate or {}).get("kv_capacity_tokens") and r.kv_capacity_reported]
    out["memory_model"] = {
        "trials": len(errors),
        "median_error": sorted(errors)[len(errors) // 2] if errors else None,
        "max_abs_error": max((abs(e) for e in errors), default=None),
        "not_launched": sum(1 for r in launched if r.launched is False),
    }
    defaults = ranked.not_overrides(study)
    if len(study.directions) == 1:
        best = ranked.pick(feasible, lambda r: r.values[0], defaults)
        out["best"] = trial_row(best, fixed) if best else None
        out["best_gain"] = gain(best.values[0]) if best else None
        out["gain_over"] = ranked.reference_name(study)
    else:
        front = {t.number for t in study.best_trials}  # feasible and non-dominated
        out["pareto"] = [trial_row(r, fixed) for r in feasible if r.number in front]
    out["ranking"] = ranking(trials, defaults)
    out["fixed_flags"] = fixed
    return out


def fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)
