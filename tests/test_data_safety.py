"""A build never loses or half-writes data: foreign folders, atomic replaces under kills, leftovers, Ctrl-C."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from needlebench.dataset import replace
from needlebench.dataset.build import MANIFEST, build_dataset
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.writer import fingerprint_files
from needlebench.errors import NeedlebenchError

OLD = ["atc_en", "atc_zh"]
NEW = ["atc_en"]
NEW_OPTIONS = BuildOptions(release_seed=7)
CLI = [sys.executable, "-c", "from needlebench.cli import main; main()"]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _user_files(folder: Path) -> None:
    (folder / "notes.md").write_text("my notes")
    (folder / "data" / "mine.csv").write_text("a,b\n1,2\n")
    (folder / "data" / "atc_en" / "extra.txt").write_text("kept")


#: name -> (old configs, old options, configs built next, their options, overwrite)
SCENARIOS = {
    "overwrite": (OLD, BuildOptions(), NEW, NEW_OPTIONS, True),
    "extend": (["atc_en"], BuildOptions(), ["atc_zh"], BuildOptions(), False),
}


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    """name -> (the old dataset with the user's files, what the scenario's build makes of it)."""
    made: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in made:
            old_configs, old_options, configs, options, overwrite = SCENARIOS[name]
            root = tmp_path_factory.mktemp(name)
            build_dataset(old_configs, root / "old", old_options, progress=False)
            _user_files(root / "old")
            shutil.copytree(root / "old", root / "new")
            build_dataset(configs, root / "new", options, progress=False, overwrite=overwrite)
            made[name] = root / "old", root / "new"
        return made[name]

    return get


@pytest.fixture()
def references(scenarios) -> tuple[Path, Path]:
    return scenarios("overwrite")


@pytest.mark.slow
def test_overwrite_replaces_only_what_the_manifest_lists(references):
    old, new = references
    before, after = _files(old), _files(new)
    mine = {"notes.md", "data/mine.csv", "data/atc_en/extra.txt"}
    assert {name: after[name] for name in mine} == {name: before[name] for name in mine}
    assert "data/atc_zh/test-00000-of-00001.parquet" not in after
    assert after["data/atc_en/test-00000-of-00001.parquet"] != before["data/atc_en/test-00000-of-00001.parquet"]
    manifest = json.loads(after[MANIFEST])
    assert list(manifest["configs"]) == NEW and manifest["recipe"]["release_seed"] == 7
    assert not [p for p in new.iterdir() if p.name.startswith(".")]
    assert not (new / "data" / "atc_zh").exists()  # emptied of the files the manifest listed: removed


@pytest.mark.slow
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_foreign_folder_is_never_modified(tmp_path, overwrite):
    folder = tmp_path / "mine"
    (folder / "data").mkdir(parents=True)
    (folder / "README.md").write_text("# my project\n")
    (folder / "data" / "mine.csv").write_text("a,b\n")
    before = _files(folder)
    args = ["build", "atc_en", "--out", str(folder), *(["--overwrite"] if overwrite else [])]
    result = subprocess.run([*CLI, *args], capture_output=True, text=True)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("needlebench: error: ") and str(folder) in line and "not a needlebench dataset" in line
    assert _files(folder) == before and sorted(p.name for p in folder.iterdir()) == ["README.md", "data"]


def _card_state(folder: Path, manifests: dict[str, dict]) -> str:
    """'old' or 'new': which whole dataset `load_dataset` sees in `folder` (asserts it is one of them)."""
    from datasets import load_dataset_builder

    card = (folder / "README.md").read_text(encoding="utf-8")
    header = yaml.safe_load(card.split("---\n")[1])
    names = [entry["config_name"] for entry in header["configs"]]
    [side] = [side for side, manifest in manifests.items() if list(manifest["configs"]) == names]
    for name in names:
        files = load_dataset_builder(str(folder), name).config.data_files["test"]
        assert fingerprint_files(files) == manifests[side]["configs"][name]["fingerprint"], (side, name)
    for info in header["dataset_info"]:
        assert info["splits"][0]["num_examples"] == manifests[side]["configs"][info["config_name"]]["rows"]
    return side


def _copy_shards(new: Path):
    """A stand-in for the shard building of a child build: the reference's files (the test is about the replace;
    the real builds made the references)."""
    from needlebench.dataset.writer import ShardStats

    manifest = json.loads((new / MANIFEST).read_text())

    def build_all(specs, options, staging, num_proc, progress):
        totals = {}
        for spec in specs:
            entry = manifest["configs"][spec.name]
            for name in entry["files"]:  # `staging`: the open staging data/ folder (needlebench.safe_fs.Folder)
                staging.write_bytes(f"{spec.name}/{Path(name).name}", (new / name).read_bytes(), create_parents=True)
            totals[spec.name] = ShardStats(entry["rows"], entry["haystack_tokens"], entry["prompt_tokens"])
        return totals

    return build_all


def _killed_child(folder: str, step: int, scenario: str, new: Path) -> None:
    import needlebench.dataset.build as build_module

    _, _, configs, options, overwrite = SCENARIOS[scenario]
    build_module._build_all = _copy_shards(new)
    os.environ[replace.KILL_ENV] = str(step)
    replace._steps = 0
    try:
        build_dataset(configs, Path(folder), options, progress=False, overwrite=overwrite)
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_kill_at_any_step_leaves_one_whole_dataset(scenarios, tmp_path, scenario):
    """Kill the build (os._exit) at each of its steps in turn: the folder always loads as the old or the new
    dataset, whole, and the next build finishes or drops the killed one."""
    from datasets import load_dataset

    old, new = scenarios(scenario)
    _, _, configs, options, overwrite = SCENARIOS[scenario]
    manifests = {side: json.loads((path / MANIFEST).read_text()) for side, path in (("old", old), ("new", new))}
    from needlebench.dataset.card import render_card

    render_card(manifests["new"], new)  # imports and caches shared with the forked children
    context = multiprocessing.get_context("fork")
    seen = []
    for step in range(1, 30):
        folder = tmp_path / f"kill{step}"
        shutil.copytree(old, folder)
        child = context.Process(target=_killed_child, args=(str(folder), step, scenario, new))
        child.start()
        child.join(300)
        if child.exitcode == 0:  # the build finished before reaching this step: every step was tried
            assert _files(folder) == _files(new)
            break
        assert child.exitcode == replace.KILL_STATUS
        side = _card_state(folder, manifests)
        seen.append(side)
        if len(seen) == 1 or seen[-2:] == ["old", "new"]:  # load it, before and right after the commit
            name = configs[0] if configs[0] in manifests[side]["configs"] else next(iter(manifests[side]["configs"]))
            loaded = load_dataset(str(folder), name, split="test", cache_dir=str(tmp_path / f"hf{step}"))
            assert loaded.num_rows == manifests[side]["configs"][name]["rows"]
        mine = {"notes.md", "data/mine.csv", "data/atc_en/extra.txt"}
        assert {name: body for name, body in _files(folder).items() if name in mine} == {
            name: body for name, body in _files(old).items() if name in mine
        }
        # the next build into the folder finishes (after the commit) or drops (before it) the killed one
        copy = tmp_path / f"recovered{step}"
        shutil.copytree(folder, copy)
        replace.recover(copy)
        assert _files(copy) == _files(new if side == "new" else old)
        if seen[-2:] == ["old", "new"]:  # and so does a real build (right after the commit)
            build_dataset(configs, folder, options, progress=False, overwrite=overwrite)
            assert _files(folder) == _files(new)
    else:
        pytest.fail("the build never finished")
    assert seen[0] == "old" and seen[-1] == "new" and len(seen) >= 6


@pytest.mark.parametrize("where", ["write_shard", "render_card", "staging_card"])
def test_an_error_during_the_build_keeps_the_old_dataset(references, tmp_path, monkeypatch, where):
    import needlebench.dataset.build as build_module
    import needlebench.dataset.card as card_module

    old, _ = references
    folder = tmp_path / "ds"
    shutil.copytree(old, folder)
    before = _files(folder)

    def fail(*args, **kwargs):
        raise (KeyboardInterrupt if where == "staging_card" else RuntimeError)("boom")

    module = {"write_shard": build_module, "render_card": card_module, "staging_card": replace}[where]
    monkeypatch.setattr(module, where, fail)
    with pytest.raises((RuntimeError, KeyboardInterrupt)):
        build_dataset(NEW, folder, NEW_OPTIONS, progress=False, overwrite=True)
    assert _files(folder) == before
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in old.iterdir())


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _our_staging(folder: Path, pid: int) -> Path:
    """A staging folder as a build `pid` of this machine makes it (with its marker)."""
    staging = folder / f".building-{pid}-abc123de"
    staging.mkdir(parents=True)
    replace.write_marker(staging, pid)
    return staging


def test_the_next_build_removes_killed_builds_leftovers(references, tmp_path, capsys):
    old, _ = references
    folder = tmp_path / "ds"
    shutil.copytree(old, folder)
    dead = _dead_pid()
    killed = _our_staging(folder, dead)
    (killed / "data" / "atc_en").mkdir(parents=True)
    (killed / "data" / "atc_en" / ".test-00000-of-00001.parquet.tmp").write_bytes(b"\0" * 1_000_000)
    legacy = folder / ".building-x1y2z3ab"  # an earlier version's name: no marker, so never ours to delete
    (legacy / "data").mkdir(parents=True)
    (folder / f".README.md.{dead}.tmp").write_text("half a card")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = _our_staging(folder, sleeper.pid)  # another build still running: left alone
        (folder / ".building-notes").write_text("a file, not our folder")  # not ours: left alone
        (folder / ".building-my-notes").mkdir()  # a folder, but not named as ours: left alone
        capsys.readouterr()
        build_dataset(["atc_zh"], folder, BuildOptions(), progress=False)
        hidden = sorted(p.name for p in folder.iterdir() if p.name.startswith("."))
        assert hidden == sorted([".building-my-notes", ".building-notes", running.name, legacy.name])
        [warning] = capsys.readouterr().err.splitlines()
        assert warning.startswith("needlebench: warning: ") and str(legacy) in warning and "left untouched" in warning
    finally:
        sleeper.kill()
        sleeper.wait()
    shutil.rmtree(running)
    shutil.rmtree(legacy)
    (folder / ".building-my-notes").rmdir()
    (folder / ".building-notes").unlink()
    assert _files(folder) == _files(old)


def test_an_empty_folder_with_only_our_leftovers_is_built_into(tmp_path):
    folder = tmp_path / "ds"
    (_our_staging(folder, _dead_pid()) / "data").mkdir(parents=True)
    build_dataset(["atc_en"], folder, BuildOptions(), progress=False)
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "data", MANIFEST]


def test_the_token_cache_leftovers_are_removed(tmp_path, monkeypatch, cl100k):
    from needlebench.sources import tokenized

    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(tmp_path))
    folder = tokenized.cache_dir()
    folder.mkdir(parents=True)
    key = "0" * 64
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ours_dead = [f".{key}.{_dead_pid()}.abcdef12.tmp", "tmpk2j4h5l6.tmp"]  # this version's, earlier versions'
        names = [*ours_dead, f".{key}.{sleeper.pid}.abcdef12.tmp", "keep.txt", "tmp-mine.tmp"]
        for name in names:
            (folder / name).write_bytes(b"x" * 1000)
        tokenized._load_or_compute("Some text. More text.", cl100k)
        assert sorted(p.name for p in folder.iterdir() if not p.name.endswith(".npz")) == sorted(names[2:])
    finally:
        sleeper.kill()
        sleeper.wait()


# ---- Ctrl-C ---------------------------------------------------------------------------------------------------
def _group(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def _interrupt_build(folder: Path, presses: int) -> tuple[subprocess.CompletedProcess, float, list[int]]:
    """Build a long config with two workers, press Ctrl-C (SIGINT to the process group, as a terminal does) once
    or twice 1 s apart once the workers run; returns the result, the seconds from the first press to the exit,
    and the processes of the group still alive."""
    process = subprocess.Popen(
        [*CLI, "build", "single_en_1000k", "--num-proc", "2", "--out", str(folder)],  # ~10 s: still running at 1 s
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while len(_group(process.pid)) < 3:  # the parent and both workers
        assert process.poll() is None and time.monotonic() < deadline, "the build did not start its workers"
        time.sleep(0.2)
    time.sleep(1.0)
    start = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    ended = None
    while time.monotonic() - start < 30:
        if ended is None and process.poll() is not None:
            ended = time.monotonic()
        if presses == 2 and time.monotonic() - start >= 1.0:
            presses = 1
            try:
                os.killpg(process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        if ended is not None and presses == 1:
            break
        time.sleep(0.02)
    if ended is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("the interrupted build hangs")
    out, err = process.communicate()
    elapsed = ended - start
    time.sleep(0.3)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err), elapsed, _group(process.pid)


def _stderr_lines(err: bytes) -> list[str]:
    """Lines on stderr, without the progress bar's redraws."""
    parts = err.decode().replace("\r", "\n").split("\n")
    return [part for part in parts if part.strip() and not part.startswith("building:")]


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_exits_130_quickly_with_one_line_and_no_leftovers(tmp_path, presses, references):
    if presses == 1:
        folder = tmp_path / "fresh"  # created by the build: removed again
    else:
        folder = tmp_path / "existing"  # an existing dataset: untouched
        shutil.copytree(references[0], folder)
    before = _files(folder) if folder.exists() else None
    result, elapsed, alive = _interrupt_build(folder, presses)
    assert result.returncode == 130, result.stderr.decode()[-2000:]
    assert elapsed < 3, elapsed
    assert _stderr_lines(result.stderr) == ["needlebench: interrupted, cleaning up"]
    assert alive == []  # the workers were terminated
    if before is None:
        assert not folder.exists()
    else:
        assert _files(folder) == before and sorted(p.name for p in folder.iterdir()) == sorted(
            p.name for p in references[0].iterdir()
        )


def test_a_folder_another_build_is_writing_into_is_refused(references, tmp_path):
    old, _ = references
    folder = tmp_path / "ds"
    shutil.copytree(old, folder)
    descriptor = replace.lock_folder(folder)  # as a build running in another process holds it
    try:
        with pytest.raises(NeedlebenchError, match="another needlebench build is writing into"):
            build_dataset(NEW, folder, NEW_OPTIONS, progress=False, overwrite=True)
    finally:
        os.close(descriptor)
    assert _files(folder) == _files(old)
