"""Relief moves: each bottleneck gives its documented move, within the space, never twice."""

from __future__ import annotations

import dataclasses
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune._device import DeviceSeen
from autotune.config import Param, Scenario
from autotune.engine.log import Startup
from autotune.measure import bottleneck as bn
from autotune.measure.measurement import Measurement
from autotune.stored import json_data
from autotune.tuning import study as study_mod
from autotune.tuning import trial as trial_mod
from autotune.tuning.policy import relief
from autotune.tuning.records.origin import RELIEF, SAMPLER, Origin
from autotune.tuning.records.progress import Progress
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.studyrecord import StudyRecord
from autotune.tuning.records.trialrecord import DEFAULTS, TrialRecord
from tests.paths import ROOT

SPACE = """
name: relief-test
model: {tiny: tiny}
space:
  api-server-count: {choices: [1, 2, 4]}
  stream-interval: {choices: [1, 4, 8]}
  async-scheduling: {choices: [true, false]}
  max-num-seqs: {choices: [64, 256, 1024]}
  max-num-batched-tokens: {choices: [2048, 8192, 16384]}
  kv-cache-dtype: {choices: [auto, fp8]}
  gpu-memory-utilization: {low: 0.8, high: 0.95, step: 0.05}
  enforce-eager: {choices: [true, false]}
speculative: {num_speculative_tokens: {choices: [0, 2, 4]}}
objective: {mode: weighted, latency: ttft_p95, slos: {ttft_p95_ms: 500, tpot_p95_ms: 30}}
"""
H200 = DeviceSeen("NVIDIA H200", 143771)
DEFAULT_FLAGS = {"gpu-memory-utilization": 0.9, "kv-cache-dtype": "auto", "stream-interval": 1}


def scenario(**changes: Any) -> Scenario:
    raw = yaml.safe_load(SPACE)
    raw.update(changes)
    return Scenario.model_validate(raw)


def measured(kind: str, number: int = 0, flags: dict[str, Any] | None = None,
             violations: tuple[str, ...] = ("ttft_p95_ms 812.0>500",),
             params: dict[str, Any] | None = None, gpu: float = 60.0, **rec: Any
             ) -> TrialRecord:
    """A completed capacity trial whose limiting step names `kind`."""
    step = {"index": 1, "violations": list(violations), "probes": {"gpu_util_mean": gpu}}
    cap = {"request_throughput": 60.0, "low": 60.0, "high": 66.0, "bottleneck_step": 1,
           "bottleneck": {"kind": kind, "text": f"{kind} figures", "valid": True},
           "steps": [{"index": 0, "violations": []}, step]}
    return TrialRecord(number, TrialState.COMPLETE, values=(0.0,), flags=flags or {},
                       params=params or {}, device=H200, metrics=Measurement.of({"capacity": cap}),
                       baseline=DEFAULTS if not flags and not params else None, **rec)


def first(rec: TrialRecord, sc: Scenario | None = None, others: tuple[TrialRecord, ...] = ()
          ) -> relief.Move | None:
    return relief.propose([rec, *others], sc or scenario(), DEFAULT_FLAGS, [rec])


@pytest.mark.parametrize(("kind", "violations", "knob", "after"), [
    (bn.FRONT_END, ("ttft_p95_ms 812.0>500",), "api-server-count", 2),
    (bn.ENGINE_CORE, ("ttft_p95_ms 812.0>500",), "async-scheduling", True),
    (bn.KV_CACHE, ("ttft_p95_ms 812.0>500",), "kv-cache-dtype", "fp8"),
    (bn.GPU, ("ttft_p95_ms 812.0>500",), "max-num-batched-tokens", 16384),
    (bn.GPU, ("tpot_p95_ms 41.0>30",), "max-num-batched-tokens", 2048),
    (bn.WORKER, ("ttft_p95_ms 812.0>500",), "enforce-eager", False),  # from eager (below)
    (bn.NONE, ("tpot_p95_ms 41.0>30",), "num_speculative_tokens", 2),
    (bn.NONE, ("ttft_p95_ms 812.0>500",), "max-num-batched-tokens", 16384),
])
def test_each_bottleneck_gives_its_documented_move(kind, violations, knob, after):
    # The defaults on an H200: 1024 sequences and 8192 batched tokens by the platform's rule.
    flags = {"enforce-eager": True} if kind == bn.WORKER else None
    move = first(measured(kind, violations=violations, flags=flags,
                          startup=Startup(async_scheduling=False)))
    assert move is not None and move.knob.name == knob and move.after == after
    assert move.knob in relief.RELIEF[kind]
    origin = move.origin
    assert origin.kind == RELIEF and origin.source == 0 and origin.bottleneck == kind
    assert origin.text == f"relieves {kind} of #0 ({kind} figures)"


