"""Layering (design.md §3): imports point down only, leaves know nothing of the package, Hydra stays at the edge.

Read with ``ast`` (nothing is imported), so a forbidden import is caught even inside a function.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nmt"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")

# module -> the nmt modules it may import (the layering table; a new module needs a row here)
ALLOWED = {
    "aer": {"textio"},
    "alignment": set(),
    "attention": set(),
    "curves": set(),
    "loss": set(),
    "plot": {"aer", "alignment", "textio"},
    "normalize": set(),
    "textio": set(),
    "tokenizer": set(),
    "model": {"attention"},
    "data": {"normalize", "textio"},
    "search": {"model"},
    "mbr": set(),  # minimum Bayes risk selection over an n-best list (decode.mbr)
    "checkpoint": {"attention", "model", "textio", "tokenizer"},  # attention: the allowed _target_s of a checkpoint
    "evaluate": {"alignment", "data", "mbr", "search", "textio", "tokenizer"},
    "schedule": set(),
    "ema": set(),  # the moving average of the weights (train.ema_decay)
    "state": {"checkpoint", "curves", "ema", "schedule", "textio"},  # Progress, last.pt/best.pt, resuming
    "final": {"average", "checkpoint", "data", "evaluate", "plot"},  # the end-of-run evaluation
    "training": {"average", "checkpoint", "data", "ema", "evaluate", "final", "loss", "schedule", "state", "textio",
                 "tokenizer"},
    "average": {"checkpoint", "curves", "textio"},  # curves.read_curve: the one reader of metrics.jsonl
    "align": {"alignment", "checkpoint", "data", "evaluate", "normalize", "search", "textio", "tokenizer"},
}
CONFIG_LIBRARIES = {"hydra", "omegaconf"}
# third-party libraries of the leaves (stdlib aside): the leaves stay light and independent
LEAF_THIRD_PARTY = {
    "aer": set(),
    "alignment": {"numpy"},
    "attention": {"torch"},
    "curves": {"matplotlib"},
    "loss": {"torch"},
    "mbr": {"numpy", "sacrebleu"},
    "schedule": {"torch"},
    "plot": {"matplotlib", "numpy"},
    "normalize": {"sacremoses"},
    "textio": set(),
    "tokenizer": {"numpy", "sentencepiece"},
}


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module name, at top level) for every import statement in a file; ``from nmt import x``
    gives ``nmt.x``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import; use `from nmt.x import y`"
            if node.module == "nmt":
                found += [(f"nmt.{alias.name}", id(node) in top) for alias in node.names]
            else:
                found.append((node.module, id(node) in top))
    return found


def internal(path: Path) -> set[str]:
    return {name.split(".")[1] for name, _ in imports(path) if name.startswith("nmt.")}


def external_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name, _ in imports(path) if name.split(".")[0] not in ("nmt", "__future__")}


GRAPH = {module: internal(PACKAGE / f"{module}.py") for module in MODULES}


def test_every_module_has_a_row():
    assert set(MODULES) == set(ALLOWED), "add the new module to ALLOWED (and to design.md §3)"


@pytest.mark.parametrize("module", MODULES)
def test_nmt_imports_follow_the_table(module):
    unexpected = GRAPH[module] - ALLOWED[module]
    assert not unexpected, f"nmt/{module}.py imports nmt.{sorted(unexpected)}; allowed: {sorted(ALLOWED[module])}"


def test_no_cycles():
    state: dict[str, str] = {}

    def visit(module, path):
        if state.get(module) == "done":
            return
        assert state.get(module) != "active", f"import cycle: {' -> '.join(path + [module])}"
        state[module] = "active"
        for dep in sorted(GRAPH[module]):
            visit(dep, path + [module])
        state[module] = "done"

    for module in MODULES:
        visit(module, [])


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")) + [ROOT / "train.py", ROOT / "translate.py"],
                         ids=lambda p: p.name)
def test_hydra_only_at_the_edge(path):
    uses = external_roots(path) & CONFIG_LIBRARIES
    if path.parent == PACKAGE and path.stem != "checkpoint":
        assert not uses, f"{path.name} imports {sorted(uses)}: only nmt/checkpoint.py and the entry scripts may"


def test_checkpoint_and_scripts_do_use_hydra():
    """The rule above is not vacuous: the one module inside nmt/ and both entry scripts do import it."""
    for path in (PACKAGE / "checkpoint.py", ROOT / "train.py", ROOT / "translate.py"):
        assert "hydra" in external_roots(path), path.name


@pytest.mark.parametrize("module", sorted(LEAF_THIRD_PARTY))
def test_leaves_third_party(module):
    import sys

    stdlib = sys.stdlib_module_names
    third_party = {name for name in external_roots(PACKAGE / f"{module}.py") if name not in stdlib}
    assert third_party <= LEAF_THIRD_PARTY[module], f"nmt/{module}.py imports {sorted(third_party)}"


def test_datasets_imported_lazily_and_only_by_data():
    """`datasets` is slow to import: only nmt/data.py's hub path imports it, inside the function."""
    for path in sorted(PACKAGE.glob("*.py")) + [ROOT / "train.py", ROOT / "translate.py"]:
        found = [(name, top) for name, top in imports(path) if name.split(".")[0] == "datasets"]
        if path.name == "data.py":
            assert found == [("datasets", False)]
        else:
            assert not found, path.name


def test_special_ids_kept_in_sync():
    """search.py keeps the special ids as literals (it must not import the tokenizer); they must agree."""
    from nmt import data, search, tokenizer

    assert (search.PAD_ID, search.BOS_ID, search.EOS_ID) == (tokenizer.PAD_ID, tokenizer.BOS_ID, tokenizer.EOS_ID)
    batch = data.collate([[5, 3]], [[6, 3]], [0])  # collate's defaults: pad 0, BOS 2
    assert batch.tgt_in[0, 0] == tokenizer.BOS_ID
    assert data.collate([[5, 3], [3]], None, [0, 1]).src[1, 1] == tokenizer.PAD_ID
