"""Why a trial was pruned or failed: every reason a trial can get is named once, in
`autotune._reasons`, with a one-line meaning, and `autotune show` explains the ones its
trials carry."""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path

import optuna
from optuna.trial import TrialState
from rich.console import Console

from autotune import _reasons as reasons
from autotune.engine import log as enginelog
from autotune.measure import searchplan
from autotune.results import views
from autotune.results.summary import Summary
from autotune.tuning import _deadline as deadline
from autotune.tuning.policy import prune
from autotune.tuning.records.trialrecord import DEFAULTS, ERROR, INTERRUPTED
from tests import trials

PACKAGE = Path(reasons.__file__).resolve().parent
# Reasons that are also ordinary words in the source (a JSON key, a config field).
_WORDS = {reasons.ERROR, reasons.TIMEOUT}


def _constants() -> dict[str, str]:
    return {k: v for k, v in vars(reasons).items() if k.isupper() and isinstance(v, str)}


def test_every_reason_has_a_one_line_meaning():
    names = _constants()
    assert set(names.values()) == set(reasons.REASONS)
    assert len(set(names.values())) == len(names)  # no two names for one reason
    for name, meaning in reasons.REASONS.items():
        assert meaning.strip() and "\n" not in meaning and len(meaning) < 120, name


def test_the_modules_take_their_reasons_from_one_place():
    spelled = [*enginelog.REASONS, prune.PREEMPTION, prune.KV_SATURATED, prune.FAILURES,
               prune.BEHIND, deadline.CRASHED, deadline.TIMEOUT, searchplan.BELOW_BEST,
               searchplan.UNREACHABLE, INTERRUPTED, ERROR]
    assert all(r in reasons.REASONS for r in spelled), spelled


def test_no_reason_is_spelled_outside_the_reasons_module():
    """A reason written as a literal elsewhere (`"oom"`, `"kv_too_small: ..."`) would be
    one a trial can get without a meaning when the two drift apart."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "_reasons.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {text[:40]!r}"
                          for r in reasons.REASONS if r not in _WORDS
                          and (text == r or text.startswith(f"{r}: "))]
    assert not found, found


def test_reasons_with_details_start_with_a_listed_reason():
    """The memory model and the pre-launch checks give `reason: detail`."""
    from autotune.config import PruneSpec
    from autotune.traffic import WorkloadSpec
    from autotune.tuning.policy import memory

    short = prune.too_short({"max-model-len": 10}, WorkloadSpec(input_len=64, output_len=64))
    assert short is not None and short.partition(": ")[0] in reasons.REASONS
    shape = memory.ModelShape(num_layers=2, num_kv_heads=2, head_dim=64, hidden_size=128,
                              vocab_size=1000, intermediate_size=256, num_attention_heads=2,
                              tie_word_embeddings=True, dtype_bytes=2,
                              max_position_embeddings=4096)
    est = memory.estimate(shape, memory.Launch(None, kv_cache_memory_bytes=10_000,
                                               max_model_len=4096))
    verdict = prune.before_launch(est, PruneSpec())
    assert verdict is not None and verdict.partition(": ")[0] == reasons.KV_TOO_SMALL


def test_legend_keeps_the_order_and_skips_unknown_names():
    assert reasons.legend(["oom", None, "", "ValueError", "oom", "behind"]) == {
        "oom": reasons.REASONS["oom"], "behind": reasons.REASONS["behind"]}
    assert reasons.meaning("ValueError") is None


def test_show_prints_the_meaning_of_the_reasons_its_trials_carry():
    st = optuna.create_study(directions=["maximize"])
    trials.add(st, values=[1.0], constraints={"completed": 0.0}, baseline=DEFAULTS,
               flags={}, outcome="complete", measures={"throughput": 1.0, "latency_ms": 1.0,
                                                       "memory_mib": 1.0})
    trials.add(st, TrialState.PRUNED, flags={"max-num-seqs": 4}, outcome="pruned",
               reason=reasons.OOM, constraints={"completed": 1.0})
    trials.add(st, TrialState.FAIL, flags={"max-num-seqs": 8}, outcome=INTERRUPTED,
               reason=reasons.DEFAULTS_FIRST)
    data = Summary.of(st)
    assert data.reasons == {r: reasons.REASONS[r] for r in
                            (reasons.OOM, reasons.DEFAULTS_FIRST, reasons.INTERRUPTED)}
    assert json.loads(json.dumps(data.as_json(), default=str))["reasons"] == data.reasons
    out = io.StringIO()
    views.print_summary(data, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    for name, meaning in data.reasons.items():
        assert f"{name}: {meaning}" in text
    assert reasons.REASONS[reasons.BEHIND] not in text  # only the reasons that occur
