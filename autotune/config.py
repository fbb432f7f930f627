"""Scenario files: strict models of the YAML, and one-line errors naming file and key.

A scenario says which model to serve, how to start the engine, which flags to
search and over what ranges, what traffic to send, how to score, which
configurations to measure first, and how long to spend.

Everything that can be known before an engine starts is checked here, because each
launch costs seconds to minutes and a launched mistake comes back as a pruned trial
with a misleading reason: the models check what the file says (they also re-validate
scenarios stored in study databases, on machines where its files may not exist), and
`load` checks what the file names on this machine (the model, prompt files).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotune import _traces as traces
from autotune._flags import Flags, flag_name, normalize, text
from autotune._slo import check_key, latency_key
from autotune.errors import ConfigError
from autotune.traffic import WorkloadSpec

# Latency figures by name (`ttft_p95` -> `p95_ttft_ms`): defined with the SLO (autotune._slo),
# re-exported here for the scenario's `objective.latency`.

# Flags the launcher sets itself for every engine (autotune.engine.server); a scenario that
# set them would break the trial server's isolation or the launcher's own requests to it.
LAUNCHER_FLAGS = {
    "model": "the model comes from the `model` section",
    "host": "each trial's server listens on 127.0.0.1 only",
    "port": "each trial's server gets a free port of its own",
    "api-key": "each trial's server gets a random key of its own",
    "served-model-name": "autotune's requests name the model as launched",
    "uds": "autotune reaches the server on its TCP port",
    "headless": "a trial needs the API server",
}


def _share_of_memory(v: float) -> bool:
    return 0 < v <= 1


def _at_least_one(v: float) -> bool:
    return v >= 1


# Ranges vLLM documents but checks only while the engine starts (a launch wasted, and the
# trial pruned as `invalid_flag`): flag -> (test, what is allowed).
FLAG_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "gpu-memory-utilization": (_share_of_memory, "a share of the device's memory in (0, 1]"),
    "max-num-seqs": (_at_least_one, "at least 1"),
    "max-num-batched-tokens": (_at_least_one, "at least 1"),
    "tensor-parallel-size": (_at_least_one, "at least 1"),
}

# A Hugging Face model id: `org/name`, nothing that reads as a path.
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
# How long a check waits for the Hugging Face hub to say whether it serves a model id that
# is not in the local cache (a machine without a network answers at once).
HUB_TIMEOUT_S = 10.0
# A study name becomes a file name (`studies/NAME.db`) and a folder (`studies/NAME/`).
_STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(_Strict):
    """Exactly one of `tiny` (a preset built on first use: `tiny` and `qwen3-4b` have random
    weights, `smollm2-135m` is a real instruct model) or `path` (directory or HF id)."""

    tiny: Literal["tiny", "qwen3-4b", "smollm2-135m"] | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ModelSpec:
        if (self.tiny is None) == (self.path is None):
            raise ValueError("give exactly one of `tiny` or `path`")
        return self


def _canonical(flags: object) -> object:
    """Flags as every later stage reads them, normalised once here, before their values are
    typed: canonical names (`max_num_seqs` reads as `max-num-seqs`), `None` dropped; a flag
    given under two spellings is an error. What is not a mapping is left to the type check."""
    return normalize(flags) if isinstance(flags, Mapping) else flags


class EngineSpec(_Strict):
    flags: Flags = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = Field(900.0, gt=0)
    # Warm restarts (`autotune.engine.compilecache`, `autotune.tuning.policy.compilekey`):
    # where compiled code is kept (`study`: a folder of the study's; `vllm`: vLLM's own
    # cache; or a folder), whether max-num-batched-tokens is held out of vLLM's compile key
    # (`bounded`), and whether a GPU engine's core process is forked rather than spawned.
    compile_cache: str = Field("study", min_length=1)
    compile_key: Literal["vllm", "bounded"] = "vllm"
    fork_engine_core: bool = True

    @field_validator("flags", mode="before")
    @classmethod
    def _flags(cls, value: object) -> object:
        return _canonical(value)


class Param(_Strict):
    """A flag's range (`low`/`high`, optional `step`/`log`) or its `choices`."""

    choices: list[Any] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    type: Literal["int", "float"] | None = None

    @model_validator(mode="after")
    def _shape(self) -> Param:
        if self.choices is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("give either `choices` or `low`/`high`, not both")
            if not self.choices:
                raise ValueError("`choices` is empty")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give `choices`, or both `low` and `high`")
        if self.step is not None and not self.step > 0:
            raise ValueError("`step` must be > 0")
        if self.low > self.high:
            raise ValueError(f"empty range: low {self.low:g} > high {self.high:g}")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        if self.log and self.step is not None:
            raise ValueError("a range is either `log` or has a `step`, not both")
        if self.type is None:
            ints = all(float(v).is_integer() for v in (self.low, self.high, self.step or 1))
            self.type = "int" if ints else "float"
        return self


