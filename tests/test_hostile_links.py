"""A link planted at any name a command writes never makes it write outside the folder (issue 33).

The names are not listed by hand: each command is run once on honest input under ``strace`` (every ``openat`` that
creates, ``mkdir``, ``rename`` and ``link`` of the whole process tree, descriptors decoded to paths with ``-y``), and
every name it made inside the folder from someone else (its temporary files and folders included) is then planted,
one at a time, as a symbolic link to the user's ``~/.bashrc`` (or, for a folder, to ``~/mydata``) in a fresh copy of
the folder, and the command is run again. It either succeeds or refuses in one line (exit 2), and the fake HOME
outside the attacked folder is byte-for-byte, mode-for-mode the same. A temporary name that carries a pid of the run
(predictable by a pid spray) fails the test by itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from support import single_row, write_samples
from support.sandbox import CLI, REAL_CONFIG, REAL_HF_HOME, snapshot

pytestmark = [
    pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (Debian package strace)"),
]

TRACED = "openat,open,creat,mkdir,mkdirat,rename,renameat,renameat2,link,linkat,symlink,symlinkat"
#: ``openat(5</abs/dir>, "name", O_WRONLY|O_CREAT...`` and friends: (dir fd decoded by -y, path) pairs.
_ARG = r'(?:(?:AT_FDCWD|-?\d+)<(?P<{d}>[^>]*)>|AT_FDCWD)?,?\s*"(?P<{p}>(?:[^"\\]|\\.)*)"'
_OPEN = re.compile(r"^(?P<pid>\d+)\s+(?:openat|open|creat)\(" + _ARG.format(d="d", p="p") + r"(?P<rest>[^)]*)")
_MKDIR = re.compile(r"^(?P<pid>\d+)\s+mkdir(?:at)?\(" + _ARG.format(d="d", p="p"))
_TWO = re.compile(
    r"^(?P<pid>\d+)\s+(?:rename|renameat2?|link|linkat)\("
    + _ARG.format(d="d1", p="p1")
    + r",\s*"
    + _ARG.format(d="d2", p="p2")
)
_SYMLINK = re.compile(r"^(?P<pid>\d+)\s+symlink(?:at)?\(\"[^\"]*\",\s*" + _ARG.format(d="d", p="p"))


def _env(home: Path) -> dict:
    return {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME}


def _absolute(directory: str | None, path: str, cwd: Path) -> Path:
    path = path.encode("latin-1", "backslashreplace").decode("unicode_escape") if "\\" in path else path
    if path.startswith("/"):
        return Path(path)
    return Path(directory) / path if directory else cwd / path


def traced_names(home: Path, args: list[str], folder: Path, cwd: Path) -> tuple[dict[str, str], set[str]]:
    """({name inside `folder`: "file" | "folder"} the command made, pids of the run); the command must succeed."""
    log = home.parent / "strace.log"
    result = subprocess.run(
        ["strace", "-f", "-qq", "-y", "-s", "4096", "-e", f"trace={TRACED}", "-o", str(log), *CLI, *args],
        capture_output=True,
        text=True,
        env=_env(home),
        cwd=cwd,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    made: dict[str, str] = {}
    pids: set[str] = set()
    root = folder.resolve()

    def note(directory: str | None, path: str, kind: str) -> None:
        target = _absolute(directory, path, cwd)
        try:
            relative = target.relative_to(root) if target.is_absolute() else None
        except ValueError:
            try:
                relative = target.relative_to(folder)
            except ValueError:
                return
        if relative is None or not relative.parts or relative.parts[0] == ".git":
            return
        made.setdefault(relative.as_posix(), kind)

    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if " = -1 " in line or "<unfinished" in line:
            continue
        match = _OPEN.match(line)
        if match:
            pids.add(match["pid"])
            if "O_CREAT" in match["rest"]:
                note(match["d"], match["p"], "file")
            continue
        match = _MKDIR.match(line)
        if match:
            note(match["d"], match["p"], "folder")
            continue
        match = _TWO.match(line)
        if match:
            note(match["d1"], match["p1"], "file")
            note(match["d2"], match["p2"], "file")
            continue
        match = _SYMLINK.match(line)
        if match:
            note(match["d"], match["p"], "file")
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        pid = line.split(" ", 1)[0]
        if pid.isdigit():
            pids.add(pid)
    log.unlink()
    return made, pids


def _plant(folder: Path, name: str, kind: str, home: Path) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(home / "mydata" if kind == "folder" else home / ".bashrc")


def _templates(names, pids: set[str]) -> set[str]:
    """The names with every pid of the run written ``{pid}``: what a pid spray can predict."""
    pattern = re.compile(r"(?<!\d)(" + "|".join(sorted(pids, key=len, reverse=True)) + r")(?!\d)")
    return {pattern.sub("{pid}", name) for name in names}


def _representatives(names: dict[str, str]) -> dict[str, str]:
    """The names to plant: every hidden name and folder, and of the files of one folder and one ending (the 150 task
    YAMLs of export-tasks, the figures of a report: each written by the same code) the first two and the last."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for name, kind in names.items():
        path = Path(name)
        hidden = path.name.startswith(".") or kind == "folder"
        groups.setdefault((str(path.parent), path.suffix, name if hidden else ""), []).append(name)
    chosen = {}
    for members in groups.values():
        members.sort()
        for name in dict.fromkeys([*members[:2], members[-1]]):
            chosen[name] = names[name]
    return chosen


