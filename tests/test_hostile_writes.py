"""Every write of a build, and of the caches, goes through needlebench.safe_fs (issue 33).

Each attack runs the `needlebench` command (a subprocess) in the sandbox of :mod:`support.sandbox`: a fake HOME
holding the user's files, hashed before and after (contents, modes, link targets, hard-link counts). Links planted
at a temporary name, a folder swapped for a link while a build runs, a FIFO among a config's files, a loose umask,
a killed worker and a 1,500-level deep tree: the user's files never change, and the command either works or stops
with one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from support.sandbox import CLI, REAL_CONFIG, REAL_HF_HOME, git_clone, refused, snapshot
from test_internal_error import PLANT

CARD, MANIFEST = "README.md", "needlebench.json"
SHARD = "test-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A real build of atc_en (the honest part of every hostile folder below)."""
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions

    out = tmp_path_factory.mktemp("honest") / "ds"
    build_dataset(["atc_en"], out, BuildOptions(), progress=False)
    return out


def _environment(home: Path, env: dict | None = None) -> dict:
    return {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME, **(env or {})}


def _run(home: Path, *args: str, timeout: float, umask: int | None = None, env: dict | None = None):
    """`run` with a timeout of our own (a hang is a failure, not a 10-minute wait) and an optional umask."""
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        env=_environment(home, env),
        cwd=home / "work",
        timeout=timeout,
        check=False,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )


def _stopped(result: subprocess.CompletedProcess, *names: str) -> str:
    """:func:`refused` for a command stopped after its progress bar was drawn: exit 2 and one error line (naming
    each of `names`) besides the bar."""
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("building:")]
    assert result.returncode == 2 and len(lines) == 1, (result.returncode, result.stderr[-2000:])
    assert lines[0].startswith("needlebench: error: ") and all(name in lines[0] for name in names), lines[0]
    return lines[0]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _temporary_names(pid: int) -> list[str]:
    """Every predictable temporary name a build wrote by path before this change, for the process `pid`: the
    card's and manifest's ``.<name>.<pid>.tmp`` (replace.write_atomic), the shard's ``.<name>.tmp``
    (writer.write_shard), and the same forms for the other files a build writes."""
    names = [CARD, MANIFEST, "replaces.json", ".needlebench-build", SHARD]
    return [f".{name}.{pid}.tmp" for name in names] + [f".{name}.tmp" for name in names]


# --- 1. links planted at the temporary names ---------------------------------------------------------------------


