"""Export a measured configuration to a deployment: CLI, vLLM YAML, compose, Kubernetes, JSON.

Only feasible completed trials can be exported (SLOs met, quality guardrail passed). Every
artifact carries the figures it was chosen on and the study and trial it came from, in
comments where the format allows.

`formats` holds the one table of formats (`FORMATS`: name -> renderer) and `render`, the
entry point: it builds one `context.ExportContext` (what every format needs, derived once
from the study and the trial) and hands it to the format's module: `shell` (`cli`),
`vllmyaml` (`vllm-yaml`), `compose`, `k8s` (with `autoscaling`, its autoscaler and
alerts) or `jsondoc` (`json`). Beneath them: `provenance` (where the export came from and
the figures it was chosen on, as comment lines), `recheck` (the command that re-measures it
and the operating limits), `plan` (image, GPUs, CPU and memory of a deployment, and the
command that starts the engine).
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["formats"]