class Speculative(_Strict):
    """Speculative decoding: `num_speculative_tokens` 0 means off; the method is chosen only
    when it is on, and ngram's prompt-lookup window only for ngram. `extra` goes into
    `--speculative-config` as it is."""

    methods: list[str] = Field(default_factory=lambda: ["ngram"], min_length=1)
    num_speculative_tokens: Param = Field(default_factory=lambda: Param(low=0, high=5))
    # ngram only: the longest and shortest prompt n-gram a draft is looked up by.
    prompt_lookup_max: Param | None = None
    prompt_lookup_min: Param | None = None
    extra: dict[str, Any] = Field(default_factory=lambda: {"prompt_lookup_max": 4})

    @model_validator(mode="after")
    def _searched_not_fixed(self) -> Speculative:
        for key in ("prompt_lookup_max", "prompt_lookup_min"):
            if getattr(self, key) is not None:
                if "ngram" not in self.methods:
                    raise ValueError(f"{key} is ngram's; add ngram to `methods`")
                self.extra.pop(key, None)  # the searched value replaces the default
        for key in ("method", "num_speculative_tokens"):
            if key in self.extra:
                raise ValueError(f"extra.{key}: set by the search; remove it from `extra`")
        return self


# The terms of the weighted score (objective.weighted_score).
WeightKey = Literal["throughput", "latency", "memory"]


class Objective(_Strict):
    mode: Literal["weighted", "pareto"] = "weighted"
    throughput: Literal["output_throughput", "request_throughput",
                        "total_token_throughput"] = "output_throughput"
    latency: str = "ttft_p95"
    # The explicit dict[...] call: mypy types a bare literal in the lambda as dict[str, float].
    weights: dict[WeightKey, float] = Field(
        default_factory=lambda: dict[WeightKey, float](
            {"throughput": 1.0, "latency": 1.0, "memory": 0.2}))
    slos: dict[str, float] = Field(default_factory=dict)

    @field_validator("latency")
    @classmethod
    def _latency(cls, value: str) -> str:
        latency_key(value)
        return value

    @field_validator("slos")
    @classmethod
    def _slos(cls, value: dict[str, float]) -> dict[str, float]:
        for key, limit in value.items():
            check_key(key)
            if not limit > 0:
                raise ValueError(f"SLO {key} must be > 0")
        return value

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in value.values()) or not any(w > 0 for w in value.values()):
            raise ValueError("weights must be >= 0 with at least one > 0")
        return value


class GuardrailSpec(_Strict):
    """Quality check of every trial against reference outputs
    (`autotune.tuning.quality`)."""

    enabled: bool = True
    prompts: str | None = None  # JSONL of {"prompt": ...}; default: the shipped set
    num_prompts: int = Field(16, ge=1)
    max_tokens: int = Field(48, ge=1)
    reference: str | None = None  # reuse (or create) this reference file across studies
    noise_factor: float = Field(3.0, gt=0)
    drift_threshold: float | None = Field(None, ge=0)  # nats; default from the noise floor
    agreement_threshold: float | None = Field(None, ge=0, le=1)
    # how prompts are sent: through the model's chat template (auto: where it has one)
    template: Literal["auto", "chat", "plain"] = "auto"
    # items of the task check (autotune.tuning.quality.tasks); 0: off. 1,000 show a 5-point drop on
    # the H200 in about 3 s a trial; +-1 point needs 4,000-6,000 (docs/real-model.md)
    tasks: int = Field(1000, ge=0)
    task_seed: int = 0
    task_tokens: int = Field(24, ge=1)  # the longest task answer, in tokens
    max_accuracy_drop: float = Field(1.0, ge=0)  # points the task check may lose
    # within_budget: only "worse" is rejected; unchanged: any change beyond the noise floor
    require: Literal["within_budget", "unchanged"] = "within_budget"