def attack(sandbox: Path, setup, args_of, folder_of) -> list[str]:
    """Trace the honest run twice (a temporary name both runs share, once their pids are written ``{pid}``, is
    predictable and fails), then plant each name it leaves, one at a time; returns the names tried."""
    temporary_names = []
    for run in ("first", "second"):
        honest = sandbox / f"honest-{run}"
        honest.mkdir()
        setup(honest)
        made, pids = traced_names(sandbox, args_of(honest), folder_of(honest), cwd=honest)
        assert made, "the trace saw no write into the folder"
        final = {name: kind for name, kind in made.items() if (folder_of(honest) / name).exists()}
        temporary_names.append(_templates(set(made) - set(final), pids))
        shutil.rmtree(honest)
    predictable = sorted(temporary_names[0] & temporary_names[1])
    assert predictable == [], (
        f"temporary names a second run uses again (a link planted there is followed): {predictable}"
    )
    tried = []
    for name, kind in sorted(_representatives(final).items()):
        place = sandbox / "attack"
        place.mkdir()
        setup(place)
        _plant(folder_of(place), name, kind, sandbox)
        before = snapshot(sandbox, skip=place)
        result = subprocess.run(
            [*CLI, *args_of(place)], capture_output=True, text=True, env=_env(sandbox), cwd=place, timeout=600
        )
        assert "Traceback" not in result.stderr, (name, result.stderr[-3000:])
        assert result.returncode in (0, 2), (name, result.returncode, result.stderr[-3000:])
        if result.returncode == 2:
            lines = [line for line in result.stderr.splitlines() if line.startswith("needlebench: error:")]
            assert len(lines) == 1, (name, result.stderr[-3000:])
        assert snapshot(sandbox, skip=place) == before, f"a link planted at {name} changed the user's files"
        assert (sandbox / ".bashrc").read_text() == "export PATH=$HOME/bin:$PATH\n"
        shutil.rmtree(place)
        tried.append(name)
    return tried


