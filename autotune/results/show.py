"""Read a study back: open it by file, name or URL, and tabulate its trials."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import reasons
from autotune.errors import ConfigError
from autotune.measure import capacity
from autotune.measure.capacity import CapacityRecord
from autotune.results import cost, whatif
from autotune.slo import Slo
from autotune.tuning import ablation, relief, storage
from autotune.tuning import ranking as ranked
from autotune.tuning.guardrail import Quality
from autotune.tuning.objective import gain
from autotune.tuning.record import DEFAULTS, Snapshot, TrialRecord, records
from autotune.verify import crosscheck
from autotune.verify.paired import compact


def open_existing(target: str, study_name: str | None = None,
                  root: Path = Path("studies")) -> optuna.Study:
    """A study from a .db file, a study name under `root`, or a storage URL
    (`storage.locate`)."""
    url, study_name = storage.locate(target, study_name, root)
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


def repository_root() -> Path | None:
    """The source checkout this package runs from, if it is one (it has `studies/`)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "studies").is_dir() else None


def open_anywhere(target: str) -> optuna.Study:
    """A study for a notebook, wherever its kernel runs: `target` (a .db file, a study name
    or a URL) as given, else relative to the shell's directory (`$PWD`: Jupyter starts the
    kernel in the notebook's folder, not where `jupyter` was typed), else to the
    repository holding this package; a name is looked for under each one's `studies/`."""
    if "://" in target or Path(target).is_absolute():
        return open_existing(target)
    bases = [Path.cwd(), Path(os.environ.get("PWD") or "."), repository_root()]
    seen: list[Path] = []
    for base in bases:
        if base is None or base.resolve() in seen:
            continue
        seen.append(base.resolve())
        root = base / "studies"
        if (base / target).exists() or storage.database(target, root).exists():
            return open_existing(str(base / target) if (base / target).exists() else target,
                                 root=root)
    raise ConfigError(f"no study database {target!r} in " + ", ".join(str(b) for b in seen)
                      + " (nor NAME.db under their studies/)")


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
        q = r.quality
        if q is not None and q.passed is False:
            why.append(f"quality ({q.short()})" if q.verdict else
                       f"quality (drift {q.drift or 0:.3f})")
        if r.metrics.get("failed"):
            why.append("failed requests")
        return ", ".join(why) or "SLO missed"
    return f"{r.reason} (not launched)" if r.launched is False else r.reason