class PruneSpec(_Strict):
    """Early pruning: before launch (memory model), at start-up, and in a probe phase."""

    enabled: bool = True
    memory_model: bool = True  # prune what cannot hold one max-model-len sequence
    workload_fit: bool = False  # also prune what cannot hold max-num-seqs requests at once
    probe_fraction: float = Field(0.25, ge=0, lt=1)  # share of the requests sent first
    preemption_allowance: int = Field(0, ge=0)  # preemptions tolerated in the probe phase
    min_success_rate: float = Field(1.0, ge=0, le=1)
    pruner: Literal["median", "none"] = "median"  # stops trials behind earlier ones
    # capacity mode: stop a search once its capacity is below the best trial's lower bound
    capacity_early_stop: bool = True
    gpu_release_timeout_s: float = Field(120.0, gt=0)


class Hardware(_Strict):
    """Emulate a smaller card: the engine gets the memory of `memory_gib` GiB."""

    memory_gib: float | None = Field(None, gt=0)


class Baseline(_Strict):
    name: str
    flags: Flags = Field(default_factory=dict)

    @field_validator("flags", mode="before")
    @classmethod
    def _flags(cls, value: object) -> object:
        return _canonical(value)


class EndValidation(_Strict):
    """The re-check that ends a run (`budget.validate`): the final choice against vLLM's
    defaults on fresh engines, alternating, measured by `client` (`vllm`: vLLM's own
    `vllm bench serve`), so that a run left overnight ends with the gain's interval."""

    client: Literal["vllm", "autotune"] = "vllm"
    repeats: int = Field(2, ge=1)
    step_seconds: float | None = Field(None, gt=0)  # vllm client's sustained steps


