"""``train(cfg, run_dir)``: the training run from start to end: settings checks, corpus, subwords, model (or
the checkpoint it resumes), the loop (:mod:`nmt.training.loop`), then the final evaluation
(:mod:`nmt.training.final`).

The run directory follows design.md §2: ``spm/``, ``checkpoints/{best,last}.pt``, ``metrics.jsonl``,
``eval/{split}.*`` (the configured decoder, beam search by default), ``eval/greedy/{split}.*`` and ``plots/``; with
``train.agreement`` also ``reverse/checkpoints/best.pt`` (:mod:`nmt.training.reverse`), with
``train.guided_alignment`` the training text and its word links in ``guided/`` (:mod:`nmt.training.guided_links`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import sentencepiece as spm
import torch

from nmt.data.batches import encode_pairs
from nmt.data.corpus import Parallel, load_splits
from nmt.data.store import cached_store
from nmt.data.stream import TrainStream, corpus_settings, train_stream
from nmt.models.allocator import reuse_freed_memory
from nmt.models.build import build_model
from nmt.models.device import pick_device, set_threads
from nmt.models.precision import Precision, bound_kernel_cache, check_precision
from nmt.settings import save_config
from nmt.training.checks import check_settings
from nmt.training.distributed import Distributed
from nmt.training.final import final_evaluation
from nmt.training.guided_links import guided_objective, prepare_links
from nmt.training.init import init_from
from nmt.training.loop import train_loop
from nmt.training.rdrop import rdrop_objective
from nmt.training.resume import resume_from
from nmt.training.reverse import REVERSE_DIR, joint_training
from nmt.training.schedule import make_optimizer
from nmt.training.state import Progress, moving_average, restore
from nmt.training.subwords import prepare_tokenizers

log = logging.getLogger(__name__)


def train(cfg, run_dir: str | Path, overrides: list[str] | tuple = (), dist: Distributed | None = None,
          device: torch.device | None = None) -> dict:
    """Train, validate and evaluate one model as configured; return the final metrics.

    Resumes from ``cfg.train.resume`` (a checkpoint path), or from ``run_dir/checkpoints/last.pt`` when the
    run directory already holds one; the model, tokenizers and architecture then come from the checkpoint.
    ``overrides``: the command line's ``key=value`` overrides, repeated in the resume command printed after
    an interruption. ``dist``: this process's rank under torchrun (:func:`nmt.training.distributed.init_distributed`,
    which also picks ``device``); rank 0 alone writes the run folder, the others wait for its final evaluation
    (:meth:`~nmt.training.distributed.Distributed.end_together`) and return ``rank`` in their results.

    Returns:
        a dict with ``valid_bleu`` (best greedy validation BLEU), per-split test/valid BLEU and chrF for
        greedy and the configured decoder, ``steps``, ``train_minutes``, ``run_dir`` and ``stopped`` (why
        training stopped). After SIGINT/SIGTERM there is no final evaluation and ``interrupted`` is True.

    Raises (each with a message that names the setting or file; ``train.py`` prints it in one line):
        ValueError: a setting out of range (:func:`nmt.training.checks.check_settings`), or
            SentencePiece models of an earlier attempt in ``run_dir`` trained with other settings.
        nmt.data.DataError: a corpus or ``data.extra_train`` entry that cannot be read as configured.
        nmt.checkpoint.CheckpointError: a checkpoint to resume from that is unreadable or of another model.
        FileNotFoundError, nmt.data.textio.TextFileError: a corpus file that is missing or not UTF-8 text.
        FloatingPointError: training diverged (a nan or inf gradient, see :func:`train_step`); names the step.
    """
    run_dir, dist = Path(run_dir), dist or Distributed()
    check_settings(cfg)  # before the corpus and tokenizers: a bad setting fails at once
    torch.manual_seed(cfg.seed)
    set_threads(cfg.get("threads"))
    device = device or pick_device(cfg.device)
    precision = training_precision(cfg.train, device, dist)
    memory = training_memory(precision, device)
    if not dist.is_main:  # rank 0 trains the subwords or copies the checkpoint's files first
        dist.barrier("waiting for rank 0 to prepare the run folder")
    cfg, splits, model, toks, payload, init_reverse = start_or_resume(cfg, run_dir, device, overrides,
                                                                      write=dist.is_main)
    if dist.is_main:  # with train.guided_alignment: the training text and its word links, in RUN/guided/
        prepare_links(cfg.train, splits["train"], run_dir)
        dist.barrier("waiting for the other ranks to start")
    if dist.rank:  # the same initial weights (DDP copies rank 0's anyway), other dropout masks on each rank
        torch.manual_seed(cfg.seed + 1_000_003 * dist.rank)
    train_pairs, epoch_pairs = training_pairs(cfg, splits["train"], toks)
    valid_pairs = encode_pairs(splits["valid"], *toks)
    agreement, trained = joint_training(cfg, model, toks, payload, device, init_reverse)  # both directions
    optimizer, scheduler = make_optimizer(trained, cfg)
    ema = moving_average(cfg.train, model, payload)
    log_start(cfg, model, device, len(train_pairs), run_dir, ema is not None, dist)
    log.info("memory: %s", memory)
    progress = Progress(world_size=dist.world_size) if payload is None else \
        restore(payload, optimizer, scheduler, cfg.train, dist)
    forward = data_parallel(trained, dist, device)
    stop = train_loop(cfg, model, optimizer, scheduler, epoch_pairs, valid_pairs, splits["valid"], toks, run_dir,
                      device, progress, overrides, ema, dist, forward, Precision(precision, device), agreement,
                      guided_objective(cfg.train, run_dir, toks) or rdrop_objective(cfg.train))
    results = {"valid_bleu": progress.best_bleu, "steps": progress.step,
               "train_minutes": progress.train_seconds / 60, "run_dir": str(run_dir), "stopped": stop}
    if stop.startswith("interrupted"):
        return {**results, "interrupted": True}
    if dist.is_main:  # the final evaluation is rank 0's; the other ranks wait for it (end_together)
        results.update(final_evaluation(cfg, splits, run_dir, device, progress.best_bleu))
        log_done(cfg, results, run_dir, agreement)
    dist.end_together()
    return results if dist.is_main else {**results, "rank": dist.rank}


def training_memory(precision: str, device: torch.device) -> str:
    """What a training process does to its memory before its first step, as a phrase for the log: glibc's
    malloc as ``NMT_MALLOC`` asks (:func:`nmt.models.allocator.reuse_freed_memory`) and, for bf16 on a CPU,
    oneDNN's kernel cache bounded (:func:`nmt.models.precision.bound_kernel_cache`); call it before the first
    bf16 product. The benchmarks that train call it too, so they measure what ``train.py`` does.

    Raises:
        ValueError: a bad ``NMT_MALLOC`` or ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``.
    """
    return f"{reuse_freed_memory()}; {bound_kernel_cache(precision, device)}"


def training_precision(t, device, dist: Distributed) -> str:
    """``train.precision`` (``t`` is ``cfg.train``) resolved for ``device``: ``fp32``, ``bf16`` or ``fp16``
    (:func:`nmt.models.precision.check_precision`, whose ValueError it raises); the precision, and what ``auto``
    chose, is logged."""
    setting = t.get("precision") or "fp32"
    precision = check_precision(setting, device)
    if dist.is_main:
        log.info("train.precision=%s: training in %s on %s", setting, precision, device)
    return precision


def log_done(cfg, results: dict, run_dir: Path, agreement=None) -> None:
    """Log the final figures and where they are; with ``train.agreement`` also the reverse model's checkpoint and
    the ``nmt.align`` command that symmetrizes the two directions."""
    log.info("final: %s", json.dumps(results))
    bleu = [f"{results[k]:.2f} {k.split('_')[1]}" for k in results if k.startswith("test_") and k.endswith("_bleu")]
    split = "test" if bleu else "valid"  # a corpus without a test split: valid's files
    files = f"{split}.hyp, {split}.scores.json, the alignment matrices {split}.alignments.npz with their tokens in " \
            f"{split}.alignments.jsonl, word links {split}.align"
    log.info("done: test BLEU %s in %s (checkpoints/; eval/: %s%s)", " / ".join(bleu) or "-", run_dir.resolve(),
             files, "; plots/" if cfg.eval.plots and bleu else "")
    if agreement is not None:
        log.info("the reverse model (%s -> %s) is %s; symmetrize the two directions' attention with:\n  %s",
                 cfg.data.tgt_lang, cfg.data.src_lang, (run_dir / REVERSE_DIR / "checkpoints" / "best.pt").resolve(),
                 agreement.align_command(cfg, run_dir))
        if aer_command := agreement.aer_command(cfg, run_dir):
            log.info("and score the links against eval.gold's (the symmetrized_aer of best.pt's step) with:\n  %s",
                     aer_command)


def log_start(cfg, model, device, pairs: int, run_dir: Path, averaging: bool, dist: Distributed) -> None:
    """Log the ranks (after the settings checks, so that a refused run leaves an empty log, whose folder train.py
    removes), the model, the device, the corpus size and the run folder (and the moving average when on)."""
    if dist.active:
        log.info("rank %d of %d: %s on %s", dist.rank, dist.world_size, "nccl" if device.type == "cuda" else "gloo",
                 device)
    log.info("model: %.2fM parameters, attention=%s, decoder=%s, device=%s; %d training pairs; run folder %s",
             sum(p.numel() for p in model.parameters()) / 1e6, type(model.decoder.attention).__name__,
             cfg.decoder.style + ("" if model.decoder.input_feeding else " without input feeding"), device,
             pairs, run_dir.resolve())
    if averaging:
        log.info("moving average of the weights (train.ema_decay=%s): validation and the model in every checkpoint "
                 "are the average; best.pt and last.pt also keep the raw weights to resume from", cfg.train.ema_decay)


def data_parallel(model, dist: Distributed, device):
    """``model`` wrapped in DistributedDataParallel under several ranks (gradients all-reduced in backward; its
    parameters are rank 0's from here), else ``model`` itself."""
    if not dist.active:
        return model
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                     else None)


