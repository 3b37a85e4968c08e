"""The documentation site: ``mkdocs build --strict`` passes (no broken link, anchor or API reference, no
docstring mkdocstrings cannot parse), and the API reference documents every public function and class of every
module under ``nmt/``."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def public_objects() -> dict[str, list[str]]:
    """Module name -> the public functions and classes it defines at top level (no leading ``_``)."""
    found = {}
    for path in sorted((ROOT / "nmt").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(part.startswith("_") for part in parts):  # private modules and __main__
            continue
        module = ".".join(parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found[module] = [node.name for node in tree.body
                         if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                         and not node.name.startswith("_")]
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One strict build of the whole site into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                            str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                           check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return build, out


def test_strict_build_passes(site):
    build, _ = site
    problems = [line for line in build.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    report = "\n".join(problems or [build.stderr[-3000:]])
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{report}"


def test_api_reference_lists_every_public_function_and_class(site):
    _, out = site
    pages = list((out / "api").rglob("*.html"))
    assert pages, f"no API pages were built in {out / 'api'}"
    anchors = set()
    for page in pages:
        anchors.update(re.findall(r'\bid="(nmt[\w.]*)"', page.read_text(encoding="utf-8")))
    modules = public_objects()
    assert "nmt.api" in modules and "Translator" in modules["nmt.api"]
    missing_modules = sorted(module for module in modules if module not in anchors)
    missing = sorted(f"{module}.{name}" for module, names in modules.items() for name in names
                     if f"{module}.{name}" not in anchors)
    assert not missing_modules and not missing, (
        "the API reference (docs/api/*.md, rendered by mkdocstrings) lacks\n  modules: "
        + ", ".join(missing_modules) + "\n  functions and classes: " + ", ".join(missing)
        + "\nadd the module to a page under docs/api/ (a '::: nmt.X' block, or a subpackage page with "
        "show_submodules) and to the nav in mkdocs.yml")


def test_inventory_lists_the_api(site):
    """``objects.inv`` (what other sites cross-reference) holds the public API too."""
    from mkdocstrings import Inventory

    _, out = site
    with open(out / "objects.inv", "rb") as file:
        inventory = Inventory.parse_sphinx(file)
    for name in ("nmt.api.Translator", "nmt.api.Translator.translate", "nmt.models.attention.Additive",
                 "nmt.analysis.aer.aer", "nmt.decoding.search.beam"):
        assert name in inventory, name