class Budget(_Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    trials: int = Field(20, ge=1)
    timeout: str | None = None  # e.g. "8h", "45m"
    trial_timeout: str = "30m"
    # Last phases of `tune`, inside the time budget: which of the winner's flags carry its
    # gain (`autotune explain`), then the re-check of the final choice.
    explain: bool = False
    validate_: EndValidation | None = Field(None, alias="validate")

    @field_validator("timeout", "trial_timeout")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and not parse_duration(value) > 0:
            raise ValueError(f"duration {value!r} must be longer than 0 s")
        return value


class CostSpec(_Strict):
    """What serving costs, for cost per million output tokens and replicas at a load
    (`autotune.results.cost`): the price of one GPU for an hour and the GPUs one replica
    holds (default: the trial's tensor x pipeline x data parallel size)."""

    gpu_hour: float = Field(gt=0)
    gpus: int | None = Field(None, ge=1)
    currency: str = Field("USD", min_length=1, max_length=12)


class SamplerSpec(_Strict):
    name: Literal["tpe", "gp", "nsga2", "random", "grid"] = "tpe"
    seed: int = 0


class ReliefSpec(_Strict):
    """Relief moves (`autotune.tuning.policy.relief`): after a trial, queue the move that relieves
    the best trial's bottleneck; at most one in every `every` trials (2: they alternate with
    the sampler's). Not with the grid sampler, which runs every point anyway."""

    enabled: bool = True
    every: int = Field(2, ge=1)


class Scenario(_Strict):
    name: str | None = None
    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    space: dict[str, Param] = Field(default_factory=dict)
    speculative: Speculative | None = None
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    objective: Objective = Field(default_factory=Objective)
    guardrail: GuardrailSpec = Field(default_factory=GuardrailSpec)
    prune: PruneSpec = Field(default_factory=PruneSpec)
    hardware: Hardware = Field(default_factory=Hardware)
    baselines: list[Baseline] = Field(default_factory=list)
    budget: Budget = Field(default_factory=Budget)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    relief: ReliefSpec = Field(default_factory=ReliefSpec)
    cost: CostSpec | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else check_study_name(value)

    @field_validator("space")
    @classmethod
    def _space_names(cls, value: dict[str, Param]) -> dict[str, Param]:
        return {flag_name(k): v for k, v in value.items()}

    @model_validator(mode="after")
    def _relations(self) -> Scenario:
        if self.workload.mode is None:  # capacity at SLO is the default when SLOs are given
            self.workload.mode = "capacity" if self.objective.slos else "fixed"
        seqs, mbt = self.space.get("max-num-seqs"), self.space.get("max-num-batched-tokens")
        if seqs is not None and mbt is not None and _lowest(seqs) > _highest(mbt):
            raise ValueError("space: max-num-batched-tokens is below max-num-seqs everywhere "
                             "(vLLM refuses every such configuration)")
        return self

    @model_validator(mode="after")
    def _flag_values(self) -> Scenario:
        """Refuse the launcher's own flags and values outside vLLM's documented ranges,
        wherever a flag is set: fixed, in a baseline, or as any bound or choice searched."""
        for site in flag_sites(self):
            bare = site.name.removeprefix("no-")
            if bare in LAUNCHER_FLAGS:
                raise ValueError(f"{site.key}: --{bare} is set by autotune itself "
                                 f"({LAUNCHER_FLAGS[bare]}); remove it")
            test, allowed = FLAG_RANGES.get(bare, (None, ""))
            if test is None:
                continue
            for value in site.values:
                number = _number(value)  # other values are the engine parser's to judge
                if number is not None and not test(number):
                    raise ValueError(f"{site.key}: {value!r} is out of range; "
                                     f"allowed: {allowed}")
        return self


class FlagSite(NamedTuple):
    """One place a scenario sets a vLLM flag."""

    key: str  # where in the file, as errors name it: "space.max-num-seqs"
    name: str  # the flag's canonical name: "max-num-seqs" (or "no-..." as written)
    values: list[Any]  # the fixed value, every choice, or a range's two bounds
    is_range: bool  # values are `low` and `high` of a searched range


def flag_sites(scenario: Scenario) -> list[FlagSite]:
    """Every flag value the scenario can launch with, and where the file sets it."""
    sites = [FlagSite(f"engine.flags.{name}", name, [value], False)
             for name, value in scenario.engine.flags.items()]
    for name, p in scenario.space.items():
        if p.choices is not None:
            sites.append(FlagSite(f"space.{name}", name, list(p.choices), False))
        else:
            sites.append(FlagSite(f"space.{name}", name, [p.low, p.high], True))
    for i, base in enumerate(scenario.baselines):
        sites += [FlagSite(f"baselines[{i}].flags.{name}", name, [value], False)
                  for name, value in base.flags.items()]
    return sites


def _number(value: Any) -> float | None:
    """A flag value as a number, or None where it is none (`true`, "auto", "4k")."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _lowest(p: Param) -> float:
    return min(float(c) for c in p.choices) if p.choices else float(p.low or 0)


def _highest(p: Param) -> float:
    return max(float(c) for c in p.choices) if p.choices else float(p.high or 0)



def parse_duration(text: str) -> float:
    """'8h', '45m', '90s', '1h30m' or plain seconds -> seconds."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"bad duration {text!r}; use e.g. 8h, 45m, 90s or 1h30m")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def check_study_name(name: str) -> str:
    """A study name that is safe as a file and folder name under the studies directory
    (`../x` or `a/b` would put the database and the trial logs somewhere else)."""
    if not _STUDY_NAME.fullmatch(name):
        raise ValueError(f"study name {name!r} must start with a letter or digit and hold "
                         "only letters, digits and . _ + -")
    return name


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file; every problem is one ConfigError line."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a text file (byte {err.object[err.start]:#04x} at "
                          f"offset {err.start} is not UTF-8); a scenario is YAML") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a scenario is a mapping of sections")
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"] if not str(x).startswith("function-"))
        msg = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            msg = "unknown key"
        # Checks of the whole scenario name their key at the start of the message.
        raise ConfigError(f"{path}: {where}: {msg}" if where else f"{path}: {msg}") from None
    if scenario.name is None:
        try:
            scenario.name = check_study_name(path.stem)
        except ValueError as err:
            raise ConfigError(f"{path}: name: {err} (the file name is the default; "
                              "set `name:`)") from None
    check_files(scenario, path)
    return scenario


def check_files(scenario: Scenario, path: str | Path) -> None:
    """The files the scenario names must exist on this machine, before any launch: a missing
    model otherwise costs an engine start per trial, each pruned as an invalid flag.

    Relative paths are read from the working directory, as the engine and the load
    generator read them. A model that is not a local path is taken as a Hugging Face id when
    it reads as one (`org/name`), and must be in the local cache or on a hub that answers
    (`hub_problem`), with the engine's environment and its --download-dir and --revision.
    """
    if scenario.model.path is not None:
        flags = scenario.engine.flags
        problem = model_problem(scenario.model.path, env=scenario.engine.env,
                                download_dir=text(flags, "download-dir"),
                                revision=text(flags, "revision"))
        if problem:
            raise ConfigError(f"{path}: model.path: {problem}")
    for key, name in (("workload.path", scenario.workload.path),
                      ("guardrail.prompts", scenario.guardrail.prompts)):
        if name is not None and not os.path.isfile(name):
            raise ConfigError(f"{path}: {key}: no such file {name!r}")
    work = scenario.workload
    if work.kind == "trace":  # read now: a bad line otherwise fails every trial
        try:
            traces.of(work)
        except ConfigError as err:
            raise ConfigError(f"{path}: workload.path: {err}") from None


