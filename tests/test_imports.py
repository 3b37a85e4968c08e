"""Layering (design.md §3): subpackages by pipeline stage, imports point down only, Hydra stays at the edge.

Read with ``ast`` (nothing is imported), so a forbidden import is caught even inside a function.
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nmt"
FILES = sorted(PACKAGE.rglob("*.py"))
SUBPACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
COMMANDS = ("aer", "align", "average", "curves", "plot")  # `python -m nmt.X`: thin entry points of a subpackage

# unit (a subpackage, nmt/settings.py or a command) -> the units it may import; the order is the pipeline's
ALLOWED = {
    "data": set(),  # text files, normalization, subwords, corpora, batches
    "commandline": set(),  # the key=value command lines of the tools that are not Hydra apps (and, for every
    # command, the quiet end of one whose reader closed the pipe)
    "settings": {"data", "commandline"},  # the one module that touches Hydra/OmegaConf (and explains its
    # command-line grammar errors with commandline.unreadable_argument)
    "models": {"data", "settings"},
    "decoding": {"data", "models"},
    "analysis": {"data", "models", "decoding", "commandline"},  # reads saved artifacts and models, never training
    "training": {"data", "settings", "models", "decoding", "analysis", "commandline"},
    # the comparison report reads runs as analysis does (and their settings); no stage and no command imports it
    "report": {"data", "settings", "models", "decoding", "analysis", "commandline"},
    **{command: {"analysis", "training"} for command in COMMANDS},
    "api": {"data", "models", "decoding", "analysis"},  # the Python API (nmt.Translator): loads and decodes
    # the Hydra apps nmt-train and nmt-translate (train.py and translate.py in a checkout are shims of them)
    "train": {"data", "settings", "models", "decoding", "analysis", "training", "commandline"},
    "translate": {"data", "settings", "models", "decoding", "analysis", "commandline"},
}
HYDRA_APPS = (PACKAGE / "settings.py", PACKAGE / "train.py", PACKAGE / "translate.py")  # may import hydra
CONFIG_LIBRARIES = {"hydra", "omegaconf"}
# third-party libraries of the leaves (stdlib aside): the leaves stay light and independent
LEAF_THIRD_PARTY = {
    "analysis/gold": set(),
    "decoding/word_alignment": {"numpy"},
    "analysis/symmetrize": {"numpy"},
    "models/attention": {"torch"},
    "analysis/curves": {"matplotlib"},
    "training/loss": {"torch"},
    "decoding/mbr": {"numpy", "sacrebleu"},
    "training/schedule": {"torch"},
    "analysis/plot": {"matplotlib", "numpy"},
    "data/normalize": {"sacremoses"},
    "data/textio": set(),
    "data/tokenizer": {"numpy", "sentencepiece"},
    "report/significance": {"sacrebleu"},
    "report/analyses": {"sacrebleu"},
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
            if node.module in ["nmt", *(f"nmt.{s}" for s in SUBPACKAGES)]:
                found += [(f"{node.module}.{alias.name}", id(node) in top) for alias in node.names]
            else:
                found.append((node.module, id(node) in top))
    return found


def unit(path: Path) -> str:
    """The layering unit of a file of nmt/: its subpackage, or its own name at the top level."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def module_name(path: Path) -> str:
    return ".".join(("nmt", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def internal(path: Path) -> set[str]:
    """The nmt modules a file imports, dotted (``nmt.data.textio``)."""
    return {name for name, _ in imports(path) if name.startswith("nmt.")}


def external_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name, _ in imports(path) if name.split(".")[0] not in ("nmt", "__future__")}


def rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE).with_suffix(""))


def test_every_unit_has_a_row():
    units = {unit(p) for p in FILES if p != PACKAGE / "__init__.py"}
    assert units == set(ALLOWED), "add the new subpackage or module to ALLOWED (and to design.md §3)"
    assert set(SUBPACKAGES) == {"data", "models", "decoding", "analysis", "training", "report"}


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_imports_follow_the_layers(path):
    if path == PACKAGE / "__init__.py":  # only the lazy ``nmt.Translator``, inside a function
        assert [(name, top) for name, top in imports(path)] == [("nmt.api", False)]
        return
    me = unit(path)
    used = {name.split(".")[1] for name in internal(path)} - {me}
    assert used <= ALLOWED[me], f"nmt/{rel(path)}.py imports nmt.{sorted(used - ALLOWED[me])}; {me} may import " \
                                f"{sorted(ALLOWED[me])}"


