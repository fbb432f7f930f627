"""The guardrail's part in a run (`Guard`): its settings, its prompts, the reference to
check against (None until the first completed trial makes it), how prompts are sent; and
`make_guard`, which reads the prompts and an existing reference file for a run."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune import tinymodel
from autotune.config import GuardrailSpec, Scenario
from autotune.errors import ConfigError
from autotune.measure.workloads import Tokenizer
from autotune.tuning.quality.prompts import expected_reference, read_prompts
from autotune.tuning.quality.reference import Reference, reference_path
from autotune.tuning.quality.template import PLAIN, chat_ids, chosen
from autotune.tuning.quality.verdict import thresholds

log = logging.getLogger("autotune")


@dataclass
class Guard:
    """The guardrail's part in a trial: check against `reference`, or make it when None.
    `template` says how prompts are sent; with "chat", `model`'s chat template wraps each
    one as a user turn, as vLLM's chat endpoint would (`sent`)."""

    spec: GuardrailSpec
    prompts: list[str]
    reference: Reference | None = None
    template: str = PLAIN
    model: str | None = None

    def sent(self, prompts: list[str]) -> list[str] | list[list[int]]:
        """`prompts` as they go to /v1/completions: the texts (plain) or the token ids
        of the chat-templated user turn (the same ids vLLM's chat endpoint makes)."""
        if self.template == PLAIN:
            return prompts
        assert self.model is not None, "a chat-templated guard knows its model"
        return chat_ids(self.model, prompts)

    def lengths(self, sent: Sequence[str | list[int]]) -> list[int]:
        """Tokens of each prompt as `sent` (ids are counted; texts are encoded as vLLM
        encodes a completion's prompt); 0 each without a model to count with."""
        if self.model is None:
            return [len(p) if isinstance(p, list) else 0 for p in sent]
        tok = Tokenizer.of(self.model).tok
        return [len(p) if isinstance(p, list) else len(tok.encode(p)) for p in sent]


def make_guard(scenario: Scenario, study_dir: Path) -> Guard | None:
    """The guardrail for this run: an existing reference is reused (sent as it was made,
    chat-templated or plain), else the first completed trial (vLLM's defaults) makes it."""
    spec = scenario.guardrail
    if not spec.enabled:
        return None
    try:
        prompts = read_prompts(spec.prompts, spec.num_prompts)
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"guardrail.prompts: cannot read {spec.prompts}: {err}") from None
    path = reference_path(scenario, study_dir)
    model = tinymodel.resolve(scenario.model.tiny, scenario.model.path)
    reference = None
    if spec.prompts and not path.exists():
        reference = expected_reference(spec.prompts, spec.num_prompts, spec.max_tokens,
                                       Tokenizer.of(model), {"model": model})
        if reference is not None:
            reference.thresholds = thresholds(reference.noise, spec.noise_factor,
                                              spec.drift_threshold, spec.agreement_threshold)
            reference.save(path)
    if path.exists() and reference is None:
        try:
            reference = Reference.load(path)
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise ConfigError(f"guardrail.reference: {path} is not a reference: {err}") from None
        if reference.prompts != prompts or reference.max_tokens != spec.max_tokens:
            raise ConfigError(f"guardrail.reference: {path} was made with other prompts or "
                              "max_tokens; remove it or point `reference` elsewhere")
        if spec.template not in ("auto", reference.template):
            raise ConfigError(f"guardrail.template: {path} was made with {reference.template} "
                              f"prompts, not {spec.template}; a new study (or `reference` "
                              "pointing elsewhere) makes one that way")
        reference.thresholds = thresholds(reference.noise, spec.noise_factor,
                                          spec.drift_threshold, spec.agreement_threshold)
        log.info("guardrail: reusing the reference in %s (%s prompts%s)", path,
                 reference.template, "" if reference.tasks else ", no task check")
    template = reference.template if reference is not None else chosen(scenario, model)
    return Guard(spec, prompts, reference, template, model)
