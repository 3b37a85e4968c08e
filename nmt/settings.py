"""Settings: the one module in ``nmt/`` that touches Hydra/OmegaConf (the entry scripts aside).

Everything below the entry points and the training orchestration takes plain values or the config node it
needs; this module turns configs into plain data and back, makes paths absolute, compares settings, writes a
run's ``.hydra/`` record, reads which keys command-line overrides set, and instantiates the ``_target_`` nodes
(the attention factory) that the configs name.
"""

from __future__ import annotations

import copy
import difflib
import re
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import CompactHydraException
from hydra.utils import instantiate as hydra_instantiate
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from nmt.commandline import unreadable_argument
from nmt.data.textio import atomic_write, file_named


def config_dir() -> str:
    """The folder of the Hydra configs (``train.yaml``, ``translate.yaml`` and their groups), as an absolute path
    for ``hydra.main``: ``nmt/conf`` inside an installed package (the wheel ships the repository's ``conf/``
    there), or the repository's ``conf/`` beside ``nmt/`` (a checkout, an editable install).

    Raises:
        FileNotFoundError: neither holds ``train.yaml`` (an installation without its configs).
    """
    package = Path(__file__).resolve().parent
    for folder in (package / "conf", package.parent / "conf"):
        if (folder / "train.yaml").is_file():
            return str(folder)
    raise FileNotFoundError(f"no Hydra configs (train.yaml) in {package / 'conf'} or {package.parent / 'conf'}: "
                            "reinstall nmt (pip install nmt, or pip install -e . in a checkout)")


def command_name(script: str, installed: str) -> str:
    """The name a command goes by in its messages: ``installed`` (``nmt-train``) when the console script is what
    ran, else ``script`` (``train.py``)."""
    return installed if Path(sys.argv[0]).name == installed else script


TRAIN_PATHS = ("data.dir", "data.file", "data.train_src", "data.train_tgt", "data.valid_src", "data.valid_tgt",
               "data.test_src", "data.test_tgt", "data.extra_train", "train.resume", "train.init",
               "train.guided_alignment.links", "eval.gold.links",
               "eval.gold.bitext", "eval.gold.paths")


TRANSLATE_PATHS = ("checkpoint", "input", "output", "alignments", "reference", "plots", "nbest")


def absolute_paths(cfg: DictConfig, keys: tuple[str, ...]) -> None:
    """Make the relative paths at the dotted ``keys`` absolute, against the directory the command was run from
    (Hydra's original working directory), so they stay right whatever ``hydra.job.chdir`` is. A list has its
    paths (``checkpoint=[A,B]``) or the files of its entries (``data.extra_train``) made absolute, a mapping
    (``eval.gold.paths``: language -> file) its values. ``-`` (stdin or stdout), null and absent keys are left
    alone."""
    for key in keys:
        value = OmegaConf.select(cfg, key)
        if isinstance(value, ListConfig):  # data.extra_train: entries {paths: {LANG: FILE}} or {tsv: FILE}
            for i, entry in enumerate(value):  # checkpoint=[A,B]: a list of paths
                if isinstance(entry, str) and entry != "-":
                    value[i] = to_absolute_path(entry)
            for entry in (e for e in value if isinstance(e, DictConfig)):  # a malformed one: read_extra says so
                if entry.get("tsv"):
                    entry.tsv = to_absolute_path(str(entry.tsv))
                if isinstance(entry.get("paths"), DictConfig):
                    for lang, path in entry.paths.items():
                        entry.paths[lang] = to_absolute_path(str(path))
        elif isinstance(value, DictConfig):  # eval.gold.paths: {LANG: FILE}
            for name, path in value.items():
                value[name] = to_absolute_path(str(path))
        elif value and value != "-":
            OmegaConf.update(cfg, key, to_absolute_path(str(value)))


