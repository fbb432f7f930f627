"""Read a study back: open it by file, name or URL, and say in words what its trials were
(outcome, reason, workload, objective); `summary` turns a study into the typed rows."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import _reasons as reasons
from autotune._slo import Slo
from autotune.config import ModelSpec, Objective, WeightKey
from autotune.errors import ConfigError
from autotune.measure import capacitytext
from autotune.measure.capacityrecord import CapacityRecord
from autotune.stored import Stored
from autotune.traffic import WorkloadSpec
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.records.trialrecord import TrialRecord
from autotune.tuning.sharing import storage


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
        if r.metrics.failed:
            why.append("failed requests")
        return ", ".join(why) or "SLO missed"
    return f"{r.reason} (not launched)" if r.launched is False else r.reason


def speculation_text(r: TrialRecord) -> str:
    """`acceptance 62% (2.9 tokens a step)`, or "" for a trial that did not speculate."""
    spec = r.speculation
    if spec is None or spec.acceptance_rate is None:
        return ""
    share = "" if spec.drafted_share is None else f", {spec.drafted_share:.0%} of the output"
    return f"acceptance {spec.acceptance_rate:.0%} ({fmt(spec.mean_acceptance_length, '.2f')} " \
        f"tokens a step{share})"


def legend(trials: Sequence[TrialRecord]) -> dict[str, str]:
    """What each reason the trials were pruned or failed for means (`autotune._reasons`),
    with the outcome of each FAIL trial (interrupted, error)."""
    return reasons.legend([n for r in trials for n in
                           (r.reason, r.outcome if r.state == TrialState.FAIL else None)])


def fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


# The weighted score's terms, in the order the objective is told.
WEIGHTS: tuple[WeightKey, ...] = ("throughput", "latency", "memory")
# Plain words for what a study ran, for the report's header and the terminal.
TINY = {"tiny": "autotune's tiny random-weight test model (2 layers; `autotune tiny-model`)",
        "qwen3-4b": "random weights in Qwen3-4B-Instruct-2507's shapes "
                    "(`autotune tiny-model --preset qwen3-4b`)"}


@dataclass(frozen=True)
class Thresholds(Stored):
    """The guardrail's thresholds a quality verdict was judged by (`Quality.thresholds`, kept
    as a mapping): a trial passes with drift at most `drift` and agreement at least
    `agreement`; None where the verdict has none."""

    drift: float | None = None
    agreement: float | None = None

    @classmethod
    def of(cls, q: Quality | None) -> Thresholds:
        return cls.from_dict((q.thresholds or {}) if q is not None else {})


def model_text(m: ModelSpec | None) -> str:
    """`random weights in Qwen3-4B's shapes (...)` or the model's path or id, from the
    stored scenario's `model`."""
    if m is None:
        return "-"
    if m.tiny:
        return TINY.get(m.tiny, f"the {m.tiny} random-weight model")
    return str(m.path or "-")


def _rate(value: Any) -> str:
    return "all at once" if value in (None, math.inf, "inf", "Infinity") or (
        isinstance(value, float) and math.isinf(value)) else f"{value:g} req/s (Poisson)"


def workload_text(w: WorkloadSpec | None) -> str:
    """`random prompts: 32 requests of 64 tokens in, 128 out; ...` with no Python reprs."""
    if w is None:
        return "-"
    if w.kind == "chat":
        text = (f"chat: {w.conversations} conversations of {w.turns} turns, "
                f"a shared {w.system_len}-token system prompt")
    elif w.kind == "random":
        prefix = f"a shared {w.prefix_len}-token prefix + " if w.prefix_len else ""
        text = (f"random prompts: {w.num_requests} requests of {prefix}"
                f"{w.input_len} tokens in, {w.output_len} out")
    else:
        text = f"{w.kind} prompts from {w.path}"
    if w.mode == "capacity":
        text += ("; capacity at SLO: the highest sustained request rate that meets every "
                 f"SLO, in steps of at least {w.capacity.min_step_s:g} s")
    else:
        text += f"; sent {_rate(w.request_rate)}"
        text += (f", at most {w.max_concurrency} in flight" if w.max_concurrency
                 else ", no cap on requests in flight")
    return text


def slo_text(slos: Mapping[str, Any]) -> str:
    """`TTFT p95 <= 500 ms, TPOT p95 <= 30 ms`."""
    parts = []
    for key, limit in slos.items():
        goal = Slo(key, limit)
        parts.append(f"{goal.metric.upper()} {goal.stat} ≤ {limit:g} ms")
    return ", ".join(parts) or "none"


def objective_text(o: Objective | None) -> str:
    """`weighted score: throughput x1, latency (TTFT p95) x0.5, memory x0.1; SLOs: ...`."""
    if o is None:
        return "-"
    metric, _, stat = o.latency.partition("_")
    latency = f"{metric.upper()} {stat}"
    if o.mode == "pareto":
        text = f"Pareto front of throughput, latency ({latency}) and memory"
    else:
        w = o.weights
        text = "weighted score: " + ", ".join(
            f"{name}{f' ({latency})' if name == 'latency' else ''} ×{w[name]:g}"
            for name in WEIGHTS if w.get(name))
    return text + f"; SLOs: {slo_text(o.slos)}"


def capacity_caveat(cap: CapacityRecord | None) -> str | None:
    """Why a capacity figure is not a sustained measurement to quote, or None: it rests on
    the burst (over in a fraction of a second), on steps much shorter than the 20-s
    default, or its uncertainty is too wide to rank by."""
    if not cap or not cap.low:
        return None
    at = [s for s in cap.steps if s.passed and s.load == cap.rate]  # the burst, in old records
    step = at[-1] if at else None
    why = []
    if step is not None and step.kind == "burst":
        why.append(f"from a {step.duration_s or 0:.1f}-s burst, not a sustained rate")
    elif step is not None and step.duration_s and step.duration_s < 10:
        why.append(f"from {step.duration_s:.1f}-s steps (sustained steps last 20 s)")
    if cap.too_uncertain:
        why.append(f"±{cap.uncertainty or 0:.0%}: too uncertain to rank by"
                   + (f", after {capacitytext.steps(cap.remeasured)}" if cap.remeasured
                      else ""))
    return "; ".join(why) or None
