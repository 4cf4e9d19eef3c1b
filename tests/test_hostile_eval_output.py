"""Hostile results folders and task folders against `needlebench eval run` and `needlebench tasks` (issue 33).

lm-eval writes a run's files by path under ``<output_path>/<model folder>/``; the oracle's model folder has a
predictable name (lm-eval's seeded ``random_name_id``), so a results folder from someone else can hold a link
there. Each attack runs the `needlebench` command (a subprocess) in the sandbox of ``tests/support/sandbox.py`` (a
fake HOME hashed before and after).
"""

from __future__ import annotations

import json
import os
import py_compile
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.sandbox import CLI, REAL_CONFIG, REAL_HF_HOME, refused, run, snapshot

#: The oracle's model folder (lm-eval would draw a random id: no model name in its arguments).
ORACLE_FOLDER = "needlebench-oracle"
FUTURE = "2099-01-01T00-00-00.000000"


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory) -> Path:
    """A dataset folder (atc_en) and the task folder `needlebench tasks` writes for it."""
    root = tmp_path_factory.mktemp("eval_output")
    subprocess.run([*CLI, "build", "atc_en", "--out", str(root / "DS")], check=True, capture_output=True)
    subprocess.run([*CLI, "tasks", str(root / "DS"), "--out", str(root / "T")], check=True, capture_output=True)
    return root / "T"


def eval_run(home: Path, tasks: Path, output: Path, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """The oracle on 4 rows of atc_en with samples logged (a hang fails the test after `timeout` seconds)."""
    environment = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME}
    args = ["eval", "run", "--model", "needlebench-oracle", "--include_path", str(tasks)]
    args += ["--tasks", "needlebench_atc_en", "--limit", "4", "--output_path", str(output), "--log_samples", *extra]
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=environment, cwd=home / "work", timeout=timeout, check=False
    )


def one_error(result: subprocess.CompletedProcess, *names: str) -> str:
    """Exit 2, no traceback, exactly one error line (lm-eval's own log lines may come before it) naming `names`."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("needlebench: error: ")]
    assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr[-2000:]
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


def run_files(output: Path) -> list[str]:
    """The run's files under `output` (names with the date replaced), and no run folder left behind."""
    assert not [p for p in output.iterdir() if p.name.startswith(".needlebench-run-")]
    names = []
    for path in sorted((output / ORACLE_FOLDER).iterdir()):
        if FUTURE not in path.name:
            names.append(path.name.split("_20")[0])
    return names


@pytest.mark.slow
def test_an_honest_run_keeps_lm_evals_layout(sandbox: Path, task_folder: Path) -> None:
    output = sandbox / "work" / "OUT"
    result = eval_run(sandbox, task_folder, output)
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(p.name for p in output.iterdir()) == [ORACLE_FOLDER]
    assert run_files(output) == ["needlebench_health", "results", "samples_needlebench_atc_en"]
    results = next((output / ORACLE_FOLDER).glob("results_*.json"))
    assert ".needlebench-run-" not in results.read_text()
    health = json.loads(next((output / ORACLE_FOLDER).glob("needlebench_health_*.json")).read_text())
    assert health["results_file"] == results.name and "needlebench_atc_en" in health["tasks"]


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["link-to-mydata", "dangling-link", "file"])
def test_a_link_at_the_model_folder_is_refused_and_never_written_through(
    sandbox: Path, task_folder: Path, planted: str
) -> None:
    shared = sandbox / "work" / "SHARED"
    shared.mkdir()
    model_folder = shared / ORACLE_FOLDER
    if planted == "link-to-mydata":
        model_folder.symlink_to(sandbox / "mydata")
    elif planted == "dangling-link":
        model_folder.symlink_to(sandbox / "nothing")
    else:
        model_folder.write_text("not a folder\n")
    before = snapshot(sandbox)
    one_error(eval_run(sandbox, task_folder, shared), ORACLE_FOLDER, "link")
    assert snapshot(sandbox) == before  # ~/mydata untouched, nothing left in SHARED (no run folder)


