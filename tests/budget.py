"""The suite's time, seen as it grows: at the end of a run, every test that took more than
`LIMIT_S` (set-up, call and tear-down together, as pytest-xdist reports them to the
controller) is named with the reason recorded for it here, and a test with no reason is
flagged as new. A report, not a failing test: timings on two shared cores vary by tens of
per cent, and a test's set-up carries the module's shared engines, so the first test of a
module pays for the others."""

from __future__ import annotations

from collections import defaultdict

import pytest

LIMIT_S = 60.0

# Why each test over the limit is worth its time (the name without xdist's `@group`).
REASONS = {
    "tests/verify/test_warmcheck_engine.py::test_a_warm_restart_measures_what_vllms_own_"
    "launch_does":
        "the README's warm-restart check as written: two pairs of compiled engines, each "
        "with a capacity search (issue 61's paired check on the CPU engine)",
    "tests/acceptance/test_readme_engine.py::test_every_study_of_the_block_has_a_decision":
        "its set-up runs the README's main job as written: two studies of five trials in "
        "all, explain, every export, the report (the acceptance tier, issue 47)",
    "tests/measure/test_traces_engine.py::test_bench_finds_the_time_scale_a_configuration_"
    "serves":
        "a capacity search of the shipped day trace (burst, sustained steps) after its "
        "unloaded run, on an engine of its own in the `alone` phase (135 s alone here)",
    "tests/tuning/test_prune_engine.py::test_every_documented_outcome_within_the_budget":
        "its set-up runs the shipped cpu-pressure study, whose every outcome the README "
        "promises (five engines)",
    "tests/verify/test_validate_engine.py::test_validate_reruns_both_and_stores_the_interval":
        "validate's pairs: four fresh engines, each with a capacity search",
    "tests/results/test_dashboard.py::test_dashboard_serves_the_study":
        "its set-up runs the session's shared CPU study (three trials) for every test "
        "that reads it",
    "tests/project/test_notebooks.py::test_pareto_notebook":
        "its set-up runs the session's shared CPU study (three trials) when it is the first "
        "of that study's tests (tests/project/ comes before tests/results/)",
    "tests/tuning/test_realmodel_engine.py::test_a_real_model_answers_and_measures_its_noise_floor":
        "its set-up serves the real SmolLM2 and makes the guardrail's reference",
    "tests/tuning/test_realmodel_engine.py::test_a_speculative_rescheduled_trial_records_its_"
    "acceptance_and_passes_the_guardrail":
        "a speculating trial of the real model, checked by the guardrail",
    "tests/tuning/test_realmodel_engine.py::test_a_wrong_rope_base_is_worse":
        "the real model with a wrong RoPE base on an engine of its own, its guardrail "
        "check answering the task items (58-72 s in CI)",
    "tests/verify/test_crosscheck_engine.py::test_validate_with_vllms_client[side-by-side]":
        "vLLM's own client on two engines side by side",
    "tests/tuning/test_faults_engine.py::test_killed_engine_ends_the_trial_as_crashed"
    "[api-server-between-steps]":
        "an engine started, its API server killed as the burst ends, every process of it "
        "checked gone (83 s in a slow CI run, under a minute in others)",
    "tests/engine/test_frontend_engine.py::test_two_api_servers_serve_and_keep_the_probed_metrics":
        "an engine of its own with two API server processes, each importing vLLM (75 s in "
        "a slow CI run)",
    "tests/tuning/test_faults_engine.py::test_trial_timeout_bounds_the_whole_trial":
        "a trial's 40-s budget held from its engine's start-up through its stop (62 s in "
        "one CI run)",
    "tests/verify/test_crosscheck_engine.py::test_validate_with_vllms_client[alternating]":
        "vLLM's own client on engines one after the other",
    "tests/tuning/test_workers.py::test_tune_gpus_on_the_cpu_engine":
        "tune --gpus: two workers, each with engines of its own",
    "tests/engine/test_warm_engine.py::test_a_warm_start_is_the_same_engine":
        "a warm start against a cold one, on the same flags",
    "tests/tuning/test_study_engine.py::test_rerun_resumes_without_repeating":
        "two more trials of the shared study, resumed",
    "tests/tuning/test_study_engine.py::test_baselines_first_then_search_with_full_records":
        "its set-up runs the session's shared CPU study (three trials) when it is the first "
        "of that study's tests (a run of this module alone)",
    "tests/tuning/test_study_engine.py::test_ctrl_c_cleans_up_and_the_study_resumes":
        "Ctrl-C in the middle of a trial, then the study resumed",
    "tests/tuning/test_explain_engine.py::test_the_flag_that_carries_the_gain_is_all_that_stays":
        "its set-up runs tune with both last phases: explain's runs and the re-check",
    "tests/measure/test_capacity_engine.py::test_search_holds_its_slos_within_the_step_budget":
        "its set-up starts the module's two engines and runs the loose search the other "
        "capacity tests compare against",
    "tests/measure/test_capacity_engine.py::test_bench_capacity_agrees_with_a_second_search":
        "`autotune bench --capacity` as a user runs it (its own process: imports, a whole "
        "search) against the module's search (89 s in a slow fresh-clone run); where they "
        "disagree, a library search made right after it as well (142 s, 2026-12-07)",
    "tests/measure/test_capacity_engine.py::test_one_sequence_at_a_time_stops_below_the_best":
        "a capacity search of the one-sequence engine, anchored above the best (64 s in a "
        "slow fresh-clone run, about 50 s on a faster machine)",
    "tests/measure/test_capacity_engine.py::test_a_stricter_slo_gives_no_higher_capacity":
        "a whole capacity search under the stricter SLO (burst, sustained steps, any "
        "re-measurement of a too-uncertain step), compared with the loose one (62 s in a "
        "fresh-clone run)",
    "tests/tuning/test_study_engine.py::test_study_on_postgresql_reusing_a_reference":
        "a study of its own on the PostgreSQL server, its trials' engines started fresh "
        "(86 s in a CI run beside another engine)",
    "tests/measure/test_bench_engine.py::test_bench_cli_launches_its_own_server":
        "`bench --model` as a user runs it: its own engine started and stopped (84 s in a "
        "CI run beside another engine)",
    "tests/tuning/test_faults_engine.py::test_bench_with_its_own_engine_stops_in_one_line_"
    "when_the_engine_dies":
        "`bench --model` with an engine of its own, killed mid-run (81 s in a CI run beside "
        "another engine)",
    "tests/engine/test_engine.py::test_serves_behind_a_busy_port_and_stops_everything":
        "an engine started behind a taken port, retried and stopped whole (68 s in a CI "
        "run beside another engine)",
    "tests/engine/test_engine.py::test_signal_to_the_tuner_leaves_no_engine[sigterm]":
        "an engine started and its tuner signalled, every process of it checked gone",
    "tests/engine/test_engine.py::test_signal_to_the_tuner_leaves_no_engine[sigint]":
        "an engine started and its tuner signalled, every process of it checked gone",
    "tests/engine/test_engine.py::test_signal_to_the_tuner_leaves_no_engine[sigkill]":
        "an engine started and its tuner killed, every process of it checked gone",
    "tests/tuning/test_study_engine.py::test_exported_config_file_serves":
        "the exported configuration file served by `vllm serve` itself",
    "tests/tuning/test_guardrail_engine.py::test_float32_drifts_and_is_rejected_under_a_"
    "strict_threshold":
        "the guardrail's check of an engine of its own in float32 against the shared "
        "engine's reference",
    "tests/measure/test_bench_engine.py::test_agrees_with_vllm_bench_serve":
        "its set-up starts the module's engine; three runs of autotune's client and three "
        "of `vllm bench serve`, alternating, each 6 s of requests paced at 8 req/s (70 s "
        "by hand on 2026-12-06)",
    "tests/tuning/test_faults_engine.py::test_killed_engine_ends_the_trial_as_crashed"
    "[engine-core-mid-step]":
        "an engine started, its engine core killed in the middle of a step, every process "
        "of it checked gone (62 s in a fresh-clone run on a slow machine)",
}

_seconds: dict[str, float] = defaultdict(float)


def name(nodeid: str) -> str:
    """A report's node id without the `@group` pytest-xdist appends to grouped tests."""
    base, _, group = nodeid.rpartition("@")
    return base if "::" in base and "]" not in group else nodeid


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[name(report.nodeid)] += report.duration


def over(seconds: dict[str, float], limit: float | None = None
         ) -> list[tuple[str, float, str]]:
    """(test, seconds, reason) for every test over `limit` (default `LIMIT_S`), slowest
    first; a test without a recorded reason reads `NEW: no reason recorded ...`."""
    limit = LIMIT_S if limit is None else limit
    return [(t, s, REASONS.get(t, "NEW: no reason recorded in tests/budget.py"))
            for t, s in sorted(seconds.items(), key=lambda kv: -kv[1]) if s > limit]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports
        return
    slow = over(_seconds)
    if not slow:
        return
    terminalreporter.section(f"tests over {LIMIT_S:.0f} s (tests/budget.py)")
    for test, seconds, why in slow:
        terminalreporter.write_line(f"{seconds:6.0f} s  {test}: {why}")