def test_the_client_as_limit_gives_no_move():
    assert first(measured(bn.CLIENT)) is None


def test_a_flag_outside_the_space_never_moves():
    only_memory = scenario(space={"max-num-seqs": {"choices": [64, 256]}}, speculative=None)
    # The front end's knobs are not in this space: nothing to propose.
    assert first(measured(bn.FRONT_END), only_memory) is None
    # KV: fp8 and the memory fraction are not searched; fewer sequences are (1024 -> 256),
    # as flags: the defaults' 1024 sequences are no point of this space.
    move = first(measured(bn.KV_CACHE), only_memory)
    assert move is not None and move.knob.name == "max-num-seqs" and move.after == 256
    assert move.params is None and move.flags == {"max-num-seqs": 256}


def test_the_end_of_the_space_moves_the_next_knob():
    rec = measured(bn.FRONT_END, number=3, params={"api-server-count": 4, "stream-interval": 1},
                   flags={"api-server-count": 4, "stream-interval": 1})
    sc = scenario(space={"api-server-count": {"choices": [1, 2, 4]},
                         "stream-interval": {"choices": [1, 4, 8]}}, speculative=None)
    move = first(rec, sc)
    assert move is not None and move.knob.name == "stream-interval" and move.after == 4
    assert move.params == {"api-server-count": 4, "stream-interval": 4}
    assert move.flags == {"api-server-count": 4, "stream-interval": 4}


def test_a_move_is_never_proposed_twice():
    sc = scenario(space={"api-server-count": {"choices": [1, 2, 4]},
                         "stream-interval": {"choices": [1, 4, 8]}}, speculative=None)
    base = measured(bn.FRONT_END)
    move = first(base, sc)
    assert move is not None and move.flags == {"api-server-count": 2, "stream-interval": 1}
    # The same configuration waiting in the queue, as its parameters: not proposed again.
    queued = TrialRecord(1, TrialState.WAITING, params=dict(move.params or {}),
                         origin=move.origin)
    again = first(base, sc, (queued,))
    assert again is not None and again.knob.name == "stream-interval"
    # Both taken (one ran, spelled with the default stream interval left out): nothing left.
    ran = TrialRecord(2, TrialState.COMPLETE, flags={"api-server-count": 2})
    other = TrialRecord(3, TrialState.PRUNED, flags={"stream-interval": 4})
    assert first(base, sc, (ran, other)) is None


def test_defaults_outside_the_space_move_as_flags():
    # 0.92 is not a point of a 0.05-step range: the move runs as flags, like a baseline.
    sc = scenario(space={"gpu-memory-utilization": {"low": 0.8, "high": 0.9, "step": 0.05},
                         "kv-cache-dtype": {"choices": ["auto", "fp8_e4m3"]}}, speculative=None)
    rec = measured(bn.KV_CACHE)
    move = relief.propose([rec], sc, {"gpu-memory-utilization": 0.92, "kv-cache-dtype": "auto"},
                          [rec])
    assert move is not None and move.params is None
    assert move.after == "fp8_e4m3" and move.flags == {"kv-cache-dtype": "fp8_e4m3"}


@pytest.mark.parametrize(("p", "value", "toward", "expected"), [
    (Param(choices=[64, 256, 1024]), 256, relief.UP, 1024),
    (Param(choices=[64, 256, 1024]), 128, relief.DOWN, 64),  # a default between choices
    (Param(choices=[64, 256, 1024]), 1024, relief.UP, None),
    (Param(low=0.8, high=0.95, step=0.05), 0.92, relief.UP, 0.95),
    (Param(low=0.8, high=0.95, step=0.05), 0.9, relief.DOWN, 0.85),
    (Param(low=16, high=1024, type="int", log=True), 100, relief.UP, 200),
    (Param(low=1, high=9, type="int", step=1), 9, relief.UP, None),
    (Param(choices=["auto", "fp8"]), "fp8", "fp8", None),  # already there
    (Param(choices=[True, False]), None, True, True),  # unknown start: set it
    (Param(choices=[64, 256]), None, relief.UP, None),  # unknown start: no notch
])
def test_notch(p, value, toward, expected):
    assert relief.notch(p, value, toward) == expected


