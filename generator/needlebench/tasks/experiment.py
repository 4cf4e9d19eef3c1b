"""User-defined needle tests (an *experiment file*): the CDME and Inspect NIAH knobs as a named config.

An experiment file is a small YAML (schema: ``data/experiment.schema.json``) naming a config and giving its task
kind, language, haystack, needles and sampling method, lengths, depths (list or linear/sigmoid spacing), start/end
buffers, runs, length buffer, question position and prompt frame. :func:`parse_experiment` validates it (one-line
errors naming the key, the value and what is allowed) into an :class:`Experiment`; :func:`experiment_spec` is its
:class:`ConfigSpec`, a config of its kind's family with an explicit :class:`Grid` (its lengths, depths, buffer,
repeats, settings and generator), registered beside the built-in configs by the caller; :func:`experiment_rows`
builds its rows with the same stages as the families (cells and seeds, exact-count placement, prompt frames, row
columns).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path

from needlebench.errors import NeedlebenchError
from needlebench.safe_fs import Folder
from needlebench.seeding import RELEASE_SEED, derive_seed
from needlebench.sources.haystacks import window_start_hint
from needlebench.sources.inputs import check_recipe_paths, input_record, is_input_record, is_local_spec
from needlebench.sources.pinned import (
    MAX_INPUT_BYTES,
    Pinned,
    note_copy,
    pin,
    read_fd,
    read_folder_txt,
)
from needlebench.sources.tokenizer import DEFAULT_TOKENIZER
from needlebench.tasks.families import FAMILIES, ConfigSpec, Grid, family_of, multi_reasoning, multi_retrieval, single
from needlebench.tasks.grid import register_config, registry
from needlebench.tasks.haystack import base_row, cells_of, tokenized_corpus
from needlebench.tasks.multi_reasoning import reasoning_question
from needlebench.tasks.needle_file import MAX_NEEDLES_BYTES, load_needles_file
from needlebench.tasks.needles import splice_guide
from needlebench.tasks.placement import NeedleRequest, build_context
from needlebench.tasks.prompts import CONTEXT_SLOT, frame_parts, prompt_data
from needlebench.tasks.settings import HaystackSettings
from needlebench.yamlload import UserYamlError, load_user_yaml

#: Experiment kinds: the haystack families.
KINDS = tuple(key for key, entry in FAMILIES.items() if entry.haystack_grid)
SAMPLE_METHODS = ("fixed", "sequential", "random")
SIZE_LABEL = "custom"


@cache
def experiment_schema() -> dict:
    """The JSON Schema of an experiment file (shipped in the package)."""
    text = resources.files("needlebench").joinpath("data/experiment.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def generate_depth_percents(n: int, spacing: str = "linear") -> tuple[float, ...]:
    """`n` depths from 0 to 100: linear, or the reference's sigmoid of the linear points (``generate_depth_percents``
    in open-compass/opencompass: ``opencompass/configs/datasets/needlebench/needlebench_4k/needlebench_single_4k.py``).
    """
    if n == 1:
        linear = [0.0]
    else:
        linear = [100 * i / (n - 1) for i in range(n)]
    if spacing == "sigmoid":
        return tuple(round(100 / (1 + math.exp(-0.1 * (x - 50))), 3) for x in linear)
    return tuple(round(x, 3) for x in linear)


def spaced_lengths(low: int, high: int, n: int) -> tuple[int, ...]:
    """`n` lengths evenly spaced from `low` to `high` (Inspect's min_context/max_context/n_contexts), rounded."""
    if n == 1:
        return (high,)
    return tuple(round(low + (high - low) * i / (n - 1)) for i in range(n))


@dataclass(frozen=True)
class ExperimentNeedle:
    text: str
    question: str
    answer: str
    keyword: str


@dataclass(frozen=True)
class Experiment:
    """A validated experiment file, every default filled in and every needle inline."""

    name: str
    kind: str
    language: str
    lengths: tuple[int, ...]
    depths: tuple[float, ...]
    needles: tuple[ExperimentNeedle, ...]
    haystack: str | None = None
    question: str = ""  # multi_reasoning
    answer: str = ""
    keyword: str = ""
    sample_method: str = "fixed"
    fixed_index: int = 0
    n_needles: int = 1
    diff: float = 10.0
    start_buffer: int = 0
    end_buffer: int = 0
    runs: int = 1
    length_buffer: int = 0
    guide: bool = True
    question_position: str = "end"
    prompt: str = "default"
    seed: int = RELEASE_SEED
    tokenizer: str = DEFAULT_TOKENIZER
    #: A local haystack as a manifest records it ({file, kind, size, sha256}): the experiment read back from it
    #: builds from the recipe's haystack, located as `verify` locates every local input.
    haystack_record: dict | None = field(default=None, compare=False)

    def to_record(self) -> dict:
        """The experiment as an experiment-file mapping with every default filled in and the needles inline, as
        recorded in the manifest (it rebuilds the config without the original file). A local haystack is recorded
        by file name, size and sha256, never by path (:func:`needlebench.sources.inputs.input_record`)."""
        skip = {
            "needles",
            "haystack",
            "question",
            "answer",
            "keyword",
            "sample_method",
            "fixed_index",
            "n_needles",
            "diff",
            "tokenizer",
            "haystack_record",
        }
        record = {key: getattr(self, key) for key in self.__dataclass_fields__ if key not in skip}
        if self.tokenizer != DEFAULT_TOKENIZER:
            record["tokenizer"] = self.tokenizer
        record["lengths"] = list(self.lengths)
        record["depths"] = list(self.depths)
        if self.haystack is not None:
            record["haystack"] = _recorded_haystack(self.haystack)
        elif self.haystack_record is not None:
            record["haystack"] = self.haystack_record
        family = family_of(self.kind)
        if family.chain_needles:
            record.update(
                needles=[n.text for n in self.needles], question=self.question, answer=self.answer, keyword=self.keyword
            )
        else:
            record["needles"] = [
                {"needle": n.text, "question": n.question, "answer": n.answer, "keyword": n.keyword}
                for n in self.needles
            ]
        if family.one_needle_per_prompt:
            record.update(sample_method=self.sample_method, fixed_index=self.fixed_index, n_needles=self.n_needles)
        else:
            record["diff"] = self.diff
        return {key: record[key] for key in sorted(record)}

    @property
    def samples_per_cell(self) -> int:
        """Repeats of a (length) cell: runs x needles sampled (single), runs otherwise."""
        return self.runs * (self.n_needles if family_of(self.kind).one_needle_per_prompt else 1)

    @property
    def num_rows(self) -> int:
        return len(self.lengths) * len(self.depths) * self.samples_per_cell


def experiment_settings(exp: Experiment) -> HaystackSettings:
    """What an experiment's rows read besides the build's tokenizer and haystack: its seed, question position,
    length buffer and depths."""
    return HaystackSettings(
        release_seed=exp.seed,
        haystack=exp.haystack,
        question_position=exp.question_position,
        buffer=exp.length_buffer,
        depths=exp.depths,
        tokenizer=exp.tokenizer,
    )


def experiment_grid(exp: Experiment) -> Grid:
    """The explicit grid of an experiment: its own lengths, depths, buffer and repeats, its rows and settings."""
    needles = 1 if family_of(exp.kind).one_needle_per_prompt else len(exp.needles)
    repeats = exp.samples_per_cell
    return Grid(
        lengths=exp.lengths,
        depths=exp.depths,
        buffer=exp.length_buffer,
        repeats=repeats,
        needle_counts=(needles,),
        num_rows=exp.num_rows,
        approx_tokens=sum(length - exp.length_buffer for length in exp.lengths) * len(exp.depths) * repeats,
        rows=experiment_rows,
        settings=experiment_settings(exp),
        source=exp,
    )


def experiment_spec(exp: Experiment) -> ConfigSpec:
    """The config of an experiment (not registered: :func:`needlebench.tasks.grid.register_config` does that)."""
    return ConfigSpec(exp.name, exp.kind, exp.language, SIZE_LABEL, grid=experiment_grid(exp))


def register_experiment(experiment: Experiment) -> ConfigSpec:
    """Register the experiment's config beside the built-in configs (a built-in name is an error) and return it."""
    if experiment.name in registry():
        raise NeedlebenchError(
            f"experiment key name: {experiment.name!r} is a built-in config; allowed: any other name matching "
            "^[a-z][a-z0-9_]*$"
        )
    spec = experiment_spec(experiment)
    register_config(spec)
    return spec


def manifest_experiment_specs(manifest: dict) -> list[ConfigSpec]:
    """The configs of the experiments a dataset manifest records (unregistered), each checked against the recipe
    (:func:`check_record_matches_recipe`)."""
    experiments = manifest.get("experiments") or {}
    recipe = manifest.get("recipe")
    if experiments and isinstance(recipe, dict):
        check_recipe_paths(recipe)  # before a record is compared with it: the line names the option to use
    specs = []
    for name, record in experiments.items():
        experiment = experiment_from_record(record)
        if isinstance(recipe, dict):
            check_record_matches_recipe(name, experiment, recipe)
        specs.append(experiment_spec(experiment))
    return specs


def _unpinned(spec: str) -> str:
    """A Hub haystack spec without its revision (``hub:ORG/NAME@REV:...`` -> ``hub:ORG/NAME:...``)."""
    if spec.startswith("opencompass"):
        return "opencompass"
    if spec.startswith("hub:"):
        repo, colon, rest = spec[4:].partition(":")
        return f"hub:{repo.split('@')[0]}{colon}{rest}"
    return spec


def check_record_matches_recipe(name: object, experiment: Experiment, recipe: dict) -> None:
    """An experiment's rows are rebuilt with the recipe's tokenizer, haystack and seed (its own settings keep the
    build's tokenizer and haystack: ``Family.settings``), so a record naming another tokenizer, haystack or seed
    does not describe what was built, and `verify` would check something else: a one-line error naming the field."""
    where = f"the manifest's experiments.{name}"
    tokenizer = recipe.get("tokenizer", DEFAULT_TOKENIZER)
    if experiment.tokenizer != tokenizer:
        raise NeedlebenchError(
            f"{where}.tokenizer is {experiment.tokenizer!r} but the recipe's tokenizer is {tokenizer!r}; the record "
            "does not describe what was built"
        )
    if "release_seed" in recipe and experiment.seed != recipe["release_seed"]:
        raise NeedlebenchError(
            f"{where}.seed is {experiment.seed!r} but the recipe's release_seed is {recipe['release_seed']!r}; the "
            "record does not describe what was built"
        )
    built = recipe.get(f"haystack_{experiment.language}")
    if experiment.haystack_record is not None:
        recorded: object = experiment.haystack_record
        same = built == recorded
    else:
        recorded = experiment.haystack
        if recorded in (None, "default"):
            same = built in (None, "default")
        else:  # a Hub spec: the recipe pins it to the revision that was read (``BuildOptions.pinned``)
            same = isinstance(built, str) and _unpinned(built) == _unpinned(recorded)
    if not same:
        shown = json.dumps(recorded, ensure_ascii=False)[:120]
        raise NeedlebenchError(
            f"{where}.haystack is {shown} but the recipe's haystack_{experiment.language} is "
            f"{json.dumps(built, ensure_ascii=False)[:120]}; the record does not describe what was built"
        )


# ---------------------------------------------------------------------------------------------------- parsing


def _fail(where: str, key: str, value: object, allowed: str) -> NeedlebenchError:
    # default=str: a YAML date (``2024-01-01`` is one) or bytes is shown, not a TypeError
    shown = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return NeedlebenchError(f"{where}: key {key}: {shown} is not allowed; allowed: {allowed}")


def _schema_allowed(error) -> str:
    schema = error.schema
    if "enum" in schema:
        return ", ".join(map(str, schema["enum"]))
    if error.validator == "additionalProperties":
        return "the keys " + ", ".join(sorted(schema.get("properties", {})))
    if error.validator == "required":
        return "a mapping with " + ", ".join(schema["required"])
    if error.validator == "oneOf":
        return " or ".join(_describe(option) for option in schema["oneOf"])
    return _describe(schema)


def _describe(schema: dict) -> str:
    kind = schema.get("type")
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    if kind == "array":
        most = f" (at most {schema['maxItems']:,} items)" if "maxItems" in schema else ""
        return f"a list of {_describe(schema.get('items', {}))}{most}"
    if kind == "object":
        return "a mapping with " + ", ".join(schema.get("properties", {}))
    if "oneOf" in schema:
        return " or ".join(_describe(option) for option in schema["oneOf"])
    bounds = []
    if "minimum" in schema:
        bounds.append(f">= {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        bounds.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema:
        bounds.append(f"<= {schema['maximum']}")
    if "pattern" in schema:
        bounds.append(f"matching {schema['pattern']}")
    if "minLength" in schema:
        bounds.append("non-empty")
    text = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false"}.get(
        kind, "a value"
    )
    return text + (" " + " and ".join(bounds) if bounds else "")


def _schema_check(data: object, where: str) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(experiment_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if not errors:
        return
    error = errors[0]
    while error.validator == "oneOf" and error.context:
        # the branch the value was meant for (a mapping for a mapping, a list for a list), not its type errors
        meant = [sub for sub in error.context if sub.validator != "type" or sub.relative_path]
        if not meant:
            break
        error = max(meant, key=lambda sub: len(sub.absolute_path))
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        path = ".".join(map(str, list(error.absolute_path) + extra[:1])) or "(top)"
        raise NeedlebenchError(f"{where}: unknown key {path}; allowed: {_schema_allowed(error)}")
    if error.validator == "required":
        missing = [key for key in error.schema["required"] if key not in error.instance]
        path = ".".join(map(str, list(error.absolute_path) + missing[:1]))
        raise NeedlebenchError(f"{where}: missing key {path}; required: {', '.join(error.schema['required'])}")
    key = ".".join(map(str, error.absolute_path)) or "(top)"
    raise _fail(where, key, error.instance, _schema_allowed(error))


#: Largest experiment file read (an experiment with ten thousand inline needles stays far below).
MAX_FILE_BYTES = 16 * 1024 * 1024


def load_experiment(path: str | Path, allowed: tuple[str | Path, ...] = ()) -> Experiment:
    """Read and validate an experiment YAML file (strictly: no aliases, tags, key given twice, deep nesting or long
    integers). Its local paths (haystack, needles_file, a tokenizer folder) are taken relative to its folder and
    must stay inside it, or inside a path of `allowed` (the user's ``--allow-path``).

    The file's folder is opened ONCE, before the file is read (:meth:`needlebench.safe_fs.Folder.open`), and the
    file and every input it names are read relative to that descriptor: a folder renamed away and replaced by a link
    (to the user's home) while the file is parsed is never looked up by its path again."""
    import yaml

    path = Path(path)
    try:
        folder = Folder.open(path.parent)
    except OSError as error:
        raise NeedlebenchError(f"cannot read experiment file {path}: {error.strerror or error}") from None
    with folder:
        text = _read_experiment_file(folder, path)
        try:
            data = load_user_yaml(text)
        except UserYamlError as error:
            raise NeedlebenchError(f"{path} {error}") from None
        except yaml.YAMLError as error:
            line = getattr(getattr(error, "problem_mark", None), "line", None)
            at = f" line {line + 1}" if line is not None else ""
            raise NeedlebenchError(f"{path}{at}: not valid YAML; an experiment file is a YAML mapping") from None
        if not isinstance(data, dict):
            raise NeedlebenchError(
                f"{path}: an experiment file is a YAML mapping of keys (name, kind, ...), not {type(data).__name__}"
            )
        return parse_experiment(data, str(path), base=path.parent, allowed=tuple(allowed), folder=folder)


def _read_experiment_file(folder: Folder, path: Path) -> str:
    """The experiment file, opened relative to its folder's descriptor (a link at the file itself, a name the user
    typed, is followed as the kernel resolves it from that folder); a FIFO, device or folder is a one-line error."""
    import os

    what = "experiment file"
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder.fd)
    except OSError as error:
        raise NeedlebenchError(f"cannot read {what} {path}: {error.strerror or error}") from None
    data = read_fd(fd, str(path), what, MAX_FILE_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NeedlebenchError(f"cannot read {what} {path}: not UTF-8 text ({error.reason})") from None


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _real_folder(folder: Folder) -> Path:
    """Where the open folder is now, as the kernel names its descriptor (``/proc/self/fd/N``, proc(5)): the folder
    that was opened, whatever has been renamed or linked at the path it was opened by since. Elsewhere its path."""
    import os

    try:
        return Path(os.readlink(f"/proc/self/fd/{folder.fd}"))
    except OSError:
        return Path(os.path.realpath(folder.path))


def _real_target(value: str, folder: Folder) -> tuple[Path, Path]:
    """(the real path `value` leads to when taken from the open `folder`, the folder's real path)."""
    import os

    real_base = _real_folder(folder)
    for _ in range(3):
        try:
            return Path(os.path.realpath(real_base / Path(value).expanduser())), real_base
        except OSError:
            # os.path.realpath (Python < 3.13) reads a link it saw a moment before with readlink(2), which fails
            # with EINVAL when the name was swapped back to a file in between: look again, then refuse.
            continue
    raise NeedlebenchError(
        f"{value!r} changed between a link and a file while it was read (three times); allowed: a file or folder "
        "that stays put while needlebench runs"
    )


def local_path(
    value: str,
    key: str,
    where: str,
    base: Path | None,
    allowed: tuple[str | Path, ...] = (),
    folder: Folder | None = None,
) -> Path:
    """A local path an experiment file names: relative to the file's folder `base` (open as `folder`). A shared file
    must not read the reader's own files into prompts (``haystack: ~/notes.txt``), so a path that leads outside the
    folder (absolute, ``~``, ``..`` or a link pointing out) is a one-line error unless it lies inside a path of
    `allowed` (given on the command line). The folder is the one open as `folder`, never `base` looked up again.
    Without `base` (a mapping given in code) the path is taken as it is."""
    if "\0" in value:  # no file name holds one; os.path.realpath would raise ValueError
        raise NeedlebenchError(f"{where}: key {key}: {value!r} holds a NUL byte; allowed: a path without one")
    path = Path(value).expanduser()
    if base is None:
        return path
    if not path.is_absolute():
        path = base / path
    if folder is None:
        with Folder.open(base) as opened:
            return local_path(value, key, where, base, allowed, opened)
    real, real_base = _real_target(value, folder)
    if _within(real, real_base) or any(_within(real, Path(a).expanduser().resolve()) for a in allowed):
        return path
    raise NeedlebenchError(
        f"{where}: key {key}: {value!r} leads outside the experiment file's folder {base} (to {real}); allowed: a "
        f"path inside that folder (relative to it), or one you pass on the command line with --allow-path {real}"
    )


def _inside_parts(value: str, folder: Folder) -> tuple[str | None, Path]:
    """(`value` relative to the open `folder` ("" for the folder itself) when it leads inside it, else None (a
    path the command line allowed), the real path it leads to)."""
    real, real_base = _real_target(value, folder)
    if not _within(real, real_base):
        return None, real
    return (real.relative_to(real_base).as_posix() if real != real_base else ""), real


def _pin_local(
    value: str,
    key: str,
    where: str,
    base: Path,
    allowed: tuple[str | Path, ...],
    folder_ok: bool,
    limit: int,
    folder: Folder,
) -> Path:
    """Read a local input of an experiment file ONCE and pin its bytes (:mod:`needlebench.sources.pinned`); every
    later use (the recipe's hash, the corpus, the needles) takes the pinned bytes, never the path again. A path
    inside the file's folder is opened relative to that folder's descriptor `folder` (opened once, before the file
    was read) with ``O_NOFOLLOW`` at every part (:class:`needlebench.safe_fs.Folder`), and the type is checked on
    the descriptor that is read: a file swapped for a link after :func:`local_path` is refused, not followed
    (open(2), ``O_NOFOLLOW``). A path outside it that the command line allowed (``--allow-path``) is the user's own
    and read once at the real path that was checked."""
    import os
    import stat

    path = local_path(value, key, where, base, allowed, folder)
    allowed_text = "a .txt or .jsonl file or a folder" if folder_ok else "an existing needles.jsonl file"
    allowed_text += " (not a FIFO, device, socket or link)"
    relative, real = _inside_parts(value, folder)
    if relative is None:  # allowed on the command line (else changed since the check: refused again here)
        local_path(value, key, where, base, allowed, folder)
        if not any(_within(real, Path(a).expanduser().resolve()) for a in allowed):
            raise _fail(where, key, value, "a path inside the experiment file's folder or one --allow-path allows")
        # read at the real path checked (links already resolved), named in messages as the file gives it
        try:
            if folder_ok and real.is_dir():
                with Folder.open(real) as outside:
                    read = read_folder_txt(outside, path.name, str(path), key, limit, sole=False)
                held = Pinned(path.name, "folder", read.files)
            elif real.exists():
                fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                held = Pinned(path.name, "file", ((path.name, read_fd(fd, str(path), key, limit)),))
            else:
                raise _fail(where, key, value, allowed_text)
        except OSError as error:
            raise NeedlebenchError(f"cannot read {key} {path}: {error.strerror or error}") from None
        pin(path, held, fresh=True)  # under the name the experiment gives; never read again
        return path
    info = folder.lstat(relative) if relative else os.fstat(folder.fd)
    if info is None:
        if folder_ok:
            raise NeedlebenchError(f"haystack {path} does not exist; give a .txt file, a .jsonl file or a directory")
        raise _fail(where, key, value, allowed_text)
    if stat.S_ISDIR(info.st_mode) and folder_ok:
        with folder.sub(relative) if relative else Folder(os.dup(folder.fd), folder.path) as sub:
            for entry in sub.listdir():  # the line for a link out names it (read_folder_txt refuses any link)
                found = sub.lstat(entry)
                if entry.endswith(".txt") and found is not None and stat.S_ISLNK(found.st_mode):
                    inner = f"{relative}/{entry}" if relative else entry
                    local_path(inner, f"haystack ({entry})", where, base, (), folder)
            held = read_folder_txt(sub, path.name, str(path), "haystack", limit)
    elif stat.S_ISREG(info.st_mode):
        data = folder.read_bytes(relative, limit=limit, what=f" ({where}: key {key})", sole=True)
        held = Pinned(path.name, "file", ((path.name, data),))
    else:
        raise _fail(where, key, value, allowed_text)
    pin(path, held, fresh=True)
    return path


def _local_haystack(
    value: object, where: str, base: Path | None, allowed: tuple[str | Path, ...], folder: Folder | None = None
) -> object:
    """The haystack of an experiment file: a local one inside its folder (:func:`local_path`) that is a regular
    file or a folder of .txt files, read once through descriptors (:func:`_pin_local`); other specs unchanged."""

    if base is None or folder is None or not is_local_spec(value):
        return value
    return str(_pin_local(value, "haystack", where, base, allowed, True, MAX_INPUT_BYTES, folder))


def parse_experiment(
    data: dict,
    where: str = "experiment",
    base: Path | None = None,
    allowed: tuple[str | Path, ...] = (),
    folder: Folder | None = None,
) -> Experiment:
    """Validate an experiment mapping against the schema and the rules the schema cannot say. Local paths are taken
    relative to `base` (the file's folder, open as `folder`: every input is read relative to that descriptor) and
    must stay inside it or inside a path of `allowed`."""
    if base is not None and folder is None:
        with Folder.open(base) as opened:
            return parse_experiment(data, where, base, allowed, opened)
    _schema_check(data, where)
    kind = data["kind"]
    language = data["language"]
    lengths_value = data["lengths"]
    if isinstance(lengths_value, dict):
        if lengths_value["min"] > lengths_value["max"]:
            raise _fail(where, "lengths.min", lengths_value["min"], f"at most lengths.max ({lengths_value['max']})")
        lengths = spaced_lengths(lengths_value["min"], lengths_value["max"], lengths_value["n"])
    else:
        lengths = tuple(lengths_value)
    if len(set(lengths)) != len(lengths):
        raise _fail(where, "lengths", lengths_value, "distinct lengths")
    depths_value = data["depths"]
    if isinstance(depths_value, dict):
        depths = generate_depth_percents(depths_value["n"], depths_value.get("spacing", "linear"))
    else:
        depths = tuple(float(d) for d in depths_value)
        bad = [d for d in depths if not math.isfinite(d)]
        if bad:  # NaN passes the schema's bounds (every comparison with it is false)
            raise _fail(where, f"depths.{depths.index(bad[0])}", bad[0], "a number >= 0 and <= 100")
    if len(set(depths)) != len(depths):
        raise _fail(where, "depths", depths_value, "distinct depths")
    start_buffer, end_buffer = data.get("start_buffer", 0), data.get("end_buffer", 0)
    length_buffer = data.get("length_buffer", 0)
    shortest = min(lengths)
    if length_buffer + start_buffer + end_buffer >= shortest:
        raise _fail(
            where,
            "length_buffer" if length_buffer else "start_buffer",
            length_buffer or start_buffer,
            f"length_buffer + start_buffer + end_buffer below the shortest length ({shortest})",
        )
    prompt = data.get("prompt", "default")
    if prompt != "default" and (prompt.count(CONTEXT_SLOT) != 1 or "{question}" not in prompt):
        raise _fail(where, "prompt", prompt, "'default' or a template with {context} once and {question}")
    family = family_of(kind)
    needles = _parse_needles(data, kind, language, where, base, allowed, folder)
    sample_method = data.get("sample_method", "fixed")
    fixed_index = data.get("fixed_index", 0)
    n_needles = data.get("n_needles", 1)
    if family.one_needle_per_prompt:
        if fixed_index >= len(needles):
            raise _fail(where, "fixed_index", fixed_index, f"an index below the {len(needles)} needle(s)")
        if sample_method == "fixed" and n_needles > 1:
            raise _fail(where, "n_needles", n_needles, "1 with sample_method fixed (use sequential or random)")
    else:
        for key in ("sample_method", "fixed_index", "n_needles"):
            if key in data:
                raise _fail(where, key, data[key], f"nothing for kind {kind} (every needle goes into each prompt)")
    if not family.chain_needles:
        for key in ("question", "answer", "keyword"):
            if key in data:
                raise _fail(where, key, data[key], f"nothing for kind {kind}; give question/answer/keyword per needle")
    if "diff" in data and not math.isfinite(data["diff"]):
        raise _fail(where, "diff", data["diff"], "a number > 0 and <= 100")
    if family.one_needle_per_prompt and "diff" in data:
        raise _fail(where, "diff", data["diff"], f"nothing for kind {kind} (diff spaces the needles of multi kinds)")
    return Experiment(
        name=data["name"],
        kind=kind,
        language=language,
        lengths=lengths,
        depths=depths,
        needles=needles,
        haystack=_local_haystack(data.get("haystack"), where, base, allowed, folder),
        question=data.get("question", ""),
        answer=data.get("answer", data.get("keyword", "")),
        keyword=data.get("keyword", ""),
        sample_method=sample_method,
        fixed_index=fixed_index,
        n_needles=n_needles,
        diff=float(data.get("diff", 10)),
        start_buffer=start_buffer,
        end_buffer=end_buffer,
        runs=data.get("runs", 1),
        length_buffer=length_buffer,
        guide=data.get("guide", True),
        question_position=data.get("question_position", "end"),
        prompt=prompt,
        seed=data.get("seed", RELEASE_SEED),
        tokenizer=_tokenizer_spec(data.get("tokenizer", DEFAULT_TOKENIZER), base, where, allowed, folder),
    )


def _tokenizer_spec(
    spec: str, base: Path | None, where: str = "", allowed: tuple[str | Path, ...] = (), folder: Folder | None = None
) -> str:
    """The file's tokenizer. ``hf:PATH`` relative to the experiment file's folder (open as `folder`) is a tokenizer
    folder there, copied through descriptors; a folder outside it (absolute, ``~``, ``..``, a link pointing out) only
    when the command line allows it (:func:`local_path`), given then by its real path. ``hf:NAME`` or
    ``hf:ORG/NAME`` that is no folder beside the file is a model name of the local Hugging Face cache, never a folder
    of the user's current folder (the loader would take one of that name first: ``AutoTokenizer.from_pretrained``
    reads a local folder before the cache) unless the command line allows it."""
    import os
    import stat

    if not spec.startswith("hf:") or base is None:
        return spec
    if folder is None:
        with Folder.open(base) as opened:
            return _tokenizer_spec(spec, base, where, allowed, opened)
    text = spec[3:]
    given = Path(text).expanduser()
    if given.is_absolute() or text.startswith("~") or ".." in Path(text).parts:
        local_path(text, "tokenizer", where, base, allowed, folder)
        relative, real = _inside_parts(text, folder)
        if relative is None:  # allowed on the command line: the user's own folder, by the real path checked
            return f"hf:{real}"
        return f"hf:{_private_tokenizer_copy(folder, relative, where)}"
    try:  # resolved by the kernel from the folder's descriptor, never from a path looked up again
        beside = stat.S_ISDIR(os.stat(text, dir_fd=folder.fd).st_mode)
    except (OSError, ValueError):
        beside = False
    if beside:
        local_path(text, "tokenizer", where, base, allowed, folder)
        relative, real = _inside_parts(text, folder)
        if relative is None:
            local_path(text, "tokenizer", where, base, allowed, folder)  # changed since the check: refused here
            return f"hf:{real}"
        return f"hf:{_private_tokenizer_copy(folder, relative, where)}"
    parts = text.split("/")
    if len(parts) > 2 or any(part in ("", ".") for part in parts) or "\\" in text or "\0" in text:
        raise _fail(
            where,
            "tokenizer",
            spec,
            f"hf:FOLDER of a tokenizer folder inside the experiment file's folder {base}, hf:NAME or hf:ORG/NAME "
            "of a model in the local Hugging Face cache, or a folder you pass with --allow-path",
        )
    if os.path.isdir(given):  # a folder of that name where the user runs needlebench: theirs, not the file's
        real = given.resolve()
        if any(_within(real, Path(a).expanduser().resolve()) for a in allowed):
            return f"hf:{real}"
        raise NeedlebenchError(
            f"{where}: key tokenizer: {spec!r} is not a folder beside the experiment file (in {base}) but names "
            f"the folder {real} in your current folder, which an experiment file may not read; allowed: a tokenizer "
            f"folder beside the experiment file, a model name of the local Hugging Face cache, or that folder with "
            f"--allow-path {real}"
        )
    return spec


#: Files of a tokenizer folder transformers reads (tokenizer.json and its configs, vocabularies, merges,
#: SentencePiece models); model weights and other files are left out of the copy.
_TOKENIZER_FILE = re.compile(
    r"^(tokenizer[\w.-]*|special_tokens_map\.json|added_tokens\.json|config\.json|generation_config\.json|"
    r"vocab[\w.-]*|merges[\w.-]*|[\w.-]+\.model|[\w.-]+\.tiktoken|chat_template[\w.-]*)$"
)
#: Largest tokenizer file copied (the largest tokenizer.json of common models is some 30 MB).
_MAX_TOKENIZER_FILE = 512 * 1024 * 1024
_copies: list = []


def _private_tokenizer_copy(top: Folder, relative: str, where: str) -> Path:
    """A private copy of the tokenizer folder `relative` of the experiment's folder (open as `top`), made through
    descriptors: each file transformers would read is opened relative to the folder's descriptor with
    ``O_NOFOLLOW`` and must be a regular file (a link such as ``tok/tokenizer.json -> ~/.ssh/id_rsa`` is a one-line
    error, never followed); the copy, under the folder's own name (its label in ``hf:LABEL@sha256:HEX``), lives as
    long as the process and is what the tokenizer is loaded from. Its index entry names the original folder
    (:func:`needlebench.sources.inputs.remember_path`)."""
    import os
    import stat
    import tempfile

    holder = tempfile.TemporaryDirectory(prefix="needlebench-tokenizer-")
    _copies.append(holder)
    origin = _real_folder(top) / relative if relative else _real_folder(top)
    name = origin.name
    folder = top.sub(relative) if relative else Folder(os.dup(top.fd), top.path)
    with folder:
        with Folder.open(holder.name) as private, private.sub(name, create=True, mode=0o700) as copy:
            for entry in folder.listdir():
                if not _TOKENIZER_FILE.match(entry):
                    continue
                info = folder.lstat(entry)
                if info is None or stat.S_ISDIR(info.st_mode):
                    continue
                if not stat.S_ISREG(info.st_mode):
                    raise _fail(
                        where, "tokenizer", f"{relative or '.'}/{entry}", "a folder of regular files (not a link)"
                    )
                data = folder.read_bytes(entry, limit=_MAX_TOKENIZER_FILE, what=f" ({where}: key tokenizer)", sole=True)
                copy.write_bytes(entry, data, mode=0o600)
    target = Path(holder.name) / name
    note_copy(target, origin)
    return target


def _parse_needles(
    data: dict,
    kind: str,
    language: str,
    where: str,
    base: Path | None,
    allowed: tuple[str | Path, ...] = (),
    folder: Folder | None = None,
) -> tuple[ExperimentNeedle, ...]:
    has_inline, has_file = "needles" in data, "needles_file" in data
    if has_inline == has_file:
        raise NeedlebenchError(f"{where}: give exactly one of the keys needles, needles_file")
    if family_of(kind).chain_needles:
        if has_file:
            raise _fail(where, "needles_file", data["needles_file"], f"inline needles (a list of strings) for {kind}")
        for key in ("question", "keyword"):
            if key not in data:
                raise NeedlebenchError(f"{where}: missing key {key}; required for kind {kind}")
        for i, item in enumerate(data["needles"]):
            if not isinstance(item, str):
                raise _fail(where, f"needles.{i}", item, f"a needle sentence (string) for {kind}")
        return tuple(ExperimentNeedle(text.strip(), "", "", "") for text in data["needles"])
    if has_file:
        if base is None or folder is None:
            path = local_path(data["needles_file"], "needles_file", where, base, allowed)
        else:  # read once through the folder's descriptor; load_needles_file takes the pinned bytes
            path = _pin_local(
                data["needles_file"], "needles_file", where, base, allowed, False, MAX_NEEDLES_BYTES, folder
            )
        loaded = load_needles_file(path, language)
        return tuple(ExperimentNeedle(n.text, n.question, n.keyword, n.keyword) for n in loaded)
    needles = []
    for i, item in enumerate(data["needles"]):
        if not isinstance(item, dict):
            raise _fail(where, f"needles.{i}", item, "a mapping with needle, question, answer, keyword")
        keyword = item.get("keyword") or item.get("answer")
        if not keyword:
            raise NeedlebenchError(f"{where}: missing key needles.{i}.keyword; required: keyword or answer")
        needles.append(ExperimentNeedle(item["needle"].strip(), item["question"], item.get("answer", keyword), keyword))
    _check_keywords(needles, where)
    return tuple(needles)


def _check_keywords(needles: list[ExperimentNeedle], where: str) -> None:
    """Each needle must hold its keyword (what scoring looks for in the answer): a needle without it asks a
    question the context cannot answer."""
    for i, needle in enumerate(needles):
        if needle.keyword.casefold() not in needle.text.casefold():
            raise _fail(
                where,
                f"needles.{i}.keyword",
                needle.keyword,
                f"a keyword that occurs in its needle ({needle.text[:40]!r}{'...' if len(needle.text) > 40 else ''})",
            )


def _recorded_haystack(spec: str) -> str | dict:
    """A haystack spec as a manifest records it: a local path becomes its {file, kind, size, sha256} record."""

    return input_record(spec) if is_local_spec(spec) else spec


def experiment_from_record(record: dict) -> Experiment:
    """An experiment recorded in a manifest (:meth:`Experiment.to_record`). A recorded local haystack is kept as
    its record: the build reads the recipe's haystack (located by hash, or `verify --haystack-en/-zh PATH`)."""

    data = dict(record)
    recorded = data.get("haystack")
    # a manifest records needles inline and a local haystack as {file, kind, size, sha256}, never as a path: a
    # path there came from someone else's folder and would read this machine's files
    if "needles_file" in data:
        raise _fail("manifest experiment", "needles_file", data["needles_file"], "inline needles (as recorded)")
    if is_local_spec(recorded):
        raise _fail("manifest experiment", "haystack", recorded, "a recorded local input {file, kind, size, sha256}")
    if not is_input_record(recorded):
        return parse_experiment(data, "manifest experiment")
    del data["haystack"]
    return replace(parse_experiment(data, "manifest experiment"), haystack_record=recorded)


# ---------------------------------------------------------------------------------------------------- rows


def pick_needle(exp: Experiment, repeat: int, seed: int) -> ExperimentNeedle:
    """The needle of one sample: Inspect's fixed (always `fixed_index`), sequential (from `fixed_index` on,
    cycling) or random (seeded by the cell) sampling."""
    import random

    count = len(exp.needles)
    if exp.sample_method == "fixed":
        return exp.needles[exp.fixed_index]
    if exp.sample_method == "sequential":
        return exp.needles[(exp.fixed_index + repeat % exp.n_needles) % count]
    return exp.needles[random.Random(seed).randrange(count)]


def placement_depth(depth: float, target: int, exp: Experiment) -> float:
    """Where a needle of grid depth `depth` goes, in percent of the whole haystack: the depth spans the part
    between the start and end buffers (Inspect's start_buffer/end_buffer), clamped to [0, 100]."""
    if not exp.start_buffer and not exp.end_buffer:
        return float(depth)
    usable = target - exp.start_buffer - exp.end_buffer
    return round(100 * (exp.start_buffer + depth / 100 * usable) / target, 6)


def _frame(exp: Experiment, family: str, question: str) -> tuple[str, str]:
    if exp.prompt == "default":
        return frame_parts(family, exp.language, question, exp.question_position)
    before, after = exp.prompt.split(CONTEXT_SLOT)
    return before.replace("{question}", question), after.replace("{question}", question)


def _guided(question: str, exp: Experiment) -> str:
    return splice_guide(question, exp.language) if exp.guide else question


def _reasoning_question(exp: Experiment, needles: list[ExperimentNeedle]) -> str:
    return reasoning_question(exp.question, exp.language) if exp.guide else exp.question


#: The question of a prompt by kind: the needle's (single), the needles' joined (multi_retrieval), the chain's.
_QUESTIONS = {
    single.FAMILY.key: lambda exp, needles: _guided(needles[0].question, exp),
    multi_retrieval.FAMILY.key: lambda exp, needles: _guided(
        prompt_data()["multi_retrieval_join"][exp.language].join(n.question for n in needles), exp
    ),
    multi_reasoning.FAMILY.key: _reasoning_question,
}
#: The answer columns of a row by kind.
_ANSWERS = {
    single.FAMILY.key: lambda exp, needles: {"answer": needles[0].answer, "keywords": [needles[0].keyword]},
    multi_retrieval.FAMILY.key: lambda exp, needles: {
        "answer": "\n".join(n.answer for n in needles),
        "keywords": [n.keyword for n in needles],
        "num_needles": len(needles),
    },
    multi_reasoning.FAMILY.key: lambda exp, needles: {
        "answer": exp.answer,
        "keywords": [exp.keyword],
        "num_needles": len(needles),
    },
}


def experiment_rows(
    spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...], utf8_prompts: bool = False
) -> Iterator[dict]:
    """Rows of an experiment: the family's columns, one row per (length, depth, sample); prompts are text."""
    exp = spec.experiment
    corpus = tokenized_corpus(spec, settings)
    family = spec.family_object
    for cell in cells_of(spec, settings, lengths):
        target = cell.length - cell.buffer
        start = window_start_hint(corpus, target, cell.seed)
        if family.one_needle_per_prompt:
            needles = [pick_needle(exp, cell.repeat, derive_seed(cell.seed, "needle"))]
        else:
            needles = list(exp.needles)
        question = _QUESTIONS[spec.family](exp, needles)
        before, after = _frame(exp, spec.family, question)
        for depth in exp.depths:
            depths = [min(100.0, depth + exp.diff * i) for i in range(len(needles))]
            requests = [NeedleRequest(n.text, placement_depth(d, target, exp)) for n, d in zip(needles, depths)]
            context = build_context(corpus, target, requests, start)
            row = {
                "id": f"{spec.name}-L{cell.length}-d{depth:g}-r{cell.repeat}",
                **base_row(cell, settings, corpus, context, before, after),
                "depth_percent": float(depth),
                "question": question,
                "needles": [n.text for n in needles],
                "seed": derive_seed(settings.release_seed, spec.name, cell.length, depth, cell.repeat),
                "requested_depths": [request.depth for request in requests],
            }
            row.update(_ANSWERS[spec.family](exp, needles))
            yield row