@pytest.mark.slow
def test_links_at_every_temporary_name_are_never_written_through(dataset, sandbox):
    """A cloned dataset carrying links named like the build's temporary files, for the very pid of the build (what
    a spray over every pid achieves), pointing at ~/.bashrc: `build atc_zh --out clone` writes the card and the
    manifest into the clone and nothing into ~/.bashrc; the links stay as they were."""
    waiting = subprocess.Popen(  # the command, started but held until its folder is planted
        [
            sys.executable,
            "-c",
            "import os, sys; print(os.getpid(), flush=True); sys.stdin.readline()\n"
            "from needlebench.cli import main; main()",
            "build",
            "atc_zh",
            "--out",
            str(sandbox / "clone"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(sandbox),
        cwd=sandbox / "work",
    )
    try:
        pid = int(waiting.stdout.readline())
        origin = sandbox.parent / "origin"
        shutil.copytree(dataset, origin)
        planted = []
        for folder in (origin, origin / "data" / "atc_zh", origin / "data" / "atc_en"):
            folder.mkdir(parents=True, exist_ok=True)
            for name in _temporary_names(pid):
                (folder / name).symlink_to(sandbox / ".bashrc")
                planted.append((folder / name).relative_to(origin))
        clone = git_clone(origin, sandbox / "clone")
        assert all((clone / name).is_symlink() for name in planted)
        before = snapshot(sandbox.parent, skip=clone)
        stdout, stderr = waiting.communicate("go\n", timeout=300)
    finally:
        waiting.kill()
        waiting.wait()
    assert waiting.returncode == 0, stderr[-2000:]
    assert snapshot(sandbox.parent, skip=clone) == before
    assert (sandbox / ".bashrc").read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert all(os.readlink(clone / name) == str(sandbox / ".bashrc") for name in planted)
    manifest = json.loads((clone / MANIFEST).read_text())
    assert set(manifest["configs"]) == {"atc_en", "atc_zh"} and "atc_zh" in (clone / CARD).read_text()
    assert not (clone / CARD).is_symlink() and not (clone / MANIFEST).is_symlink()


# --- 2. a folder swapped for a link while the build runs ---------------------------------------------------------


@pytest.mark.slow
def test_a_config_folder_swapped_for_a_link_during_overwrites_never_reaches_the_user(dataset, sandbox):
    """A second process swaps ``data/atc_en`` for a link to ~/mydata (which holds a file of the same name) over and
    over while `build atc_en --overwrite` runs round after round: every check and the action it guards use one
    descriptor, so ~/mydata is never touched; each round builds or stops with one line. (Whether a round meets the
    swap at the right instant is chance: the next test makes the second process win every time.)"""
    out = sandbox / "work" / "ds"
    shutil.copytree(dataset, out)
    before = snapshot(sandbox, skip=out)
    data, real, mydata = out / "data" / "atc_en", out / "data" / ".atc_en-real", sandbox / "mydata"
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        while not stop.is_set():
            try:
                os.rename(data, real)
                os.symlink(mydata, data)
                time.sleep(0.0001)  # the timing that reached ~/mydata in about one round in ten before descriptors
                os.unlink(data)
                os.rename(real, data)
                swaps[0] += 1
                time.sleep(0.0001)
            except OSError:
                time.sleep(0.0001)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    results = []
    try:
        for _ in range(5):
            results.append(_run(sandbox, "build", "atc_en", "--out", str(out), "--overwrite", timeout=300))
    finally:
        stop.set()
        swapper.join(10)
    assert swaps[0] > 100, swaps
    assert snapshot(sandbox, skip=out) == before
    assert (mydata / SHARD).read_bytes() == b"the user's own file"
    for result in results:
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr[-2000:]
        if result.returncode != 0:
            _stopped(result)


#: Loaded into the `needlebench` process (``sitecustomize`` on its PYTHONPATH): the second process of the race at
#: the worst moment for the build, every time. ``checks``: right after the last check of the replace's plan (the
#: staging folder's ``replaces.json`` against the output folder); ``opened``: right after the build opened
#: ``data/atc_en`` to place the new shard there, before the placing.
_RACER = """
import os, pathlib, sys
MOMENT, DATA = os.environ["RACE_MOMENT"], os.environ["RACE_DATA"]
MYDATA, FLAG = os.environ["RACE_MYDATA"], os.environ["RACE_FLAG"]

def swap():
    if not os.path.exists(FLAG):
        pathlib.Path(FLAG).write_text("swapped")
        os.rename(DATA, DATA + ".real")
        os.symlink(MYDATA, DATA)

import needlebench.dataset.replace as replace
if MOMENT == "checks":
    real_check = replace.check_targets
    def check_targets(root, names, what):
        real_check(root, names, what)
        if str(what).endswith("replaces.json"):
            swap()
    replace.check_targets = check_targets
else:
    from needlebench.safe_fs import Folder
    real_place = Folder.place_from
    def place_from(self, source, source_name, name):
        if str(self.path) == DATA:
            swap()
        return real_place(self, source, source_name, name)
    Folder.place_from = place_from
"""


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["checks", "opened"])
def test_a_swap_at_the_worst_moment_never_reaches_the_user(dataset, sandbox, tmp_path, moment):
    """The race above, won by the second process every time: ``data/atc_en`` becomes a link to ~/mydata right after
    the build checked it (or right after it opened the folder): the removal and the placing go through the
    descriptor that was checked, so ~/mydata is untouched; the build stops with one line or finishes in the folder
    it checked."""
    out = sandbox / "work" / "ds"
    shutil.copytree(dataset, out)
    racer = tmp_path / "racer"
    racer.mkdir()
    (racer / "sitecustomize.py").write_text(_RACER)
    flag = tmp_path / "swapped"
    env = {
        "PYTHONPATH": f"{racer}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "RACE_MOMENT": moment,
        "RACE_DATA": str(out / "data" / "atc_en"),
        "RACE_MYDATA": str(sandbox / "mydata"),
        "RACE_FLAG": str(flag),
    }
    before = snapshot(sandbox, skip=out)
    result = _run(sandbox, "build", "atc_en", "--out", str(out), "--overwrite", "--seed", "5", timeout=300, env=env)
    assert flag.exists(), result.stderr[-2000:]  # the swap happened
    assert snapshot(sandbox, skip=out) == before
    assert (sandbox / "mydata" / SHARD).read_bytes() == b"the user's own file"
    if moment == "checks":  # the link is found when data/atc_en is opened: one line, the user's folder untouched
        _stopped(result, "atc_en", "link")
    else:  # the folder was open before the swap: the new shard went into it, wherever it was moved (the summary
        # that reads the shards back then finds the link: one line)
        if result.returncode != 0:
            _stopped(result, "atc_en", "link")
        moved = out / "data" / "atc_en.real" / SHARD
        assert json.loads((out / MANIFEST).read_text())["configs"]["atc_en"]["fingerprint"] == _sha256(moved)


#: The parent-swap race (a second process renames a parent of a new --out and puts a link to the user's home in its
#: place while the build runs), won every time: right after the build made its staging folder; then the build fails
#: (as a Ctrl-C or any error would end it), so it removes the --out it made.
_PARENT_RACER = """
import os
PARENT, HOME = os.environ["RACE_PARENT"], os.environ["RACE_HOME"]
import needlebench.dataset.replace as replace
real_make = replace.make_staging
def make_staging(out):
    staging = real_make(out)
    os.rename(PARENT, PARENT + ".real")
    os.symlink(HOME, PARENT)
    raise KeyboardInterrupt
replace.make_staging = make_staging
"""


@pytest.mark.slow
def test_a_parent_swapped_for_a_link_never_redirects_the_clean_up(sandbox, tmp_path):
    """``--out shared/A/mydata`` (a new folder) while another process swaps ``shared/A`` for a link to the home
    folder, then the build is interrupted: the folder it made is removed through its parent's descriptor, never
    through the link (which would remove ~/mydata)."""
    shared = sandbox / "work" / "shared"
    (shared / "A").mkdir(parents=True)
    racer = tmp_path / "racer"
    racer.mkdir()
    (racer / "sitecustomize.py").write_text(_PARENT_RACER)
    env = {
        "PYTHONPATH": f"{racer}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "RACE_PARENT": str(shared / "A"),
        "RACE_HOME": str(sandbox),
    }
    before = snapshot(sandbox, skip=sandbox / "work")
    result = _run(sandbox, "build", "atc_en", "--out", str(shared / "A" / "mydata"), timeout=300, env=env)
    assert result.returncode == 130, result.stderr[-2000:]
    assert (shared / "A").is_symlink()  # the swap happened
    assert snapshot(sandbox, skip=sandbox / "work") == before
    assert (sandbox / "mydata" / SHARD).read_bytes() == b"the user's own file"
    assert not (shared / "A.real" / "mydata").exists()  # the build's own folder, removed where it was


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["tokens", "arrow", "crash"])
def test_a_link_in_a_shared_cache_is_never_followed(dataset, sandbox, planted):
    """A cache root others may write (a shared or loose ``NEEDLEBENCH_CACHE``) holding ``<folder> -> ~/mydata``:
    needlebench neither changes the mode of ~/mydata nor writes into it (the link is refused; the cache is skipped
    with a warning, or the command stops in one line)."""
    cache = sandbox / "work" / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    (sandbox / "mydata").chmod(0o775)
    (cache / planted).symlink_to(sandbox / "mydata")
    before = snapshot(sandbox, skip=sandbox / "work")
    env = {"NEEDLEBENCH_CACHE": str(cache)}
    if planted == "tokens":
        result = _run(sandbox, "build", "single_en_4k", "--out", str(sandbox / "work" / "k4"), env=env, timeout=600)
    elif planted == "arrow":
        first = pq.read_table(dataset / "data" / "atc_en" / SHARD, columns=["id"]).column("id")[0].as_py()
        result = _run(sandbox, "show", str(dataset), first, env=env, timeout=600)
    else:  # a bug planted at the front door (tests/test_internal_error.py): its traceback goes to cache/crash
        result = subprocess.run(
            [sys.executable, "-c", PLANT, "needlebench.dataset.build:build_dataset", "build", "atc_en", "--out", "x"],
            capture_output=True,
            text=True,
            env=_environment(sandbox, env),
            cwd=sandbox / "work",
            timeout=600,
        )
        assert "could not save its traceback" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert snapshot(sandbox, skip=sandbox / "work") == before
    assert stat.S_IMODE(os.stat(sandbox / "mydata").st_mode) == 0o775


