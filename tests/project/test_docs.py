"""The docs name what exists: every `autotune/...` path in the README and the docs is in the
repository, the README stays a user's README (at most 400 lines), no Markdown file points to a
folder outside the repository (`../shared`), and relative links between files resolve.

No engine, no network: the Markdown files are read as text."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import pytest

from tests.paths import ROOT

README = ROOT / "README.md"
README_MAX_LINES = 400

# Generated or installed folders: their Markdown is not the project's.
SKIP_DIRS = {"node_modules", "__pycache__", "build", "out"}


def markdown_files() -> list[Path]:
    """Every Markdown file of the repository, outside hidden folders (.venv, .git, .gpu-pack,
    caches), installed packages and generated study folders (studies/NAME/trials/)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = Path(dirpath).relative_to(ROOT)
        dirnames[:] = sorted(
            d for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")
            and not (rel.parts[:1] == ("studies",) and d in ("trials", "workers")))
        found += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".md")]
    return found


def documents() -> list[Path]:
    """The docs whose `autotune/...` paths must exist."""
    return [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
            ROOT / "scripts" / "gpu" / "README.md"]


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s)>\]`'\"]+", re.I)
# A path of the package as the docs write it: `autotune/tuning/records/trialrecord.py`,
# `autotune/measure/`, `autotune/*.py`, optionally `::name` or `:line` after it (not part of
# the path). Not a path inside another folder (`~/.cache/autotune/models`, `$X/autotune`) or
# a name that only ends in autotune (`vllm-autotune`), nor prose (`autotune/vLLM`: the
# package's names are lower case); `../autotune/...` (a link from a subfolder) is one.
PACKAGE_PATH = re.compile(r"(?:(?<=\.\./)|(?<![\w.~$/-]))autotune/[a-z0-9_./*-]*(?![\w])")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def package_paths(text: str) -> list[tuple[int, str]]:
    """(line number, path) of every `autotune/...` path in `text`, URLs left out."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in PACKAGE_PATH.finditer(URL.sub(" ", line)):
            out.append((number, m.group(0).rstrip(".,;")))
    return out


def exists(rel: str) -> bool:
    if any(c in rel for c in "*?["):
        return bool(glob.glob(str(ROOT / rel)))
    return (ROOT / rel).exists()


def slugs(text: str) -> set[str]:
    """GitHub's anchors of the headings of a Markdown text (code blocks left out)."""
    seen: dict[str, int] = {}
    out = set()
    for m in HEADING.finditer(FENCE.sub("", text)):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_helpers_read_paths_as_the_docs_write_them():
    text = ("see `autotune/tuning/records/trialrecord.py::TrialRecord` and autotune/measure/, "
            "[x](../autotune/engine/server.py:42), `~/.cache/autotune/models/tiny`, "
            "vllm-autotune, $AUTOTUNE_CACHE/autotune/x, https://github.com/o/autotune/blob/x.py, "
            "`autotune/*.py`, the ratio autotune/vLLM. And autotune/_flags.py.")
    assert [p for _, p in package_paths(text)] == [
        "autotune/tuning/records/trialrecord.py", "autotune/measure/", "autotune/engine/server.py",
        "autotune/*.py", "autotune/_flags.py"]
    assert exists("autotune/*.py") and not exists("autotune/nothing.py")
    assert {"capacity-at-slo", "autotune-tune", "9-a-real-model-smollm2-135m-instruct-at-6-users",
            "the-warm-launcher-2026-11-30-benchmarksstartuppy", "x", "x-1"} <= slugs(
        "### Capacity at SLO\n## `autotune tune`\n"
        "## 9. A real model: SmolLM2-135M-Instruct at 6 users\n"
        "### The warm launcher (2026-11-30, `benchmarks/startup.py`)\n# x\n# x\n"
        "```bash\n# not a heading\n```\n")
    assert "not-a-heading" not in slugs("```bash\n# not a heading\n```\n")


@pytest.mark.parametrize("doc", documents(), ids=_id)
def test_every_package_path_the_docs_name_exists(doc):
    assert doc.is_file(), f"{_id(doc)} is missing"
    missing = [f"{_id(doc)}:{n}: {p}" for n, p in package_paths(doc.read_text())
               if not exists(p)]
    assert not missing, "paths that do not exist (moved in a split?):\n" + "\n".join(missing)


def test_the_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): it is for users; "
        "maintainer material goes to docs/ (architecture.md, testing.md), measured tables "
        "next to their scripts (benchmarks/README.md)")


def test_no_markdown_file_points_outside_the_repository():
    files = markdown_files()
    assert README in files and ROOT / "docs" / "architecture.md" in files
    found = [f"{_id(f)}:{n}: {line.strip()}" for f in files
             for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
             if "../shared" in line]
    assert not found, ("a reader has no ../shared folder; state the fact itself:\n"
                       + "\n".join(found))


@pytest.mark.parametrize("doc", markdown_files(), ids=_id)
def test_relative_links_resolve(doc):
    """A relative link names a file or folder of the repository, and an anchor into a
    Markdown file names one of its headings."""
    text = doc.read_text()
    broken = []
    for m in LINK.finditer(FENCE.sub("", text)):
        target = m.group(1)
        if URL.match(target) or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in slugs(dest.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{_id(doc)}:\n" + "\n".join(broken)


def test_the_architecture_names_every_module():
    """docs/architecture.md's tables say what each module does: a module added, moved or
    split without a line there is a newcomer's blind spot."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "autotune").rglob("*.py")
                     if p.name not in ("__init__.py", "__main__.py"))
    missing = [m for m in modules if f"`{m.rsplit('/', 1)[-1]}`" not in text
               and f"`{m}`" not in text and f"{m.split('/', 1)[-1]}" not in text]
    assert not missing, "modules docs/architecture.md does not name:\n" + "\n".join(missing)
