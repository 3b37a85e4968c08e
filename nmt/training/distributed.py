"""Data-parallel training on several processes (torchrun): the process group, and what the ranks agree on.

``torchrun --nproc_per_node N train.py ...`` starts N processes with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` set; :func:`init_distributed` joins them into one process group (gloo on
CPU, NCCL on CUDA with one GPU per local rank). Plain ``python train.py`` gets a :class:`Distributed` of one
rank and no process group at all.

What the ranks must agree on, so that none waits for a peer that has left: the run folder (rank 0's), the stop
decisions (a signal on any rank, the wall time, the validation's early stopping), and the validation's outcome
(best BLEU, the plateau schedule's rate). Every collective here is bounded by the process group's timeout
(``train.dist_timeout`` seconds); a peer that died breaks its sockets, and its survivors fail at their next
collective with an error naming the rank, instead of waiting.
"""

from __future__ import annotations

import datetime
import gc
import logging
import os
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class DistributedError(RuntimeError):
    """A collective that failed because a peer died or did not answer in time; names this rank."""


@dataclass
class Distributed:
    """This process's place in a data-parallel run: ``rank`` of ``world_size`` (0 of 1 without torchrun) and
    ``local_rank`` on its machine (the GPU it uses)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    end_group: object = field(default=None, repr=False)  # the gloo group of end_together (None: the default)

    @property
    def active(self) -> bool:
        """Whether a process group exists (more than one rank)."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that validates, logs, writes the run folder and evaluates."""
        return self.rank == 0

    def _collective(self, what: str, call):
        """Run one collective; a peer's failure becomes a :class:`DistributedError` naming this rank."""
        try:
            return call()
        except RuntimeError as err:  # gloo and NCCL errors (DistBackendError is one)
            raise self.peer_failure(what, err) from None

    def peer_failure(self, what: str, err: Exception) -> DistributedError:
        """The error to raise when ``what`` (a collective, or DDP's gradient all-reduce in backward) failed."""
        return DistributedError(f"rank {self.rank} of {self.world_size}: {what} failed, a peer process died or did "
                                f"not answer within train.dist_timeout: {str(err).splitlines()[0]}")

    def barrier(self, what: str = "waiting for the other ranks") -> None:
        """Wait until every rank gets here (no-op on one rank)."""
        if self.active:
            self._collective(what, dist.barrier)

    def share(self, value, what: str = "sharing rank 0's state"):
        """Rank 0's ``value`` (any picklable object) on every rank."""
        if not self.active:
            return value
        box = [value if self.is_main else None]
        self._collective(what, lambda: dist.broadcast_object_list(box, src=0))
        return box[0]

    def gather(self, value, what: str = "gathering the ranks' state") -> list:
        """Every rank's ``value``, in rank order, on every rank (``[value]`` on one rank)."""
        if not self.active:
            return [value]
        out = [None] * self.world_size
        self._collective(what, lambda: dist.all_gather_object(out, value))
        return out

    def total(self, value: int, what: str = "counting the target tokens of an update") -> int:
        """The sum of ``value`` (a whole number) over the ranks."""
        if not self.active:
            return value
        tensor = torch.tensor([value], dtype=torch.float64)
        self._collective(what, lambda: dist.all_reduce(tensor, op=dist.ReduceOp.SUM))
        return int(tensor.item())

    def maximum(self, values: list[float], what: str = "agreeing on whether to stop") -> list[float]:
        """The element-wise maximum of ``values`` over the ranks (the same list on one rank)."""
        if not self.active:
            return values
        tensor = torch.tensor(values, dtype=torch.float64)
        self._collective(what, lambda: dist.all_reduce(tensor, op=dist.ReduceOp.MAX))
        return tensor.tolist()

    def end_together(self) -> None:
        """Hold every rank here until rank 0 is here too, after the final evaluation that rank 0 does alone, so
        that all ranks end together (no-op on one rank).

        A rank that ended at once took its torchrun agent with it after torchrun's exit barrier (300 s): where
        that agent hosted the rendezvous store (``--rdzv_backend c10d``, ranks by arrival), rank 0's agent lost
        the store and ended rank 0 in the middle of its evaluation. The wait goes through a gloo group (on
        NCCL runs too), so it notices a peer that died at once and is bounded by ``train.dist_timeout``. Never
        raises: a rank that cannot wait any longer logs a warning and returns, as rank 0's outcome is the
        run's."""
        if not self.active:
            return
        try:
            dist.barrier(group=self.end_group)
        except RuntimeError as err:
            log.warning("rank %d of %d: the ranks did not end together (rank 0's final evaluation takes longer "
                        "than train.dist_timeout, or a peer died): %s", self.rank, self.world_size,
                        str(err).splitlines()[0] if str(err) else type(err).__name__)

    def close(self) -> None:
        """Leave the process group (after the last collective). The DistributedDataParallel wrapper, which holds
        the group and lives in reference cycles, is collected first: left to the interpreter's shutdown, its
        backend threads can be torn down after Python and abort the process."""
        if self.active and dist.is_initialized():
            gc.collect()
            dist.destroy_process_group()