def start_or_resume(cfg, run_dir: Path, device, overrides=(), write: bool = True):
    """The config, splits, model, tokenizers and checkpoint payload of the run: resumed from ``train.resume``
    (a checkpoint, or a run folder with ``checkpoints/last.pt``) or from ``run_dir/checkpoints/last.pt`` when it
    exists (:func:`nmt.training.resume.resume_from`; ``payload`` holds the optimizer, progress and RNG state), else
    the weights and subword models of ``train.init`` to fine-tune (:func:`nmt.training.init.init_from`), else a
    new model with SentencePiece models trained on the training split (``payload`` None in both). It resumes
    whatever run the folder holds: train.py has refused, before writing anything, a folder where another command
    trains (:mod:`nmt.training.lock`) and one whose run has other settings than the command's
    (:func:`nmt.training.resume.check_run_folder`); code that calls :func:`train` itself takes those steps if it
    needs them.

    Returns:
        ``(cfg, splits, model, (src_tok, tgt_tok), payload, init_reverse)``; after a resume ``cfg`` holds the
        checkpoint's model, attention, decoder, tokenizer and data settings, after ``train.init`` all but the data,
        and ``.hydra/config.yaml`` is rewritten to them. ``init_reverse``: the reverse model's weights of a
        ``train.init`` checkpoint of an agreement run, else None.

    ``write``: False on the ranks other than 0, which read what rank 0 wrote (``spm/``, the copied checkpoints)
    and write nothing.

    Raises:
        FileNotFoundError / nmt.checkpoint.CheckpointError: for a resume or ``train.init`` checkpoint that is missing
            or unusable; ValueError: a ``train.init`` model of another language pair.
    """
    resume = cfg.train.get("resume") or (run_dir / "checkpoints" / "last.pt")
    if Path(resume).is_dir() and (Path(resume) / "checkpoints" / "last.pt").is_file():  # a run folder
        resume = Path(resume) / "checkpoints" / "last.pt"
    if cfg.train.get("resume") or Path(resume).is_file():
        model, src_tok, tgt_tok, payload, cfg = resume_from(resume, cfg, run_dir, device, overrides)
        if write:
            save_config(cfg, run_dir / ".hydra" / "config.yaml")  # the folder describes the model trained
        return cfg, corpus_splits(cfg), model, (src_tok, tgt_tok), payload, None
    if cfg.train.get("init"):
        model, src_tok, tgt_tok, cfg, reverse = init_from(cfg.train.init, cfg, run_dir, device, write)
        if write:
            save_config(cfg, run_dir / ".hydra" / "config.yaml")
        return cfg, corpus_splits(cfg), model, (src_tok, tgt_tok), None, reverse
    with torch.random.fork_rng(devices=[]):  # a bad architecture setting (decoder.style=...) fails before any work;
        build_model(cfg.model, cfg.decoder, cfg.attention, 8, 8)  # the RNG is left as it was (same initialisation)
    splits = corpus_splits(cfg)
    src_tok, tgt_tok = prepare_tokenizers(cfg.tokenizer, splits["train"], run_dir / "spm", corpus_settings(cfg.data))
    model = build_model(cfg.model, cfg.decoder, cfg.attention, len(src_tok), len(tgt_tok)).to(device)
    return cfg, splits, model, (src_tok, tgt_tok), None, None


