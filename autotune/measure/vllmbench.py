"""Measure with vLLM's own client: `vllm bench serve` steps run by one long-lived helper.

A gain found with autotune's load generator is re-measured with `vllm bench serve` before
it is quoted. Each `vllm bench serve` pays its imports (docs/architecture.md, "Measuring a
capacity"), so one helper (`python -m autotune.measure.vllmbench`) imports it once and runs
one step per JSON line on stdin (`{"argv": [...], "api_key": ...}`), answering one JSON line
on stdout, until stdin closes. The API key goes through `OPENAI_API_KEY`, never argv.
`search` runs the same `searchplan.plan` with these steps.
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from autotune import _slo as slo
from autotune import _traces as traces
from autotune.errors import AutotuneError, ConfigError
from autotune.measure import _stepverdict as stepverdict
from autotune.measure import searchplan, searchresult, serversearch, watch, workloads
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.measurement import Measurement
from autotune.measure.searchplan import Anchor
from autotune.traffic import WorkloadSpec

# A sustained step offers the rate for this long: 4-6-s steps measured the transient.
STEP_S = 20.0
# Every step sends at least this many prompts, so a p95 is not just the slowest request
# (a low rate then runs longer than STEP_S: 20 prompts at 0.5 req/s take 40 s).
MIN_PROMPTS = 20
PERCENTILES = (50, 95, 99)
METRICS = "ttft,tpot,itl,e2el"
READY_TIMEOUT_S = 600.0  # the helper's imports: ~27 s on a GPU host, more on a busy one


class VllmBenchError(AutotuneError):
    """The `vllm bench serve` helper failed, hung or died."""


@dataclass(frozen=True)
class Endpoint:
    """The running server vLLM's client measures: its base URL, the served model's name,
    the tokenizer vLLM's client counts and builds prompts with (a path or Hugging Face id),
    the API key (it reaches the client through `OPENAI_API_KEY`, never the command line)
    and the watch on its engine (`alive`: a search ends with `Halted` once it names a
    reason)."""

    base_url: str
    model: str
    tokenizer: str
    api_key: str | None = None
    alive: watch.Alive | None = None


@dataclass(frozen=True)
class Invocation:
    """One `vllm bench serve` run: `num_prompts` prompts offered at `rate` requests/s (None:
    a burst, all at once) with seed `seed`, after `warmups` warm-up requests; the
    percentiles it reports (`metric_percentiles`); a trace step's own file (`trace_file`,
    `write_trace`), and where vLLM's client saves its result file (`result_dir`,
    `result_filename`; None: not saved)."""

    rate: float | None
    num_prompts: int
    seed: int
    metric_percentiles: Sequence[int] = PERCENTILES
    warmups: int = 0
    trace_file: Path | None = None
    result_dir: Path | None = None
    result_filename: str | None = None


def dataset_args(spec: WorkloadSpec, trace_file: Path | None = None
                 ) -> tuple[list[str], str | None]:
    """vLLM's dataset options for the workload, and a note when they only approximate it.

    A chat workload (conversations with growing history under a shared system prompt)
    has no equivalent in vLLM's client; its random dataset with the system prompt as a
    shared prefix and one turn per request is the closest. A trace step is a file of its
    own (`write_trace`), read by vLLM's `timed_trace` dataset.
    """
    if spec.kind == "trace":
        return ["--dataset-name", "timed_trace", "--dataset-path", str(trace_file),
                "--timed-trace-chunk-hash-size", str(spec.block_tokens),
                "--timed-trace-sec-multiplier", "0.001"], (
            "trace replayed by vLLM's timed_trace dataset: the same stretches at the same "
            "pace and the same shared blocks, filled with tokens of its own")
    if spec.kind in ("random", "chat"):
        prefix = spec.prefix_len if spec.kind == "random" else spec.system_len
        args = ["--dataset-name", "random", "--random-input-len", str(spec.input_len),
                "--random-output-len", str(spec.output_len),
                "--random-range-ratio", repr(spec.range_ratio),
                "--random-prefix-len", str(prefix)]
        note = None if spec.kind == "random" else (
            f"chat workload approximated by vLLM's random dataset: a shared {prefix}-token "
            f"prefix (the system prompt) + {spec.input_len} in / {spec.output_len} out, one "
            f"turn per request (no conversation history)")
        return args, note
    if spec.kind == "sharegpt":
        return ["--dataset-name", "sharegpt", "--dataset-path", str(spec.path)], None
    if spec.kind == "text":
        # The shipped rows are {"prompt": the user's message}: vLLM's custom dataset, sent
        # as a chat message as it is (the server applies the chat template, as for ours).
        return ["--dataset-name", "custom", "--dataset-path",
                str(workloads.dataset_path(spec.dataset or "")),
                "--custom-output-len", "-1",  # each row's `output_tokens`
                "--skip-chat-template"], None
    raise ConfigError(f"vllm bench serve: workload kind {spec.kind!r} has no vLLM dataset; "
                      "use --client autotune")


def prompts(spec: WorkloadSpec, rate: float | None, step_s: float = STEP_S) -> int:
    """Prompts of one step: rate x step_s (at least MIN_PROMPTS); a burst (rate None)
    sends the workload's own request count (at least MIN_PROMPTS)."""
    if rate is None or math.isinf(rate):
        own = spec.conversations * spec.turns if spec.kind == "chat" else spec.num_requests
        return max(own, MIN_PROMPTS)
    return max(math.ceil(rate * step_s), MIN_PROMPTS)


