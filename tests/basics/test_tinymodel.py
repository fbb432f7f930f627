import hashlib
import json

import pytest

from autotune import tinymodel


def _digest(path):
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_build_is_deterministic_and_cached(tmp_path):
    a = tinymodel.build(tmp_path / "a", preset="tiny", seed=0)
    b = tinymodel.build(tmp_path / "b", preset="tiny", seed=0)
    assert not a.reused and not b.reused
    assert _digest(a.path) == _digest(b.path)
    assert (a.path / "tokenizer.json").read_bytes() == (b.path / "tokenizer.json").read_bytes()
    again = tinymodel.build(tmp_path / "a", preset="tiny", seed=0)
    assert again.reused and _digest(again.path) == _digest(a.path)
    other = tinymodel.build(tmp_path / "c", preset="tiny", seed=1)
    assert _digest(other.path) != _digest(a.path)


def test_shape_and_tokenizer_cover_the_vocabulary(tiny_model):
    from transformers import AutoTokenizer

    config = json.loads((tiny_model / "config.json").read_text())
    shape = tinymodel.PRESETS["tiny"]
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["head_dim"] >= 64  # the CPU attention kernels reject smaller heads
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_key_value_heads"):
        assert config[key] == shape[key]
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    assert len(tok) == shape["vocab_size"]
    specials = set(tok.all_special_ids)
    # Every id a random model can emit must decode to visible text.
    empty = [i for i in range(shape["vocab_size"])
             if i not in specials and not tok.decode([i])]
    assert empty == []
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>"


def test_refuses_a_foreign_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        tinymodel.build(tmp_path, preset="tiny")


def test_unknown_preset():
    with pytest.raises(ValueError, match="allowed: qwen3-4b, smollm2-135m, tiny"):
        tinymodel.fingerprint("llama", 0)


def test_qwen3_4b_shape_matches_the_real_checkpoint():
    s = tinymodel.PRESETS["qwen3-4b"]
    assert (s["num_hidden_layers"], s["hidden_size"], s["num_attention_heads"],
            s["num_key_value_heads"], s["head_dim"], s["vocab_size"],
            s["intermediate_size"], s["tie_word_embeddings"]) == (
        36, 2560, 32, 8, 128, 151936, 9728, True)
