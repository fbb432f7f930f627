"""A scenario from one command line (`autotune tune --model M --slo KEY=MS`, `autotune init`).

Writing a scenario means knowing which flags the installed vLLM has, what ranges fit the
card (a 24 GB card and a 141 GB one want different max-num-seqs, memory fractions and
context lengths) and how to describe the traffic. Most of that can be read: the card
(`Card`: name, memory, cores), the model's config.json (KV bytes per token, its
context), the installed engine's flags and choices, the workload. `build` turns those facts
into a `Scenario` and says why in one line per choice (`Choice`), e.g. "max-num-seqs
16-256: a 24 GiB card holds about 180 of these requests in fp8"; `Start.yaml` writes it
as a commented file that the next run starts from (`studies/NAME/scenario.yaml`).

What it searches: the mission's flags (gpu-memory-utilization, max-num-seqs,
max-num-batched-tokens, kv-cache-dtype, block size, speculative tokens where the text can
repeat itself) and the front end (API servers on a machine with the cores for them), each
only where the installed engine takes the values. max-model-len is fixed to what the
workload needs: a model's own context (262,144 tokens for Qwen3-4B) would not fit one
sequence in a small card's KV cache, and vLLM refuses to start then. On the CPU build the
space and the steps are small: it exercises the loop, it does not tune a GPU.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import _traces as traces
from autotune._device import DeviceSeen
from autotune._flags import Flags, integer
from autotune.config import Scenario
from autotune.engine.defaults import machine_of, platform_rules
from autotune.engine.info import EngineInfo
from autotune.traffic import WorkloadSpec
from autotune.tuning.policy import memory, prune

GiB = 1 << 30
WORKLOADS = ("random", "chat", "text", "trace")
# The memory fractions the search tries on a GPU (the mission's 0.85-0.95).
FRACTIONS = (0.85, 0.9, 0.95)
# On the CPU build (autotune sets VLLM_CPU_KVCACHE_SPACE to this many GiB).
CPU_KV_GIB = 1


@dataclass(frozen=True)
class Card:
    """The machine the study will run on: a GPU's name and memory (None: the CPU build) and
    the host's cores. One engine per GPU: the space sets no parallelism."""

    name: str
    memory_gib: float | None
    cores: int = 1

    @property
    def tag(self) -> str:
        """A short name for study names: `h200`, `rtx-4090-d`, `cpu`."""
        if self.memory_gib is None:
            return "cpu"
        words = [w for w in re.split(r"[^a-z0-9]+", self.name.lower())
                 if w and w not in ("nvidia", "geforce", "tesla")]
        return "-".join(words) or "gpu"


@dataclass(frozen=True)
class Choice:
    """One decision `build` took, in words: `key` (a flag or section) and why."""

    key: str
    text: str


@dataclass(frozen=True)
class Start:
    """The scenario `build` made and the choices behind it."""

    scenario: Scenario
    choices: tuple[Choice, ...]
    card: Card
    engine: str  # `vllm 0.26.0`

    def yaml(self) -> str:
        """The scenario as a commented YAML file. Values go through `yaml.safe_dump` (a
        model path or name is data: quoted and escaped there), comments carry only the
        choices' words and figures."""
        data = self.scenario.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        head = [f"# Written by autotune on {dt.date.today().isoformat()} for "
                f"{_oneline(self.card.name)} ({self.engine}); edit it and run",
                "# `autotune tune THIS-FILE`. Every key: the README's \"Scenario files\".",
                "# Why these values:"]
        head += [f"# - {_oneline(c.text)}" for c in self.choices]
        return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False,
                                                        allow_unicode=True)


def _oneline(text: str) -> str:
    return " ".join(str(text).split())


def study_name(model: str, card: Card) -> str:
    """`qwen3-4b-instruct-2507-h200` from a model path or id and the card."""
    base = Path(model.rstrip("/")).name or "model"
    slug = re.sub(r"[^a-z0-9._+-]+", "-", base.lower()).strip("-.") or "model"
    return f"{slug}-{card.tag}"[:80]


def workload_of(kind_or_file: str, cpu: bool) -> dict[str, Any]:
    """The `workload` section for `--workload`: a shipped kind (`trace`: the shipped day),
    a trace file (CSV, or JSONL with timestamps) or a JSONL file of prompts."""
    if kind_or_file == "random":
        return ({"kind": "random", "num_requests": 32, "input_len": 64, "output_len": 128,
                 "warmup_requests": 4} if cpu else
                {"kind": "random", "num_requests": 200, "input_len": 256, "output_len": 128,
                 "prefix_len": 1024, "warmup_requests": 16})
    if kind_or_file == "chat":
        return {"kind": "chat"}
    if kind_or_file == "text":
        return {"kind": "text", "dataset": "chat"}
    if kind_or_file == "trace":
        return {"kind": "trace", "dataset": "day", "num_requests": 32 if cpu else 200,
                "warmup_requests": 4 if cpu else 16}
    if traces.is_trace(kind_or_file):
        return {"kind": "trace", "path": kind_or_file}
    return {"kind": "jsonl", "path": kind_or_file}