def test_a_trial_pruned_for_preemption_is_relieved_as_kv():
    rec = TrialRecord(4, TrialState.PRUNED, reason="preemption", detail="12 preemptions",
                      flags={"max-num-seqs": 1024}, params={"max-num-seqs": 1024},
                      device=H200)
    sc = scenario(space={"max-num-seqs": {"choices": [64, 256, 1024]}}, speculative=None)
    move = first(rec, sc)
    assert move is not None and move.after == 256
    assert move.origin.text == "relieves kv_cache of #4 (pruned for preemption: 12 preemptions)"


def test_the_gpu_at_full_use_is_said():
    assert relief.ceiling(measured(bn.GPU, gpu=98.0)) .startswith(
        "#0 is limited by the GPU, busy 98 %")
    assert relief.ceiling(measured(bn.GPU, gpu=80.0)) is None
    assert relief.ceiling(measured(bn.FRONT_END, gpu=99.0)) is None


def test_due_alternates_with_the_sampler():
    done = lambda n, kind: TrialRecord(n, TrialState.COMPLETE,  # noqa: E731
                                       origin=Origin(kind, kind))
    assert relief.due([done(0, "baseline")], 2)
    assert not relief.due([done(0, "baseline"), done(1, RELIEF)], 2)
    assert relief.due([done(0, "baseline"), done(1, RELIEF), done(2, SAMPLER)], 2)
    assert relief.due([done(0, "baseline"), done(1, RELIEF)], 1)
    waiting = TrialRecord(3, TrialState.WAITING, origin=Origin(RELIEF, "r"))
    assert not relief.due([done(0, "baseline"), waiting], 1)
    assert not relief.due([done(0, "baseline")], 3)


LOOP = """
name: relief-loop
model: {tiny: tiny}
space:
  api-server-count: {choices: [1, 2, 4]}
  block-size: {choices: [16, 32, 64]}
workload: {kind: random, num_requests: 8}
objective: {mode: weighted, latency: ttft_p95, weights: {throughput: 1.0, latency: 0.0}}
guardrail: {enabled: false}
budget: {trials: 6}
sampler: {name: random, seed: 0}
"""


def canned(scenario: Scenario, model: str, flags: dict[str, Any], **_: Any) -> trial_mod.Outcome:
    """Throughput grows with API servers, and the front end limits below 4 of them."""
    servers = int(flags.get("api-server-count", 1))
    probes = {"api_server_cpu": 99.0 if servers < 4 else 40.0, "api_servers": servers,
              "gpu_util_mean": 60.0 if servers < 4 else 97.0}
    summary = {"completed": 8, "failed": 0, "output_throughput": 100.0 * servers,
               "p95_ttft_ms": 50.0, "probes": probes,
               "bottleneck": json_data(bn.attribute(probes))}
    return trial_mod.Outcome(trial_mod.COMPLETE, "", Measurement.of(summary),
                             trial_mod.EngineRun(flags))


def _run_loop(tmp_path, **changes: Any) -> list[TrialRecord]:
    raw = yaml.safe_load(LOOP)
    raw.update(changes)
    sc = Scenario.model_validate(raw)
    url = f"sqlite:///{tmp_path}/relief-loop.db"
    shared = study_mod.open_study(sc, url)
    # vLLM's block size on a GPU: the defaults are a point of the space.
    shared.study.set_user_attr("engine_defaults", {"block-size": 16})
    study_mod.loop(study_mod.RunContext(shared, sc, "model", tmp_path, runner=canned), trials=6)
    return records(optuna.load_study(study_name="relief-loop", storage=url))


def test_the_study_queues_relief_moves_and_records_why(tmp_path):
    trials = _run_loop(tmp_path)
    why = [r.tried_because for r in trials]
    assert why[0].text == f"baseline {DEFAULTS}"
    # Right after the defaults, the front end's relief: a second API server, then (the
    # best is then that trial) a fourth; sampler trials in between.
    assert why[1].kind == RELIEF and trials[1].flags["api-server-count"] == 2
    assert why[1].text.startswith("relieves front_end of #0 (front end: API server 99 %")
    assert why[2].kind == SAMPLER
    relieved = [r for r in trials if r.origin_kind == RELIEF and r.state == TrialState.COMPLETE]
    assert [r.flags["api-server-count"] for r in relieved][:2] == [2, 4]
    # Parameters, so the sampler learns from them; every configuration launched once.
    assert all(r.params for r in relieved)
    taken = relief.TakenConfigurations([], scenario(), {"block-size": 16})
    keys = [taken.key(r.flags) for r in trials
            if r.duplicate_of is None and r.state == TrialState.COMPLETE]
    assert len(keys) == len(set(keys))
    assert all(r.scalars()["tried_because"] == r.tried_because.text for r in trials)