def write_trace(spec: WorkloadSpec, n: int, time_scale: float, index: int, path: Path) -> int:
    """One step of a trace as vLLM's `timed_trace` dataset reads it (timestamps in ms at
    the step's pace, the blocks as hash ids); the number of requests written.

    The requests are those autotune's own step sends (`traces.Trace.sample`). Block ids
    are shifted per step: vLLM's client fills a block from its id alone, and the same ids
    in the next step would find the previous step's prefixes in the engine's cache.
    """
    trace = traces.of(spec)
    shift = (max(b for r in trace.requests for b in r.blocks) + 1) * index
    picked = trace.sample(n)
    lines = [json.dumps({"timestamp": 0.0 if math.isinf(time_scale) else at / time_scale * 1000,
                         "input_length": req.input_tokens,
                         "output_length": max(1, req.output_tokens),
                         "hash_ids": [b + shift for b in req.blocks]})
             for at, req in picked]
    path.write_text("".join(line + "\n" for line in lines))
    return len(lines)


def percentiles(slos: Mapping[str, float]) -> list[int]:
    """50/95/99 plus any percentile an SLO names (e.g. p90 for `ttft_p90_ms`)."""
    out = set(PERCENTILES)
    for key in slos:
        stat = slo.summary_key(key).split("_")[0]
        if stat.startswith("p"):
            out.add(int(stat[1:]))
    return sorted(out)


def step_args(spec: WorkloadSpec, endpoint: Endpoint, run: Invocation) -> list[str]:
    """The `vllm bench serve` arguments of one run of `spec` against `endpoint` (pure). A
    trace step's pace is in its file (`write_trace`): vLLM's client times it by its
    timestamps."""
    chat = spec.api == "chat"
    rate = run.rate
    args = ["--backend", "openai-chat" if chat else "openai", "--base-url", endpoint.base_url,
            "--endpoint", "/v1/chat/completions" if chat else "/v1/completions",
            "--model", endpoint.model, "--tokenizer", endpoint.tokenizer,
            *dataset_args(spec, run.trace_file)[0],
            "--num-prompts", str(run.num_prompts), "--seed", str(run.seed),
            "--request-rate", "inf" if rate is None else repr(float(rate)),
            "--burstiness", repr(spec.burstiness), "--temperature", repr(spec.temperature),
            "--percentile-metrics", METRICS,
            "--metric-percentiles", ",".join(str(p) for p in run.metric_percentiles),
            "--disable-tqdm"]
    if spec.ignore_eos:
        args.append("--ignore-eos")
    if spec.max_concurrency is not None:
        args += ["--max-concurrency", str(spec.max_concurrency)]
    if run.warmups:
        args += ["--num-warmups", str(run.warmups)]
    if run.result_dir is not None:
        args += ["--save-result", "--result-dir", str(run.result_dir)]
        if run.result_filename:
            args += ["--result-filename", run.result_filename]
    return args