def adopt(cfg: DictConfig, source: DictConfig, keys: tuple[str, ...]) -> DictConfig:
    """A copy of ``cfg`` whose top-level nodes ``keys`` are those of ``source`` (e.g. a checkpoint's config when
    resuming: its architecture, tokenizer and data, whatever the command line says)."""
    out = copy.deepcopy(cfg)
    with open_dict(out):
        for key in keys:
            out[key] = copy.deepcopy(source.get(key))
    return out


def differences(before, now, prefix: str) -> list[tuple[str, object, object]]:
    """The leaves that differ between two config nodes (or plain values), as ``(dotted name, before, now)``."""
    if isinstance(before, DictConfig):
        before = OmegaConf.to_container(before, resolve=True)
    if isinstance(now, DictConfig):
        now = OmegaConf.to_container(now, resolve=True)
    if isinstance(before, dict) and isinstance(now, dict):
        return [d for key in sorted(set(before) | set(now), key=str)
                for d in differences(before.get(key), now.get(key), f"{prefix}.{key}")]
    return [] if same_setting(before, now) else [(prefix, before, now)]


def setting_at(cfg, key: str, default=None):
    """The value at the dotted ``key`` of a config (or a plain mapping), ``default`` where a part of it is absent."""
    value = cfg
    for part in key.split("."):
        value = value.get(part, default) if value is not default and hasattr(value, "get") else default
    return value


def same_setting(before, now) -> bool:
    """Equal setting values, absolute paths compared as the files they name (``/a/../b/c`` and ``/b/c``, a link
    and its target), inside lists and mappings too (``data.extra_train``)."""
    if isinstance(before, str) and isinstance(now, str):
        return before == now or file_named(before) == file_named(now)
    if isinstance(before, list) and isinstance(now, list):
        return len(before) == len(now) and all(map(same_setting, before, now))
    if isinstance(before, dict) and isinstance(now, dict):
        return before.keys() == now.keys() and all(same_setting(before[key], now[key]) for key in before)
    return before == now


def save_hydra_record(folder: str | Path, cfg: DictConfig, hydra_cfg: DictConfig) -> None:
    """Write what Hydra's own ``.hydra/`` folder holds into ``folder``: ``config.yaml`` (``cfg`` as composed,
    interpolations left as written), ``hydra.yaml`` (``hydra_cfg``, Hydra's node) and ``overrides.yaml`` (the
    command line's task overrides). ``conf/train.yaml`` sets ``hydra.output_subdir: null`` and train.py calls this
    once it holds the run folder's lock and has checked the folder's run, so that a refused command never
    overwrites the record of a run that is training, or finished, there."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "config.yaml", OmegaConf.to_yaml(cfg))
    atomic_write(folder / "hydra.yaml", OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})))
    atomic_write(folder / "overrides.yaml", OmegaConf.to_yaml(hydra_cfg.overrides.task))


class SweepJobError(CompactHydraException):
    """One failed job of a sweep (``train.py -m``), raised so that Hydra records it as failed and runs the
    other jobs; at the end of the sweep Hydra prints the first one's message alone, without a traceback."""


def override_keys(overrides) -> list[str]:
    """The dotted keys, or config groups (``attention``, ``+experiment``'s ``experiment``), that command-line
    ``key=value`` overrides set; ``+``/``++``/``~`` prefixes dropped."""
    return [o.key_or_group for o in _PARSER.parse_overrides(list(overrides))]


def save_config(cfg: DictConfig, path: str | Path) -> None:
    """Write ``cfg`` as YAML, atomically, when ``path``'s folder exists (Hydra's ``.hydra/`` of a run)."""
    if Path(path).parent.is_dir():
        atomic_write(path, OmegaConf.to_yaml(cfg))


def to_plain(cfg) -> dict:
    """A config as plain, resolved containers (what a checkpoint stores; ``torch.load(weights_only=True)`` reads
    it back)."""
    return OmegaConf.to_container(cfg, resolve=True)


def from_plain(data: dict) -> DictConfig:
    """A config rebuilt from plain containers (a checkpoint's stored config)."""
    return OmegaConf.create(data)


