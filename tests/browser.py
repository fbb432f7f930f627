"""Headless Chromium driven through the DevTools Protocol: load a page as a person's browser
would, record every JavaScript error and network request, evaluate a probe, take a screenshot.

Used by the report's browser test and by `make report-screenshot`
(`python tests/browser.py REPORT.html SHOT.png`). Debian's `chromium` (installed by
`make setup`); no browser download. The background-service flags matter: this network refuses
the connections Chromium otherwise opens at start-up, and a fresh profile keeps runs apart.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    # Plotly's parallel coordinates draw with WebGL; without a GPU, Chromium only offers it
    # through its software rasteriser when asked to.
    "--enable-unsafe-swiftshader",
    "--hide-scrollbars", "--mute-audio", "--remote-debugging-port=0",
]
# True once every plotly graph on the page has been drawn (its SVG root exists).
PLOTS_DRAWN = """(() => {
  const gds = [...document.querySelectorAll('.js-plotly-plot')];
  return document.readyState === 'complete' &&
    gds.every(gd => gd._fullLayout && gd.querySelector('svg.main-svg'));
})()"""


@dataclass
class PageRun:
    """What one page load produced."""

    probe: Any  # the probe expression's value
    errors: list[str] = field(default_factory=list)  # uncaught exceptions, console errors
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    screenshot: Path | None = None


@contextlib.contextmanager
def chromium() -> Iterator[int]:
    """A headless Chromium with a fresh profile; yields its DevTools port. Its whole process
    group is stopped on exit."""
    if not os.access(CHROMIUM, os.X_OK):
        raise FileNotFoundError(f"{CHROMIUM} is missing (Debian: apt-get install chromium; "
                                "`make setup` does it)")
    profile = Path(tempfile.mkdtemp(prefix="autotune-chromium-"))
    log = open(profile.parent / f"{profile.name}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        yield _devtools_port(proc, profile / "DevToolsActivePort")
    finally:
        _stop_group(proc)
        log.close()
        shutil.rmtree(profile, ignore_errors=True)
        Path(log.name).unlink(missing_ok=True)


def _devtools_port(proc: subprocess.Popen, port_file: Path, timeout: float = 30.0) -> int:
    """Chromium writes the port it chose (we ask for 0: any free one) into its profile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before listening")
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):  # half-written
            return int(port_file.read_text().split()[0])
        time.sleep(0.1)
    raise TimeoutError(f"chromium did not open its DevTools port within {timeout:.0f} s")


def _stop_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class _Session:
    """One DevTools websocket: numbered commands, and events kept in arrival order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self.ws = ws
        self.next_id = 0
        self.pending: dict[int, asyncio.Future] = {}
        self.events: list[dict[str, Any]] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, 60)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    async def evaluate(self, expression: str) -> Any:
        reply = await self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                                awaitPromise=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"probe failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def seen(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.events if e["method"] == method]


def _errors(session: _Session) -> list[str]:
    out = []
    for p in session.seen("Runtime.exceptionThrown"):
        d = p["exceptionDetails"]
        out.append("exception: " + str((d.get("exception") or {}).get("description")
                                       or d.get("text")))
    for p in session.seen("Runtime.consoleAPICalled"):
        if p["type"] in ("error", "assert"):
            out.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                              for a in p["args"]))
    for p in session.seen("Log.entryAdded"):
        if p["entry"]["level"] == "error":
            out.append(f"log ({p['entry']['source']}): {p['entry']['text']}")
    return out


async def _load(port: int, url: str, probe: str, screenshot: Path | None, width: int,
                timeout: float, ready: str = PLOTS_DRAWN) -> PageRun:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        page = next(t for t in targets if t["type"] == "page")
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            s = _Session(ws)
            for domain in ("Runtime", "Log", "Network", "Page"):
                await s.send(f"{domain}.enable")
            await s.send("Emulation.setDeviceMetricsOverride", width=width, height=900,
                         deviceScaleFactor=1, mobile=False)
            await s.send("Page.navigate", url=url)
            deadline = time.monotonic() + timeout
            while not (s.seen("Page.loadEventFired") and await s.evaluate(ready)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{url} did not finish drawing within {timeout:.0f} s")
                await asyncio.sleep(0.2)
            run = PageRun(probe=await s.evaluate(probe))
            if screenshot is not None:
                height = await s.evaluate("document.documentElement.scrollHeight")
                await s.send("Emulation.setDeviceMetricsOverride", width=width,
                             height=int(height), deviceScaleFactor=1, mobile=False)
                await asyncio.sleep(0.5)  # plotly redraws responsive figures on resize
                shot = await s.send("Page.captureScreenshot", format="png",
                                    captureBeyondViewport=True)
                screenshot.write_bytes(base64.b64decode(shot["data"]))
                run.screenshot = screenshot
            run.errors = _errors(s)
            run.requests = [p["request"]["url"] for p in s.seen("Network.requestWillBeSent")]
            s.reader.cancel()
            return run


def load(path: Path, probe: str = "null", screenshot: Path | None = None, width: int = 1400,
         timeout: float = 60.0, port: int | None = None) -> PageRun:
    """Open a local HTML file in headless Chromium, wait until its plots are drawn, and return
    the probe's value, the errors, the requests, and optionally a full-page PNG.

    `port`: the DevTools port of a Chromium that `chromium()` opened, to load several pages
    in one browser, one after the other in its tab; a fresh one is started otherwise. Pages
    loaded from the same path in one browser compile the inlined plotly.js once: Chromium
    keeps a script's compiled code for its URL (a report loads in 0.45 s instead of 1.25 s).
    """
    with chromium() if port is None else contextlib.nullcontext(port) as open_port:
        return asyncio.run(_load(open_port, Path(path).resolve().as_uri(), probe, screenshot,
                                 width, timeout))


def load_url(url: str, ready: str, probe: str = "null", screenshot: Path | None = None,
             width: int = 1280, timeout: float = 60.0) -> PageRun:
    """Open `url` (e.g. a server on 127.0.0.1) in a fresh headless Chromium, wait until the
    expression `ready` is true (a client-side application draws after the load event), and
    return the probe's value, the errors, the requests, and optionally a full-page PNG."""
    with chromium() as port:
        return asyncio.run(_load(port, url, probe, screenshot, width, timeout, ready))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tests/browser.py PAGE.html SHOT.png", file=sys.stderr)
        return 2
    run = load(Path(argv[0]), screenshot=Path(argv[1]))
    for err in run.errors:
        print(f"browser: {err}", file=sys.stderr)
    print(f"screenshot of {argv[0]} written to {argv[1]}")
    return 1 if run.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
