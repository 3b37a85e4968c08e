"""One command-line style for every tool: ``key=value`` settings, as ``train.py`` and ``translate.py`` take them.

:class:`SettingsParser` is an :class:`argparse.ArgumentParser` whose optional arguments are written
``key=value`` on the command line (``gold_format=naacl``, ``one_based=true``, ``index=[0,3,7]``) and listed that way
by ``--help``. The tools declare their settings with argparse as usual (``--gold-format``, ``action="store_true"``,
``nargs="+"``); this module only translates the command line before argparse reads it, and argparse's messages
back:

- ``key=value`` where ``key`` is a declared setting (dashes or underscores, a leading ``+`` ignored) becomes the
  option; a switch takes ``true``/``false``; a list takes ``[a,b,c]`` (or one value; an item in quotes keeps
  its commas: ``labels='["plateau, 90 min",decay]'``); ``null`` leaves (or puts back) the default; the
  last value of a key wins; the settings may come before, between or after the positional arguments;
- any other argument is a positional one (a run folder, a file); one that looks like ``name=...`` with ``name``
  not a setting is refused with the closest settings, since it is almost always a mistyped key (write a file
  named so as ``./name=...``);
- ``--the-old-flag value`` still works, with a warning that names its ``key=value`` spelling.

For the two Hydra apps (``nmt-train``, ``nmt-translate``), :func:`unreadable_argument` explains, before Hydra runs,
an argument that Hydra's override grammar cannot read: a value with ``(``, ``)``, ``=`` or a quote in it (a file named
``news(1).de``), which Hydra stops at with a parser message (``mismatched input '(' expecting <EOF>``), or an
argument without its key (a run folder on its own).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import sys
import textwrap
from collections.abc import Callable, Sequence

_KEY = re.compile(r"^\+?([A-Za-z][A-Za-z0-9_-]*)=(.*)$", re.DOTALL)
_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")
TRUE, FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def prog_name(module: str) -> str:
    """The program name to show: the installed command (``nmt-aer``) when it is what ran, else ``python -m
    nmt.aer`` for ``module="nmt.aer"``."""
    command = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    installed = module.replace(".", "-")
    return installed if command == installed else f"python -m {module}"


def key_of(action: argparse.Action) -> str:
    """The ``key`` of an optional argument: ``--gold-format`` -> ``gold_format``."""
    return action.option_strings[-1].lstrip("-").replace("-", "_")


def _list_items(value: str) -> list[str]:
    """``[a,b, c]`` -> ``["a", "b", "c"]``; ``a`` -> ``["a"]``; ``[]`` -> ``[]``. An item in quotes keeps its
    commas and spaces: ``["plateau, 90 min",'b']`` -> ``["plateau, 90 min", "b"]``.

    Raises:
        ValueError: a quote that is not closed.
    """
    value = value.strip()
    if not (value.startswith("[") and value.endswith("]")):
        return [value]
    items, current, quote, quoted = [], "", None, False
    for char in value[1:-1] + ",":
        if quote:
            if char == quote:
                quote = None
            else:
                current += char
        elif char in "\"'" and not current.strip():
            quote, quoted, current = char, True, ""
        elif char == ",":
            if quoted or current.strip():
                items.append(current if quoted else current.strip())
            current, quoted = "", False
        elif not (quoted and char.isspace()):  # spaces after a closing quote are dropped
            current += char
    if quote:
        raise ValueError(f"{value}: a quote ({quote}) is not closed")
    return items


class SettingsParser(argparse.ArgumentParser):
    """An argument parser for ``key=value`` command lines (see the module docstring); ``--help`` lists the
    settings as ``key=VALUE``. Usage errors print the usage and ``error: ...`` with ``key=`` spellings, and exit 2
    as argparse does."""

    def __init__(self, module: str, description: str, epilog: str | None = None) -> None:
        super().__init__(prog=prog_name(module), description=description, epilog=epilog,
                         formatter_class=argparse.RawDescriptionHelpFormatter)

    def _settings(self) -> dict[str, argparse.Action]:
        """``{key: action}`` of the optional arguments (help aside)."""
        return {key_of(a): a for a in self._actions if a.option_strings and not isinstance(a, argparse._HelpAction)}

    def translate(self, argv: Sequence[str]) -> list[str]:
        """The ``key=value`` command line ``argv`` as argparse's flags: the positional arguments (and older
        ``--flag`` ones) in their order, then the last value of each setting.

        Raises:
            SystemExit: (2, via :meth:`error`) an unknown key, a switch given neither true nor false, a list
                with a quote that is not closed.
        """
        settings, out, flags, positional_only = self._settings(), [], {}, False
        for arg in argv:
            match = None if positional_only else _KEY.match(arg)
            if arg == "--":
                positional_only = True
                out.append(arg)
            elif arg.startswith("-") and not positional_only and arg not in ("-", "-h", "--help"):
                out.append(self._old_flag(arg, settings))
            elif match and match.group(1).replace("-", "_") in settings:
                key = match.group(1).replace("-", "_")
                flags.pop(key, None)  # the last value of a key wins; null goes back to the default
                flags[key] = self._flags(settings[key], match.group(2))
            elif match:
                self._unknown_key(match.group(1), settings)
            else:
                out.append(arg)
        # the settings go after the positional arguments (before a "--"): a list setting written first
        # (labels=[a,b] RUN RUN) must not take the positional arguments that follow it as more items
        end = out.index("--") if "--" in out else len(out)
        return out[:end] + [flag for key_flags in flags.values() for flag in key_flags] + out[end:]

    def _flags(self, action: argparse.Action, value: str) -> list[str]:
        """One ``key=value`` as the flags argparse reads for ``action``."""
        flag = action.option_strings[-1]
        if value.strip() == "null" and not action.required:
            return []
        if action.nargs == 0:  # a switch (store_true)
            if value.strip().lower() not in TRUE + FALSE:
                self.error(f"{key_of(action)}={value}: give true or false")
            return [flag] if value.strip().lower() in TRUE else []
        if action.nargs in ("+", "*") or isinstance(action.nargs, int):
            try:
                items = _list_items(value)
            except ValueError as err:
                self.error(f"{key_of(action)}={err}")
            if not items and action.nargs == "+":
                self.error(f"{key_of(action)}={value}: give at least one value, e.g. {key_of(action)}=[0,3]")
            return [flag, *items] if items or action.nargs == "*" else []
        return [f"{flag}={value}"]

    def _unknown_key(self, key: str, settings: dict[str, argparse.Action]) -> None:
        """Refuse ``key=...`` that names no setting, with the closest ones (``threads=``, which the commands that
        run a model take, with what it is for)."""
        if key.replace("-", "_") == "threads":
            self.error(f"unknown setting threads=...; {self.prog} runs no model, so it has no CPU threads to set "
                       "(threads= is a setting of nmt-train, nmt-translate, nmt-align and nmt-report)")
        close = difflib.get_close_matches(key.replace("-", "_"), list(settings), n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        self.error(f"unknown setting {key}=...; {hint}settings: {', '.join(settings) or 'none'} "
                   f"(a file whose name has '=' in it: write it as ./{key}=...)")

    def _old_flag(self, arg: str, settings: dict[str, argparse.Action]) -> str:
        """``--flag`` (or ``--flag=value``), the older spelling of ``flag=...``: a one-line warning, and the flag as
        argparse declares it (``--one_based`` -> ``--one-based``); anything else unchanged, for argparse to judge."""
        flag, sep, value = arg.partition("=")
        name = flag[2:].replace("-", "_") if arg.startswith("--") else ""
        if name not in settings:
            return arg
        print(f"{self.prog}: warning: {flag} is the older spelling; write {name}=...", file=sys.stderr)
        return settings[name].option_strings[-1] + sep + value

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):
        return super().parse_args(self.translate(sys.argv[1:] if args is None else args), namespace)

    def error(self, message: str):
        if not message.startswith("unrecognized arguments"):  # those are shown as the user wrote them
            message = _FLAG.sub(lambda m: m.group(1).replace("-", "_") + "=", message)
        message = message.replace("argument ", "setting ", 1) if message.startswith("argument ") else message
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n({self.prog} --help lists the settings)\n")

    def format_usage(self) -> str:
        parts = [self.prog]
        for action in self._actions:
            if not action.option_strings:
                parts.append(f"{action.metavar or action.dest.upper()}" + (" ..." if action.nargs in ("+", "*")
                                                                              else ""))
            elif action.required:
                parts.append(f"{key_of(action)}={self._value_text(action)}")
        return "usage: " + " ".join(parts) + " [key=value ...]\n"

    def _value_text(self, action: argparse.Action) -> str:
        """What a setting's value looks like: ``true|false``, ``a|b``, ``[N,...]`` or ``VALUE``."""
        if action.nargs == 0:
            return "true|false"
        one = "|".join(map(str, action.choices)) if action.choices else (action.metavar or key_of(action).upper())
        return f"[{one},...]" if action.nargs in ("+", "*") or isinstance(action.nargs, int) else one

    def format_help(self) -> str:
        lines = [self.format_usage(), (self.description or "").strip(), ""]
        positional = [a for a in self._actions if not a.option_strings]
        if positional:
            lines.append("arguments:")
            lines += self._entries((a.metavar or a.dest.upper(), a.help or "") for a in positional)
        lines.append("settings (key=value; a setting left out keeps its default):")
        entries = []
        for action in self._settings().values():
            text = action.help or ""
            note = " (required)" if action.required else (
                f" (default: {action.default})" if action.default not in (None, False, argparse.SUPPRESS)
                and "default" not in text else "")
            entries.append((f"{key_of(action)}={self._value_text(action)}", text + note))
        lines += self._entries(entries)
        lines += ["  -h, --help", "        show this help and exit"]
        if self.epilog:
            lines += ["", self.epilog.strip()]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _entries(entries) -> list[str]:
        """Help entries: the name on its own line, the text indented under it, wrapped at 100 characters."""
        out = []
        for name, text in entries:
            text = _FLAG.sub(lambda m: m.group(1).replace("-", "_") + "=", text)
            out.append(f"  {name}")
            out += textwrap.wrap(text, 100, initial_indent="        ", subsequent_indent="        ") or []
        return out