def instantiate(node):
    """Hydra's ``instantiate`` of a ``_target_`` node (``_partial_: true`` gives a factory).

    Raises:
        hydra.errors.InstantiationException: for a target that cannot be imported or called with the node's keys.
    """
    return hydra_instantiate(node)


_PARSER = OverridesParser.create()


def _reads_back(override_text: str, value: str) -> bool:
    """Whether Hydra's parser reads ``override_text`` as the string ``value``."""
    try:
        return _PARSER.parse_overrides([override_text])[0].value() == value
    except Exception:  # noqa: BLE001 - the grammar's errors: it does not
        return False


def override(key: str, value: str | Path) -> str:
    """A ``key=value`` command-line override that Hydra reads back as the string ``value``: bare when Hydra's
    own parser reads it so, else single-quoted, with ``'`` and the backslashes before a quote or at the end
    escaped (a bare value is split or refused at ``=``, ``,``, spaces, brackets and non-ASCII letters, and typed
    when it reads as ``null``, ``true``, a number or ``inf``). ``${...}`` is still OmegaConf's interpolation."""
    text = str(value)
    if _reads_back(f"{key}={text}", text):
        return f"{key}={text}"
    escaped = re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text)
    return f"{key}='{escaped}'"


def _leaf_keys(node, prefix: str = "") -> list[str]:
    """Dotted keys of every setting (leaf) of a config node."""
    keys = []
    for key, value in node.items_ex(resolve=False) if isinstance(node, DictConfig) else ():
        name = f"{prefix}{key}"
        keys += _leaf_keys(value, f"{name}.") if isinstance(value, DictConfig) else [name]
    return keys


# nodes that the code reads with defaults for the keys a config leaves out (nmt.models.biases checks attention.bias,
# nmt.training.gold eval.gold): a +key there is read, so it is not refused
OPTIONAL_NODES = ("attention.bias", "eval.gold.")


def check_added_keys(cfg: DictConfig, overrides: list[str], groups) -> None:
    """Refuse a ``+key=value`` override that adds a setting: no configuration has it, so nothing reads it, and the
    run would go on with the value silently ignored (Hydra suggests ``+`` for a mistyped key). Config groups
    (``+experiment=...``) and ``hydra.*`` keys are left alone.

    Args:
        cfg: the composed config (with the added keys).
        overrides: the command line's overrides (``HydraConfig.get().overrides.task``).
        groups: the names of the config groups (``HydraConfig.get().runtime.choices``).
    Raises:
        ValueError: naming the override and the closest existing setting.
    """
    added = [o for o in OverridesParser.create().parse_overrides(list(overrides))
             if o.is_add() and not o.key_or_group.startswith(("hydra", *OPTIONAL_NODES))
             and o.key_or_group not in set(groups)]
    if not added:
        return
    known = [k for k in _leaf_keys(cfg) if k not in {o.key_or_group for o in added}]
    first = added[0]
    close = _closest(first.key_or_group, known)
    hint = f"; did you mean {' or '.join(close)}?" if close else "; --help lists the settings"
    raise ValueError(f"+{first.key_or_group}={first.value()} adds a setting that nothing reads: give an existing "
                     f"setting without '+'{hint}")


def _closest(key: str, known: list[str]) -> list[str]:
    """Up to 3 settings of ``known`` close to the dotted ``key``: by the whole key, and by its last name alone
    (``decoder.layers`` -> ``model.decoder_layers``)."""
    close = difflib.get_close_matches(key, known, n=6, cutoff=0.5)  # ranked below, the best 3 kept
    names = difflib.get_close_matches(key.rsplit(".", 1)[-1], [k.rsplit(".", 1)[-1] for k in known], n=3, cutoff=0.6)
    found = {*(k for k in known if k.rsplit(".", 1)[-1] in names), *close}
    def distance(k: str) -> tuple:  # the closest first: the whole key and its last name together (the shared
        # section prefix alone must not rank train.init beside train.max_minutes), then the name against the key
        # (decoder.layers ~ decoder_layers)
        whole = difflib.SequenceMatcher(None, key, k).ratio()
        last = difflib.SequenceMatcher(None, key.rsplit(".", 1)[-1], k.rsplit(".", 1)[-1]).ratio()
        name = difflib.SequenceMatcher(None, key.replace(".", "_"), k.rsplit(".", 1)[-1]).ratio()
        return -round((whole + last) / 2, 6), -name, k

    return sorted(found, key=distance)[:3]


