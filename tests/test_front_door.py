"""Every config family x every build mode it accepts x both languages, through the front door.

The matrix is derived from the config registry (:func:`needlebench.tasks.grid.registry`) and the modes each
config declares (:attr:`ConfigSpec.compat_modes`, :attr:`ConfigSpec.accepts_hf_tokenizer`), plus every experiment
file of ``scripts/experiments``: one cell per family variant (edition, family, ATC / Counting-Stars variant, star
count), language and mode, at the family's smallest size (and three depths, ``--depths 0,50,100``, where a family has
a depth grid: the modes' code paths are the same at every depth, and CI's time is short). Each cell is built with
the ``needlebench`` command (one ``build`` call per mode for all its configs), checked with ``needlebench verify``,
loaded with ``datasets.load_dataset``, exported with ``needlebench tasks`` and run through lm-eval with
``needlebench eval``: ``needlebench-oracle`` scores full marks and lm-eval's ``dummy`` model (it answers "lol")
about zero on a stratified ``--subset`` of every task, each model in one lm-eval process over the whole matrix.

A mode a config does not declare is refused by the command line (one line, exit status 2, nothing written): so
the matrix covers every family x mode the command line accepts, and a new family or mode joins it by being
declared in :mod:`needlebench.tasks.grid`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from needlebench.evaluation.report import HEALTH
from needlebench.tasks.experiment import load_experiment, register_experiment
from needlebench.tasks.grid import COMPAT_MODES, ConfigSpec, registry
from needlebench.tasks.schema import features_dict
from support.needles import write_needles
from support.smollm import smollm_dir

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT_FILES = sorted((ROOT / "scripts" / "experiments").glob("*.yaml"))
#: Every mode the command line has: the default, each ``--compat`` mode, and ``--tokenizer hf:...``.
HF = "hf"
ALL_MODES = ("default", *COMPAT_MODES, HF)
#: The depth grid of the built-in builds (``--depths``; ATC and Counting-Stars have none).
DEPTHS = "0,50,100"
#: Rows per task in the lm-eval runs (an ATC item is four rows, so one whole item).
SUBSET = 4
#: lm-eval's ``dummy`` model answers "lol": a score at most this share of full marks counts as about zero.
DUMMY_CEILING = 0.05


def variant_key(spec: ConfigSpec) -> tuple:
    """What makes a family variant: edition, family, variant (ATC style, Counting-Stars task) and star count."""
    return (spec.edition, spec.family, spec.variant, spec.stars)


def smallest_configs() -> list[ConfigSpec]:
    """Per family variant and language, the registry's config with the fewest context tokens."""
    best: dict[tuple, ConfigSpec] = {}
    for spec in registry().values():
        key = (variant_key(spec), spec.language)
        if key not in best or spec.approx_tokens < best[key].approx_tokens:
            best[key] = spec
    return list(best.values())


def modes_of(spec: ConfigSpec) -> tuple[str, ...]:
    """The modes a config declares: the default, its compat modes, and hf when its lengths may be counted so."""
    return ("default", *spec.compat_modes, *((HF,) if spec.accepts_hf_tokenizer else ()))


def experiment_specs() -> list[ConfigSpec]:
    return [register_experiment(load_experiment(path)) for path in EXPERIMENT_FILES]


@dataclass(frozen=True)
class Build:
    """One ``needlebench build`` call: a mode and the configs (or the experiment file) it builds."""

    id: str
    mode: str
    configs: tuple[str, ...] = ()
    experiment: Path | None = None


def plan() -> list[Build]:
    builds = []
    specs = smallest_configs()
    for mode in ALL_MODES:
        configs = tuple(spec.name for spec in specs if mode in modes_of(spec))
        if configs:
            builds.append(Build(mode, mode, configs))
    for path, spec in zip(EXPERIMENT_FILES, experiment_specs(), strict=True):
        for mode in modes_of(spec):
            builds.append(Build(f"{spec.name}-{mode}", mode, (spec.name,), path))
    return builds


BUILDS = plan()
CELLS = [(build, config) for build in BUILDS for config in build.configs]


def cell_id(cell: tuple[Build, str]) -> str:
    return f"{cell[0].mode}-{cell[1]}"


def task_of(build: Build, config: str) -> str:
    """The lm-eval task of a cell: its mode's build of the config (configs repeat across modes)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", f"fd_{build.id}_{config}")


def spec_of(config: str) -> ConfigSpec:
    from needlebench.tasks.grid import get_config

    return get_config(config)


def run(*args: str | Path, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """The ``needlebench`` command (its console-script entry point) in a fresh process."""
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )


def children_cpu() -> float:
    """CPU seconds used by finished child processes (wall time depends on what else the machine runs)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


