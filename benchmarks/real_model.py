"""Benchmark: the quality guardrail and the real-text workloads on a real model (CPU engine).

    .venv/bin/python benchmarks/real_model.py guardrail [--repeats 10] [--json OUT]
    .venv/bin/python benchmarks/real_model.py overlap [--prompts 16] [--json OUT]

Both serve SmolLM2-135M-Instruct (`autotune tiny-model --preset smollm2-135m`) on vLLM's
CPU build, one engine at a time, `--enforce-eager --dtype float32` throughout.

`guardrail`: vLLM's defaults make the reference (batched, then one prompt at a time: the
noise floor), exactly as a study's trial 0 does. Then every configuration below is started
as a fresh engine and checked against it with the study's default thresholds: the defaults
themselves `--repeats` times (every rejection is a false reject), configurations that must
not change greedy answers (block size, max-num-seqs, prefix caching, ngram speculation,
which is lossless under greedy), and configurations that really change the model (an fp8
KV cache, a wrong RoPE base, six fewer layers). Prints drift and agreement per check.

`overlap`: the shipped `edit` and `chat` workloads' greedy answers: how much of each answer
copies the prompt (the share of answer tokens inside a 3-token or longer run that also
occurs in the prompt: what prompt-lookup speculation can draft) and the answers' length;
then the same prompts with ngram speculation: the acceptance the engine counted and the share
of the output that accepted drafts supplied.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from autotune import tinymodel
from autotune.config import Scenario
from autotune.engine.server import Server
from autotune.measure import speculation
from autotune.measure.loadgen import Target
from autotune.measure.workloads import Tokenizer, dataset_path
from autotune.tuning.quality import checking
from autotune.tuning.quality.guard import make_guard
from autotune.tuning.quality.verdict import Quality

# float32: on CPUs without AVX-512 BF16 the CPU build computes bf16 several times slower
# (seen here: a 495-token prefill 11.4 s in bf16, 1.8 s in float32).
EAGER = {"enforce-eager": True, "dtype": "float32"}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
LOSSLESS = {
    "block-size 32": {"block-size": 32},
    "max-num-seqs 4": {"max-num-seqs": 4},
    "no prefix caching": {"enable-prefix-caching": False},
    "ngram x4": {"speculative-config": NGRAM},
}
# Each one is a different model (or cache) than the reference's, not a different schedule.
DEGRADED = {
    "fp8 KV cache": {"kv-cache-dtype": "fp8"},
    "RoPE base 1e4 (config says 1e5)": {"hf-overrides": {"rope_theta": 10000.0}},
    "RoPE base 1e4, as rope_parameters": {"hf-overrides": {"rope_parameters": {
        "rope_type": "default", "rope_theta": 10000.0}}},
    "RoPE base 1e3, as rope_parameters": {"hf-overrides": {"rope_parameters": {
        "rope_type": "default", "rope_theta": 1000.0}}},
    "24 of 30 layers": {"hf-overrides": {"num_hidden_layers": 24}},
    "fp8 weights": {"quantization": "fp8"},
}


def model_path() -> str:
    return str(tinymodel.build(preset="smollm2-135m").path)


def _row(group: str, name: str, q: Quality, seconds: float | None = None
         ) -> dict[str, Any]:
    t = q.tasks
    return {"group": group, "config": name, "drift": q.drift, "agreement": q.agreement,
            "noise_multiple": q.noise_multiple(), "verdict": q.verdict, "passed": q.passed,
            "words": q.words(), "tasks": t.as_dict() if t else None,
            "check_s": seconds}


def guardrail_run(repeats: int, logs: Path, base: dict[str, Any], only: list[str] | None,
                  model: str | None = None, out: Path | None = None, items: int | None = None
                  ) -> list[dict[str, Any]]:
    """The reference from vLLM's defaults (`base` flags), then each configuration as a
    fresh engine checked against it: drift, the task check and the verdict. The rows go
    to `out` after each check, so a run stopped by a deadline keeps what it measured."""
    model = model or model_path()
    scenario = Scenario.model_validate({"model": {"path": model}, "guardrail": {} if items
                                        is None else {"tasks": items}})
    guard = make_guard(scenario, logs / "none")
    assert guard is not None
    t0 = time.monotonic()
    with Server(model, base, log_path=logs / "reference.log") as srv:
        ref, own = checking.make_reference(Target(srv.url, model, srv.headers), guard,
                                            context={"model": model, "flags": base})
    guard.reference = ref
    print(f"reference ({ref.template} prompts): noise drift {ref.noise['drift']:.4f} nats, "
          f"agreement {ref.noise['agreement']:.3f}; thresholds drift <= "
          f"{ref.thresholds['drift']:.4f}, agreement >= {ref.thresholds['agreement']:.3f}; "
          f"{own.words()} ({time.monotonic() - t0:.0f} s with start-up)", flush=True)
    rows = [_row("noise floor", "defaults, run twice", own)]
    if out is not None:
        out.write_text(json.dumps(rows, indent=2))
    plan = [("defaults", f"defaults #{i + 1}", {}) for i in range(repeats)]
    plan += [("lossless", name, flags) for name, flags in LOSSLESS.items()]
    plan += [("degraded", name, flags) for name, flags in DEGRADED.items()]
    if only is not None:  # in the order asked: what matters most runs first
        plan = sorted((p for p in plan if p[0] in only or p[1] in only),
                      key=lambda p: only.index(p[1] if p[1] in only else p[0]))
    for i, (group, name, flags) in enumerate(plan):
        try:
            with Server(model, {**base, **flags}, log_path=logs / f"{i:02d}.log") as srv:
                t1 = time.monotonic()
                got = checking.check(Target(srv.url, model, srv.headers), guard)
                row = _row(group, name, got, time.monotonic() - t1)
        except Exception as err:  # noqa: BLE001 - a refused configuration is a result
            row = {"group": group, "config": name, "error": f"{type(err).__name__}: {err}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out is not None:
            out.write_text(json.dumps(rows, indent=2))
    return rows


def copied_share(prompt: list[int], output: list[int], n: int = 3) -> float:
    """Share of `output` tokens inside a run of `n`+ tokens that also occurs in `prompt`."""
    if len(output) < n:
        return 0.0
    grams = {tuple(prompt[i:i + n]) for i in range(len(prompt) - n + 1)}
    covered = [False] * len(output)
    for i in range(len(output) - n + 1):
        if tuple(output[i:i + n]) in grams:
            covered[i:i + n] = [True] * n
    return sum(covered) / len(output)


async def _answers(target: Target, prompts: list[str], max_tokens: int) -> list[str]:
    async with aiohttp.ClientSession(trust_env=False) as http:
        async def one(p: str) -> str:
            body = {"model": target.model, "messages": [{"role": "user", "content": p}],
                    "max_tokens": max_tokens, "temperature": 0}
            async with http.post(target.url + "/v1/chat/completions", json=body,
                                 headers=target.headers) as resp:
                return (await resp.json())["choices"][0]["message"]["content"]
        return list(await asyncio.gather(*(one(p) for p in prompts)))


def overlap_run(count: int, logs: Path) -> list[dict[str, Any]]:
    model = model_path()
    tok = Tokenizer.of(model)
    rows = []
    for dataset in ("edit", "chat"):
        data = [json.loads(line) for line in dataset_path(dataset).read_text().splitlines()]
        prompts = [r["prompt"] for r in data[:count]]
        out: dict[str, Any] = {"workload": dataset, "prompts": len(prompts)}
        plain: list[str] = []
        for label, flags in (("plain", {}), ("ngram x4", {"speculative-config": NGRAM})):
            with Server(model, {**EAGER, **flags},
                        log_path=logs / f"overlap-{dataset}-{label[:5]}.log") as srv:
                target = Target(srv.url, model, srv.headers)
                before = speculation.Counters.parse(srv.get_text("/metrics") or "")
                answers = asyncio.run(_answers(target, prompts, data[0]["output_tokens"]))
                spec = speculation.between(
                    before, speculation.Counters.parse(srv.get_text("/metrics") or ""))
            if label == "plain":
                shares = [copied_share(tok.encode(p), tok.encode(a))
                          for p, a in zip(prompts, answers, strict=True)]
                out.update(copied_share=statistics.mean(shares),
                           copied_share_median=statistics.median(shares),
                           answer_tokens=statistics.mean(len(tok.encode(a)) for a in answers),
                           example=answers[0][:160])
            else:
                out.update(same_answers=sum(a == b for a, b in zip(
                    answers, plain, strict=True)) / len(answers),
                    acceptance_rate=spec.acceptance_rate if spec else None,
                    mean_acceptance_length=spec.mean_acceptance_length if spec else None,
                    drafted_share=spec.drafted_share if spec else None)
            plain = answers
        rows.append(out)
        print(json.dumps(out), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    g = sub.add_parser("guardrail")
    g.add_argument("--repeats", type=int, default=10)
    g.add_argument("--gpu", action="store_true",
                   help="the GPU's defaults (bf16, eager) instead of the CPU's float32")
    g.add_argument("--only", nargs="*", help="groups or configurations to check")
    g.add_argument("--tasks", type=int, help="items of the task check (default: the study's)")
    g.add_argument("--model", help="the model's folder (default: SmolLM2-135M-Instruct)")
    o = sub.add_parser("overlap")
    o.add_argument("--prompts", type=int, default=16)
    for p in (g, o):
        p.add_argument("--json", type=Path, help="write the rows here")
        p.add_argument("--logs", type=Path, help="engine logs (default: a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        rows = guardrail_run(args.repeats, logs, {"enforce-eager": True} if args.gpu
                             else EAGER, args.only, args.model, args.json, args.tasks) \
            if args.what == "guardrail" else overlap_run(args.prompts, logs)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