def test_a_scenario_turns_relief_off(tmp_path):
    trials = _run_loop(tmp_path, relief={"enabled": False})
    assert {r.origin_kind for r in trials[1:]} == {SAMPLER}


def test_a_baseline_with_flags_beyond_the_space_moves_as_flags():
    sc = scenario(space={"max-num-seqs": {"choices": [2, 16]}}, speculative=None)
    rec = TrialRecord(1, TrialState.PRUNED, reason="preemption", baseline="preempting",
                      flags={"kv-cache-memory-bytes": 2000000, "max-num-seqs": 16},
                      device=DeviceSeen("cpu"))
    move = first(rec, sc)
    assert move is not None and move.params is None
    assert move.flags == {"kv-cache-memory-bytes": 2000000, "max-num-seqs": 2}


def test_preemption_fits_the_sequences_to_what_the_cache_held():
    sc = scenario(space={"max-num-seqs": {"choices": [16, 32, 64, 128, 256]}}, speculative=None)
    # 183,000 KV tokens over 2,304-token requests: 79 sequences fit; 256 -> 64, not 128.
    rec = TrialRecord(2, TrialState.PRUNED, reason="preemption", params={"max-num-seqs": 256},
                      flags={"max-num-seqs": 256}, kv_capacity_reported=183_000,
                      metrics=Measurement.of({"completed": 10, "total_input_tokens": 20_480,
                                              "total_output_tokens": 2_560}), device=H200)
    move = first(rec, sc)
    assert move is not None and move.after == 64
    # Without the engine's KV figure: one notch down.
    unknown = TrialRecord(2, TrialState.PRUNED, reason="preemption",
                          params={"max-num-seqs": 256}, flags={"max-num-seqs": 256},
                          device=H200)
    assert first(unknown, sc).after == 128
    assert relief.largest_within(Param(low=8, high=512, type="int", step=8), 256, 79.4) == 72


def test_the_live_progress_says_when_the_best_is_gpu_bound():
    from autotune.results.views import progress_line

    best = dataclasses.replace(measured(bn.GPU, gpu=97.0), gain=0.1)
    line = progress_line(Progress(3, 10, 600.0, None, best, best))
    assert "its GPU is near full use: further flags will not help much" in line
    calm = dataclasses.replace(measured(bn.FRONT_END), gain=0.1)
    assert "near full use" not in progress_line(Progress(3, 10, 600.0, None, calm,
                                                                   calm))


def _guided() -> tuple[list[TrialRecord], Scenario, dict[str, Any]]:
    """The committed H200 study h200-guided-check (no baselines, relief every 2), its
    defaults' limit read again across their knee, as a study records it now."""

    from autotune.measure import searchresult

    db = ROOT / "studies" / "h200-guided-check.db"
    st = optuna.load_study(study_name="h200-guided-check", storage=f"sqlite:///{db}")
    recs = records(st)
    cap = recs[0].capacity
    assert cap is not None and cap.limiting_step is not None
    knee = searchresult.knee(cap.steps, cap.rate, cap.limiting_step)
    metrics = recs[0].metrics.replace(capacity=dataclasses.replace(cap, bottleneck=knee))
    scenario = StudyRecord.of(st).scenario.scenario
    assert scenario is not None
    return ([dataclasses.replace(recs[0], metrics=metrics)],
            scenario, StudyRecord.of(st).engine_defaults or {})


def test_replayed_the_first_move_from_the_defaults_is_more_api_servers():
    """On the H200 the threshold named the engine core (pegged at 94-98 % at every load)
    and relief moved max-num-batched-tokens, a tie; read across the knee the API server
    rose 77 -> 88 %, and the first move is more API servers."""
    recs, sc, defaults = _guided()
    move = relief.propose(recs, sc, defaults, recs)
    assert move is not None and move.limit.kind == bn.FRONT_END
    assert move.knob.name == "api-server-count" and move.before == 1 and move.after == 2
    # the engine core stays a suspect: it was saturated at the failing step
    assert [s.kind for s in relief.suspected(recs[0])] == [bn.FRONT_END, bn.ENGINE_CORE]