# --------------------------------------------------------------------------------------------- the matrix


def test_the_matrix_covers_every_family_variant_language_and_mode():
    specs = smallest_configs()
    assert {variant_key(spec) for spec in specs} == {variant_key(spec) for spec in registry().values()}
    for spec in specs:  # both languages of every variant
        assert {s.language for s in specs if variant_key(s) == variant_key(spec)} == {"en", "zh"}
    cells = {(build.mode, config) for build, config in CELLS}
    for spec in specs:
        assert {mode for mode, config in cells if config == spec.name} == set(modes_of(spec))
    assert {s.name for s in experiment_specs()} <= {config for _, config in cells}
    # the cells the families of the issue name, spelled out (a derivation that lost one fails here)
    for expected in [
        ("opencompass", "v2_single_en_4k"),
        ("opencompass", "v2_multi_retrieval_zh_4k"),
        ("opencompass", "v2_multi_reasoning_en_4k"),
        ("opencompass", "v2_atc_zh"),
        ("opencompass", "atc_en_512"),
        ("counting-stars", "counting_stars_reasoning_zh_128k"),
        (HF, "multi_reasoning_zh_4k"),
        ("default", "counting_stars_acquisition_en_128k_m1024"),
        ("default", "atc_zh_open"),
    ]:
        assert expected in cells, expected


@pytest.mark.slow
def test_every_mode_a_config_does_not_declare_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """The command line accepts exactly the declared modes: every other (config, mode) of the matrix's configs
    is refused by ``needlebench build`` in one line with exit status 2, before anything is written."""
    from needlebench import cli, interrupts

    monkeypatch.setattr(interrupts, "exit_now", lambda status=None: sys.exit(status))  # never os._exit in pytest
    monkeypatch.setattr(interrupts, "install", lambda: None)  # pytest keeps its own Ctrl-C handling
    tokenizer = f"hf:{smollm_dir()}"
    capsys.readouterr()  # what a first conversion of the model printed
    refused = 0
    for spec in [*smallest_configs(), *experiment_specs()]:
        for mode in set(ALL_MODES) - set(modes_of(spec)):
            out = tmp_path / f"{spec.name}-{mode}"
            if spec.name in {s.name for s in experiment_specs()}:
                path = EXPERIMENT_FILES[[s.name for s in experiment_specs()].index(spec.name)]
                target = ["--experiment", str(path)]
            else:
                target = [spec.name]
            option = ["--tokenizer", tokenizer] if mode == HF else ["--compat", mode]
            monkeypatch.setattr(sys, "argv", ["needlebench", "build", *target, *option, "--out", str(out)])
            with pytest.raises(SystemExit) as exited:
                cli.main()
            err = capsys.readouterr().err
            assert exited.value.code == 2, (spec.name, mode, err)
            assert err.startswith("needlebench: error: ") and err.count("\n") == 1, (spec.name, mode, err)
            assert not out.exists()
            refused += 1
    assert refused >= 40  # ATC, Counting-Stars and experiments refuse several modes each


