"""Hold GPU memory so that an engine on a big GPU has exactly a smaller card's memory.

Scaling `--gpu-memory-utilization` alone is not a cap: vLLM's budget leaves out CUDA graphs,
the CUDA context and allocator overhead (docs/architecture.md, "An emulated card"). The
ballast allocates until only the emulated card's memory is free, so the engine must fit it.

`python -m autotune.engine.ballast --free-gib G [--device N]` allocates until CUDA device N has
G GiB free, prints `ready <bytes held> <free bytes>` and sleeps until killed or orphaned;
ctypes to the CUDA driver, standard library only. Without a driver, or G GiB, it exits 2.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from autotune.errors import AutotuneError
from autotune.stored import Stored

GiB = 1 << 30
# The driver backs large allocations with 2 MiB pages: free memory moves in these steps.
GRANULE = 2 << 20
MAX_CHUNK = GiB
_OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY


class BallastError(AutotuneError):
    """The device cannot be brought down to the emulated card's free memory."""


# -- pure sizing -----------------------------------------------------------------------


def to_hold(free_bytes: int, keep_free_bytes: int) -> int:
    """Bytes to allocate so that `keep_free_bytes` stay free; an error when fewer are free."""
    if keep_free_bytes <= 0:
        raise BallastError(f"the memory to leave free must be positive, not {keep_free_bytes}")
    if free_bytes < keep_free_bytes:
        raise BallastError(f"the device has {free_bytes / GiB:.2f} GiB free, less than the "
                           f"{keep_free_bytes / GiB:.2f} GiB of the emulated card")
    return free_bytes - keep_free_bytes


def next_chunk(free_bytes: int, keep_free_bytes: int, max_chunk: int = MAX_CHUNK) -> int:
    """The next allocation: at most `max_chunk`, whole granules, never below the target;
    0 once less than a granule is left above it. Re-measuring free memory between chunks
    accounts for page rounding and for the driver's own bookkeeping."""
    excess = max(free_bytes - keep_free_bytes, 0)
    return min(max_chunk, excess) // GRANULE * GRANULE


# -- the CUDA driver ------------------------------------------------------------------


