"""Exports are safe by construction: hostile names and values stay data in every format.

A study, a baseline, a model path and env values chosen to break out of a shell comment or
quote, or to change a YAML document, are exported in all five formats; the CLI script is
run (with a stand-in `vllm` that records its arguments) and the others are parsed.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune.errors import ConfigError
from autotune.measure.measurement import Measurement
from autotune.results import _limits as limits
from autotune.results.export import _provenance as provenance
from autotune.results.export import _recheck as recheck
from autotune.results.export import formats
from autotune.tuning.records.trialrecord import TrialRecord
from tests import trials

HOSTILE = [
    "fast\ntouch pwned\n#",
    "a\rtouch pwned",
    "$(touch pwned)",
    "`touch pwned`",
    "x'; touch pwned; echo '",
    'x"; touch pwned; echo "',
    "key: value\n- item\n&anchor *alias !!python/object:os.system",
    "--- \n...\n{[}]",
    "tab\there\x1b[31m\x00nul",
]


def _study(name: str, baseline: str, env_value: str) -> tuple[optuna.Study, TrialRecord]:
    st = optuna.create_study(study_name=name, direction="maximize")
    rec = trials.add(st, values=[0.1], constraints={"slo": -1.0}, baseline=baseline,
                     flags={"max-num-seqs": 4, "served-model-name": env_value},
                     env={"VLLM_TEST_VALUE": env_value},
                     measures={"throughput": 10.0, "latency_ms": 5.0, "memory_mib": 1.0},
                     metrics=Measurement.of({"output_throughput": 10.0}),
                     engine_version="vllm-0.26.0",
                     device={"name": "gpu"}, gain=0.1)
    return st, rec


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_the_cli_script_runs_only_vllm(tmp_path, name):
    st, rec = _study(name, name, name)
    model = f"/models/{name}"
    script = formats.render(st, rec, "cli", model)
    # A stand-in `vllm` that writes its arguments, one per line, NUL-separated.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "vllm"
    stub.write_text('#!/usr/bin/env python3\nimport os, sys\n'
                    'open("argv", "w", newline="").write("\\0".join(sys.argv[1:]))\n'
                    'open("env", "w", newline="").write(os.environ.get("VLLM_TEST_VALUE", ""))\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "run.sh").write_text(script)
    proc = subprocess.run(["bash", "run.sh"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"},
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "pwned").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv", "bin", "env", "run.sh"]
    argv = (tmp_path / "argv").read_bytes().decode().split("\0")
    nul_free = name.replace("\0", "")  # a shell word cannot hold NUL; bash drops it
    assert argv[:2] == ["serve", model.replace("\0", "")]
    assert argv[2:] == ["--max-num-seqs", "4", "--served-model-name", nul_free]
    assert (tmp_path / "env").read_bytes().decode() == nul_free
    # Every comment stays one comment line (a quoted value may span lines: that is data).
    # The operating limits and the re-check command (with the study's name) follow them.
    lim = limits.derive(rec, recheck.slos_of(st))
    notes = provenance.comment_lines(provenance.Provenance.of(st, rec)) + \
        recheck.limit_lines(lim, recheck.recheck(st, rec, lim))
    lines = script.splitlines()
    assert [ln.removeprefix("# ") for ln in lines[:len(notes)]] == notes
    assert lines[len(notes)].startswith("VLLM_TEST_VALUE=")


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_yaml_and_json_exports_parse_to_the_same_data(name):
    st, rec = _study(name, name, name)
    model = f"/models/{name}"
    flags = {"max-num-seqs": 4, "served-model-name": name}
    assert yaml.safe_load(formats.render(st, rec, "vllm-yaml", model)) == flags
    data = json.loads(formats.render(st, rec, "json", model))
    assert data["study"] == name and data["baseline"] == name and data["model"] == model
    compose = yaml.safe_load(formats.render(st, rec, "compose", model))
    svc = compose["services"]["vllm"]
    assert svc["command"][0] == model and svc["command"][-1] == name
    assert svc["environment"] == {"VLLM_TEST_VALUE": name}
    deployment, service = yaml.safe_load_all(formats.render(st, rec, "k8s", model))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == model and container["args"][-1] == name
    assert container["env"] == [{"name": "VLLM_TEST_VALUE", "value": name}]
    assert deployment["metadata"]["annotations"]["autotune/study"] == name
    label = deployment["metadata"]["labels"]["autotune/study"]
    assert len(label) <= 63 and all(c.isalnum() or c in "._-" for c in label)
    assert service["metadata"]["labels"]["autotune/study"] == label


def test_an_env_name_that_is_not_a_name_is_refused():
    st = optuna.create_study(study_name="s", direction="maximize")
    rec = trials.add(st, TrialState.COMPLETE, values=[0.0], constraints={"slo": -1.0},
                     env={"A=1; touch pwned; B": "x"}, flags={}, measures={
                         "throughput": 1.0, "latency_ms": 1.0, "memory_mib": 1.0})
    for fmt in formats.FORMATS:
        with pytest.raises(ConfigError, match="not an environment variable name"):
            formats.render(st, rec, fmt, "/m")
