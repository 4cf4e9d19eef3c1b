"""Hostile names and files against the task folders, experiment files and terminal output (issue 33).

Each attack runs the `needlebench` command (a subprocess) in the sandbox of ``tests/support/sandbox.py``: a fake
HOME with the user's files, hashed before and after, so a refused attack that touched anything fails.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from support.sandbox import refused, run, snapshot, warnings_of

NEEDLE = {"needle": "The vault code is 4711.", "question": "What is the vault code?", "keyword": "4711"}
#: Some sentences of a haystack (a few thousand tokens once cycled: enough for 1,000-token prompts).
TEXT = " ".join(f"The river stone number {i} rested in the quiet garden by the window." for i in range(300))


def experiment(**changes) -> dict:
    data = {"name": "hostile", "kind": "single", "language": "en", "lengths": [1000], "depths": [50]}
    data["needles"] = [NEEDLE]
    data.update(changes)
    return data


def write_experiment(folder: Path, data: dict | str, name: str = "exp.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def build(home: Path, path: Path, *extra: str):
    return run(home, "build", "--experiment", str(path), "--out", str(home / "work" / "out"), *extra)


# --------------------------------------------------------------------------------- experiment files: YAML


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("name: !!binary aGVsbG8=\n", ["field name", "!!binary"]),
        (
            "name: x\nneedles:\n  - {needle: a, question: b, keyword: !!python/name:os.system x}\n",
            ["needles.0.keyword"],
        ),
        ("name: x\nruns: " + "9" * 5000 + "\n", ["field runs", "5,000 characters", "at most 40 digits"]),
        ("name: x\ndepths: " + "[" * 200 + "]" * 200 + "\n", ["field depths.0", "deeper than 32 levels"]),
        ("name: &n x\nkind: *n\n", ["field kind", "alias *n"]),
        (yaml.safe_dump(experiment()).replace("name: hostile", "name: 2024-01-01"), ["key name", "2024-01-01"]),
    ],
    ids=["binary", "python-tag", "5000-digits", "deep", "alias", "date"],
)
def test_hostile_yaml_in_an_experiment_file_is_one_line(sandbox: Path, text: str, names: list[str]) -> None:
    path = write_experiment(sandbox / "shared", text)
    before = snapshot(sandbox)
    refused(build(sandbox, path), "exp.yaml", *names)
    assert snapshot(sandbox) == before


# --------------------------------------------------------------------------- experiment files: local paths


@pytest.mark.slow
@pytest.mark.parametrize(
    "field",
    ["haystack", "needles_file"],
)
@pytest.mark.parametrize("form", ["home", "absolute", "dotdot", "link"])
def test_an_experiment_file_reads_nothing_outside_its_folder(sandbox: Path, field: str, form: str) -> None:
    shared = sandbox / "Downloads" / "shared"
    shared.mkdir(parents=True)
    secret = sandbox / "notes.txt" if field == "haystack" else sandbox / "needles.jsonl"
    if field == "needles_file":
        record = {"needle": "My PIN is 1234.", "retrieval_question": "PIN?", "arg1": "", "arg2": "1234"}
        secret.write_text(json.dumps({**record, "language": "English"}) + "\n")
    value = {
        "home": f"~/{secret.name}",
        "absolute": str(secret),
        "dotdot": f"../../{secret.name}",
        "link": "inside" + secret.suffix,
    }[form]
    if form == "link":
        (shared / value).symlink_to(secret)
    data = experiment(**{field: value})
    if field == "needles_file":
        del data["needles"]
    path = write_experiment(shared, data)
    before = snapshot(sandbox)
    line = refused(build(sandbox, path), "exp.yaml", f"key {field}", "outside the experiment file's folder")
    assert "--allow-path" in line
    assert snapshot(sandbox) == before
    assert not (sandbox / "work" / "out").exists()


@pytest.mark.slow
def test_a_link_in_an_experiment_haystack_folder_leads_nowhere_outside(sandbox: Path) -> None:
    shared = sandbox / "shared"
    (shared / "hay").mkdir(parents=True)
    (shared / "hay" / "a.txt").write_text(TEXT)
    (shared / "hay" / "b.txt").symlink_to(sandbox / "notes.txt")
    path = write_experiment(shared, experiment(haystack="hay"))
    before = snapshot(sandbox)
    refused(build(sandbox, path), "b.txt", "outside")
    assert snapshot(sandbox) == before


@pytest.mark.slow
def test_allow_path_and_a_relative_haystack_build(sandbox: Path) -> None:
    """A haystack inside the file's folder is read relative to it (whatever the working folder); one outside it
    is read when the command line names it."""
    shared = sandbox / "shared"
    shared.mkdir()
    (shared / "essays.txt").write_text(TEXT)
    result = build(sandbox, write_experiment(shared, experiment(haystack="essays.txt")))
    assert result.returncode == 0, result.stderr
    assert "river stone" in _first_prompt(sandbox / "work" / "out")
    result = build(sandbox, write_experiment(shared, experiment(haystack="~/notes.txt")), "--overwrite")
    refused(result, "key haystack")
    (sandbox / "notes.txt").write_text(TEXT.replace("river", "brook"))
    result = build(
        sandbox,
        shared / "exp.yaml",
        "--overwrite",
        "--allow-path",
        str(sandbox / "notes.txt"),
    )
    assert result.returncode == 0, result.stderr
    assert "brook stone" in _first_prompt(sandbox / "work" / "out")


def _first_prompt(folder: Path) -> str:
    import pyarrow.parquet as pq

    (shard,) = sorted(folder.rglob("*.parquet"))
    return pq.read_table(shard).column("prompt")[0].as_py()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("field", ["haystack", "needles_file", "experiment"])
def test_a_fifo_or_device_named_by_an_experiment_is_refused_at_once(sandbox: Path, kind: str, field: str) -> None:
    shared = sandbox / "shared"
    shared.mkdir()
    target = shared / ("needles.jsonl" if field == "needles_file" else "hay.txt")
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    data = experiment(**{field: target.name}) if field != "experiment" else experiment()
    if field == "needles_file":
        del data["needles"]
    path = write_experiment(shared, data) if field != "experiment" else target
    before = snapshot(sandbox, skip=shared)  # (the snapshot itself would wait on the FIFO)
    start = time.monotonic()
    # the link leads outside the folder: allowed here, to reach the regular-file check
    extra = ("--allow-path", "/dev/zero") if kind == "dev-zero" and field != "experiment" else ()
    line = refused(build(sandbox, path, *extra), target.name)
    assert time.monotonic() - start < 30
    assert "FIFO" in line or "regular file" in line or "existing" in line
    assert snapshot(sandbox, skip=shared) == before


@pytest.mark.slow
def test_a_fifo_given_as_haystack_on_the_command_line_is_refused(sandbox: Path) -> None:
    (sandbox / "pipes").mkdir()
    fifo = sandbox / "pipes" / "hay.txt"
    os.mkfifo(fifo)
    before = snapshot(sandbox, skip=fifo.parent)
    result = run(sandbox, "build", "single_en_4k", "--haystack-en", str(fifo), "--out", str(sandbox / "work" / "o"))
    refused(result, "hay.txt", "not a regular file")
    assert snapshot(sandbox, skip=fifo.parent) == before


# ------------------------------------------------------------------------------------------ terminal output


@pytest.mark.slow
def test_escapes_in_names_never_reach_the_terminal(sandbox: Path) -> None:
    shared = sandbox / "evil\x1b]0;pwned\x07\x1b[2J\nname"
    path = write_experiment(shared, experiment(haystack="missing.txt"))
    before = snapshot(sandbox)
    result = build(sandbox, path)
    line = refused(result, "missing.txt")
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J" in line
    assert snapshot(sandbox) == before


@pytest.mark.slow
def test_escapes_in_a_haystack_name_are_escaped_in_warnings_and_output(sandbox: Path) -> None:
    """A short haystack gets the "repeated" warning naming it, and `build` prints the folder it wrote."""
    shared = sandbox / "shared"
    shared.mkdir()
    name = "hay\x1b[31m\x1b]0;pwned\x07.txt"
    (shared / name).write_text(TEXT)
    out = sandbox / "work" / "out\x1b[2J"
    result = run(
        sandbox, "build", "--experiment", str(write_experiment(shared, experiment(haystack=name))), "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stderr + result.stdout and "\x07" not in result.stderr + result.stdout
    (warning,) = [line for line in warnings_of(result) if "repeated" in line]
    assert "hay\\x1b[31m\\x1b]0;pwned\\x07.txt" in warning
    assert "out\\x1b[2J" in result.stdout


# ------------------------------------------------------------------------------------------ task folders


@pytest.fixture(scope="module")
def honest_dataset(tmp_path_factory) -> Path:
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions

    out = tmp_path_factory.mktemp("honest") / "ds"
    build_dataset(["atc_en"], out, BuildOptions(), progress=False)
    return out


def _task_yamls(folder: Path) -> dict[str, dict]:
    from needlebench.evaluation.harness.task_yaml import load_yaml

    return {p.name: load_yaml(p.read_text(encoding="utf-8")) for p in sorted(folder.iterdir()) if "yaml" in p.name}


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "ds\nnum_fewshot: 3\ntest_split: train",
        "ds\rnum_fewshot: 3",
        "ds\u2028num_fewshot: 3\u0085test_split: train",
        "ds'\": #num_fewshot: 3 {a: b} [c]",
    ],
    ids=["newline", "cr", "yaml-line-breaks", "quotes-colon"],
)
def test_a_folder_name_never_adds_keys_to_a_task_yaml(sandbox: Path, honest_dataset: Path, name: str) -> None:
    import shutil

    hostile = sandbox / "work" / name
    shutil.copytree(honest_dataset, hostile)
    honest_tasks = sandbox / "work" / "honest-tasks"
    assert run(sandbox, "tasks", str(honest_dataset), "--out", str(honest_tasks)).returncode == 0
    before = snapshot(sandbox, skip=sandbox / "work")
    result = run(sandbox, "tasks", str(hostile), "--out", str(sandbox / "work" / "tasks"))
    assert result.returncode == 0, result.stderr
    assert snapshot(sandbox, skip=sandbox / "work") == before
    assert result.stdout.replace("\n", "").isprintable()
    written, honest = _task_yamls(sandbox / "work" / "tasks"), _task_yamls(honest_tasks)
    assert written.keys() == honest.keys()
    for file, data in written.items():
        assert data.keys() == honest[file].keys(), file
        if "metadata" in data and "data_dir" in data["metadata"]:
            assert data["metadata"]["data_dir"] == str(hostile)
            data["metadata"]["data_dir"] = honest[file]["metadata"]["data_dir"]
        assert data == honest[file], file


@pytest.mark.slow
def test_tasks_leave_what_they_did_not_write(sandbox: Path, honest_dataset: Path) -> None:
    out = sandbox / "work" / "tasks"
    (out / "__pycache__").mkdir(parents=True)
    (out / "__pycache__" / "mine.cpython-311.pyc").write_bytes(b"the user's bytecode")
    before = snapshot(out)
    result = run(sandbox, "tasks", str(honest_dataset), "--out", str(out))
    assert result.returncode == 0, result.stderr
    after = snapshot(out)
    assert {k: v for k, v in after.items() if k.startswith("__pycache__")} == before  # kept as it was
    assert run(sandbox, "tasks", str(honest_dataset), "--out", str(out)).returncode == 0  # a rerun replaces its own
    assert (out / "__pycache__" / "mine.cpython-311.pyc").read_bytes() == b"the user's bytecode"
    # a file of ours the user changed, a file of the user's, a link planted at a name we write: refused, untouched
    for plant in ("changed", "own", "link"):
        target = out / ("atc_en.yaml" if plant != "own" else "notes.yaml")
        saved = target.read_bytes() if target.exists() else None
        if plant == "changed":
            target.write_text(saved.decode() + "num_fewshot: 3\n")
        elif plant == "own":
            target.write_text("# Written by `needlebench tasks` (a copy the user keeps)\n")
        else:
            target.unlink()
            target.symlink_to(sandbox / ".bashrc")
        before = snapshot(sandbox)
        result = run(sandbox, "tasks", str(honest_dataset), "--out", str(out))
        refused(result, str(out), target.name, "did not write")
        assert snapshot(sandbox) == before
        target.unlink()
        if saved is not None:
            target.write_bytes(saved)
    assert run(sandbox, "tasks", str(honest_dataset), "--out", str(out)).returncode == 0


@pytest.mark.slow
def test_a_stale_task_file_is_removed_only_when_it_is_ours(sandbox: Path, honest_dataset: Path) -> None:
    out = sandbox / "work" / "tasks"
    assert run(sandbox, "tasks", str(honest_dataset), "--out", str(out)).returncode == 0
    record = json.loads((out / ".needlebench-written.json").read_text())
    # an earlier generation of this user wrote gone.yaml (recorded with its hash, the record signed with the user's
    # secret); this one does not: it is removed
    (out / "gone.yaml").write_text("# Written by `needlebench tasks`\n")
    from hashlib import sha256

    from needlebench.evaluation.harness.task_export import record_text

    record["files"]["gone.yaml"] = sha256((out / "gone.yaml").read_bytes()).hexdigest()
    (out / ".needlebench-written.json").write_text(record_text(record["writer"], record["files"]))
    assert run(sandbox, "tasks", str(honest_dataset), "--out", str(out)).returncode == 0
    assert not (out / "gone.yaml").exists() and (out / "atc_en.yaml").is_file()


# ------------------------------------------------------------------------------------- the runner's own writes


@pytest.mark.slow
def test_eval_resume_never_follows_a_link_in_a_results_folder(sandbox: Path, honest_dataset: Path) -> None:
    results = sandbox / "work" / "results"
    results.mkdir()
    (results / ".needlebench-cache").symlink_to(sandbox / "mydata")
    before = snapshot(sandbox)
    result = run(
        sandbox,
        "eval",
        "run",
        "--model",
        "needlebench-oracle",
        "--tasks",
        "needlebench_atc_en",
        "--limit",
        "2",
        "--metadata",
        json.dumps({"data_dir": str(honest_dataset)}),
        "--output_path",
        str(results),
        "--resume",
    )
    refused(result, ".needlebench-cache", "symbolic link")
    assert snapshot(sandbox) == before


def test_the_chunk_store_never_writes_or_reads_through_a_link(sandbox: Path) -> None:
    from needlebench.errors import NeedlebenchError
    from needlebench.evaluation.runner.chunked import ChunkStore

    cache = sandbox / "work" / "out" / ".needlebench-cache"
    cache.mkdir(parents=True)
    (cache / "m-chunks").symlink_to(sandbox / "mydata")
    store = ChunkStore(cache / "m-chunks", object(), {}, {})
    store._path = lambda task, positions: store.folder / "c.json"
    before = snapshot(sandbox)
    with pytest.raises(NeedlebenchError, match="m-chunks"):
        store.save(None, [0], [{"doc_id": 0}])
    assert store.load(None, [0]) is None
    assert snapshot(sandbox) == before
    (cache / "m-chunks").unlink()
    (cache / "m-chunks").mkdir()
    (cache / "m-chunks" / "c.json").symlink_to(sandbox / ".bashrc")
    assert store.load(None, [0]) is None  # a link is no chunk
    store.save(None, [0], [{"doc_id": 0}])  # the link is replaced, ~/.bashrc untouched
    assert not (cache / "m-chunks" / "c.json").is_symlink() and store.load(None, [0]) == [{"doc_id": 0}]
    assert snapshot(sandbox, skip=sandbox / "work") == {k: v for k, v in before.items() if not k.startswith("work")}


def test_reasoning_task_folder_copies_no_link(sandbox: Path, tmp_path: Path) -> None:
    from needlebench.evaluation.runner.guard import reasoning_task_dir

    source = sandbox / "work" / "tasks"
    source.mkdir()
    (source / "_needlebench_mine.yaml").write_text("group: mine\ntask: [needlebench_atc_en]\n")
    (source / "_needlebench_key.yaml").symlink_to(sandbox / ".ssh" / "id_rsa")
    (source / "atc_en.yaml").write_text("task: needlebench_atc_en\n")
    (source / "single_en_4k.yaml").symlink_to(sandbox / "notes.txt")
    target = tmp_path / "reasoning"
    target.mkdir()
    (target / "needlebench").mkdir()
    (target / "needlebench" / "atc_en.yaml").symlink_to(sandbox / ".bashrc")  # replaced, never written through
    before = snapshot(sandbox)
    reasoning_task_dir(source, "double", target)
    assert snapshot(sandbox) == before
    written = sorted(p.name for p in (target / "needlebench").iterdir())
    assert written == ["_needlebench_mine.yaml", "atc_en.yaml"]
    assert not (target / "needlebench" / "atc_en.yaml").is_symlink()


@pytest.mark.slow
def test_export_tasks_leaves_a_users_pycache(sandbox: Path) -> None:
    out = sandbox / "work" / "export"
    (out / "__pycache__").mkdir(parents=True)
    (out / "__pycache__" / "mine.cpython-311.pyc").write_bytes(b"the user's bytecode")
    args = ("export-tasks", "--repo", "needlebench/NeedleBench", "--revision", "v1.0.0", "--out", str(out))
    for _ in range(2):  # written, then replaced by a rerun
        result = run(sandbox, *args)
        assert result.returncode == 0, result.stderr
        assert (out / "__pycache__" / "mine.cpython-311.pyc").read_bytes() == b"the user's bytecode"
    (out / "README.md").unlink()
    (out / "README.md").symlink_to(sandbox / "notes.txt")
    before = snapshot(sandbox)
    refused(run(sandbox, *args), "README.md", "did not write")
    assert snapshot(sandbox) == before
