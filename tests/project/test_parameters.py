"""No function of the package takes more than `MOST` parameters:
what travels together (a workload against a server, a step as it was sent, a search's anchor,
the plot area a figure's labels go into) is one typed record, not a row of keywords that each
caller unpacks and the callee repacks."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST = 7
# The packages held to `MOST` (the whole package); `self` and `cls` do not count, `*args`
# and `**kwargs` do.
PACKAGES = ("autotune",)


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many parameters `fn` takes, `self`/`cls` left out."""
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    own = 1 if names and names[0] in ("self", "cls") else 0
    return len(names) - own + (a.vararg is not None) + (a.kwarg is not None)


def too_many(source: str) -> list[tuple[str, int]]:
    """(name, count) of each function in `source` over `MOST`."""
    return [(node.name, parameters(node)) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and parameters(node) > MOST]


def test_the_count_leaves_out_self_and_counts_star_arguments():
    source = ("class A:\n    def m(self, a, b, c, d, e, f, g): ...\n"
              "def f(a, b, c, d, e, f, *args, **kw): ...\n"
              "async def g(a, /, b, *, c, d, e, f, g, h): ...\n")
    assert too_many(source) == [("f", 8), ("g", 8)]


def test_no_function_takes_more_than_seven_parameters():
    over = [f"{path.relative_to(ROOT)}::{name} takes {count}"
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            for name, count in too_many(path.read_text())]
    assert not over, f"more than {MOST} parameters:\n" + "\n".join(over)


# `dict[str, Any]` is where a typed record is still missing or where JSON passes through
# untouched (`dict[str, object]` when the code only carries it): at most this many.
MOST_UNTYPED = 40


def test_few_dicts_of_anything():
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "autotune").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if "dict[str, Any]" in line]
    assert len(found) <= MOST_UNTYPED, (f"{len(found)} uses of dict[str, Any] (at most "
                                        f"{MOST_UNTYPED}):\n" + "\n".join(found))
