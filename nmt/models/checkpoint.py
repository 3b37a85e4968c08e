"""Checkpoint files: write them atomically, read them safely, rebuild model and tokenizers from them.

A checkpoint is one file holding only tensors and plain Python data (loadable with
``torch.load(path, weights_only=True)``): model weights, optimizer/scheduler state, step, epoch, RNG states,
the resolved config, and the bytes of both SentencePiece models, so it translates on its own. The
architecture is always rebuilt from the config stored in it, never from the current command line.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import torch

from nmt.data.textio import atomic_write
from nmt.data.tokenizer import Tokenizer
from nmt.models import attention, multihead, positional
from nmt.models.biases import BIAS_KEYS
from nmt.models.build import build_model
from nmt.models.run_folders import folder_hint, not_found_hint
from nmt.models.seq2seq import Seq2Seq
from nmt.settings import from_plain, to_plain

ATTENTION_MODULES = (attention, positional, multihead)  # where a checkpoint's attention._target_ may point


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and why."""


def check_attention_node(node, path: str | Path) -> None:
    """Refuse a stored ``attention`` config that would make ``instantiate`` run anything but an attention model.

    ``build_model`` instantiates ``cfg.attention``; from a checkpoint that node is data written by someone else,
    so its ``_target_`` must name an :class:`nmt.attention.Attention` subclass and every other value must be a
    plain scalar (no ``_args_``, no nested nodes that Hydra would instantiate too), but for ``bias``, a mapping
    of the structural biases' keys (:data:`nmt.models.biases.BIAS_KEYS`) to plain scalars.

    Raises:
        CheckpointError: naming the file and the offending entry.
    """
    if not isinstance(node, dict):
        raise CheckpointError(f"{path}: its config has no attention node (got {type(node).__name__})")
    target = node.get("_target_")
    module, _, name = str(target).rpartition(".")
    home = {m.__name__: m for m in ATTENTION_MODULES}.get(module)
    cls = getattr(home, name, None) if home is not None else None
    if not (isinstance(cls, type) and issubclass(cls, attention.Attention) and cls is not attention.Attention):
        raise CheckpointError(f"{path}: refused: its config names attention._target_={target!r}, which is not an "
                              f"nmt.attention model; only load checkpoints written by nmt")
    plain = (bool, int, float, str)
    for key, value in node.items():
        if key == "bias" and isinstance(value, dict):  # the structural biases: known keys, plain values
            value = None if set(value) <= set(BIAS_KEYS) and all(v is None or isinstance(v, plain)
                                                                 for v in value.values()) else value
        if (not isinstance(key, str) or (key.startswith("_") and key not in ("_target_", "_partial_"))
                or not (value is None or isinstance(value, plain))):
            raise CheckpointError(f"{path}: refused: its config holds attention.{key}={value!r}, which is not a "
                                  f"plain setting of an attention model; only load checkpoints written by nmt")


def check_no_interpolation(node, path: str | Path, where: str = "config") -> None:
    """Refuse a stored config with an OmegaConf interpolation (``${...}``) anywhere in it.

    :func:`save` stores configs resolved, so a checkpoint written by nmt has none; in one written by someone
    else, ``"${x}"`` as an attention setting would make Hydra's ``instantiate`` build the node ``x``, whatever
    ``_target_`` it names, and a resolver (``${oc.env:...}``) would read the environment.

    Raises:
        CheckpointError: naming the file and the dotted key of the first interpolation.
    """
    if isinstance(node, dict):
        for key, value in node.items():
            check_no_interpolation(key, path, where)
            check_no_interpolation(value, path, f"{where}.{key}")
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            check_no_interpolation(value, path, f"{where}[{i}]")
    elif isinstance(node, str) and "${" in node:
        raise CheckpointError(f"{path}: refused: {where} holds the interpolation {node!r}; nmt stores configs "
                              f"resolved, so only load checkpoints written by nmt")