def unreadable_argument(argv: Sequence[str], parse: Callable[[str], object]) -> str | None:
    """The first argument of ``argv`` that Hydra's grammar cannot read, as a message that says how to write it;
    None when Hydra can read every one, or when the command line has flags (``--help``, ``-m``: left to Hydra).
    ``parse``: Hydra's parser of one override, raising on a grammar error (``nmt.settings``, the module that
    imports Hydra, passes it in).

    An argument without ``=`` (other than a ``~key`` deletion) is a value without its key; a ``key=value`` that does
    not parse has a value that needs quotes: ``"input='news(1).de'"`` (the outer quotes for the shell, the inner ones
    for Hydra, which reads ``\\'`` as a quote inside them).
    """
    if any(arg.startswith("-") for arg in argv):
        return None
    for arg in argv:
        if "=" not in arg:
            if arg.startswith("~"):
                continue
            return (f"{arg!r} is not a setting: every argument is key=value, so give it its key (nmt-translate: "
                    f"checkpoint={arg} for a run folder or a checkpoint, input={arg} for a file to translate); --help "
                    "lists the settings")
        try:
            parse(arg)
        except Exception:  # noqa: BLE001 - any grammar error: the advice is the same
            key, _, value = arg.partition("=")
            hydra = key + "='" + value.replace("'", "\\'") + "'"  # Hydra's quoted string, \' for a quote in it
            quoted = '"' + re.sub(r'([\\"$`])', r"\\\1", hydra) + '"'  # in the shell's double quotes
            return (f"cannot read {arg!r}: a value with characters such as ( ) = , [ ] {{ }} or quotes in it must be "
                    f"quoted for Hydra, inside the shell's quotes: {quoted}")
    return None


def shortcut_conflict(overrides: Sequence[str], shortcut: str, full: str) -> str | None:
    """A message when the command line's ``overrides`` give both ``shortcut`` and the ``full`` key it stands for
    (``beam_size=1 decode.beam_size=7``) with other values, where the shortcut would silently win; else None."""
    given = {}
    for override in overrides:
        key, sep, value = override.lstrip("+").partition("=")
        if sep and key in (shortcut, full):
            given[key] = value
    if len(given) == 2 and given[shortcut] != given[full]:
        return (f"{shortcut}={given[shortcut]} and {full}={given[full]} disagree: {shortcut} is the shortcut for "
                f"{full}, so give one of them")
    return None


@contextlib.contextmanager
def quiet_when_the_reader_stops():
    """Around a command's work: when what reads its output stops early (``nmt-train --help | head``), end with
    status 1 and no traceback, the recipe of Python's ``signal`` documentation (stdout is pointed at ``/dev/null``
    so that the flush at exit does not fail again); a shell tool stopped so ends with a non-zero status too (141,
    killed by SIGPIPE). Whether the reader stops before the output is all written depends on timing and length."""
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
