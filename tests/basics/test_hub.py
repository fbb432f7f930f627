"""A Hugging Face id is checked before any launch (`config.hub_problem`): in the local cache it
is served; offline, out of the hub's reach or unknown to the hub, it is refused in one line
that names the cache and what to do. The hub is a local fake here (this machine reaches none)
answering as the hub answers, through huggingface_hub's own client."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune import config
from autotune.errors import ConfigError

MODEL = "nosuchorg/nosuchmodel"


def cached(root: Path, model: str = MODEL) -> Path:
    """A Hugging Face cache holding `model`'s config.json at revision main, laid out as
    huggingface_hub writes it."""
    repo = root / f"models--{model.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    return root


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def hub() -> Iterator[dict]:
    """A fake hub: HEAD of a file answers with `answer["status"]` and its error code, as
    the hub's API does (`X-Error-Code`)."""
    answer: dict = {"status": 200, "code": None}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(answer["status"])
            if answer["code"]:
                self.send_header("X-Error-Code", answer["code"])
            self.send_header("X-Repo-Commit", "0" * 40)
            self.send_header("ETag", '"abc"')
            self.send_header("Content-Length", "2")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    answer["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    yield answer
    server.shutdown()
    server.server_close()


def test_a_cached_model_is_served_even_offline(tmp_path):
    root = cached(tmp_path / "hub")
    assert config.hub_problem(MODEL, env={"HF_HUB_CACHE": str(root), "HF_HUB_OFFLINE": "1"}) \
        is None
    assert config.hub_problem(MODEL, download_dir=str(root), env={"HF_HUB_OFFLINE": "1"}) is None
    (tmp_path / "home").mkdir()
    cached(tmp_path / "home" / "hub")
    assert config.hub_problem(MODEL, env={"HF_HOME": str(tmp_path / "home"),
                                          "HF_HUB_OFFLINE": "1"}) is None


def test_offline_and_not_cached_is_refused_at_once(tmp_path):
    t0 = time.monotonic()
    problem = config.hub_problem(MODEL, env={"HF_HUB_CACHE": str(tmp_path),
                                             "HF_HUB_OFFLINE": "1"})
    assert time.monotonic() - t0 < 2
    assert problem == (f"{MODEL!r} is not in the local Hugging Face cache ({tmp_path}) and "
                       f"HF_HUB_OFFLINE is set: download it where the hub can be reached "
                       f"(`hf download {MODEL}`) or give a local directory with config.json")


def test_a_hub_out_of_reach_is_refused(tmp_path):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    problem = config.hub_problem(MODEL, env={"HF_HUB_CACHE": str(tmp_path)}, endpoint=endpoint)
    assert problem is not None and problem.startswith(f"{MODEL!r} is not in the local Hugging "
                                                      f"Face cache ({tmp_path})")
    assert f"the hub ({endpoint}) cannot be reached" in problem
    # The engine's environment names the hub as well as the check's caller.
    assert "cannot be reached" in (config.hub_problem(
        MODEL, env={"HF_HUB_CACHE": str(tmp_path), "HF_ENDPOINT": endpoint}) or "")


@pytest.mark.parametrize(("status", "code", "words"), [
    (404, "RepoNotFound", "no such model on the Hugging Face hub"),
    (401, "RepoNotFound", "no such model on the Hugging Face hub"),
    (403, "GatedRepo", "is gated on the Hugging Face hub"),
    (404, "RevisionNotFound", "has no revision"),
])
def test_what_the_hub_refuses_is_refused(hub, tmp_path, status, code, words):
    hub.update(status=status, code=code)
    problem = config.hub_problem(MODEL, env={"HF_HUB_CACHE": str(tmp_path)},
                                 endpoint=hub["url"])
    assert problem is not None and words in problem


@pytest.mark.parametrize(("status", "code"), [(200, None), (404, "EntryNotFound"),
                                              (503, None)])
def test_what_the_hub_serves_or_cannot_judge_now_goes_to_the_engine(hub, tmp_path, status,
                                                                    code):
    """Found, a repository without config.json (the engine judges its files), a busy hub
    (the engine retries): not refused."""
    hub.update(status=status, code=code)
    assert config.hub_problem(MODEL, env={"HF_HUB_CACHE": str(tmp_path)},
                              endpoint=hub["url"]) is None


def test_ids_of_other_sources_and_bad_ids():
    assert config.hub_problem(MODEL, env={"VLLM_USE_MODELSCOPE": "1"}) is None
    assert config.hub_problem("a--b/c") == \
        "'a--b/c' is not a Hugging Face id: Cannot have -- or .. in repo_id: 'a--b/c'."


def test_a_scenario_names_its_file_and_key(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(f"model: {{path: {MODEL}}}\n"
                    f"engine: {{env: {{HF_HUB_OFFLINE: '1', HF_HUB_CACHE: {tmp_path}}}}}\n")
    with pytest.raises(ConfigError) as err:
        config.load(path)
    assert str(err.value).startswith(f"{path}: model.path: {MODEL!r} is not in the local "
                                     "Hugging Face cache")
    cached(tmp_path / "dl")
    path.write_text(f"model: {{path: {MODEL}}}\n"
                    f"engine: {{env: {{HF_HUB_OFFLINE: '1'}}, "
                    f"flags: {{download-dir: {tmp_path / 'dl'}}}}}\n")
    assert config.load(path).model.path == MODEL  # vLLM's --download-dir is its cache