def _powers(low: int, high: int) -> list[int]:
    """Powers of two from `low` to the first one at or above `high`."""
    out = [low]
    while out[-1] < high:
        out.append(out[-1] * 2)
    return out


def check_tokens(model: str) -> int | None:
    """Tokens the quality check needs of one sequence with the guardrail's defaults: its
    longest prompt (or task item) as sent, plus its answer and the scoring request's one
    more token; None when the model's tokenizer cannot be read here."""
    from autotune.config import GuardrailSpec
    from autotune.tuning.quality import tasks
    from autotune.tuning.quality.guard import Guard
    from autotune.tuning.quality.prompts import default_prompts
    from autotune.tuning.quality.template import CHAT, PLAIN, has_chat_template

    spec = GuardrailSpec()
    template = CHAT if has_chat_template(model) else PLAIN
    guard = Guard(spec, default_prompts(), None, template, model)
    try:
        prompts = guard.lengths(guard.sent(guard.prompts))
        items = guard.lengths(guard.sent([i.prompt for i in tasks.generate(spec.tasks,
                                                                           spec.task_seed)]))
    except (OSError, ValueError):
        return None
    return max(max(prompts) + spec.max_tokens, max(items) + spec.task_tokens) + 1


@dataclass(frozen=True)
class Asked:
    """What the command line asks a scenario for: the model, its SLOs (`--slo KEY=MS`) and
    the traffic (`--workload`: a kind of `WORKLOADS` or a file), and optionally the study's
    name, its trials and time (its budget) and a smaller card to emulate (`--memory-gib`,
    `hardware.memory_gib`)."""

    model: str
    slos: Mapping[str, float]
    workload: str = "random"
    name: str | None = None
    trials: int | None = None
    timeout: str | None = None
    memory_gib: float | None = None