def model_problem(name: str, *, env: Mapping[str, str] | None = None,
                  download_dir: str | None = None, revision: str | None = None
                  ) -> str | None:
    """Why the engine could not load `name` (a path, or a Hugging Face id with what
    `hub_problem` takes), or None when it can be served."""
    local = Path(name)
    if local.is_dir():
        if (local / "config.json").is_file():
            return None
        return f"{name!r} is a directory without config.json (not a Hugging Face model)"
    if local.is_file():
        return None if local.suffix == ".gguf" else (
            f"{name!r} is a file; a model is a directory with config.json (or a .gguf file)")
    if _MODEL_ID.fullmatch(name):
        return hub_problem(name, env=env, download_dir=download_dir, revision=revision)
    return (f"{name!r} does not exist; give a local directory with config.json or a Hugging "
            "Face id such as Qwen/Qwen3-4B-Instruct-2507")


def _on(value: str | None) -> bool:
    """An environment switch as huggingface_hub reads one (1, ON, YES, TRUE)."""
    return (value or "").upper() in ("1", "ON", "YES", "TRUE")


def hub_problem(model_id: str, *, env: Mapping[str, str] | None = None,
                download_dir: str | None = None, revision: str | None = None,
                endpoint: str | None = None, timeout: float = HUB_TIMEOUT_S) -> str | None:
    """Why the engine could not fetch the Hugging Face model `model_id`, or None.

    A model in the local cache (`download_dir`, else the cache of `env` or of this process)
    is served; one that is not must come from the hub. The engine finds out that the hub is
    off (HF_HUB_OFFLINE, here or in `env`), out of reach or without the model only after
    seconds to minutes of start-up, so the hub is asked here, within `timeout`, through
    huggingface_hub's public API (vLLM's own dependency: without it there is no engine).
    """
    env = dict(env or {})
    if _on(env.get("VLLM_USE_MODELSCOPE", os.environ.get("VLLM_USE_MODELSCOPE"))):
        return None  # ModelScope's ids, fetched by the engine itself
    try:
        import huggingface_hub
        from huggingface_hub import errors
    except ImportError:
        return None
    cache = download_dir or env.get("HF_HUB_CACHE") or (
        os.path.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else None)
    try:
        cached = huggingface_hub.try_to_load_from_cache(model_id, "config.json",
                                                        cache_dir=cache, revision=revision)
    except (errors.HFValidationError, ValueError) as err:
        return f"{model_id!r} is not a Hugging Face id: {str(err).splitlines()[0]}"
    if cached is not None:  # its config.json, or the cache's note that it has none
        return None
    missing = (f"{model_id!r} is not in the local Hugging Face cache "
               f"({cache or huggingface_hub.constants.HF_HUB_CACHE})")
    advice = (f"download it where the hub can be reached (`hf download {model_id}`) or give "
              "a local directory with config.json")
    if huggingface_hub.is_offline_mode() or _on(env.get("HF_HUB_OFFLINE")):
        return f"{missing} and HF_HUB_OFFLINE is set: {advice}"
    endpoint = endpoint or env.get("HF_ENDPOINT") or huggingface_hub.constants.ENDPOINT
    url = huggingface_hub.hf_hub_url(model_id, "config.json", revision=revision,
                                     endpoint=endpoint)
    try:
        huggingface_hub.get_hf_file_metadata(url, timeout=timeout,
                                             token=env.get("HF_TOKEN") or None)
    except errors.GatedRepoError:
        return (f"{model_id!r} is gated on the Hugging Face hub: accept its terms on the "
                "model's page and set HF_TOKEN")
    except errors.RepositoryNotFoundError:
        return (f"{model_id!r}: no such model on the Hugging Face hub ({endpoint}; a "
                "private one needs HF_TOKEN)")
    except errors.RevisionNotFoundError:
        return f"{model_id!r} has no revision {revision!r} on the Hugging Face hub"
    except errors.HfHubHTTPError:
        return None  # the hub answered (no config.json, or busy): the engine's to judge
    except Exception as err:  # the transport's own errors differ between releases
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        return f"{missing} and the hub ({endpoint}) cannot be reached ({why}): {advice}"
    return None