def bytes_tensor(data: bytes) -> torch.Tensor:
    """Bytes as a uint8 tensor ``[len(data)]`` (safe to store under ``weights_only`` loading)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def save(path: str | Path, model: Seq2Seq, cfg, src_tok: Tokenizer, tgt_tok: Tokenizer,
         weights: dict | None = None, **state) -> None:
    """Write a checkpoint atomically (temporary file, fsync, rename); ``state`` adds optimizer, step, ...

    ``weights``: the state dict stored as ``model`` (what loads for translation) instead of ``model.state_dict()``,
    e.g. the moving average of the weights (:mod:`nmt.training.ema`). Everything stored must be tensors or plain data;
    ``cfg`` is resolved to plain containers here.

    Raises:
        nmt.data.textio.WriteError: as :func:`write_payload`.
    """
    payload = {
        "model": model.state_dict() if weights is None else weights,
        "config": to_plain(cfg),
        "spm": {"src": bytes_tensor(src_tok.model_proto), "tgt": bytes_tensor(tgt_tok.model_proto),
                **{f"{side}_vocab": torch.tensor(tok.vocab, dtype=torch.long)
                   for side, tok in (("src", src_tok), ("tgt", tgt_tok)) if tok.vocab is not None}},
        **state,
    }
    write_payload(path, payload)


def write_payload(path: str | Path, payload: dict) -> None:
    """``torch.save`` a checkpoint dict atomically (temporary file, fsync, rename): never half-written.

    Raises:
        nmt.data.textio.WriteError: naming the file, when it cannot be written (a full disk, a quota, a read-only
            file system, no permission); the checkpoint that was under that name is left intact.
    """
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write(path, buffer.getvalue())


def existing_file(path: str | Path) -> Path:
    """``path`` as a :class:`Path` when it is a file, without reading it (what :func:`load_payload` checks first).

    Raises:
        FileNotFoundError: naming the path, and the run folder or checkpoint it is like (a typo), else the newest
            run folder beside it (:func:`nmt.models.run_folders.not_found_hint`).
        CheckpointError: for a folder (a run folder names the file to use).
    """
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file{folder_hint(path)}")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}{not_found_hint(path)}")
    return path


def load_payload(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint with ``weights_only=True`` (no code from the file runs).

    Raises:
        FileNotFoundError: naming the path.
        CheckpointError: for a folder (a run folder names the file to use), a file that is not a torch file at
            all, one that is truncated, or one that holds pickled objects.
    """
    path = existing_file(path)
    with open(path, "rb") as handle:
        head = handle.read(4)
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):  # torch.save's zip, or a legacy pickle
        raise CheckpointError(f"{path} is not a checkpoint: it is not a file written by torch.save (it starts with "
                              f"{head!r}); pass a .pt file from a run's checkpoints/ folder")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"{path} was refused: it contains pickled Python objects, not only tensors and plain data, and "
            f"loading it could run code. Only load checkpoints written by nmt. ({str(err).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError) as err:
        # torch's reason, its first sentence: without the advice that follows it
        first = (str(err).strip().splitlines() or [type(err).__name__])[0].split(". ")[0].rstrip(".")[:200]
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or not a torch file: {first}); copy "
                              "it again, or use another checkpoint of the run (checkpoints/last.pt, step_N.pt)"
                              ) from None
    missing = {"model", "config", "spm"} - set(payload) if isinstance(payload, dict) else {"model"}
    if missing:
        raise CheckpointError(f"{path} is not an nmt checkpoint: it lacks {sorted(missing)}")
    attention_node = payload["config"].get("attention") if isinstance(payload["config"], dict) else None
    if isinstance(attention_node, dict) and isinstance(attention_node.get("_target_"), str):
        module, _, name = attention_node["_target_"].rpartition(".")
        if module in MOVED_MODULES:  # a checkpoint written before the package was laid out by stage
            attention_node["_target_"] = f"{MOVED_MODULES[module]}.{name}"
    for (section, key), value in ADDED_SETTINGS.items():  # checkpoints written before a setting existed
        if isinstance(payload["config"], dict) and isinstance(payload["config"].get(section), dict):
            payload["config"][section].setdefault(key, value)
    return payload


# Modules that a stored ``_target_`` may name under its former path: the score models lived in nmt.attention.
MOVED_MODULES = {"nmt.attention": "nmt.models.attention"}

# Settings added after checkpoints were first written, with the value that reproduces the older models: a
# checkpoint without them gets them on loading, so resuming or averaging it compares like with like.
ADDED_SETTINGS = {("decoder", "input_feeding"): True,
                  ("model", "source_word_dropout"): 0.0, ("model", "target_word_dropout"): 0.0,
                  ("decode", "coverage_penalty"): 0.0, ("decode", "mbr"): None, ("decode", "mbr_temperature"): 1.0}