def test_a_tied_move_is_followed_by_the_next_suspects_move():
    """More API servers tied with the defaults: the next move relieves the engine core (the
    next suspect), not the front end's next knob (stream-interval)."""
    recs, sc, defaults = _guided()
    first = relief.propose(recs, sc, defaults, recs)
    assert first is not None
    tied = dataclasses.replace(
        recs[0], number=1, baseline=None, flags=first.flags, origin=first.origin)
    assert capacity_tied(tied, recs[0])
    move = relief.propose([*recs, tied], sc, defaults, recs)
    assert move is not None and move.limit.kind == bn.ENGINE_CORE
    assert move.knob.name != "stream-interval"
    assert "the next suspect, relieving front_end tied" in move.limit.text
    # a move that did not tie (it lost) leaves the suspect in place: its next knob follows
    worse = dataclasses.replace(recs[0].capacity, low=30.0, high=33.0, request_throughput=30.0)
    lost = dataclasses.replace(tied, metrics=recs[0].metrics.replace(capacity=worse))
    again = relief.propose([*recs, lost], sc, defaults, recs)
    assert again is not None and again.limit.kind == bn.FRONT_END
    assert again.knob.name == "stream-interval"


def capacity_tied(a: TrialRecord, b: TrialRecord) -> bool:
    from autotune.measure import capacityrecord

    return a.capacity is not None and b.capacity is not None and \
        capacityrecord.tied(a.capacity, b.capacity)


def test_the_study_loop_follows_a_tied_move_with_the_next_suspects_move(tmp_path):
    """Through the loop on a real SQLite study: the H200 defaults' measured capacity comes
    back for every configuration, so the first relief move (more API servers) ties; the
    loop's next relief move relieves the engine core, the next suspect."""
    recs, sc, defaults = _guided()
    measured_defaults = recs[0].metrics
    sc = sc.model_copy(update={"name": "tied-loop", "budget": sc.budget.model_copy(
        update={"trials": 4}), "sampler": sc.sampler.model_copy(update={"name": "random"})})

    def same_capacity(scenario: Scenario, model: str, flags: dict[str, Any],
                      **_: Any) -> trial_mod.Outcome:
        return trial_mod.Outcome(trial_mod.COMPLETE, "", measured_defaults,
                                 trial_mod.EngineRun(flags, device=H200))

    url = f"sqlite:///{tmp_path}/tied-loop.db"
    shared = study_mod.open_study(sc, url)
    shared.study.set_user_attr("engine_defaults", defaults)
    study_mod.loop(study_mod.RunContext(shared, sc, "model", tmp_path, runner=same_capacity),
                   trials=4)
    trials = records(optuna.load_study(study_name="tied-loop", storage=url))
    moves = [r for r in trials if r.origin_kind == RELIEF]
    assert [r.number for r in moves] == [1, 3]  # relief every 2: sampler trial #2 between
    assert moves[0].tried_because.bottleneck == bn.FRONT_END
    assert moves[0].flags["api-server-count"] == 2 and moves[0].tried_because.source == 0
    assert capacity_tied(moves[0], trials[0])
    nxt = moves[1].tried_because
    assert nxt.bottleneck == bn.ENGINE_CORE and nxt.knob != "stream-interval"
    assert "the next suspect, relieving front_end tied" in nxt.text


def test_a_resource_pegged_across_the_studys_trials_goes_after_the_others():
    """h200-guided-check #9 (an ablation of the winner): its knee shows no rise, and the
    threshold names the engine core at 92 % before the GPU at 95 %. Across the study the
    engine core read >= 90 % at 33 of 35 sustained steps of its trials, passing or failing:
    with the study's trials, the GPU is the first suspect and the engine core goes last,
    with that evidence."""

    db = ROOT / "studies" / "h200-guided-check.db"
    recs = records(optuna.load_study(study_name="h200-guided-check",
                                     storage=f"sqlite:///{db}"))
    alone = relief.suspected(recs[9])
    assert [b.kind for b in alone] == [bn.ENGINE_CORE, bn.GPU]
    across = relief.suspected(recs[9], recs)
    assert [b.kind for b in across] == [bn.GPU, bn.ENGINE_CORE]
    assert across[1].text.endswith("(engine core >= 90 % at 33 of the study's 35 sustained "
                                   "steps, passing or failing: not what broke)")
    # a suspect that is the only one keeps its place: there is nothing to try before it
    assert [b.kind for b in relief.suspected(recs[1], recs)] == [bn.ENGINE_CORE]
    # one trial, or too few steps, is no contrast across trials
    steps = [[s.probes for s in r.capacity.steps if s.rate is not None]
             for r in recs if r.capacity is not None]
    assert bn.pegged_everywhere(steps[:1]) == {}
    assert bn.pegged_everywhere([steps[0][:2], steps[1][:2]]) == {}
    assert set(bn.pegged_everywhere(steps)) == {bn.ENGINE_CORE}
