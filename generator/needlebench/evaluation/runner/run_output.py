"""Where lm-eval writes the files of a ``needlebench eval run``: a new private folder, moved by descriptors at the end.

lm-eval writes ``results_<date>.json`` and ``samples_<task>_<date>.jsonl`` by path under
``<output_path>/<model folder>/`` (``EvaluationTracker.save_results_aggregated`` and ``save_results_samples`` in
``lm_eval/loggers/evaluation_tracker.py``: ``Path.mkdir(exist_ok=True)``, ``write_text``, ``open(..., "a")``), so a
link planted at the model folder of a results folder from someone else would receive them. lm-eval is therefore
given a folder made for the run (``.needlebench-run-<random>``, 0700) in the user's private cache
(``$NEEDLEBENCH_CACHE/runs``), never inside the output folder: in a shared output folder that others may write (no
sticky bit, ``unlink(2)``), someone could rename the run's folder and put a link in its place while lm-eval writes
by path. When the run ends each file it produced is placed into ``<output>/<model folder>/``
(:meth:`needlebench.safe_fs.Folder.place_from`: a hard link, or a copy by descriptors across file systems; the
model folder opened with ``O_NOFOLLOW``) and the run's folder is removed. The layout and the bytes are lm-eval's
own; nothing is written through a link.

A link or a file at ``<output>/<model folder>`` is refused in one line as soon as lm-eval has named the model
folder (``GeneralConfigTracker.log_experiment_args``, before any request runs), and again by the move itself.
"""

from __future__ import annotations

import contextlib
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.runner import lm_eval_seam
from needlebench.safe_fs import Folder, parts_of, private_folder
from needlebench.sources.cache import cache_root

#: Name prefix of the folder lm-eval writes a run's files into (sixteen random hex digits follow).
RUN_PREFIX = ".needlebench-run-"
#: Folder levels below the run's folder that are moved (lm-eval writes one: the model folder).
_MAX_DEPTH = 4


@dataclass
class RunOutput:
    """The run's private folder and where its files go."""

    destination: Path  # the output folder (its parent for an output path ending in .json, as lm-eval reads it)
    name: str  # the run's folder inside `base`
    json_path: bool  # lm-eval's ``--output_path x.json``: files beside it, no model folder
    lm_eval_path: str  # the ``--output_path`` lm-eval receives
    base: Path  # the private folder holding the run's folder (``$NEEDLEBENCH_CACHE/runs``)

    @property
    def folder(self) -> Path:
        return self.base / self.name

    @contextmanager
    def open(self) -> Iterator[Folder]:
        """The run's folder, opened by descriptors from the private base."""
        with Folder.open(self.base) as base, base.sub(self.name) as folder:
            yield folder


def start(output: Path) -> RunOutput:
    """Make the run's private folder for the ``--output_path`` `output` (the output folder is created when missing,
    as lm-eval does, so that a bad output path is refused before the model loads)."""
    json_path = output.suffix == ".json"  # lm-eval's rule (save_results_aggregated)
    destination = output.parent if json_path else output
    with Folder.open(destination, create=True):
        pass
    with private_folder(cache_root() / "runs") as base:
        name = base.new_private(lambda: RUN_PREFIX + secrets.token_hex(8))
        folder_path = base.path / name
        return RunOutput(
            destination,
            name,
            json_path,
            str(folder_path / output.name) if json_path else str(folder_path),
            base.path,
        )


def _refuse_model_folder(run: RunOutput, name: str) -> NeedlebenchError:
    return NeedlebenchError(
        f"--output_path {run.destination}: {run.destination / name} is a symbolic link or a file, not a folder; "
        "lm-eval's results for this model go there and needlebench never writes through a link: remove it or choose "
        "another --output_path"
    )


def check_model_folder(run: RunOutput, name: str) -> None:
    """Refuse (one line) a model folder name lm-eval would leave the output folder with, or a link or a file
    at ``<output>/<name>``."""
    if run.json_path:
        return
    parts = parts_of(name, f"the model folder of --output_path {run.destination}")
    if len(parts) != 1:
        raise NeedlebenchError(f"the model folder {name!r} of --output_path {run.destination} is not one folder name")
    with Folder.open(run.destination) as root:
        info = root.lstat(name)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise _refuse_model_folder(run, name)


def check_named_model_folder(run: RunOutput, model_args: object) -> None:
    """When the model arguments name the model (``pretrained=``, ``model=``...), check its folder before anything
    starts: lm-eval's own name and sanitising (``GeneralConfigTracker._get_model_name``, ``sanitize_model_name``).
    An unnamed model gets a random folder name only once lm-eval runs (:func:`model_folder_checked`)."""
    name = lm_eval_seam.model_name(model_args)
    if name:
        check_model_folder(run, lm_eval_seam.model_folder_name(name))


@contextmanager
def model_folder_checked(run: RunOutput | None) -> Iterator[None]:
    """While the block runs, lm-eval's naming of the model folder checks ``<output>/<model folder>`` at once
    (:func:`check_model_folder`), before the model answers anything (``simple_evaluate`` in
    ``lm_eval/evaluator.py`` logs the model before it calls ``evaluate``)."""
    if run is None:
        yield
        return

    def check(tracker: Any, *args: Any, **kwargs: Any) -> None:
        check_model_folder(run, lm_eval_seam.logged_model_folder(tracker))

    with lm_eval_seam.model_logged(check):
        yield


def _move(source: Folder, target: Folder, depth: int) -> None:
    """Place every regular file of `source` into `target` (a hard link, or a copy by descriptors across file
    systems), folders into folders of the same name (opened with ``O_NOFOLLOW``, created when missing), then remove
    it from `source`. Nothing else can be in `source` (0700, made by this run)."""
    for name in source.listdir():
        info = source.lstat(name)
        if info is None:
            continue
        if stat.S_ISREG(info.st_mode):
            try:
                target.place_from(source, name, name)
            except OSError as error:
                raise NeedlebenchError(
                    f"{target.path / name} cannot be replaced by this run's file ({error.strerror})"
                ) from None
            source.unlink(name)
        elif stat.S_ISDIR(info.st_mode) and depth < _MAX_DEPTH:
            try:
                inner_target = target.sub(name, create=True)
            except NeedlebenchError:
                raise NeedlebenchError(f"{target.path / name} is a symbolic link or a file, not a folder") from None
            with inner_target, source.sub(name) as inner_source:
                _move(inner_source, inner_target, depth + 1)


def deliver(run: RunOutput) -> None:
    """Move the run's files into the output folder and remove the run's folder; when a file cannot be placed
    (a link or a file at the model folder), a one-line error saying where the run's files stay."""
    with Folder.open(run.destination) as root, Folder.open(run.base) as base:
        try:
            with base.sub(run.name) as folder:
                _move(folder, root, 0)
        except NeedlebenchError as error:
            raise NeedlebenchError(
                f"{error}; needlebench never writes through a link: this run's files stay in {run.folder}"
            ) from None
        with contextlib.suppress(OSError):
            base.rmtree(run.name)


__all__ = [
    "RUN_PREFIX",
    "RunOutput",
    "check_model_folder",
    "check_named_model_folder",
    "deliver",
    "model_folder_checked",
    "start",
]