def judge(result: Measurement, slos: Mapping[str, float],
          min_success_rate: float = 1.0) -> list[str]:
    """The SLOs a `vllm bench serve` result broke (its keys are autotune's, e.g.
    `p95_ttft_ms`); an empty list is a pass. No completed request is never a pass."""
    broken = stepverdict.violations(result, slos, min_success_rate)
    if not result.completed and not any(b.startswith("success_rate") for b in broken):
        broken.insert(0, "no completed requests")
    return broken


class Helper:
    """The helper process: `with Helper(log) as h: h.step(argv, api_key=...)`.

    It runs in its own session so that a Ctrl-C reaches autotune, which stops it; it
    is killed on exit whatever happened, and exits by itself when its stdin closes.
    """

    def __init__(self, log_path: Path, ready_timeout_s: float = READY_TIMEOUT_S):
        self.log_path = Path(log_path)
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self.start_s: float | None = None
        self.import_s: float | None = None
        self.version: str | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()

    def __enter__(self) -> Helper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        """Launch and wait until vLLM's client is imported."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autotune.measure.vllmbench"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "VLLM_NO_USAGE_STATS": "1",
                     "DO_NOT_TRACK": "1"})
        threading.Thread(target=_pump, args=(self.proc.stdout, self._lines),
                         daemon=True).start()
        try:
            ready = self._read(self.ready_timeout_s, "starting")
        except BaseException:
            self.close()
            raise
        self.start_s = time.monotonic() - t0
        self.import_s, self.version = ready.get("import_s"), ready.get("vllm")

    def step(self, argv: list[str], *, api_key: str | None = None,
             timeout_s: float = 3600.0) -> Measurement:
        """Run one `vllm bench serve` with `argv`; its result (scalars only)."""
        if self.proc is None or self.proc.stdin is None:
            raise VllmBenchError("vllm bench serve helper is not running")
        try:
            self.proc.stdin.write(json.dumps({"argv": argv, "api_key": api_key}) + "\n")
            self.proc.stdin.flush()
        except OSError:
            raise VllmBenchError(self._died("before a step")) from None
        reply = self._read(timeout_s, "running a step")
        if not reply.get("ok"):
            raise VllmBenchError(f"vllm bench serve failed: {reply.get('error')}; "
                                 f"log {self.log_path}")
        return Measurement.of(reply["result"])

    def _read(self, timeout_s: float, doing: str) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise VllmBenchError(f"vllm bench serve helper: no answer after {timeout_s:.0f} s "
                                 f"{doing}; log {self.log_path}") from None
        if line is None:
            raise VllmBenchError(self._died(doing))
        return json.loads(line)

    def _died(self, doing: str) -> str:
        code = self.proc.wait(timeout=10) if self.proc else None
        tail = _tail(self.log_path)
        return (f"vllm bench serve helper exited (code {code}) {doing}: {tail}; "
                f"log {self.log_path}")

    def close(self) -> None:
        """Close stdin (the helper then exits); kill its session if it lingers."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: this helper only
            except ProcessLookupError:
                pass
            proc.wait()


def _pump(stream: IO[str] | None, lines: queue.Queue[str | None]) -> None:
    """Move the helper's answer lines to a queue, so a read can have a deadline."""
    if stream is not None:
        for line in stream:
            if line.strip():
                lines.put(line)
    lines.put(None)


def _tail(path: Path, n: int = 1) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " | ".join(text[-n:]) or "empty log"