def unknown_setting(config_name: str, argv: list[str]) -> str | None:
    """Before Hydra runs: the first ``key=value`` of the command line ``argv`` that names no setting of the config
    it composes (a mistyped key: Hydra's own message suggests ``+key=value``, which would add a setting that
    nothing reads), as a one-line message with the closest settings; None when every key exists, or when the
    command line is one this check leaves to Hydra (``--help`` and other flags, sweeps, ``+``/``~`` overrides,
    ``hydra.*`` keys, a key under a node that is not a mapping)."""
    if any(a.startswith("-") for a in argv):
        return None
    try:
        overrides = _PARSER.parse_overrides([a for a in argv if "=" in a]) if argv else []
    except Exception:  # noqa: BLE001 - the grammar's errors: refuse_unknown_settings explains them first
        return None
    if any(o.is_sweep_override() for o in overrides):
        return None  # every job composes its own config; each is checked by Hydra then
    groups = {p.name for p in Path(config_dir()).iterdir() if p.is_dir()}
    searched = any(o.key_or_group.startswith("hydra.searchpath") for o in overrides)  # choices from elsewhere too
    for o in [] if searched else overrides:  # a mistyped choice (attention=dott): Hydra's reply spans lines
        group, value = o.key_or_group.split("@")[0], o.value()
        choices = sorted(f.stem for f in (Path(config_dir()) / group).glob("*.yaml")) if group in groups else []
        if choices and isinstance(value, str) and value not in choices:
            close = difflib.get_close_matches(value, choices, n=2, cutoff=0.5)
            return (f"no {group} named {value}" + (f" (did you mean {' or '.join(close)}?)" if close else "")
                    + f"; the choices: {', '.join(choices)}")
    chosen = [a for a, o in zip([a for a in argv if "=" in a], overrides)
              if o.key_or_group.split("@")[0] in groups or o.is_add() or o.is_delete()]
    try:
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose(config_name, overrides=chosen)
    except Exception:  # noqa: BLE001 - a group or value Hydra itself will report
        return None
    absent = object()
    for o in overrides:
        key = o.key_or_group
        if key.split("@")[0] in groups or o.is_add() or o.is_delete() or key.startswith(("hydra", *OPTIONAL_NODES)):
            continue  # an optional node's key without '+': Hydra says to add the '+', which is then accepted
        parent = OmegaConf.select(cfg, key.rpartition(".")[0], default=absent) if "." in key else cfg
        if isinstance(parent, DictConfig) and key.rpartition(".")[2] not in list(parent.keys()):  # ??? ones too
            close = _closest(key, _leaf_keys(cfg))
            return (f"no setting {key}" + (f" (did you mean {' or '.join(close)}?)" if close else "")
                    + "; --help lists every setting")
    return None


def refuse_unknown_settings(config_name: str, prog: str) -> None:
    """Before Hydra runs ``prog``: end the command with ``prog: error: no setting ...`` (exit status 1) when its
    command line names a setting that ``config_name`` does not have (:func:`unknown_setting`), or has an argument
    that Hydra's grammar cannot read (:func:`nmt.commandline.unreadable_argument`)."""
    argv = sys.argv[1:]
    if message := unreadable_argument(argv, _PARSER.parse_override) or unknown_setting(config_name, argv):
        sys.exit(f"{prog}: error: {message}")
