"""The report of a sweep, written by ``train.py -m``: a Hydra callback (``conf/train.yaml``: ``hydra.callbacks``).

After every job (in the job's own process, also under the parallel launchers) the report of the sweep's
finished jobs is written again to ``SWEEP/report/`` (under a lock, so two jobs ending together take turns), and
a failed job is recorded with its error in ``SWEEP/report/failed_jobs.jsonl`` and listed on the page. When the
sweep ends, the report is written once more and the last line printed says where it is. Hydra ends a sweep
with a failed job by raising that job's error, skipping the end of the sweep: the report written after the
last job is then the final one. A report that cannot be made (fewer than one finished run, runs that cannot be
compared) is said in one line and never fails the sweep.

Hydra calls the methods by name; nothing here imports Hydra (its config objects are read by attribute).
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows: jobs ending together may then each write the report
    fcntl = None

REPORT_FOLDER = "report"
FAILED = "failed_jobs.jsonl"
COMMAND = "command.txt"


@contextmanager
def _locked(folder: Path):
    """Hold ``folder/.lock`` (an OS advisory lock) while writing the report there."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _failed_notes(folder: Path) -> list[str]:
    """The failed jobs recorded in ``folder/failed_jobs.jsonl``, one note each."""
    try:
        lines = (folder / FAILED).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    records = [json.loads(line) for line in lines if line.strip()]
    return [f"Job #{r['job']} ({r['folder']}) failed: {r['error']}" for r in records]


def _command(folder: Path) -> str | None:
    """The sweep's command, as ``on_multirun_start`` recorded it (None: unknown)."""
    try:
        return (folder / COMMAND).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def write_sweep_report(sweep_dir: str | Path, final: bool) -> Path | None:
    """Write the report of the finished runs under ``sweep_dir`` to ``sweep_dir/report/`` and print where it is.

    Returns:
        the page, or None when no report could be made (said in one line on stderr).
    """
    from nmt.report.build import ReportOptions
    from nmt.report.page import write_report
    from nmt.report.runs import ReportError

    folder = Path(sweep_dir) / REPORT_FOLDER
    with _locked(folder):
        previous = logging.root.manager.disable
        logging.disable(logging.CRITICAL)  # the job's log file is still open: it must not get the report's lines
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the page lists the runs left out
                page = write_report([sweep_dir], folder, ReportOptions(notes=_failed_notes(folder)), _command(folder))
        except (ReportError, OSError, ValueError) as err:
            print(f"nmt.report: no report of the sweep {sweep_dir}: {err}", file=sys.stderr, flush=True)
            return None
        finally:
            logging.disable(previous)
    what = "the sweep's report" if final else "the report of the sweep's finished jobs"
    print(f"nmt.report: {what}: {page}", file=sys.stderr if not final else sys.stdout, flush=True)
    return page


class SweepReport:
    """The Hydra callback: ``on_multirun_start`` clears the failure record, ``on_job_end`` records a failed job
    and writes the report so far, ``on_multirun_end`` writes the final report."""

    def on_run_start(self, config, **kwargs) -> None:
        """A single run: nothing to do (Hydra calls every hook of a callback by name)."""

    def on_run_end(self, config, **kwargs) -> None:
        """A single run: nothing to do."""

    def on_job_start(self, config, **kwargs) -> None:
        """Nothing to do before a job."""

    def on_compose_config(self, config, **kwargs) -> None:
        """Nothing to do when Hydra composes the config."""

    def on_multirun_start(self, config, **kwargs) -> None:
        """A new sweep: forget the failures a previous sweep into this folder recorded, and keep the sweep's
        command for the page (the jobs' processes do not know it)."""
        folder = Path(config.hydra.sweep.dir) / REPORT_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        (folder / FAILED).unlink(missing_ok=True)
        command = shlex.join(["python", Path(sys.argv[0]).name, "-m", *config.hydra.overrides.task])
        (folder / COMMAND).write_text(command + "\n", encoding="utf-8")

    def on_job_end(self, config, job_return, **kwargs) -> None:
        """After a job of a sweep: record it when it failed, then write the report of the finished jobs."""
        hydra = config.get("hydra") if hasattr(config, "get") else None
        if hydra is None or str(hydra.mode) != "RunMode.MULTIRUN":
            return
        sweep_dir = Path(hydra.sweep.dir)
        if getattr(job_return.status, "name", "") == "FAILED":
            error = str(getattr(job_return, "_return_value", "") or "failed").splitlines()[0]
            record = {"job": hydra.job.num, "folder": hydra.runtime.output_dir, "error": error}
            folder = sweep_dir / REPORT_FOLDER
            with _locked(folder), open(folder / FAILED, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        write_sweep_report(sweep_dir, final=False)

    def on_multirun_end(self, config, **kwargs) -> None:
        """The sweep has ended with every job done: its final report, and the last line says where it is."""
        write_sweep_report(config.hydra.sweep.dir, final=True)