def run_model(path: str | Path) -> Path:
    """The checkpoint file that ``path`` names: ``path`` itself, or for a run folder (one with ``checkpoints/``)
    the model its final evaluation scored (``eval/test.scores.json`` or ``eval/valid.scores.json`` record it:
    ``best.pt`` or ``averaged.pt``) unless ``best.pt`` is newer than that file (the run was resumed and has not
    finished again), else its ``checkpoints/best.pt``, so ``checkpoint=RUN`` translates with the model behind the
    run's reported BLEU. A run folder's ``checkpoints/`` folder itself stands for its run folder.

    Raises:
        CheckpointError: for a run folder that holds neither (training still running or stopped early: it names
            ``last.pt`` when that exists).
    """
    path = Path(path)
    if path.name == "checkpoints" and path.is_dir() and not (path / "checkpoints").is_dir():
        path = path.parent  # (what a shell's completion gives for RUN/)
    folder = path / "checkpoints"
    if not (path.is_dir() and folder.is_dir()):
        return path  # a file, or a path that load() will report
    for split in ("test", "valid"):
        try:
            recorded = json.loads((path / "eval" / f"{split}.scores.json").read_text(encoding="utf-8"))["checkpoint"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        chosen = folder / Path(str(recorded)).name  # by name: the run folder may have moved since
        best = folder / "best.pt"
        if chosen.is_file() and not (best.is_file() and best.stat().st_mtime > chosen.stat().st_mtime):
            return chosen  # (a best.pt newer than the record: the run was resumed and has not finished again)
    if (folder / "best.pt").is_file():
        return folder / "best.pt"
    last = (f"; its training state {folder / 'last.pt'} translates too: give checkpoint={folder / 'last.pt'}"
            if (folder / "last.pt").is_file() else "")
    raise CheckpointError(f"{path} is a run folder without a finished model (no {folder / 'best.pt'}){last}")


def load(path: str | Path, map_location: str | torch.device = "cpu"):
    """Rebuild model and tokenizers from a checkpoint.

    Returns:
        ``(model, cfg, src_tok, tgt_tok, payload)``; the model is in eval mode on ``map_location``.

    Raises:
        FileNotFoundError: no such file (see :func:`load_payload`).
        CheckpointError: a file that is not a usable checkpoint (see :func:`load_payload`), also when the stored
            SentencePiece models do not match the model's vocabulary sizes, when the stored architecture cannot
            be built, and when its attention node names anything but an attention model (see
            :func:`check_attention_node`).
    """
    payload = load_payload(path, map_location)
    if not isinstance(payload.get("config"), dict):
        raise CheckpointError(f"{path}: it holds no config (got {type(payload.get('config')).__name__}); only load "
                              f"checkpoints written by nmt")
    check_no_interpolation(payload["config"], path)  # before OmegaConf or Hydra see it
    check_attention_node(payload["config"].get("attention"), path)
    cfg = from_plain(payload["config"])
    try:
        src_tok, tgt_tok = (Tokenizer(payload["spm"][side].cpu().numpy().tobytes(), name=f"{path}:spm/{side}",
                                      vocab=vocab.tolist() if (vocab := payload["spm"].get(f"{side}_vocab")) is not None
                                      else None) for side in ("src", "tgt"))
    except (RuntimeError, ValueError, TypeError, AttributeError, KeyError) as err:
        raise CheckpointError(f"{path}: the sentencepiece model stored in it is unusable: {err!r}") from None
    try:
        model = build_model(cfg.model, cfg.decoder, cfg.attention, len(src_tok), len(tgt_tok))
    except Exception as err:  # noqa: BLE001 - Hydra's, OmegaConf's and the modules' own errors alike
        raise CheckpointError(f"{path}: the architecture in its config cannot be built: {err}") from None
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, TypeError, AttributeError) as err:
        raise CheckpointError(f"{path}: weights do not fit the architecture in its own config or its "
                              f"sentencepiece vocabularies ({len(src_tok)}, {len(tgt_tok)}): {err}") from None
    return model.to(map_location).eval(), cfg, src_tok, tgt_tok, payload