@pytest.mark.slow
def test_a_model_named_in_its_arguments_is_checked_before_lm_eval_starts(sandbox: Path, task_folder: Path) -> None:
    shared = sandbox / "work" / "SHARED"
    shared.mkdir()
    (shared / "my-model").symlink_to(sandbox / "mydata")
    before = snapshot(sandbox)
    refused(eval_run(sandbox, task_folder, shared, "--model_args", "pretrained=my-model"), "my-model", "link")
    assert snapshot(sandbox) == before


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["fifo", "garbage"])
def test_the_health_file_reads_only_this_runs_files(sandbox: Path, task_folder: Path, planted: str) -> None:
    shared = sandbox / "work" / "SHARED"
    (shared / ORACLE_FOLDER).mkdir(parents=True)
    results = shared / ORACLE_FOLDER / f"results_{FUTURE}.json"
    samples = shared / ORACLE_FOLDER / f"samples_needlebench_atc_en_{FUTURE}.jsonl"
    if planted == "fifo":
        os.mkfifo(results)
    else:
        results.write_text(json.dumps({"results": {"needlebench_atc_en": {}}}))
        samples.write_text("{not json\n")
        os.utime(samples, (time.time() + 3e8, time.time() + 3e8))
    os.utime(results, (time.time() + 3e8, time.time() + 3e8))  # newer than anything the run writes
    before = snapshot(sandbox, skip=shared)
    result = eval_run(sandbox, task_folder, shared, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert snapshot(sandbox, skip=shared) == before
    if planted == "fifo":  # left alone (never opened: a FIFO blocks its reader)
        assert stat.S_ISFIFO(os.lstat(results).st_mode)
    else:
        assert samples.read_text() == "{not json\n"
    assert run_files(shared) == ["needlebench_health", "results", "samples_needlebench_atc_en"]
    health = json.loads(next((shared / ORACLE_FOLDER).glob("needlebench_health_2*.json")).read_text())
    assert FUTURE not in health["results_file"] and health["tasks"]["needlebench_atc_en"]["no_final_answer"] == 0.0


@pytest.mark.slow
def test_resume_refuses_a_link_at_the_chunk_store_before_the_model_runs(sandbox: Path, task_folder: Path) -> None:
    import argparse

    from needlebench.evaluation.runner.guard import EvalArgs, run_key

    key = run_key(EvalArgs(argparse.Namespace(model="needlebench-oracle", model_args={})))
    shared = sandbox / "work" / "SHARED"
    (shared / ".needlebench-cache").mkdir(parents=True)
    (shared / ".needlebench-cache" / f"{key}-chunks").symlink_to(sandbox / "mydata")
    before = snapshot(sandbox)
    # one line and nothing else on stderr: refused before lm-eval starts (no log line, no chunk run)
    refused(eval_run(sandbox, task_folder, shared, "--resume"), f"{key}-chunks")
    assert snapshot(sandbox) == before


def _plant_unchecked_pyc(folder: Path, home: Path) -> Path:
    """An unchecked hash-based ``utils`` bytecode (PEP 552) that writes ~/PWNED when imported."""
    source = folder.parent / "evil_utils.py"
    source.write_text(f"open({str(home / 'PWNED')!r}, 'w').write('pwned')\n")
    pyc = folder / "__pycache__" / f"utils.{sys.implementation.cache_tag}.pyc"
    pyc.parent.mkdir(parents=True)
    py_compile.compile(
        str(source), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH, doraise=True
    )
    source.unlink()
    return pyc


@pytest.mark.slow
def test_a_planted_bytecode_of_the_written_hooks_never_runs(sandbox: Path, task_folder: Path) -> None:
    dataset = task_folder.parent / "DS"
    folder = sandbox / "work" / "FOLDER"
    folder.mkdir()
    pyc = _plant_unchecked_pyc(folder, sandbox)
    mine = folder / "__pycache__" / f"mine.{sys.implementation.cache_tag}.pyc"
    mine.write_bytes(b"another module's bytecode")
    before = snapshot(sandbox, skip=folder)
    result = run(sandbox, "tasks", str(dataset), "--out", str(folder))
    assert result.returncode == 0, result.stderr[-2000:]
    assert not pyc.exists()  # the stale bytecode of the utils.py written is gone
    result = eval_run(sandbox, folder, sandbox / "work" / "OUT")
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (sandbox / "PWNED").exists()  # lm-eval imported the utils.py `tasks` wrote, not the planted bytecode
    assert mine.read_bytes() == b"another module's bytecode"  # another module's bytecode is left alone
    assert snapshot(sandbox, skip=sandbox / "work") == {k: v for k, v in before.items() if not k.startswith("work")}


@pytest.mark.slow
def test_a_pycache_link_in_the_task_folder_is_refused(sandbox: Path, task_folder: Path) -> None:
    folder = sandbox / "work" / "FOLDER"
    folder.mkdir()
    (folder / "__pycache__").symlink_to(sandbox / "mydata")
    before = snapshot(sandbox)
    refused(run(sandbox, "tasks", str(task_folder.parent / "DS"), "--out", str(folder)), "__pycache__", "symbolic link")
    assert snapshot(sandbox) == before


def test_the_move_never_writes_through_a_link_planted_during_the_run(sandbox: Path) -> None:
    """A link put at the model folder after the check (while the model runs) is refused by the move itself; the
    run's files stay in its own folder."""
    from needlebench.errors import NeedlebenchError
    from needlebench.evaluation.runner import run_output

    shared = sandbox / "work" / "SHARED"
    run = run_output.start(shared)
    assert (os.stat(run.folder).st_mode & 0o777) == 0o700 and run.name.startswith(".needlebench-run-")
    # lm-eval writes by path into the run's folder: it is in the user's private cache, never in the output folder,
    # where another user who may write there could rename it and put a link in its place while lm-eval writes
    assert not run.folder.is_relative_to(shared) and not Path(run.lm_eval_path).is_relative_to(shared)
    assert (os.stat(run.base).st_mode & 0o777) == 0o700 and os.stat(run.base).st_uid == os.getuid()
    (run.folder / ORACLE_FOLDER).mkdir()
    (run.folder / ORACLE_FOLDER / f"results_{FUTURE}.json").write_text("{}\n")
    (shared / ORACLE_FOLDER).symlink_to(sandbox / "mydata")
    before = snapshot(sandbox, skip=sandbox / "work")
    with pytest.raises(NeedlebenchError, match=f"{ORACLE_FOLDER}.*stay in"):
        run_output.deliver(run)
    assert snapshot(sandbox, skip=sandbox / "work") == before
    assert (run.folder / ORACLE_FOLDER / f"results_{FUTURE}.json").read_text() == "{}\n"
    (shared / ORACLE_FOLDER).unlink()
    run_output.deliver(run)  # once the link is gone, the files land in place and the run's folder is removed
    assert sorted(p.name for p in shared.iterdir()) == [ORACLE_FOLDER]
    assert (shared / ORACLE_FOLDER / f"results_{FUTURE}.json").read_text() == "{}\n"