# --------------------------------------------------------------------------------------------- inputs and builds


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small local inputs: the paper's file formats (PaulGrahamEssays.jsonl, zh_finance.jsonl, needles.jsonl,
    names.json) for ``--compat opencompass``, and haystack slices for ``--tokenizer hf:`` (a small corpus
    tokenises in a moment)."""
    from needlebench.sources.corpus import load_corpus

    folder = tmp_path_factory.mktemp("inputs")
    files = {}
    for language, name, size in (("en", "PaulGrahamEssays.jsonl", 1000), ("zh", "zh_finance.jsonl", 400)):
        text = load_corpus(None, language).text
        documents = [text[i * size : (i + 1) * size] for i in range(40)]  # about 10,000 tokens in each language
        files[f"haystack_{language}"] = folder / name
        files[f"haystack_{language}"].write_text(
            "".join(
                json.dumps({"text": doc, "title": str(i)}, ensure_ascii=False) + "\n" for i, doc in enumerate(documents)
            ),
            encoding="utf-8",
        )
        files[f"slice_{language}"] = folder / f"{language}_slice.txt"
        files[f"slice_{language}"].write_text(text[: 100 * size], encoding="utf-8")
    files["needles"] = write_needles(folder / "needles.jsonl")
    # ATC chains of up to 512 relations need 513 distinct names per language
    given = [
        "Ann",
        "Bob",
        "Cid",
        "Dee",
        "Eve",
        "Fay",
        "Gus",
        "Hal",
        "Ivy",
        "Jon",
        "Kim",
        "Lou",
        "Max",
        "Ned",
        "Oto",
        "Pam",
        "Quin",
        "Rex",
        "Sue",
        "Tom",
        "Uma",
        "Vic",
        "Wes",
        "Xia",
        "Yul",
        "Zed",
    ]
    family = [
        "Lee",
        "Ray",
        "Fox",
        "Moss",
        "Park",
        "Hunt",
        "Cole",
        "Dunn",
        "Egan",
        "Ford",
        "Gray",
        "Hale",
        "Irwin",
        "Judd",
        "Kent",
        "Lowe",
        "Marsh",
        "Nash",
        "Orr",
        "Pike",
        "Quay",
        "Reed",
        "Shaw",
    ]
    english = [f"{a} {b}" for a in given for b in family]
    chinese = [
        a + b
        for a in "赵钱孙李周吴郑王冯陈褚卫蒋沈韩杨朱秦尤许何吕施张孔曹严华金魏陶姜"
        for b in "伟芳娜敏静丽强磊军洋勇艳杰娟涛明超秀霞平刚桂"
    ]
    files["names"] = folder / "names.json"
    files["names"].write_text(
        json.dumps({"English": ",".join(english), "Chinese": ",".join(chinese)}, ensure_ascii=False), encoding="utf-8"
    )
    return files


def mode_options(build: Build, inputs: dict[str, Path], tokenizer: Path) -> list[str]:
    """The options of a build's mode, as a user gives them (the same ones re-point inputs for `verify`)."""
    if build.mode == "opencompass":
        return [
            "--haystack-en",
            str(inputs["haystack_en"]),
            "--haystack-zh",
            str(inputs["haystack_zh"]),
            "--needles",
            str(inputs["needles"]),
            "--names",
            str(inputs["names"]),
        ]
    if build.mode == HF and build.experiment is None:
        return ["--haystack-en", str(inputs["slice_en"]), "--haystack-zh", str(inputs["slice_zh"])]
    return []


