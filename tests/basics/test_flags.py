import pytest

from autotune._flags import flag_name, integer, normalize, number, text, to_args


@pytest.mark.parametrize(
    ("flags", "args"),
    [
        ({}, []),
        ({"max-num-seqs": 64}, ["--max-num-seqs", "64"]),
        ({"max_num_seqs": 64}, ["--max-num-seqs", "64"]),
        ({"--max-num-seqs": 64}, ["--max-num-seqs", "64"]),
        ({"enforce-eager": True}, ["--enforce-eager"]),
        ({"enable-prefix-caching": False}, ["--no-enable-prefix-caching"]),
        ({"kv-cache-dtype": None}, []),
        ({"gpu-memory-utilization": 0.9}, ["--gpu-memory-utilization", "0.9"]),
        ({"gpu-memory-utilization": 1e-4}, ["--gpu-memory-utilization", "0.0001"]),
        ({"max-model-len": "32K"}, ["--max-model-len", "32K"]),
        (
            {"speculative-config": {"num_speculative_tokens": 3, "method": "ngram"}},
            ["--speculative-config", '{"method":"ngram","num_speculative_tokens":3}'],
        ),
        ({"middleware": ["a", "b"]}, ["--middleware", "a", "b"]),
        (
            {"block-size": 32, "enforce-eager": False, "kv-cache-dtype": "fp8"},
            ["--block-size", "32", "--no-enforce-eager", "--kv-cache-dtype", "fp8"],
        ),
    ],
)
def test_to_args(flags, args):
    assert to_args(flags) == args


def test_zero_is_a_value_not_false():
    assert to_args({"seed": 0}) == ["--seed", "0"]


@pytest.mark.parametrize(
    "flags",
    [{"max_num_seqs": 1, "max-num-seqs": 2}, {"": 1}, {"middleware": []}, {"x": [[1]]}],
)
def test_rejects(flags):
    with pytest.raises(ValueError):
        to_args(flags)


def test_normalize_keeps_order_and_drops_none():
    assert list(normalize({"b_c": 1, "a": None, "--d": 2})) == ["b-c", "d"]
    assert flag_name("--kv_cache_dtype") == "kv-cache-dtype"


def test_a_number_flag_reads_as_a_whole_number_and_nothing_else_does():
    flags = {"api-server-count": "4", "tensor-parallel-size": 2, "enforce-eager": True,
             "speculative-config": {"method": "ngram"}}
    assert integer(flags, "api-server-count", 1) == 4
    assert integer(flags, "tensor-parallel-size", 1) == 2
    assert integer(flags, "max-num-seqs", 256) == 256  # unset: the default
    for name in ("enforce-eager", "speculative-config"):
        with pytest.raises(ValueError, match=f"flag --{name} takes a whole number"):
            integer(flags, name, 1)


def test_number_and_text_read_one_value_of_a_flag():
    flags = {"gpu-memory-utilization": "0.5", "revision": 7, "download-dir": "/d",
             "enforce-eager": True, "speculative-config": {"method": "ngram"}}
    assert number(flags, "gpu-memory-utilization", 0.9) == 0.5
    assert number(flags, "swap-space", 0.9) == 0.9  # unset: the default
    assert (text(flags, "revision"), text(flags, "download-dir")) == ("7", "/d")
    assert text(flags, "tokenizer") is None
    for name in ("enforce-eager", "speculative-config"):
        with pytest.raises(ValueError, match=f"flag --{name} takes a number"):
            number(flags, name, 1.0)
        with pytest.raises(ValueError, match=f"flag --{name} takes a single value"):
            text(flags, name)