# --- the folders ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("links") / "ds"
    subprocess.run([*CLI, "build", "atc_en", "--out", str(out)], check=True, capture_output=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def results(dataset: Path, tmp_path_factory) -> Path:
    """The oracle's lm-eval output on a few ATC rows (samples logged)."""
    base = tmp_path_factory.mktemp("links-results")
    subprocess.run([*CLI, "tasks", str(dataset), "--out", str(base / "tasks")], check=True, capture_output=True)
    output = base / "out"
    done = subprocess.run(
        [
            *CLI,
            "eval",
            "run",
            "--model",
            "needlebench-oracle",
            "--include_path",
            str(base / "tasks"),
            "--tasks",
            "needlebench_atc_en",
            "--limit",
            "4",
            "--output_path",
            str(output),
            "--log_samples",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return output


def _copy(source: Path, target: Path) -> None:
    shutil.copytree(source, target, symlinks=True)


@pytest.mark.slow
def test_build_into_a_clone(dataset, sandbox):
    tried = attack(
        sandbox,
        lambda here: _copy(dataset, here / "clone"),
        lambda here: ["build", "atc_zh", "--out", str(here / "clone")],
        lambda here: here / "clone",
    )
    assert "needlebench.json" in tried and "README.md" in tried


@pytest.mark.slow
def test_build_overwrite(dataset, sandbox):
    attack(
        sandbox,
        lambda here: _copy(dataset, here / "clone"),
        lambda here: ["build", "atc_en", "--seed", "7", "--overwrite", "--out", str(here / "clone")],
        lambda here: here / "clone",
    )


@pytest.mark.slow
@pytest.mark.parametrize("command", ["tasks", "export-tasks"])
def test_task_folders(dataset, sandbox, command):
    """Writing a task folder again over one an earlier run wrote (the names are then all there to plant)."""

    def args(here: Path) -> list[str]:
        if command == "tasks":
            return ["tasks", str(dataset), "--out", str(here / "tasks")]
        return ["export-tasks", "--repo", "org/needlebench", "--revision", "v1.0.0", "--out", str(here / "tasks")]

    def setup(here: Path) -> None:
        subprocess.run([*CLI, *args(here)], check=True, capture_output=True, env=_env(sandbox), timeout=600)

    attack(sandbox, setup, args, lambda here: here / "tasks")


@pytest.mark.slow
def test_report_of_a_results_folder(results, sandbox):
    attack(
        sandbox,
        lambda here: (_copy(results, here / "results"), (here / "report").mkdir()),
        lambda here: ["report", str(here / "results"), "--out", str(here / "report")],
        lambda here: here / "report",
    )


class _Judge(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "Rating: [[10]]"}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture()
def judge_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _with_srt_rows(results: Path, target: Path) -> None:
    """The oracle's ATC output plus a few S-RT rows: the judge sends S-RT rows (ATC ones the report scores by rule)."""
    _copy(results, target)
    rows = [{"doc": single_row(depth_percent=float(depth)), "resp": "x", "score": 0.0} for depth in (0, 50)]
    write_samples(target / "needlebench-oracle", "needlebench_single_en_4k", rows)


@pytest.mark.slow
def test_judge_of_a_results_folder(results, sandbox, judge_url):
    attack(
        sandbox,
        lambda here: _with_srt_rows(results, here / "results"),
        lambda here: ["judge", str(here / "results"), "--base-url", judge_url, "--model", "judge"],
        lambda here: here / "results",
    )


def test_the_trace_parser_reads_descriptor_relative_calls(tmp_path: Path):
    """The parser itself, on a command whose writes are known: a planted name is found through a descriptor."""
    script = (
        "import os; d = os.open({!r}, os.O_RDONLY | os.O_DIRECTORY); os.mkdir('sub', dir_fd=d); "
        "f = os.open('sub/x.tmp', os.O_WRONLY | os.O_CREAT, dir_fd=d); os.close(f); "
        "os.replace('sub/x.tmp', 'sub/y', src_dir_fd=d, dst_dir_fd=d)"
    ).format(str(tmp_path / "f"))
    (tmp_path / "f").mkdir()
    log = tmp_path / "log"
    subprocess.run(
        ["strace", "-f", "-qq", "-y", "-e", f"trace={TRACED}", "-o", str(log), sys.executable, "-c", script],
        check=True,
    )
    found = []
    for line in log.read_text().splitlines():
        for name, pattern in (("open", _OPEN), ("mkdir", _MKDIR), ("rename", _TWO)):
            match = pattern.match(line)
            if match and str(tmp_path / "f") in line:
                found.append((name, match.groupdict()))
    assert ("mkdir", "sub", str(tmp_path / "f")) in [(n, m.get("p"), m.get("d")) for n, m in found]
    assert any(n == "open" and m["p"] == "sub/x.tmp" and "O_CREAT" in m["rest"] for n, m in found)
    assert any(n == "rename" and m["p1"] == "sub/x.tmp" and m["p2"] == "sub/y" for n, m in found)