def trial_row(r: TrialRecord, fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """One trial as plain data: for the table and for `--json` (`fixed` flags left out)."""
    m, q = r.measures, r.quality or Quality()
    return {
        "number": r.number,
        "name": r.name,
        "tried_because": r.tried_because.text,
        "tried": r.tried_because.short,
        "outcome": outcome(r),
        "reason": reason(r),
        "flags": {k: v for k, v in r.flags.items() if k not in (fixed or {})},
        "throughput": m.throughput if m else None,
        "latency_ms": m.latency_ms if m else None,
        "memory_mib": m.memory_mib if m else None,
        "values": list(r.values) if r.values is not None else None,
        "gain": r.gain,
        "startup_s": r.startup_s,
        "capacity": _capacity(r),
        "bottleneck": r.bottleneck.text if r.bottleneck else None,
        "detail": r.detail,
        "quality": {"passed": q.passed, "drift": q.drift, "agreement": q.agreement,
                    "verdict": q.verdict, "cell": q.short(), "words": q.words(),
                    "tasks": q.tasks.as_dict() if q.tasks else None},
        "speculation": r.spec.as_dict() if r.spec else None,
        "validation": compact(r.validation),
        "validation_vllm": crosscheck.compact(r.validation_vllm),
    }


def speculation_text(r: TrialRecord) -> str:
    """`acceptance 62% (2.9 tokens a step)`, or "" for a trial that did not speculate."""
    spec = r.spec
    if spec is None or spec.acceptance_rate is None:
        return ""
    share = "" if spec.drafted_share is None else f", {spec.drafted_share:.0%} of the output"
    return f"acceptance {spec.acceptance_rate:.0%} ({fmt(spec.mean_acceptance_length, '.2f')} " \
        f"tokens a step{share})"


def _capacity(r: TrialRecord) -> dict[str, Any] | None:
    """Capacity at SLO, its interval and its uncertainty (capacity mode only)."""
    cap = r.capacity
    if cap is None:
        return None
    lo, hi = capacity.interval(cap)
    return {"request_throughput": cap.request_throughput,
            "output_throughput": cap.output_throughput, "low": cap.low, "high": cap.high,
            "uncertainty": cap.uncertainty, "saturated": cap.saturated, "stopped": cap.stopped,
            "interval": [lo, hi], "steps": len(cap.steps), "text": capacity.describe(cap),
            "bottleneck": capacity.limit_text(cap), "caveat": capacity_caveat(cap)}


def ranking(trials: list[TrialRecord], defaults: dict[str, Any],
            price: cost.Price | None = None) -> list[dict[str, Any]]:
    """Feasible capacity-mode trials by capacity, highest first; `tied` marks those within
    the leader's noise, and `overrides` counts flags set to other than `defaults` (vLLM's
    parser defaults and the scenario's fixed flags). With a known `price`, each row has its
    cost per million output tokens at its capacity (`per_million`)."""
    done = [(r, cap) for r in trials
            if r.feasible and (cap := r.capacity) and r.duplicate_of is None]
    done.sort(key=lambda rc: -rc[1].request_throughput)
    return [{"number": r.number, "name": r.name, "overrides": ranked.overrides(r, defaults),
             "tied": capacity.tied(cap, done[0][1]), **(_capacity(r) or {}),
             **({"per_million": cost.trial_cost(r, price).per_million,
                 "currency": price.currency} if price is not None and price.known else {})}
            for r, cap in done]


def tied_with_best(study: optuna.Study | Snapshot) -> set[int]:
    """Trials whose capacity the study cannot tell apart from its best trial's (the `=` of
    the ranking), the best itself left out: their gains over the defaults differ by noise,
    not by configuration."""
    best = ranked.feasible_best(study)
    if best is None or best.capacity is None:
        return set()
    return {r.number for r in records(study, (TrialState.COMPLETE,))
            if r.feasible and r.capacity and r.number != best.number
            and capacity.tied(r.capacity, best.capacity)}


def summary(study: optuna.Study, what_if: Sequence[Slo] = (), *, load: float | None = None,
            gpu_hour: float | None = None, gpus: int | None = None) -> dict[str, Any]:
    """Every trial, the baseline, and the best feasible trial or the feasible Pareto set;
    with `what_if`, the trials re-ranked under those SLOs from their recorded steps. The
    price is the scenario's `cost`, or `gpu_hour` and `gpus`; with `load` (req/s), `cost`
    sets the winner beside the defaults: replicas for that load and what they cost."""
    snap = Snapshot.of(study)  # read once, ranked several ways below
    price = cost.price_of(ranked.stored_scenario(snap), gpu_hour, gpus)
    trials = records(snap)
    fixed = ranked.fixed_flags(snap)
    rows = [trial_row(r, fixed) for r in trials]
    feasible = [r for r in trials if r.feasible]
    base = next((r for r in rows if r["name"] == DEFAULTS and r["outcome"] != "pruned"), None)
    out: dict[str, Any] = {"study": study.study_name, "directions":
                           [d.name.lower() for d in study.directions], "trials": rows,
                           "baseline": base}
    launched = [r for r in trials if r.duplicate_of is None]
    errors = [r.memory_estimate["kv_capacity_tokens"] / r.kv_capacity_reported - 1
              for r in launched
              if r.memory_estimate and r.memory_estimate.get("kv_capacity_tokens")
              and r.kv_capacity_reported]
    out["memory_model"] = {
        "trials": len(errors),
        "median_error": sorted(errors)[len(errors) // 2] if errors else None,
        "max_abs_error": max((abs(e) for e in errors), default=None),
        "not_launched": sum(1 for r in launched if r.launched is False),
    }
    effective = ranked.effective_defaults(snap)
    defaults = {**effective.values, **fixed}  # `ranked.not_overrides`, read once
    tied = tied_with_best(snap)
    top = ranked.feasible_best(snap) if tied else None
    for row in rows:  # a gain within noise of the best's is a tie, not a loss or a win
        row["tied_with_best"] = top.number if top and row["number"] in tied else None
    if len(study.directions) == 1:
        best = ranked.pick(feasible, ranked.objective_value, defaults)
        out["best"] = trial_row(best, fixed) if best else None
        if best is not None:  # what the winner changes, against vLLM's effective defaults
            own = {k: v for k, v in best.flags.items() if k not in fixed}
            out["best_changes"] = effective.overrides(own)
            out["best_left_out"] = effective.words(own)
        out["ceiling"] = relief.ceiling(best)
        out["best_gain"] = gain(ranked.objective_value(best)) if best else None
        out["gain_over"] = ranked.reference_name(snap)
    else:
        front = {t.number for t in study.best_trials}  # feasible and non-dominated
        out["pareto"] = [trial_row(r, fixed) for r in feasible if r.number in front]
    out["ranking"] = ranking(trials, defaults, price)
    explained = ablation.latest(snap)  # which of the winner's flags carry its gain
    out["explanation"] = explained.as_dict() if explained else None
    out["explanation_lines"] = explained.lines() if explained else []
    out["price"] = dataclasses.asdict(price)
    if load is not None:
        winner = ranked.feasible_best(snap)
        out["cost"] = cost.side_by_side(winner, ranked.reference_trial(snap),
                                        ranked.reference_name(snap), price, load).as_dict() \
            if winner else None
    out["fixed_flags"] = fixed
    out["reasons"] = legend(trials)
    if what_if:
        out["what_if"] = whatif.rerank(trials, what_if)
    return out


def legend(trials: Sequence[TrialRecord]) -> dict[str, str]:
    """What each reason the trials were pruned or failed for means (`autotune.reasons`),
    with the outcome of each FAIL trial (interrupted, error)."""
    return reasons.legend([n for r in trials for n in
                           (r.reason, r.outcome if r.state == TrialState.FAIL else None)])


def fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


# Plain words for what a study ran, for the report's header and the terminal.
TINY = {"tiny": "autotune's tiny random-weight test model (2 layers; `autotune tiny-model`)",
        "qwen3-4b": "random weights in Qwen3-4B-Instruct-2507's shapes "
                    "(`autotune tiny-model --preset qwen3-4b`)"}


def model_text(model: Mapping[str, Any]) -> str:
    """`random weights in Qwen3-4B's shapes (...)` or the model's path or id."""
    if model.get("tiny"):
        return TINY.get(model["tiny"], f"the {model['tiny']} random-weight model")
    return str(model.get("path") or "-")


def _rate(value: Any) -> str:
    return "all at once" if value in (None, math.inf, "inf", "Infinity") or (
        isinstance(value, float) and math.isinf(value)) else f"{value:g} req/s (Poisson)"


def workload_text(w: Mapping[str, Any]) -> str:
    """`random prompts: 32 requests of 64 tokens in, 128 out; ...` with no Python reprs."""
    if not w:
        return "-"
    kind = w.get("kind", "random")
    if kind == "chat":
        text = (f"chat: {w.get('conversations')} conversations of {w.get('turns')} turns, "
                f"a shared {w.get('system_len')}-token system prompt")
    elif kind == "random":
        prefix = f"a shared {w['prefix_len']}-token prefix + " if w.get("prefix_len") else ""
        text = (f"random prompts: {w.get('num_requests')} requests of {prefix}"
                f"{w.get('input_len')} tokens in, {w.get('output_len')} out")
    else:
        text = f"{kind} prompts from {w.get('path')}"
    search = w.get("capacity") or {}  # the scenario's CapacitySpec, as plain data
    if w.get("mode") == "capacity":
        text += ("; capacity at SLO: the highest sustained request rate that meets every "
                 f"SLO, in steps of at least {search.get('min_step_s', 20):g} s")
    else:
        text += f"; sent {_rate(w.get('request_rate'))}"
        text += (f", at most {w['max_concurrency']} in flight" if w.get("max_concurrency")
                 else ", no cap on requests in flight")
    return text


def slo_text(slos: Mapping[str, Any]) -> str:
    """`TTFT p95 <= 500 ms, TPOT p95 <= 30 ms`."""
    parts = []
    for key, limit in slos.items():
        goal = Slo(key, limit)
        parts.append(f"{goal.metric.upper()} {goal.stat} ≤ {limit:g} ms")
    return ", ".join(parts) or "none"


def objective_text(o: Mapping[str, Any]) -> str:
    """`weighted score: throughput x1, latency (TTFT p95) x0.5, memory x0.1; SLOs: ...`."""
    if not o:
        return "-"
    metric, _, stat = str(o.get("latency") or "ttft_p95").partition("_")
    latency = f"{metric.upper()} {stat}"
    if o.get("mode") == "pareto":
        text = f"Pareto front of throughput, latency ({latency}) and memory"
    else:
        w = o.get("weights") or {}
        text = "weighted score: " + ", ".join(
            f"{name}{f' ({latency})' if name == 'latency' else ''} ×{w[name]:g}"
            for name in ("throughput", "latency", "memory") if w.get(name))
    return text + f"; SLOs: {slo_text(o.get('slos') or {})}"


def capacity_caveat(cap: CapacityRecord | None) -> str | None:
    """Why a capacity figure is not a sustained measurement to quote, or None: it rests on
    the burst (over in a fraction of a second), on steps much shorter than the 20-s
    default, or its uncertainty is too wide to rank by."""
    if not cap or not cap.low:
        return None
    at = [s for s in cap.steps if s.passed and s.load == cap.low]
    step = at[-1] if at else None
    why = []
    if step is not None and step.kind == "burst":
        why.append(f"from a {step.duration_s or 0:.1f}-s burst, not a sustained rate")
    elif step is not None and step.duration_s and step.duration_s < 10:
        why.append(f"from {step.duration_s:.1f}-s steps (sustained steps last 20 s)")
    if (cap.uncertainty or 0) > 0.25:
        why.append(f"±{cap.uncertainty:.0%}: too uncertain to rank by")
    return "; ".join(why) or None