def corpus_splits(cfg) -> dict:
    """The validation and test splits in memory, and the training split as a stream
    (:class:`nmt.data.stream.TrainStream`, read into the token store), or in memory too with
    ``tokenizer.sample_alpha`` > 0 (each epoch segments the text anew)."""
    if cfg.tokenizer.get("sample_alpha"):
        return load_splits(cfg.data)
    return {**load_splits(cfg.data, train=False), "train": train_stream(cfg.data)}


def cache_root(cfg) -> Path:
    """The folder of the token stores (``cache_dir``; ``~`` expanded)."""
    return Path(str(cfg.get("cache_dir") or "~/.cache/nmt")).expanduser() / "stores"


def training_pairs(cfg, train: Parallel | TrainStream, toks) -> tuple:
    """The encoded training pairs (best segmentation, at most ``data.max_len`` pieces a side) and the function
    that gives the pairs of epoch e. From a stream: the memory-mapped token store of the corpus and these
    tokenizers (:func:`nmt.data.store.cached_store`, built once, by one rank, and reused by later runs). With
    ``tokenizer.sample_alpha`` > 0 (subword regularization, Kudo 2018; BPE-dropout, Provilkov et al. 2020): a
    fresh sampled segmentation every epoch of the sides ``tokenizer.sample_side`` names, seeded by ``seed + e``."""
    if isinstance(train, TrainStream):
        store = cached_store(cache_root(cfg), train.files, *toks, cfg.data.max_len,
                             lambda: (train.lines("src"), train.lines("tgt")), extra={"data": train.settings})
        return store, lambda epoch: store
    pairs = encode_pairs(train, *toks, cfg.data.max_len)
    alpha = cfg.tokenizer.get("sample_alpha") or 0.0
    if not alpha:
        return pairs, lambda epoch: pairs
    side = cfg.tokenizer.get("sample_side") or "both"
    log.info("subword regularization: a fresh sampled segmentation of the training data every epoch "
             "(tokenizer.sample_alpha=%s, tokenizer.sample_side=%s)", alpha, side)

    def epoch_pairs(epoch: int) -> list:
        spm.set_random_generator_seed(cfg.seed + epoch)
        return encode_pairs(train, *toks, cfg.data.max_len, sample_alpha=alpha, quiet=True, sample_side=side)
    return pairs, epoch_pairs
