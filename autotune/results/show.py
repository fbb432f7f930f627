"""Read a study back: open it by file, name or URL, and tabulate its trials."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ConfigError
from autotune.measure import capacity
from autotune.tuning import crosscheck
from autotune.tuning.objective import gain
from autotune.tuning.paired import compact
from autotune.tuning.study import DEFAULTS, fixed_flags, not_overrides, reference_name


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


def outcome(t: FrozenTrial) -> str:
    if t.state == TrialState.COMPLETE:
        return "ok" if t.user_attrs.get("feasible", True) else "infeasible"
    if t.state == TrialState.PRUNED:
        return "pruned"
    if t.state == TrialState.FAIL:
        return t.user_attrs.get("outcome") or "fail"
    return t.state.name.lower()


def reason(t: FrozenTrial) -> str:
    if t.user_attrs.get("duplicate_of") is not None:
        return f"same as #{t.user_attrs['duplicate_of']}"
    if outcome(t) == "infeasible":
        why = []
        q = t.user_attrs.get("quality") or {}
        if q and not q.get("passed", True):
            why.append(f"quality (drift {q.get('drift', 0):.3f})")
        if (t.user_attrs.get("metrics") or {}).get("failed"):
            why.append("failed requests")
        return ", ".join(why) or "SLO missed"
    text = str(t.user_attrs.get("reason") or "")
    return f"{text} (not launched)" if t.user_attrs.get("launched") is False else text


def trial_row(t: FrozenTrial, fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """One trial as plain data: for the table and for `--json` (`fixed` flags left out)."""
    m = t.user_attrs.get("measures") or {}
    flags = t.user_attrs.get("flags") or {}
    row: dict[str, Any] = {
        "number": t.number,
        "name": t.user_attrs.get("baseline") or "",
        "outcome": outcome(t),
        "reason": reason(t),
        "flags": {k: v for k, v in flags.items() if k not in (fixed or {})},
        "throughput": m.get("throughput"),
        "latency_ms": m.get("latency_ms"),
        "memory_mib": m.get("memory_mib"),
        "values": t.values,
        "gain": t.user_attrs.get("gain"),
        "startup_s": (t.user_attrs.get("timings") or {}).get("startup_s"),
        "capacity": _capacity(t),
        "detail": t.user_attrs.get("detail"),
        "quality": {k: (t.user_attrs.get("quality") or {}).get(k)
                    for k in ("passed", "drift", "agreement")},
        "validation": compact(t.user_attrs.get("validation")),
        "validation_vllm": crosscheck.compact(t.user_attrs.get(crosscheck.KEY)),
    }
    return row


def _capacity(t: FrozenTrial) -> dict[str, Any] | None:
    """Capacity at SLO, its interval and its uncertainty (capacity mode only)."""
    cap = capacity.of(t)
    if cap is None:
        return None
    lo, hi = capacity.interval(cap)
    return {k: cap.get(k) for k in ("request_throughput", "output_throughput", "low", "high",
                                    "uncertainty", "saturated", "stopped")} | {
        "interval": [lo, hi], "steps": len(cap.get("steps") or []),
        "text": capacity.describe(cap), "bottleneck": capacity.limit_text(cap)}


def ranking(trials: list[FrozenTrial], defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """Feasible capacity-mode trials by capacity, highest first; `tied` marks those within
    the leader's noise, and `overrides` counts flags set to other than `defaults` (vLLM's
    parser defaults and the scenario's fixed flags)."""
    done = [t for t in trials if t.state == TrialState.COMPLETE
            and t.user_attrs.get("feasible", True) and capacity.of(t)
            and t.user_attrs.get("duplicate_of") is None]
    done.sort(key=lambda t: -capacity.of(t)["request_throughput"])
    return [{"number": t.number, "name": t.user_attrs.get("baseline") or "",
             "overrides": capacity.overrides(t, defaults),
             "tied": capacity.tied(capacity.of(t), capacity.of(done[0])),
             **(_capacity(t) or {})} for t in done]


def summary(study: optuna.Study) -> dict[str, Any]:
    """Every trial, the baseline, and the best feasible trial or the feasible Pareto set."""
    trials = study.get_trials(deepcopy=False)
    fixed = fixed_flags(study)
    rows = [trial_row(t, fixed) for t in trials]
    feasible = [t for t in trials if t.state == TrialState.COMPLETE
                and t.user_attrs.get("feasible", True)]
    base = next((r for r in rows if r["name"] == DEFAULTS and r["outcome"] != "pruned"), None)
    out: dict[str, Any] = {"study": study.study_name, "directions":
                           [d.name.lower() for d in study.directions], "trials": rows,
                           "baseline": base}
    errors = [t.user_attrs["memory_estimate"]["kv_capacity_tokens"]
              / t.user_attrs["kv_capacity_reported"] - 1 for t in trials
              if (t.user_attrs.get("memory_estimate") or {}).get("kv_capacity_tokens")
              and t.user_attrs.get("kv_capacity_reported")
              and t.user_attrs.get("duplicate_of") is None]
    out["memory_model"] = {
        "trials": len(errors),
        "median_error": sorted(errors)[len(errors) // 2] if errors else None,
        "max_abs_error": max((abs(e) for e in errors), default=None),
        "not_launched": sum(1 for t in trials if t.user_attrs.get("launched") is False
                            and t.user_attrs.get("duplicate_of") is None),
    }
    if len(study.directions) == 1:
        best = capacity.pick(feasible, lambda t: t.values[0], not_overrides(study))
        out["best"] = trial_row(best, fixed) if best else None
        out["best_gain"] = gain(best.values[0]) if best else None
        out["gain_over"] = reference_name(study)
    else:
        out["pareto"] = [trial_row(t, fixed) for t in _pareto(feasible)]
    out["ranking"] = ranking(trials, not_overrides(study))
    out["fixed_flags"] = fixed
    return out


def _pareto(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Non-dominated trials for (max throughput, min latency, min memory)."""
    def key(t: FrozenTrial) -> tuple[float, float, float]:
        v = t.values
        return (-v[0], v[1], v[2])

    front = []
    for t in trials:
        kt = key(t)
        if not any(all(a <= b for a, b in zip(key(o), kt, strict=True)) and key(o) != kt
                   for o in trials):
            front.append(t)
    return front


def fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)
