"""Where an engine's start-up time went, phase by phase, timed while it starts.

vLLM stamps its log lines to the second, and its own figures cover only the engine core's
part; imports, model inspection, process spawns and the API server's set-up are the rest.
`Server` feeds each new piece of the log to a `PhaseClock` while it polls for readiness,
so a phase ends when its first line shows up (to the 0.5-s poll). A phase whose marker
never shows is folded into the next one that does: the phases add up to the start-up.
"""

from __future__ import annotations

import re

# (phase, the line that ends it), in the order an engine starts.
MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # vLLM's first log line (`LEVEL MM-DD HH:MM:SS`, after a `(Process pid=N) ` prefix or,
    # with several API servers, none): the launching process has imported vLLM
    ("imports", re.compile(
        r"^(?:\([^)\n]*\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d",
        re.M)),
    # model inspection (vLLM runs it in a fresh interpreter unless its cache has the model)
    ("inspect", re.compile(r"Resolved architecture")),
    # the engine-core process spawned and imported vLLM again
    ("engine_core", re.compile(r"^\(EngineCore\S* pid=\d+\)", re.M)),
    # the engine core spawned its worker (the CPU build always; GPUs with several ranks)
    ("worker", re.compile(r"^\((?:Vllm)?Worker\S* pid=\d+\)", re.M)),
    ("load", re.compile(r"Loading weights took|Model loading took")),
    # torch.compile, inside the profiling run: vLLM's own total on a GPU, the end of the
    # warm-up the CPU build compiles in (absent with --enforce-eager: folded into the next)
    ("compile", re.compile(r"torch\.compile t(?:akes|ook) [\d.]+ ?s in total|Warming up done")),
    # the memory profile that sizes the KV cache, and its allocation
    ("kv_cache", re.compile(r"KV cache size: [\d,]+ tokens")),
    # CUDA-graph capture (a GPU without --enforce-eager)
    ("graphs", re.compile(r"Graph capturing finished")),
    # what is left of the engine's set-up: kernel warm-up (18 s on a fresh H200 machine)
    ("init", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    ("serve", re.compile(r"Starting vLLM server on")),
)
FIRST_REQUEST = "first_request"  # from the server's start to the first completed request
PHASES = (*(name for name, _ in MARKS), FIRST_REQUEST)
FAILED = "failed"  # a failed start: from the last line that ended a phase to the failure


class PhaseClock:
    """Stamps the first appearance of each marker in a log that grows while it is read."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.seen: dict[str, float] = {}
        self._tail = ""  # the unfinished last line of the previous piece

    def feed(self, text: str, now: float) -> None:
        """A new piece of the log, read at `now` (same clock as `t0`)."""
        text = self._tail + text
        cut = text.rfind("\n") + 1  # whole lines only: a marker may be half written
        self._tail = text[cut:]
        for name, pattern in MARKS:
            if name not in self.seen and pattern.search(text, 0, cut):
                self.seen[name] = now

    def phases(self, end: float, failed: bool = False) -> dict[str, float]:
        """Seconds per phase, in start-up order, adding up to `end - t0`; the last is
        `first_request` when the engine got ready at `end`, `failed` when it failed."""
        out: dict[str, float] = {}
        last = self.t0
        for name in PHASES:
            if name == FIRST_REQUEST:
                name, at = (FAILED if failed else FIRST_REQUEST), end
            elif name in self.seen:
                at = self.seen[name]
            else:
                continue  # never seen: its time goes to the next phase that was
            at = max(at, last)
            out[name] = round(at - last, 2)
            last = at
        return out