class Driver:
    """The few CUDA driver calls the ballast needs, on one device's primary context."""

    def __init__(self, device: int):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as err:
            raise BallastError(f"no CUDA driver: {err}") from None
        self._check("cuInit", self.lib.cuInit(0))
        count = ctypes.c_int(0)
        self._check("cuDeviceGetCount", self.lib.cuDeviceGetCount(ctypes.byref(count)))
        if not 0 <= device < count.value:
            raise BallastError(f"no CUDA device {device}: {count.value} visible "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})")
        handle = ctypes.c_int(0)
        self._check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(handle), device))
        ctx = ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain",
                    self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), handle))
        self._check("cuCtxSetCurrent", self.lib.cuCtxSetCurrent(ctx))
        self.lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.lib.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t)] * 2
        self.held: list[ctypes.c_uint64] = []

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the device, its own context already counted."""
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self._check("cuMemGetInfo", self.lib.cuMemGetInfo_v2(ctypes.byref(free),
                                                             ctypes.byref(total)))
        return free.value, total.value

    def alloc(self, size: int) -> bool:
        """Allocate and keep `size` bytes; False when the device is out of memory."""
        ptr = ctypes.c_uint64(0)
        code = self.lib.cuMemAlloc_v2(ctypes.byref(ptr), size)
        if code == _OUT_OF_MEMORY:
            return False
        self._check("cuMemAlloc", code)
        self.held.append(ptr)
        return True

    def _check(self, call: str, code: int) -> None:
        if code != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(code, ctypes.byref(text))
            what = text.value.decode() if text.value else f"error {code}"
            raise BallastError(f"{call} failed: {what}")


def fill(driver: Driver, keep_free_bytes: int) -> tuple[int, int]:
    """Allocate until `keep_free_bytes` (to within a granule) are free: (held, free)."""
    free, _ = driver.mem_info()
    to_hold(free, keep_free_bytes)
    held, chunk = 0, MAX_CHUNK
    while size := next_chunk(free, keep_free_bytes, chunk):
        if driver.alloc(size):
            held += size
        elif size <= GRANULE:
            break  # what is left cannot be had in one piece
        else:
            chunk = size // 2
        free, _ = driver.mem_info()
    return held, free


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autotune.engine.ballast",
        description="Hold GPU memory until only --free-gib GiB are free; sleep until killed.")
    parser.add_argument("--free-gib", type=float, required=True,
                        help="memory to leave free, in GiB (the emulated card)")
    parser.add_argument("--device", type=int, default=0,
                        help="CUDA device number, after CUDA_VISIBLE_DEVICES (default 0)")
    args = parser.parse_args(argv)
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # die quietly; the driver frees the memory
    try:
        driver = Driver(args.device)
        held, free = fill(driver, int(args.free_gib * GiB))
    except BallastError as err:
        print(f"ballast: {err}", file=sys.stderr)
        return 2
    print(f"ready {held} {free}", flush=True)
    # Not PR_SET_PDEATHSIG: it fires when the parent *thread* ends, and a tuner may start
    # the ballast from a worker thread.
    while os.getppid() == parent:
        time.sleep(0.5)
    return 0


# -- the tuner's side -------------------------------------------------------------------


@dataclass(frozen=True)
class Held(Stored):
    """What a trial keeps of its ballast (its record's `ballast`): the free memory it left
    on `device` (GiB asked, bytes measured) and the bytes it held."""

    free_gib: float | None = None
    device: int = 0
    held_bytes: int | None = None
    free_bytes: int | None = None


class Ballast:
    """The ballast process for one engine launch: `with Ballast(24):` around the engine.

    Started in its own process group before the engine and stopped after it; it exits by
    itself if the tuner dies. `free_gib=None` makes an inactive ballast that does nothing,
    so a launch without emulation reads the same.
    """

    def __init__(self, free_gib: float | None, *, device: int = 0,
                 env: Mapping[str, str] | None = None, timeout_s: float = 120.0):
        self.free_gib = free_gib
        self.device = device
        self.env = {**os.environ, **(env or {})}
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self.held_bytes: int | None = None
        self.free_bytes: int | None = None

    @property
    def active(self) -> bool:
        return self.free_gib is not None

    def __enter__(self) -> Ballast:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self) -> Held | None:
        """What the trial stores (its record's `ballast`): None without a ballast."""
        if not self.active:
            return None
        return Held(self.free_gib, self.device, self.held_bytes, self.free_bytes)

    def start(self) -> None:
        """Start the process and wait for its `ready` line; BallastError otherwise."""
        if not self.active:
            return
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.engine.ballast", "--free-gib", repr(self.free_gib),
             "--device", str(self.device)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=self.env, start_new_session=True)
        try:
            words = self._first_line().split()
            if len(words) != 3 or words[0] != "ready":
                self._terminate()
                why = (self.proc.stderr.read() if self.proc.stderr else "").strip()
                last = why.splitlines()[-1] if why else " ".join(words) or "no output"
                raise BallastError(f"the GPU ballast for a {self.free_gib:g} GiB card did not "
                                   f"start: {last.removeprefix('ballast: ')}")
            self.held_bytes, self.free_bytes = int(words[1]), int(words[2])
        except BaseException:
            self.stop()
            raise

    def _first_line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(self.timeout_s):
                return f"no answer after {self.timeout_s:.0f} s"
        return self.proc.stdout.readline()  # the whole line, or "" at exit

    def stop(self) -> None:
        """Stop the process group and wait until it is gone (the driver frees its memory)."""
        if self.proc is None:
            return
        self._terminate()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        self.proc = None  # its pid may be reused: never signal it again

    def _terminate(self) -> None:
        """SIGTERM to the group, SIGKILL after a grace period; wait for the process."""
        assert self.proc is not None
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 30.0)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue


if __name__ == "__main__":
    sys.exit(main())