# --- 3. files of data/<config>/ the manifest does not list --------------------------------------------------------


@pytest.mark.slow
def test_unlisted_files_and_a_fifo_in_a_config_folder_are_left_alone(dataset, sandbox):
    """The build summary reads only the files the manifest lists: a FIFO named like a shard in ``data/atc_en/``
    neither hangs the build nor is touched, and the user's other files there stay, with and without --overwrite."""
    out = sandbox / "work" / "ds"
    shutil.copytree(dataset, out)
    folder = out / "data" / "atc_en"
    os.mkfifo(folder / "test-00001-of-00001.parquet")
    (folder / "notes.parquet").write_bytes(b"my own parquet notes")
    (folder / "readme.txt").write_text("mine")
    before = snapshot(sandbox, skip=out)
    for extra in ([], ["--overwrite"]):
        result = _run(sandbox, "build", "atc_en", "--out", str(out), *extra, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert stat.S_ISFIFO(os.lstat(folder / "test-00001-of-00001.parquet").st_mode)
        assert (folder / "notes.parquet").read_bytes() == b"my own parquet notes"
        assert (folder / "readme.txt").read_text() == "mine"
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["configs"]["atc_en"]["files"] == [f"data/atc_en/{SHARD}"]
    assert snapshot(sandbox, skip=out) == before


# --- 4. caches under a loose umask --------------------------------------------------------------------------------


def _loose(root: Path) -> list[str]:
    """What under `root` others may read or write (folders beyond 0700, files beyond 0600)."""
    found = []
    for directory, folders, files in os.walk(root):
        for name in [*folders, *files, ""] if directory == str(root) else [*folders, *files]:
            path = Path(directory) / name
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if mode & 0o077:
                found.append(f"{path} {mode:o}")
    return found


@pytest.mark.slow
def test_caches_and_the_secret_are_private_under_umask_000(sandbox):
    """`umask 000` (a shared machine's misconfiguration): the cache folders (token caches, sentence tables, the
    corpora, the local-inputs index) and the secret's folder are 0700, their files 0600."""
    haystack = sandbox / "work" / "essays.txt"
    from needlebench.sources.haystacks import corpus_for

    haystack.write_text(corpus_for(None, "en").text[:400_000])
    env = {"NEEDLEBENCH_CACHE": str(sandbox / "cache"), "XDG_CONFIG_HOME": str(sandbox / "config")}
    args = ["build", "atc_en", "single_en_4k", "--haystack-en", str(haystack), "--out", str(sandbox / "work" / "ds")]
    result = _run(sandbox, *args, timeout=300, umask=0, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    tokens = sandbox / "cache" / "tokens"
    assert (tokens / "local-inputs.json").is_file() and list(tokens.glob("sentences-*.npz"))
    assert (sandbox / "config" / "needlebench" / "secret.key").is_file()
    assert _loose(sandbox / "cache") == [] and _loose(sandbox / "config") == []


_STOP_MID_SECRET = """
import os, sys
from needlebench.sources import cache
def stop(handle):
    handle.write(b"half")
    handle.flush()
    os._exit(9)  # a daemon thread cut off at exit, or a kill: the secret half-written
cache._fill_secret = stop
cache.secret()
"""


@pytest.mark.slow
def test_a_secret_cut_off_half_way_leaves_no_file_and_a_second_never_replaces_the_first(tmp_path):
    """The secret is written into a file with no name and only then linked in: a process stopped half-way leaves its
    folder empty (no temporary file in ~/.config), and a second process keeps the first one's secret."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    stopped = subprocess.run([sys.executable, "-c", _STOP_MID_SECRET], env=env, capture_output=True, timeout=120)
    assert stopped.returncode == 9, stopped.stderr[-2000:]
    folder = tmp_path / "config" / "needlebench"
    assert os.listdir(folder) == []
    read = "from needlebench.sources import cache; import sys; sys.stdout.write(cache.secret().hex())"
    first, second = (
        subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, timeout=120)
        for _ in range(2)
    )
    assert first.stdout == second.stdout and len(first.stdout) == 64 and first.stderr == second.stderr == ""
    assert os.listdir(folder) == ["secret.key"] and (folder / "secret.key").read_bytes().hex() == first.stdout


def test_an_existing_loose_cache_folder_of_ours_is_made_private(sandbox, tmp_path, monkeypatch):
    """A cache folder an earlier version made under umask 000 (0777) is made 0700 before anything is written into
    it; the GGUF tokenizer cache's hash memo is 0600 in a 0700 folder."""
    from needlebench.evaluation.runner import model_tokenizer

    cache = tmp_path / "cache"
    (cache / "gguf-tokenizers").mkdir(parents=True)
    for folder in (cache, cache / "gguf-tokenizers"):
        folder.chmod(0o777)
    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(cache))
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF not really")
    old = os.umask(0)
    try:
        digest = model_tokenizer._sha256(weights)
    finally:
        os.umask(old)
    assert len(digest) == 64 and _loose(cache) == []
    assert model_tokenizer._sha256(weights) == digest  # read back from the memo


def test_the_on_the_fly_dataset_cache_is_private_under_umask_000(tmp_path, monkeypatch):
    """The loader's on-the-fly build (``data_dir`` unset): its folder ``datasets/`` and everything up to the cache
    root are made 0700 (they were 0777), its lock and record 0600, under umask 000; the lock is never opened through
    a planted link."""
    from needlebench.dataset import load

    cache = tmp_path / "cache"
    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(cache))
    folder = load.built_cache_dir(0)
    (cache / "datasets").mkdir(parents=True)
    for path in (cache, cache / "datasets"):  # as an earlier version made them under umask 000
        path.chmod(0o777)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    (cache / "datasets" / f"{folder.name}.lock").symlink_to(victim)
    old = os.umask(0)
    try:
        with pytest.raises(OSError):  # a link at the lock's name: refused (ELOOP), never truncating its target
            load.ensure_built("atc_en", 0)
        (cache / "datasets" / f"{folder.name}.lock").unlink()
        assert load.ensure_built("atc_en", 0) == folder
    finally:
        os.umask(old)
    assert victim.read_text() == "the user's file"
    for path in (cache, cache / "datasets"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in (cache / "datasets" / f"{folder.name}.lock", cache / "datasets" / f"{folder.name}.record"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


# --- 5. a killed worker -------------------------------------------------------------------------------------------


def _kill_first_worker(process: subprocess.Popen, after: float) -> int | None:
    """SIGKILL the first worker process of the build `process` (a child of it), `after` seconds after it is seen (the
    workers live for well under a second on a warm cache: 1,680 rows at ~5,000 rows/s in CI, so not longer)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        except OSError:
            children = []
        if children:
            time.sleep(after)
            try:
                os.kill(int(children[0]), 9)
            except ProcessLookupError:  # a short-lived child (or a worker done with its shard): the next one
                continue
            return int(children[0])
        time.sleep(0.01)
    return None


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a build uses worker processes only with 2 CPUs")
@pytest.mark.parametrize("how", ["new", "existing", "from outside"])
def test_a_killed_build_worker_is_one_line_and_leaves_nothing(dataset, sandbox, how):
    """A worker process killed by SIGKILL (what the out-of-memory killer sends; by a test hook inside the worker, or
    from outside while it builds a 32k config): one line naming it, exit 2, and nothing of the build left (no new
    folder, no staging folder, the old dataset as it was)."""
    out = sandbox / "work" / "ds"
    if how != "new":
        shutil.copytree(dataset, out)
    before = snapshot(sandbox)
    if how == "from outside":
        args = ["build", "single_en_32k", "single_en_8k", "--num-proc", "2", "--out", str(out), "--overwrite"]
        process = subprocess.Popen(
            [*CLI, *args], stderr=subprocess.PIPE, text=True, env=_environment(sandbox), cwd=sandbox / "work"
        )
        killed = _kill_first_worker(process, after=0.05)
        stderr = process.communicate(timeout=300)[1]
        assert killed is not None, stderr[-2000:]
        result = subprocess.CompletedProcess(args, process.returncode, "", stderr)
    else:
        args = ["build", "atc_en", "single_en_4k", "--num-proc", "2", "--out", str(out), "--overwrite"]
        result = _run(sandbox, *args, timeout=300, env={"NEEDLEBENCH_TEST_KILL_WORKER": "1"})
    line = _stopped(result, "SIGKILL", "worker")
    assert "nothing of this build was written" in line
    assert snapshot(sandbox) == before


# --- 6. a 1,500-level deep folder tree ----------------------------------------------------------------------------


def _deep(root: Path, levels: int, name: str = "d") -> Path:
    """`levels` nested folders under `root`, made one at a time (``os.makedirs`` recurses once per level)."""
    descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=descriptor)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = child
    finally:
        os.close(descriptor)
    return root.joinpath(*([name] * levels))


def _deepest(root: Path, name: str) -> list[str]:
    """What the deepest folder of the tree `root`/`name` of :func:`_deep` holds (walked by descriptors: its path may
    be too long for the kernel)."""
    descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while name in os.listdir(descriptor):
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = child
        return os.listdir(descriptor)
    finally:
        os.close(descriptor)


def _remove_deep(root: Path, name: str) -> None:
    """Remove the tree `root`/`name` of :func:`_deep` without recursion (``shutil.rmtree`` and ``os.walk`` recurse
    once per level): the folder below the top one is moved up, the top one removed, level after level."""
    descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=descriptor)
            except (FileNotFoundError, NotADirectoryError):
                return
            moved = False
            try:
                for entry in os.listdir(child):
                    if entry == name and not moved:
                        os.rename(entry, ".deep-next", src_dir_fd=child, dst_dir_fd=descriptor)
                        moved = True
                    else:
                        shutil.rmtree(entry, dir_fd=child)  # a dataset folder, a few levels at most
            finally:
                os.close(child)
            os.rmdir(name, dir_fd=descriptor)
            if not moved:
                return
            os.rename(".deep-next", name, src_dir_fd=descriptor, dst_dir_fd=descriptor)
    finally:
        os.close(descriptor)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["inside", "new", "too-long"])
def test_an_out_in_a_deep_tree_is_built_or_one_line(sandbox, case):
    """``--out`` inside a 1,500-level tree, or a new 1,500-level path (``mkdir -p`` never recurses): built; a path
    beyond PATH_MAX: one line naming the limit. Never a RecursionError or an OSError traceback."""
    work = sandbox / "work"
    top = {"inside": "d", "new": "n", "too-long": "dd"}[case]
    if case == "new":
        out = work.joinpath(*([top] * 1500)) / "ds"
    else:
        out = _deep(work, 1500, top) / "ds"
    try:
        before = snapshot(sandbox, skip=work / top)
        result = _run(sandbox, "build", "atc_en", "--out", str(out), timeout=300)
        if case == "too-long":
            refused(result, "PATH_MAX")
            assert _deepest(work, top) == []  # no "ds" made at the bottom
        else:
            assert result.returncode == 0, result.stderr[-2000:]
            assert json.loads((out / MANIFEST).read_text())["configs"]["atc_en"]["rows"] == 720
        assert snapshot(sandbox, skip=work / top) == before
    finally:
        _remove_deep(work, top)


@pytest.mark.slow
def test_a_deep_tree_inside_a_config_folder_is_left_alone(dataset, sandbox):
    """A dataset folder holding a 1,500-level tree in ``data/atc_en/``: `build --overwrite` replaces the listed
    shard and leaves the tree (not listed by the manifest) as it is."""
    out = sandbox / "work" / "ds"
    shutil.copytree(dataset, out)
    deep = _deep(out / "data" / "atc_en", 1500)
    try:
        before = snapshot(sandbox, skip=out)
        result = _run(sandbox, "build", "atc_en", "--out", str(out), "--overwrite", "--seed", "5", timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert deep.is_dir() and snapshot(sandbox, skip=out) == before
    finally:
        _remove_deep(out / "data" / "atc_en", "d")
