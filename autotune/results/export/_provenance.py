"""Where an export came from (study, trial, engine, device) and the figures it was chosen on,
as every format's comments and the JSON carry them. Names are user data: every comment line
is made inert (`inert`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autotune._remeasurements import Recheck, Validation
from autotune.measure import capacityrecord, capacitytext
from autotune.tuning import ranking
from autotune.tuning.quality import accuracy
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.records.snapshot import StudyOrSnapshot
from autotune.tuning.records.trialrecord import TrialRecord

# Printed in every export of a trial whose answers changed within the budget.
QUALITY_WARNING = ("this configuration changes the model's answers (within the accuracy "
                   "budget): check it on your own task before deploying")


@dataclass(frozen=True)
class Provenance:
    """Where an export came from (study, trial, engine, device) and the figures it was chosen
    on, as its comments and its JSON carry them."""

    study: str
    trial: int
    baseline: str | None
    engine: str | None
    device: str | None
    gain_over_defaults: float | None
    gain_over: str
    output_throughput: float | None
    request_throughput: float | None
    median_ttft_ms: float | None
    p95_ttft_ms: float | None
    median_tpot_ms: float | None
    memory_mib: float | None
    quality_drift: float | None
    quality_passed: bool | None
    quality_verdict: str | None
    quality_words: str
    startup_s: float | None
    validation: Validation | None  # without the per-run figures
    validation_vllm: Recheck | None
    capacity: str | None
    capacity_ratio: str | None = None  # against vLLM's defaults, with its interval

    @classmethod
    def of(cls, study: StudyOrSnapshot, trial: TrialRecord) -> Provenance:
        """In capacity mode the throughputs are the capacity's (the rate at SLO and its
        output tokens), the figures `show` and the report give, not the step's own."""
        metrics, quality = trial.metrics, trial.quality or Quality()
        cap = trial.capacity if trial.capacity is not None and trial.capacity.low else None
        ref = ranking.reference_trial(study)
        ratio = capacityrecord.ratio(cap, ref.capacity) if cap is not None and ref is not None \
            and ref.number != trial.number and ref.capacity is not None else None
        reference = ranking.reference_name(study)
        return cls(study.study_name, trial.number, trial.baseline, trial.engine_version,
                   trial.device_name, trial.gain, reference,
                   cap.output_throughput if cap else metrics.value("output_throughput"),
                   cap.request_throughput if cap else metrics.value("request_throughput"),
                   metrics.value("median_ttft_ms"), metrics.value("p95_ttft_ms"),
                   metrics.value("median_tpot_ms"),
                   trial.measures.memory_mib if trial.measures else None,
                   quality.drift, quality.passed, quality.verdict, quality.words(),
                   trial.startup_s,
                   trial.validation.headline() if trial.validation else None,
                   trial.validation_vllm.headline() if trial.validation_vllm else None,
                   capacitytext.describe(trial.capacity) if trial.capacity else None,
                   ratio.text(reference) if ratio else None)


def inert(text: str) -> str:
    """`text` on one line with no control characters, for a `#` comment: a newline in a
    study or baseline name must not end the comment and start a command."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in str(text))


def commented(notes: Iterable[str]) -> str:
    """Lines made inert already, each as a `#` comment, one block with no final newline."""
    return "\n".join(f"# {note}" for note in notes)


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def comment_lines(provenance: Provenance) -> list[str]:
    """The comment lines of an export, each made inert (names are user data)."""
    p = provenance
    latency = (f"TTFT p50/p95 {_number(p.median_ttft_ms, '.1f')}/"
               f"{_number(p.p95_ttft_ms, '.1f')} ms, "
               f"TPOT p50 {_number(p.median_tpot_ms, '.2f')} ms, memory "
               f"{_number(p.memory_mib, '.0f')} MiB")
    measured = [
        f"capacity at SLO: {p.capacity}" + (f"; {p.capacity_ratio}" if p.capacity_ratio else ""),
        f"at that rate: {_number(p.output_throughput, '.1f')} output tok/s; the step at "
        "capacity: " + latency] if p.capacity else [
        f"measured: {_number(p.output_throughput, '.1f')} output tok/s, "
        f"{_number(p.request_throughput, '.2f')} req/s, {latency}"]
    return [inert(line) for line in [
        f"autotune: study {p.study}, trial {p.trial}" + (f" ({p.baseline})" if p.baseline else "")
        + f", {p.engine} on {p.device}",
        *measured,
        f"score gain over {p.gain_over} {_number(p.gain_over_defaults, '+.1%')} (the weighted "
        f"objective); quality drift {_number(p.quality_drift, '.4f')} nats ("
        + ("passed" if p.quality_passed else "not checked") + ")",
    ] + ([f"quality: {p.quality_words}"] if p.quality_verdict else []) \
      + ([QUALITY_WARNING] if p.quality_verdict == accuracy.CHANGED else []) \
      + ([f"validated: {p.validation.line()}"] if p.validation else []) \
      + ([f"re-measured: {p.validation_vllm.line()}"] if p.validation_vllm else [])]