def test_data_and_models_import_no_later_stage():
    """The rules design.md §3 names, stated once more without the table: data and models import nothing from
    decoding, training or analysis; decoding imports no training; analysis never imports training."""
    forbidden = {"data": {"models", "decoding", "training", "analysis"}, "models": {"decoding", "training", "analysis"},
                 "decoding": {"training", "analysis"}, "analysis": {"training"}}
    for path in FILES:
        if unit(path) in forbidden:
            used = {name.split(".")[1] for name in internal(path)}
            assert not used & forbidden[unit(path)], f"nmt/{rel(path)}.py imports {sorted(used & forbidden[unit(path)])}"


def test_nothing_imports_the_report():
    """nmt.report is the end of the line: it reads what the other stages wrote, and none of them (nor a command)
    depends on it, so the page's libraries (jinja2, plotly) never load with training or translation."""
    assert not any("report" in allowed for unit_name, allowed in ALLOWED.items() if unit_name != "report")
    for path in FILES:
        if unit(path) != "report":
            used = {name.split(".")[1] for name in internal(path)}
            assert "report" not in used, f"nmt/{rel(path)}.py imports nmt.report"


def test_every_subpackage_says_what_it_holds():
    for name in SUBPACKAGES:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "May import" in doc, f"nmt/{name}/__init__.py: say what it holds and what it may import"


def test_no_cycles():
    graph = {module_name(p): {m for m in internal(p) if m in {module_name(q) for q in FILES}} for p in FILES}
    state: dict[str, str] = {}

    def visit(module, path):
        if state.get(module) == "done":
            return
        assert state.get(module) != "active", f"import cycle: {' -> '.join(path + [module])}"
        state[module] = "active"
        for dep in sorted(graph[module]):
            visit(dep, path + [module])
        state[module] = "done"

    for module in graph:
        visit(module, [])


@pytest.mark.parametrize("path", FILES + [ROOT / "train.py", ROOT / "translate.py"], ids=lambda p: p.name)
def test_hydra_only_at_the_edge(path):
    uses = external_roots(path) & CONFIG_LIBRARIES
    if path not in HYDRA_APPS:
        assert not uses, f"{path.name} imports {sorted(uses)}: only nmt/settings.py and the two Hydra apps may"


def test_settings_and_the_hydra_apps_do_use_hydra():
    """The rule above is not vacuous: nmt/settings.py and both Hydra apps do import it; the checkout's train.py and
    translate.py only call the apps."""
    for path in HYDRA_APPS:
        assert "hydra" in external_roots(path), path.name
    for script in ("train", "translate"):
        assert internal(ROOT / f"{script}.py") == {f"nmt.{script}"}


@pytest.mark.parametrize("module", sorted(LEAF_THIRD_PARTY))
def test_leaves_third_party(module):
    stdlib = sys.stdlib_module_names
    path = PACKAGE / f"{module}.py"
    third_party = {name for name in external_roots(path) if name not in stdlib}
    assert third_party <= LEAF_THIRD_PARTY[module], f"nmt/{module}.py imports {sorted(third_party)}"


def test_datasets_imported_lazily_and_only_by_data():
    """`datasets` is slow to import: only nmt/data/corpus.py's hub path imports it, inside the function."""
    for path in FILES + [ROOT / "train.py", ROOT / "translate.py"]:
        found = [(name, top) for name, top in imports(path) if name.split(".")[0] == "datasets"]
        if path == PACKAGE / "data" / "corpus.py":
            assert found == [("datasets", False)]
        else:
            assert not found, path.name


def test_files_and_functions_stay_small():
    """One idea per file (about 300 lines at most) and a function fits on a screen (about 60 lines)."""
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        assert text.count("\n") <= 310, f"nmt/{rel(path)}.py has {text.count(chr(10))} lines: split it"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                assert length <= 62, f"nmt/{rel(path)}.py: {node.name} has {length} lines"


def test_special_ids_kept_in_sync():
    """nmt.decoding.hypothesis keeps the special ids as literals (search must not import the tokenizer); they
    must agree."""
    from nmt.data import batches as data
    from nmt.data import tokenizer
    from nmt.decoding import hypothesis

    assert (hypothesis.PAD_ID, hypothesis.BOS_ID, hypothesis.EOS_ID) == (tokenizer.PAD_ID, tokenizer.BOS_ID,
                                                                         tokenizer.EOS_ID)
    batch = data.collate([[5, 3]], [[6, 3]], [0])  # collate's defaults: pad 0, BOS 2
    assert batch.tgt_in[0, 0] == tokenizer.BOS_ID
    assert data.collate([[5, 3], [3]], None, [0, 1]).src[1, 1] == tokenizer.PAD_ID
