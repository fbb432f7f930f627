"""The `workload:` section of a scenario: what traffic to send, and how a capacity search runs.

These are configuration models only (validated when a scenario or `autotune bench`'s options
are read); `autotune.measure.workloads` turns a spec into the sessions a load generator sends.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Kind = Literal["random", "jsonl", "sharegpt", "chat", "text"]
# The real-text workloads shipped with autotune (`kind: text`, autotune/data/workloads/):
# `edit` answers copy much of the prompt, `chat` answers little of it.
DATASETS = ("edit", "chat")


class CapacitySpec(BaseModel):
    """How the capacity search runs (see autotune.measure.capacity)."""

    model_config = ConfigDict(extra="forbid")

    tolerance: float = Field(0.05, gt=0, lt=1, description="stop when (high-low)/high is this")
    max_steps: int = Field(8, ge=1, description="every step counts: burst, bisection, repeats")
    repeats: int = Field(2, ge=1, description="measurements at the final rate (spread)")
    min_success_rate: float = Field(1.0, ge=0, le=1)
    # Sustained steps: 4-6-s steps measured the transient on the H200 and ranked inside the
    # noise; at 20 s `vllm bench serve` repeated its verdicts (docs/results-h200.md).
    min_step_s: float = Field(20.0, ge=0,
                              description="a Poisson step sends >= rate x this many requests")
    max_step_s: float = Field(60.0, gt=0, description="a step sends <= rate x this (>= 4)")
    ramp_fraction: float = Field(0.2, ge=0, lt=1,
                                 description="share of a step's arrivals left out as ramp-up")
    tail_fraction: float = Field(0.1, ge=0, lt=1,
                                 description="share of a step's arrivals left out at the end")
    backlog_limit: float = Field(0.05, gt=0, lt=1, description="a step fails when requests in "
                                 "flight grow by more than this share of its arrivals")
    # On the H200 a doubling from the burst's rate (60 -> 120 req/s) cost a step far above
    # capacity, 1,364 queued requests and its drain, and left too few steps to bracket.
    expand_factor: float = Field(1.25, gt=1, description="raise the rate by this factor "
                                 "while sustained steps pass")
    max_expand: float = Field(4.0, ge=1, description="stop raising the rate above this "
                              "multiple of the burst's; the capacity is then a floor")
    min_rate_fraction: float = Field(1 / 32, gt=0, lt=1,
                                     description="give up below this share of the burst's rate")
    idle_timeout_s: float = Field(120.0, gt=0, description="wait for an idle engine per step")

    @model_validator(mode="after")
    def _window(self) -> CapacitySpec:
        if self.ramp_fraction + self.tail_fraction >= 0.9:
            raise ValueError("ramp_fraction + tail_fraction must leave at least 10 % of a step "
                             f"to judge (got {self.ramp_fraction:g} + {self.tail_fraction:g})")
        return self


class WorkloadSpec(BaseModel):
    """The traffic to send. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    kind: Kind = "random"
    api: Literal["completions", "chat"] = "completions"
    num_requests: int = Field(100, ge=1, description="requests (random/jsonl/sharegpt)")
    input_len: int = Field(256, ge=1)
    output_len: int = Field(128, ge=1)
    range_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    prefix_len: int = Field(0, ge=0, description="tokens shared by every prompt")
    path: str | None = None
    dataset: Literal["edit", "chat"] | None = Field(
        None, description="text: which shipped real-text workload (edit or chat)")
    # chat: conversations sharing a system prompt, each with growing history
    conversations: int = Field(8, ge=1)
    turns: int = Field(4, ge=1)
    system_len: int = Field(256, ge=0)
    # arrival
    request_rate: float = Field(math.inf, gt=0)
    burstiness: float = Field(1.0, gt=0)
    max_concurrency: int | None = Field(None, ge=1)
    warmup_requests: int = Field(0, ge=0)
    max_duration_s: float | None = Field(None, gt=0)
    ignore_eos: bool = True
    temperature: float = Field(0.0, ge=0)
    timeout_s: float = Field(600.0, gt=0)
    seed: int = 0
    # fixed: send the workload as described; capacity: find the highest request rate that
    # meets the SLOs (None: capacity when the objective has SLOs, else fixed)
    mode: Literal["fixed", "capacity"] | None = None
    capacity: CapacitySpec = Field(default_factory=CapacitySpec)

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.kind in ("jsonl", "sharegpt") and not self.path:
            raise ValueError(f"workload kind {self.kind!r} needs `path`")
        if self.kind == "chat":
            self.api = "chat"
        if (self.kind == "text") != (self.dataset is not None):
            raise ValueError("`dataset` goes with workload kind 'text', which needs it "
                             f"(allowed: {', '.join(DATASETS)})")
        if self.kind == "text":
            self.api = "chat"  # instruct prompts, sent through the model's chat template
            if "ignore_eos" not in self.model_fields_set:
                self.ignore_eos = False  # a real answer ends where the model ends it
        return self