def launched_by_torchrun() -> bool:
    """Whether this process was started by torchrun (or another launcher that sets ``WORLD_SIZE``) for more
    than one rank."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def init_distributed(device: str, timeout_s: float = 1800.0) -> tuple[Distributed, torch.device | None]:
    """Join the process group that torchrun described in the environment, or return one rank without a group.

    ``device`` is the ``device=`` setting: with ``auto`` or ``cuda`` and CUDA available every rank takes GPU
    ``LOCAL_RANK`` and NCCL; otherwise gloo on CPU. Returns ``(Distributed, device)``; device is None without
    torchrun (the caller picks it as usual).

    Raises:
        ValueError: before any work, for a launch that cannot work: a rendezvous variable missing
            (``MASTER_ADDR``/``MASTER_PORT``: start with torchrun), more processes on a machine than it has GPUs,
            ``device=cuda`` without CUDA, or a timeout that is not a positive number.
    """
    if not launched_by_torchrun():
        return Distributed(), None
    missing = [name for name in TORCHRUN_VARIABLES if not os.environ.get(name)]
    if missing:
        raise ValueError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {', '.join(missing)} not set: start several "
                         "processes with torchrun (torchrun --nproc_per_node N train.py ...; on several machines "
                         "--nnodes M --node_rank R --rdzv_endpoint HOST:PORT)")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"train.dist_timeout={timeout_s} must be a number of seconds > 0")
    rank, world, local = (int(os.environ[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    use_cuda = device in ("auto", "cuda") and torch.cuda.is_available() or device.startswith("cuda:")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device}: this machine (torch {torch.__version__}) has no usable CUDA GPU; use "
                         "device=cpu (gloo) or device=auto")
    if use_cuda:
        if local >= torch.cuda.device_count():
            raise ValueError(f"local rank {local} has no GPU: this machine has {torch.cuda.device_count()} "
                             f"(--nproc_per_node must be at most the number of GPUs per machine)")
        chosen = torch.device("cuda", local)
        torch.cuda.set_device(chosen)
    else:
        chosen = torch.device("cpu")
    backend = "nccl" if use_cuda else "gloo"
    timeout = datetime.timedelta(seconds=float(timeout_s))
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout,
                            **({"device_id": chosen} if use_cuda else {}))
    end_group = dist.new_group(backend="gloo", timeout=timeout) if use_cuda else None
    return Distributed(rank, world, local, end_group), chosen


def reports_shared_errors(rank: int) -> bool:
    """Whether this process prints an error that every rank meets alike (a setting, a file), so that it is said
    once: rank 0 once the process group is joined; before that, the first process of each torchrun machine
    (local rank 0), and any process started without torchrun."""
    if dist.is_initialized():
        return rank == 0
    return os.environ.get("LOCAL_RANK", "0") == "0" or "TORCHELASTIC_RUN_ID" not in os.environ


def wait_for_the_reporting_rank(seconds: float = 30.0) -> None:
    """On a rank that leaves a shared error to another (:func:`reports_shared_errors` is False), before it
    exits: wait up to ``seconds`` so that the reporting rank prints the error first. torchrun ends every worker
    as soon as one fails, so a silent rank that exited at once could have the reporting rank ended before its
    message was out; torchrun ends this wait when that rank exits. A caller still running afterwards says the
    error itself (no other rank did). Returns at once outside torchrun."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        time.sleep(seconds)