def build(asked: Asked, *, card: Card, engine: EngineInfo, shape: memory.ModelShape | None,
          check: int | None = None) -> Start:
    """The scenario `asked` for on `card`, and why each value was chosen.

    `shape` is the model's config.json (None for a Hub id not on disk: ranges then come
    from the card alone). `check` is what the quality check needs of one sequence
    (`check_tokens`): the max-model-len holds it too, or the check would be refused by the
    engine it checks.
    """
    model, slos, workload = asked.model, asked.slos, asked.workload
    trials, timeout, memory_gib = asked.trials, asked.timeout, asked.memory_gib
    cpu = card.memory_gib is None
    choices: list[Choice] = []
    gib = memory_gib if memory_gib is not None else card.memory_gib
    work = workload_of(workload, cpu)
    raw: dict[str, Any] = {
        "name": asked.name or study_name(model, card), "model": {"path": model},
        "workload": {**work, "mode": "capacity"},
        "objective": {"mode": "weighted", "latency": next(iter(slos))[:-3],
                      "weights": {"throughput": 1.0, "latency": 0.5, "memory": 0.1},
                      "slos": dict(slos)},
    }
    longest = prune.longest_request(WorkloadSpec.model_validate(raw["workload"]))
    request = longest or 2048  # chat histories and files: measured by the engine itself
    flags: Flags = {}
    context = shape.max_position_embeddings if shape else None
    need = max(2048, 1 << math.ceil(math.log2(max(request, check or 1, 1))))
    if context is not None and check is not None and check > request and need >= context:
        need = context  # the check's prompts cannot get more than the model has
    if context is None or need < context:
        flags["max-model-len"] = need
        whole = None  # does one sequence of the model's own context fit the KV cache?
        if shape is not None and context is not None:
            whole = memory.estimate(shape, memory.Launch(
                device_memory_bytes=int(gib * GiB) if gib else None,
                cpu_kvcache_space_gib=CPU_KV_GIB if cpu else None,
                gpu_memory_utilization=max(FRACTIONS))).fits_one_sequence
        choices.append(Choice("max-model-len", (
            f"max-model-len {need}: the workload's longest request is {longest} tokens"
            if longest else f"max-model-len {need}: room for chat histories and file prompts")
            + (f", the quality check's longest prompt and answer {check:,}"
               if check is not None else "")
            + (f" (the model allows {context:,}" if context else "")
            + (", more than this card's KV cache holds for one sequence)" if whole is False
               else ")" if context else "")))
    space: dict[str, Any] = {}
    fp8 = not cpu and "fp8" in (engine.choices("kv-cache-dtype") or [])
    if cpu:
        flags["enforce-eager"] = True
        raw["engine"] = {"flags": flags, "env": {"VLLM_CPU_KVCACHE_SPACE": str(CPU_KV_GIB)},
                         "startup_timeout_s": 600}
        per = memory.kv_bytes_per_token(shape) if shape else None
        held = CPU_KV_GIB * GiB / per / request if per else None
        seqs = _powers(4, min(64, max(4, int(held or 64))))
        space["max-num-seqs"] = {"choices": seqs}
        choices.append(Choice("max-num-seqs", f"max-num-seqs {seqs[0]}-{seqs[-1]}: the CPU "
                              f"build's {CPU_KV_GIB} GiB KV cache"
                              + (f" holds about {held:,.0f} of these requests" if held else "")
                              + "; at most 64 on the CPU build"))
        space["block-size"] = {"choices": [32, 128]}
        choices.append(Choice("engine", "the CPU build: eager mode (no torch.compile halves "
                              "start-up), steps of 3-8 s; it exercises the loop, not a GPU"))
        raw["workload"]["capacity"] = {"tolerance": 0.1, "max_steps": 6, "repeats": 2,
                                       "min_step_s": 3, "max_step_s": 8}
        raw["guardrail"] = {"tasks": 200}
        raw["budget"] = {"trials": trials or 5, "trial_timeout": "5m"}
    else:
        assert gib is not None
        raw["engine"] = {"flags": flags}
        if memory_gib is not None:
            raw["hardware"] = {"memory_gib": memory_gib}
        # an emulated card has its own batch defaults, as `prune.emulate` passes them
        machine = machine_of(DeviceSeen(card.name, gib * 1024))
        rules = platform_rules(machine)
        space["gpu-memory-utilization"] = {"choices": list(FRACTIONS)}
        held = None
        if shape is not None:
            est = memory.estimate(shape, memory.Launch(
                device_memory_bytes=int(gib * GiB), gpu_memory_utilization=max(FRACTIONS),
                kv_cache_dtype="fp8" if fp8 else "auto",
                max_model_len=need if "max-model-len" in flags else None))
            held = est.kv_capacity_tokens / request
        top = min(1024, max(16, int(held))) if held else integer(rules, "max-num-seqs", 256)
        seqs = _powers(16, top)
        space["max-num-seqs"] = {"choices": seqs}
        choices.append(Choice("max-num-seqs", f"max-num-seqs {seqs[0]}-{seqs[-1]}: " + (
            f"a {gib:.0f} GiB card holds about {held:,.0f} of these {request:,}-token requests"
            f"{' in fp8' if fp8 else ''}" if held else
            f"vLLM's default on this card is {rules['max-num-seqs']}")))
        chunks = [2048, 4096, 8192, 16384] + ([32768] if gib >= 70 else [])
        space["max-num-batched-tokens"] = {"choices": chunks}
        choices.append(Choice("max-num-batched-tokens", (
            f"max-num-batched-tokens {chunks[0]}-{chunks[-1]}: prefill chunks around vLLM's "
            f"{rules['max-num-batched-tokens']} on this card")))
        if fp8:
            space["kv-cache-dtype"] = {"choices": ["auto", "fp8"]}
            choices.append(Choice("kv-cache-dtype", "kv-cache-dtype auto or fp8: fp8 halves "
                                  "the KV bytes per token; the guardrail judges its answers"))
        space["block-size"] = {"choices": [16, 32]}
        if work["kind"] == "chat" or work.get("prefix_len"):  # prompts share prefixes
            space["enable-prefix-caching"] = {"choices": [True, False]}
        if card.cores >= 8:
            servers = [n for n in (1, 2, 4) if n <= card.cores // 4] or [1]
            space["api-server-count"] = {"choices": servers}
            choices.append(Choice("api-server-count", (
                f"api-server-count {servers[0]}-{servers[-1]}: {card.cores} cores; one "
                "API-server process limited chat near 60 req/s on an H200")))
        if engine.knows("stream-interval"):
            space["stream-interval"] = {"choices": [1, 4, 8]}
            choices.append(Choice("stream-interval", "stream-interval 1-8: fewer streamed "
                                  "events for the API servers to send (TTFT and TPOT keep "
                                  "their meaning)"))
        if work["kind"] in ("text", "chat", "jsonl"):
            raw["speculative"] = {"num_speculative_tokens": {"choices": [0, 2, 4]}}
            choices.append(Choice("speculative", "speculative tokens 0, 2 or 4 (ngram): "
                                  "real text repeats itself, where prompt lookup can draft"))
        else:
            choices.append(Choice("speculative", "no speculative decoding: random tokens give "
                                  "ngram's prompt lookup nothing to draft from"))
        raw["workload"]["capacity"] = {"tolerance": 0.1, "max_steps": 8, "repeats": 2,
                                       "min_step_s": 20, "max_step_s": 25}
        raw["budget"] = {"trials": trials or 20, "trial_timeout": "10m", "explain": True,
                         "validate": {"client": "vllm", "repeats": 2}}
        choices.append(Choice("budget", "ends with `explain` and a re-check by vLLM's own "
                              "client against vLLM's defaults (both inside --timeout)"))
    if timeout:
        raw["budget"]["timeout"] = timeout
    raw["space"] = space
    scenario = Scenario.model_validate(raw)
    return Start(scenario, tuple(choices), card, f"{engine.distribution} {engine.version}")
