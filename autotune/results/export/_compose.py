"""The `compose` format: a Docker Compose service on vLLM's image, with the trial's resources
(GPUs reserved, CPU and memory), the model's source as a volume and a health check. Written
by the YAML library; the notes are its comments."""

from __future__ import annotations

import yaml

from autotune.results.export._context import ExportContext
from autotune.results.export._plan import HF_CACHE, PORT, Plan
from autotune.results.export._provenance import commented


def volume(deployment: Plan) -> dict[str, object]:
    """The Hugging Face cache as a named volume, or the model's path bound read-only."""
    if deployment.hub:
        return {"type": "volume", "source": "hf-cache", "target": HF_CACHE}
    return {"type": "bind", "source": deployment.model, "target": deployment.model,
            "read_only": True}


def resources(deployment: Plan) -> dict[str, object]:
    """Limits (twice the cores requested) and reservations, the GPUs among them."""
    memory = f"{deployment.memory_gib}g"
    reservations: dict[str, object] = {"cpus": str(deployment.cpus), "memory": memory}
    if deployment.gpus:
        reservations["devices"] = [{"driver": "nvidia", "count": deployment.gpus,
                                    "capabilities": ["gpu"]}]
    return {"limits": {"cpus": str(2 * deployment.cpus), "memory": memory},
            "reservations": reservations}


def render(context: ExportContext) -> str:
    deployment = context.plan
    env: dict[str, str | None] = dict(deployment.env)
    if deployment.hub:
        env.setdefault("HF_TOKEN", None)  # passed through from the shell, if set
    service: dict[str, object] = {
        "image": deployment.image,
        "entrypoint": ["vllm", "serve"],
        "command": [deployment.model, "--host", "0.0.0.0", "--port", str(PORT), *context.args],
        "ports": [f"{PORT}:{PORT}"],
        "shm_size": f"{deployment.shm_gib}gb",
        **({"environment": env} if env else {}),
        "volumes": [volume(deployment)],
        "deploy": {"resources": resources(deployment)},
        "healthcheck": {"test": ["CMD", "curl", "-fsS", f"http://localhost:{PORT}/health"],
                        "interval": "15s", "timeout": "5s", "retries": 3,
                        "start_period": "300s"},
    }
    document: dict[str, object] = {"services": {"vllm": service}}
    if deployment.hub:
        document["volumes"] = {"hf-cache": {}}
    return commented(context.container_notes) + "\n" + yaml.safe_dump(document, sort_keys=False)