def search(helper: Helper, spec: WorkloadSpec, slos: Mapping[str, float],
           endpoint: Endpoint, *, step_s: float = STEP_S, result_dir: Path | None = None,
           anchor: Anchor | None = None) -> CapacityRecord:
    """The capacity at SLO of the server at `endpoint`, measured with vLLM's client, as
    `searchresult.record` keeps it. An anchor with a `start` begins the search there instead
    of at a burst (`searchplan.plan`). `endpoint.alive` watches the engine through the
    idle waits and after every step (`Halted` once it names a reason): a dead engine fails
    vLLM's requests at once, and each step would then wait out the idle timeout."""
    if step_s <= 0:
        raise ConfigError(f"--step-seconds must be positive (got {step_s:g})")
    cap = spec.capacity
    alive = endpoint.alive
    pct = percentiles(slos)
    pace = workloads.pace(spec)
    files = Path(tempfile.mkdtemp(prefix="autotune-trace-")) if result_dir is None \
        else result_dir

    def measure(kind: str, rate: float | None, index: int, seconds: float | None
                ) -> searchresult.Step:
        waited = watch.run(serversearch.wait_idle(endpoint.base_url, cap.idle_timeout_s),
                           alive)
        n = prompts(spec, rate, seconds or step_s)
        trace_file = None
        if pace:  # a trace: this step's stretches at this step's pace
            trace_file = files / f"step-{index:02d}-{kind}.jsonl"
            n = write_trace(spec, n, math.inf if rate is None else rate / pace, index,
                            trace_file)
        warmups = (spec.warmup_requests or serversearch.WARMUP) if index == 0 else 0
        argv = step_args(spec, endpoint, Invocation(
            rate, n, spec.seed + index, metric_percentiles=pct, warmups=warmups,
            trace_file=trace_file, result_dir=result_dir,
            result_filename=f"step-{index:02d}-{kind}.json"))
        # A step that falls behind drains its backlog: allow the requests' own timeout.
        expected = n / rate if rate else n
        t0 = time.monotonic()
        result = helper.step(argv, api_key=endpoint.api_key,
                             timeout_s=expected + spec.timeout_s + 120)
        watch.check(alive)  # requests that failed because the engine died are no result
        broken = judge(result, slos, cap.min_success_rate)
        figures = stepverdict.slo_figures(result, slos)
        return searchresult.Step(index, kind, rate, not broken, result.request_throughput,
                                 result.output_throughput, broken,
                                 result.completed + result.failed, figures,
                                 round(waited, 3), round(time.monotonic() - t0, 3),
                                 total_token_throughput=result.total_token_throughput,
                                 summary=result)

    try:
        record = searchresult.record(searchplan.plan(measure, cap, anchor), spec)
    finally:
        if result_dir is None:
            shutil.rmtree(files, ignore_errors=True)
    # vLLM's client judges every request of a step and samples nothing: with no steady
    # window its steps achieved no rate to hold against the offered one, so its capacity
    # is the rate it offered (`steprecord.achieved_at`)
    return replace(record, step_s=step_s, window=None, bottleneck=None)


class _ArgumentError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    """vLLM's own parser, but a bad argument is an answer, not the helper's exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _ArgumentError(message)


def _scalars(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result without its per-request lists (they are in the saved file if asked)."""
    out: dict[str, Any] = {}
    for k, v in result.items():
        if isinstance(v, numbers.Integral):  # numpy integers are not JSON numbers
            out[k] = int(v)
        elif isinstance(v, numbers.Real):
            out[k] = float(v)
        elif v is None or isinstance(v, str):
            out[k] = v
    return out


def _serve() -> int:
    """The helper's main loop: one `vllm bench serve` per request line, until EOF."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # vLLM prints its report on stdout: keep that off the answer channel
    t0 = time.monotonic()
    import vllm
    from vllm.benchmarks import serve

    parser = _Parser(prog="vllm bench serve")
    serve.add_cli_args(parser)
    answers.write(json.dumps({"ready": True, "import_s": round(time.monotonic() - t0, 3),
                              "vllm": vllm.__version__}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("api_key"):
            os.environ["OPENAI_API_KEY"] = request["api_key"]
        else:
            os.environ.pop("OPENAI_API_KEY", None)
        t1 = time.monotonic()
        try:
            result = serve.main(parser.parse_args(request["argv"]))
            reply = {"ok": True, "result": _scalars(result)}
        except Exception as err:  # noqa: BLE001 - any failure is an answer to the caller
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        reply["seconds"] = round(time.monotonic() - t1, 3)
        sys.stderr.flush()
        answers.write(json.dumps(reply, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
