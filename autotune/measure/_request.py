"""One request's fate as the load generator saw it (`RequestResult`): what
`autotune.measure.metrics` summarises and `autotune.measure._steady` windows."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestResult:
    """One request as vLLM's `RequestFuncOutput` records it; times in seconds (perf_counter).

    `ttft`: first SSE event with non-empty `choices` minus send time (0.0 when none);
    `itl`: gaps between consecutive content events (per event, not per token);
    `latency`: last content event minus send time (E2EL); `output_tokens`: the server's
    `usage.completion_tokens`; `success`: HTTP 200 and at least one content event.
    `due` (autotune's): when the arrival schedule had it sent; later than that, the
    client fell behind the load it was to offer. None where no schedule set it (a chat
    conversation's later turns, sent when the reply before them ended).
    """

    success: bool
    prompt_len: int
    output_tokens: int
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    start_time: float = 0.0
    error: str = ""
    generated_text: str = ""
    due: float | None = None

    @property
    def arrival(self) -> float:
        """When the request arrived as offered load: its due time, else its send time."""
        return self.start_time if self.due is None else self.due
