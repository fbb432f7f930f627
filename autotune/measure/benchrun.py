"""`autotune bench` as one library call (`run`): a workload, or a capacity search, against a
running server or against an engine launched for it, the result saying where it ran (the
device, and a launched engine's command, start-up and log).

The CLI parses its options into a `BenchRun` and prints what comes back; what the engine
would refuse only after a start-up (a model it cannot get, a block size its kernels do not
take) is refused here first (`check_launch`), in one line."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from autotune import config
from autotune.engine import gpu
from autotune.engine.info import engine_info, installed
from autotune.engine.log import StartupFigures
from autotune.engine.server import Server
from autotune.errors import ConfigError
from autotune.measure import serversearch
from autotune.measure.bench import Load, benchmark
from autotune.measure.loadgen import Target
from autotune.measure.measurement import Measurement
from autotune.traffic import WorkloadSpec


@dataclass(frozen=True)
class Remote:
    """A server that is already running: its base URL, its API key (None: none) and the
    model name it serves (None: the first it lists)."""

    url: str
    api_key: str | None = None
    served_model_name: str | None = None


@dataclass(frozen=True)
class EngineLaunch:
    """An engine launched for the benchmark: the model, vLLM flags as `vllm serve` takes
    them, the name it serves the model under, its log and how long it may take to serve."""

    model: str
    engine_args: tuple[str, ...] = ()
    served_model_name: str | None = None
    log: Path | None = None
    startup_timeout_s: float = 900.0


@dataclass(frozen=True)
class BenchRun:
    """One `autotune bench`: the workload, vLLM's per-request goodput SLOs (plain runs), the
    percentile SLOs a capacity search holds, the tokenizer (None: the model's), and where it
    runs (`server`: a `Remote` or an `EngineLaunch`)."""

    spec: WorkloadSpec
    server: Remote | EngineLaunch
    goodput: Mapping[str, float]
    percentile: Mapping[str, float]
    tokenizer: str | None = None


@dataclass(frozen=True)
class LaunchedEngine:
    """The engine `autotune bench` launched: its command, start-up (seconds, and the
    figures its log gave), version and log."""

    command: list[str]
    startup_s: float | None
    figures: StartupFigures
    version: str
    log: str

    def as_dict(self) -> dict[str, object]:
        return {"command": self.command, "startup_s": self.startup_s,
                **self.figures.as_dict(), "version": self.version, "log": self.log}


@dataclass(frozen=True)
class BenchReport:
    """What `autotune bench` gives back: the measurement, the device it ran on (`cpu` where
    there is no GPU, and no memory figure) and, for an `EngineLaunch`, the engine."""

    measurement: Measurement
    device: str
    device_memory_mib: float | None = None
    engine: LaunchedEngine | None = None

    def as_dict(self) -> dict[str, object]:
        """The JSON `--json` and `--output` write: the measurement's flat object, then
        `engine` (a launched one) and `device`."""
        device: dict[str, object] = {"name": self.device}
        if self.device_memory_mib is not None:
            device["memory_mib"] = self.device_memory_mib
        out: dict[str, object] = dict(self.measurement.as_dict())
        if self.engine is not None:
            out["engine"] = self.engine.as_dict()
        out["device"] = device
        return out


def run(bench: BenchRun) -> BenchReport:
    """Run the benchmark where `bench.server` says and return its measurement, the device
    it ran on and (for an `EngineLaunch`) the engine's command, start-up, version and log."""
    engine = None
    if isinstance(bench.server, Remote):
        remote = bench.server
        headers = {"Authorization": f"Bearer {remote.api_key}"} if remote.api_key else {}
        name = remote.served_model_name or first_model(remote.url, headers)
        result = _measure(bench, Target(remote.url.rstrip("/"), name, headers),
                          bench.tokenizer or name)
    else:
        result, engine = _launched(bench, bench.server)
    device = gpu.device()
    if device is None:
        return BenchReport(result, "cpu", engine=engine)
    return BenchReport(result, device.name, device.memory_mib, engine)


def _launched(bench: BenchRun, launch: EngineLaunch) -> tuple[Measurement, LaunchedEngine]:
    check_launch(launch.model, launch.engine_args)
    log = engine_log(launch.log, None)
    extra = list(launch.engine_args)
    if launch.served_model_name:
        extra += ["--served-model-name", launch.served_model_name]
    with Server(launch.model, extra_args=extra, log_path=log,
                startup_timeout=launch.startup_timeout_s) as srv:
        target = Target(srv.url, launch.served_model_name or launch.model, srv.headers)
        result = _measure(bench, target, bench.tokenizer or launch.model,
                          lambda: [p.pid for p in srv.processes()], srv.death)
        return result, LaunchedEngine(["vllm", "serve", launch.model, *srv.serve_args()],
                                      srv.startup_s, srv.figures,
                                      "-".join(installed()), str(log))


def _measure(bench: BenchRun, target: Target, tokenizer: str,
             pids: Callable[[], list[int]] | None = None,
             alive: Callable[[], str | None] | None = None) -> Measurement:
    """The benchmark itself; with `alive` (a launched server's watch) a dead engine ends it
    within a second as one line (`Halted`), not after every step's timeout."""
    load = Load(target, bench.spec, tokenizer, pids=pids, alive=alive)
    if bench.spec.mode == "capacity":
        return serversearch.search(load, dict(bench.percentile))
    return benchmark(load, slos=dict(bench.goodput))


def engine_log(log: Path | None, output: Path | None) -> Path:
    """Where a launched engine writes its log: `--log`, else beside `--output`
    (`result.json` -> `result.engine.log`), else a new temporary folder; never the working
    directory, which a benchmark run from a checkout would litter."""
    if log is not None:
        return log
    if output is not None:
        return output.with_name(f"{output.stem}.engine.log")
    return Path(tempfile.mkdtemp(prefix="autotune-bench-")) / "engine.log"


def check_launch(model: str, engine_args: tuple[str, ...] | list[str]) -> None:
    """What the engine would refuse only after a start-up, refused now in one line: a model
    it cannot get, a block size its attention kernels do not take."""
    if problem := config.model_problem(model, download_dir=engine_arg(engine_args,
                                                                         "download-dir"),
                                       revision=engine_arg(engine_args, "revision")):
        raise ConfigError(f"bench: --model {model}: {problem}")
    block = engine_arg(engine_args, "block-size")
    if block is not None:
        info = engine_info()
        if problem := info.multiple_problem("block-size", block):
            raise ConfigError(f"bench: --block-size {block} is not accepted by "
                              f"{info.distribution} {info.version}; {problem}")


def engine_arg(args: tuple[str, ...] | list[str], flag: str) -> str | None:
    """The value of `--flag V` or `--flag=V` (or `--flag_name`) among vLLM flags, the last
    one as vLLM's parser takes it; None where it is not given."""
    value = None
    for i, arg in enumerate(args):
        name, eq, given = arg.partition("=")
        if name.startswith("--") and name[2:].replace("_", "-") == flag:
            value = given if eq else (args[i + 1] if i + 1 < len(args) else None)
    return value


def first_model(url: str, headers: Mapping[str, str]) -> str:
    """The first model a running server lists (`/v1/models`)."""
    req = urllib.request.Request(url.rstrip("/") + "/v1/models", headers=dict(headers))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())["data"][0]["id"]
    except (OSError, ValueError, KeyError, IndexError) as err:
        raise ConfigError(f"bench: cannot list models at {url}/v1/models: {err}") from None