@pytest.fixture(scope="module")
def built(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every build of the plan: one `needlebench build` call per mode (all its configs), one per experiment."""
    tokenizer = smollm_dir()
    root = tmp_path_factory.mktemp("builds")
    folders, timings = {}, {}
    cpu = children_cpu()
    for build in BUILDS:
        out = root / build.id
        args: list[str] = ["build"]
        args += ["--experiment", str(build.experiment)] if build.experiment else [*build.configs, "--depths", DEPTHS]
        if build.mode in COMPAT_MODES:
            args += ["--compat", build.mode]
        if build.mode == HF:
            args += ["--tokenizer", f"hf:{tokenizer}"]
        started = time.monotonic()
        ok(run(*args, *mode_options(build, inputs, tokenizer), "--out", out))
        timings[build.id] = round(time.monotonic() - started, 1)
        folders[build.id] = out
    print(f"build seconds: {timings}; CPU seconds of all builds: {children_cpu() - cpu:.1f}")
    return folders


@pytest.mark.slow
@pytest.mark.parametrize("build", BUILDS, ids=[build.id for build in BUILDS])
def test_every_build_verifies(build: Build, built: dict[str, Path], inputs: dict[str, Path]):
    options = mode_options(build, inputs, smollm_dir())
    if build.mode == HF:
        options += ["--tokenizer", f"hf:{smollm_dir()}"]
    started, cpu = time.monotonic(), children_cpu()
    result = ok(run("verify", built[build.id], *options))
    print(f"verify {build.id}: {time.monotonic() - started:.1f} s ({children_cpu() - cpu:.1f} CPU s)")
    assert "all configs match their fingerprints" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS, ids=[cell_id(cell) for cell in CELLS])
def test_every_cell_loads_with_datasets(cell: tuple[Build, str], built: dict[str, Path]):
    import datasets

    build, config = cell
    from needlebench.dataset.manifest import read_manifest

    split = datasets.load_dataset(str(built[build.id]), config, split="test")
    spec = spec_of(config)
    assert split.num_rows == read_manifest(built[build.id])["configs"][config]["rows"] > 0
    if build.experiment is not None or not spec.depths:  # the registry's grid (no --depths override)
        assert split.num_rows == spec.num_rows
    assert split.features.to_dict() == features_dict(spec.schema_family)
    first = split[0]
    assert first["config"] == config and first["language"] == spec.language and first["prompt"]
    assert first["compat"] == (build.mode if build.mode in COMPAT_MODES else "")
    assert first["tokenizer"].startswith("hf:" if build.mode == HF else "cl100k_base")


COMPAT_CELLS = [cell for cell in CELLS if cell[0].mode in COMPAT_MODES]


@pytest.mark.slow
@pytest.mark.parametrize("cell", COMPAT_CELLS, ids=[cell_id(cell) for cell in COMPAT_CELLS])
def test_compat_cells_hold_the_rows_of_the_reference_construction(
    cell: tuple[Build, str], built: dict[str, Path], inputs: dict[str, Path]
):
    """The byte-for-byte comparisons with the reference loaders (tests/test_compat_opencompass.py,
    test_v2_compat.py, test_counting_stars.py) check the rows the library yields; the rows the command wrote are
    those rows: the first 12 of each compat cell, every column."""
    import itertools

    import datasets

    from needlebench.dataset.options import BuildOptions
    from needlebench.dataset.rows import iter_rows

    build, config = cell
    files = (
        {
            "haystack_en": inputs["haystack_en"],
            "haystack_zh": inputs["haystack_zh"],
            "needles": inputs["needles"],
            "names": inputs["names"],
        }
        if build.mode == "opencompass"
        else {}
    )
    options = BuildOptions(
        compat=build.mode,
        depths=tuple(float(d) for d in DEPTHS.split(",")),
        **{key: str(path) for key, path in files.items()},
    )
    expected = list(itertools.islice(iter_rows(spec_of(config), options), 12))
    written = {row["id"]: row for row in datasets.load_dataset(str(built[build.id]), config, split="test")}
    for row in expected:
        assert written[row["id"]] == row, row["id"]


# --------------------------------------------------------------------------------------------- lm-eval


@pytest.fixture(scope="module")
def task_folder(built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`needlebench tasks` for every build, and one task per cell that includes its build's task under a name
    of its own (the same config is built in several modes), so one lm-eval process runs the whole matrix."""
    root = tmp_path_factory.mktemp("tasks")
    cells = root / "matrix"
    cells.mkdir()
    for build in BUILDS:
        ok(run("tasks", built[build.id], "--out", root / build.id))
    for build, config in CELLS:
        task = task_of(build, config)
        text = yaml.safe_dump({"include": str(root / build.id / f"{config}.yaml"), "task": task, "task_alias": task})
        (cells / f"{task}.yaml").write_text(text, encoding="utf-8")
    return cells


def evaluate(model: str, task_folder: Path, output: Path) -> dict:
    started, cpu = time.monotonic(), children_cpu()
    tasks = ",".join(task_of(build, config) for build, config in CELLS)
    ok(
        run(
            "eval",
            "run",
            "--model",
            model,
            "--include_path",
            task_folder,
            "--tasks",
            tasks,
            "--subset",
            str(SUBSET),
            "--output_path",
            output,
            timeout=900,
        )
    )
    print(
        f"lm-eval {model}: {time.monotonic() - started:.1f} s ({children_cpu() - cpu:.1f} CPU s) for {len(CELLS)} tasks"
    )
    return json.loads(max(output.rglob("results_*.json")).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def oracle_results(task_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return evaluate("needlebench-oracle", task_folder, tmp_path_factory.mktemp("oracle"))


@pytest.fixture(scope="module")
def dummy_results(task_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return evaluate("dummy", task_folder, tmp_path_factory.mktemp("dummy"))


def scores(results: dict, build: Build, config: str) -> dict[str, float]:
    """The task's metrics (not their stderr, not the run-health counts), each checked to cover the subset."""
    task = task_of(build, config)
    assert task in results["results"], f"lm-eval has no results for {task}"
    assert results["n-samples"][task]["effective"] >= min(SUBSET, spec_of(config).num_rows)
    values = {
        key.split(",")[0]: value
        for key, value in results["results"][task].items()
        if key.endswith(",none") and "_stderr" not in key and key.split(",")[0] not in HEALTH
    }
    assert values, task
    return values


def full_marks(config: str) -> float:
    return 1.0 if spec_of(config).family == "counting_stars" else 100.0


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS, ids=[cell_id(cell) for cell in CELLS])
def test_the_oracle_scores_full_marks(cell: tuple[Build, str], oracle_results: dict):
    build, config = cell
    for metric, value in scores(oracle_results, build, config).items():
        assert value == pytest.approx(full_marks(config)), (metric, value)


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS, ids=[cell_id(cell) for cell in CELLS])
def test_the_dummy_model_scores_about_zero(cell: tuple[Build, str], dummy_results: dict):
    build, config = cell
    for metric, value in scores(dummy_results, build, config).items():
        assert 0.0 <= value <= DUMMY_CEILING * full_marks(config), (metric, value)
