"""A local Hugging Face Hub for tests: an `olah` server over git repositories in a temporary folder.

Repositories live at ``<mirrors>/datasets/ORG/NAME`` (plain git repositories; tags are revisions). The server runs
as ``olah-cli -c CONFIG`` on a free 127.0.0.1 port, offline (it never contacts huggingface.co), and is stopped
when the context ends.

``huggingface_hub`` and ``datasets`` read ``HF_ENDPOINT`` (and ``HF_HOME``) once, at import time, into module
constants, so client code runs in a fresh Python process whose environment points at the server
(:meth:`HubServer.call`): exactly what a user's shell with ``HF_ENDPOINT=...`` does, and nothing leaks into the
test process. Run as a script, this module is that client (``python hub_server.py CALLS_JSON``).

Use :func:`olah_server` as a context manager or :func:`olah_fixture` to make a pytest fixture.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT = 40.0
STOP_TIMEOUT = 10.0
CLIENT_TIMEOUT = 180.0
_RESULT_MARK = "@@HUB-CLIENT-RESULT@@"
#: Environment variables removed from client processes (no credentials, no caches outside the test folder).
_SCRUBBED = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_HUB_CACHE",
    "HF_DATASETS_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_ASSETS_CACHE",
    "HF_XET_CACHE",
    "TRANSFORMERS_CACHE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
)


class ClientError(Exception):
    """An exception raised in a client process: its type name and one-line message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def client_env(endpoint: str, hf_home: Path) -> dict[str, str]:
    """Environment of a Hub client process pointed at ``endpoint`` with its own caches under ``hf_home``."""
    env = {key: value for key, value in os.environ.items() if key not in _SCRUBBED}
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=str(hf_home),
        HF_HUB_OFFLINE="0",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
        HF_HUB_ETAG_TIMEOUT="10",
        HF_HUB_DOWNLOAD_TIMEOUT="10",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        TOKENIZERS_PARALLELISM="false",
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
    return env


def run_client(calls: list[dict[str, Any]], env: dict[str, str], timeout: float = CLIENT_TIMEOUT) -> list[Any]:
    """Run ``calls`` (``{"target": "module:function", "args": [...], "kwargs": {...}}``) in a fresh process.

    Returns one entry per call: the JSON-converted result, or a :class:`ClientError` when the call raised.
    """
    completed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), json.dumps(calls)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    marked = [line for line in completed.stdout.splitlines() if line.startswith(_RESULT_MARK)]
    if completed.returncode != 0 or not marked:
        raise RuntimeError(f"hub client failed (exit {completed.returncode}):\n{completed.stderr[-4000:]}")
    results = json.loads(marked[-1][len(_RESULT_MARK) :])
    return [ClientError(r["error"]["type"], r["error"]["message"]) if "error" in r else r["ok"] for r in results]


@dataclass
class HubServer:
    """A running olah server and the folders it serves."""

    url: str
    mirrors: Path
    home: Path
    process: subprocess.Popen = field(repr=False)
    log: Path = field(repr=False)

    def repo_path(self, repo_id: str, repo_type: str = "datasets") -> Path:
        """Where the git repository of ``repo_id`` lives (it need not exist yet)."""
        return self.mirrors / repo_type / repo_id

    def env(self, hf_home: Path | None = None) -> dict[str, str]:
        return client_env(self.url, hf_home or self.home / "hf-home")

    def call(self, target: str, *args: Any, hf_home: Path | None = None, **kwargs: Any) -> Any:
        """Call ``module:function`` in a client process; re-raises a client exception as :class:`ClientError`."""
        result = self.calls([(target, args, kwargs)], hf_home=hf_home)[0]
        if isinstance(result, ClientError):
            raise result
        return result

    def calls(self, calls: list[tuple[str, tuple, dict]], hf_home: Path | None = None) -> list[Any]:
        """Several calls in one client process (one interpreter start-up); errors are returned, not raised."""
        payload = [{"target": t, "args": list(a), "kwargs": dict(k)} for t, a, k in calls]
        return run_client(payload, self.env(hf_home))

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-chars:] if self.log.exists() else ""


def write_config(folder: Path, port: int, mirrors: Path) -> Path:
    """The olah TOML config: local mirrors only, offline, metadata never cached (repos change during tests)."""
    config = folder / "olah.toml"
    config.write_text(
        "[basic]\n"
        'host = "127.0.0.1"\n'
        f"port = {port}\n"
        f"repos-path = {json.dumps(str(folder / 'repos'))}\n"
        f"mirrors-path = [{json.dumps(str(mirrors))}]\n"
        "metadata-cache-ttl = 0\n"
        "\n[accessibility]\n"
        "offline = true\n",
        encoding="utf-8",
    )
    return config


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer means the server is up
    except (urllib.error.URLError, OSError):
        return False


def wait_until_up(url: str, process: subprocess.Popen, timeout: float, log: Path) -> None:
    """Poll ``url`` until the server answers; fail early if it exits, and after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"olah exited with {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        if _answers(f"{url}/api/datasets/needlebench-probe/none/refs"):
            return
        time.sleep(0.2)
    raise RuntimeError(
        f"olah did not answer on {url} within {timeout:.0f} s:\n{log.read_text(errors='replace')[-3000:]}"
    )


def stop(process: subprocess.Popen) -> None:
    """Terminate the server (its own process group), then kill it if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(timeout=STOP_TIMEOUT)


@contextlib.contextmanager
def olah_server(folder: Path, *, startup_timeout: float = STARTUP_TIMEOUT) -> Iterator[HubServer]:
    """Start olah over ``folder/mirrors`` on a free port; stop it when the block ends."""
    executable = shutil.which("olah-cli")
    if executable is None:
        raise RuntimeError("olah-cli is not installed (pip install olah)")
    folder = Path(folder)
    mirrors = folder / "mirrors"
    (mirrors / "datasets").mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = write_config(folder, port, mirrors)
    log = folder / "olah.log"
    with log.open("wb") as log_stream:
        process = subprocess.Popen(
            [executable, "-c", str(config), "--log-path", str(folder / "logs")],
            cwd=folder,
            stdout=log_stream,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process, startup_timeout, log)
        yield HubServer(url=url, mirrors=mirrors, home=folder, process=process, log=log)
    finally:
        stop(process)


def olah_fixture(scope: str = "module"):
    """A pytest fixture (assign it to a name in a test module) yielding a running :class:`HubServer`."""
    import pytest

    @pytest.fixture(scope=scope)
    def _server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
        with olah_server(tmp_path_factory.mktemp("olah")) as server:
            yield server

    return _server


# --- git repositories for the server --------------------------------------------------------------------------

GIT_ENV = {
    "GIT_AUTHOR_NAME": "fixture",
    "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
    "GIT_COMMITTER_NAME": "fixture",
    "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(path: Path, *args: str) -> str:
    """Run git in ``path`` (never discovering a repository above it); returns stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV, GIT_CEILING_DIRECTORIES=str(Path(path).parent))
    completed = subprocess.run(
        ["git", "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false", "-C", str(path), *args],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    return completed.stdout


def commit_files(path: Path, files: dict[str, bytes | str], *, tag: str | None = None, message: str = "fixture") -> str:
    """Write ``files`` into the git repository at ``path`` (created if needed), commit, tag; returns the commit."""
    path = Path(path)
    if not (path / ".git").exists():
        path.mkdir(parents=True, exist_ok=True)
        git(path, "init", "-q", "-b", "main")
    for name, content in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    git(path, "add", "-A")
    git(path, "commit", "-q", "--allow-empty", "-m", message)
    if tag:
        git(path, "tag", tag)
    return git(path, "rev-parse", "HEAD").strip()


# --- small needlebench dataset folders -------------------------------------------------------------------------

#: A recipe shaped like the builder's (defaults, public-domain corpora).
FIXTURE_RECIPE: dict[str, Any] = {
    "buffer": None,
    "compat": None,
    "corpora": {
        "en": {"name": "fixture-en", "language": "en", "source": "test fixture", "revision": "r1",
               "license": "public domain", "documents": 2, "sha256": "a" * 64},
    },
    "generator_version": "0.1.0",
    "haystack_en": None,
    "haystack_zh": None,
    "names": None,
    "needles": None,
    "question_position": "end",
    "reasoning_needles_en": None,
    "reasoning_needles_zh": None,
    "release_seed": 20240711,
    "tokenizer": "cl100k_base",
}  # fmt: skip


def _fixture_value(dtype: Any, column: str, index: int, salt: str) -> Any:
    import pyarrow as pa

    if pa.types.is_list(dtype):
        return [_fixture_value(dtype.value_type, column, index, salt)]
    if pa.types.is_integer(dtype):
        return index
    if pa.types.is_floating(dtype):
        return float(index) / 2
    return f"{column}-{index}{salt}"


def fixture_rows(config: str, rows: int, salt: str = "") -> list[dict[str, Any]]:
    """``rows`` synthetic rows with exactly the columns of the config's family."""
    from needlebench.tasks.grid import get_config
    from needlebench.tasks.schema import columns_for

    family = get_config(config).family
    data = [{col: _fixture_value(t, col, i, salt) for col, t in columns_for(family).items()} for i in range(rows)]
    for row in data:
        row["config"] = config
    return data


def make_dataset_folder(folder: Path, configs: dict[str, int], *, salt: str = "", card: bool = True) -> dict:
    """A needlebench dataset folder with synthetic rows (Parquet, manifest, card); returns the manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from needlebench.dataset.card import write_card
    from needlebench.dataset.verify import fingerprint_files
    from needlebench.tasks.grid import get_config
    from needlebench.tasks.schema import arrow_schema

    folder = Path(folder)
    entries = {}
    for name, count in configs.items():
        rows = fixture_rows(name, count, salt)
        relative = f"data/{name}/test-00000-of-00001.parquet"
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(rows, schema=arrow_schema(get_config(name).family))
        pq.write_table(table, folder / relative, row_group_size=16)
        entries[name] = {
            "rows": count,
            "haystack_tokens": 1000 * count,
            "prompt_tokens": 1100 * count,
            "fingerprint": fingerprint_files([folder / relative]),
            "files": [relative],
        }
    manifest = {
        "format": "needlebench-dataset",
        "format_version": 1,
        "generator_version": "0.1.0",
        "recipe": json.loads(json.dumps(FIXTURE_RECIPE)),
        "configs": entries,
    }
    (folder / "needlebench.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    if card:
        write_card(folder, manifest)
    return manifest


# --- the client side (runs in the subprocess) -----------------------------------------------------------------


def load_rows(path: str, config: str | None, revision: str | None = None, split: str = "test") -> list[dict[str, Any]]:
    """``datasets.load_dataset`` of a Hub dataset (at a revision) or a local folder, as plain rows."""
    import datasets

    return datasets.load_dataset(path, config, split=split, revision=revision).to_list()


def hub_settings() -> dict[str, Any]:
    """The endpoint and cache the client libraries actually use (to check the environment took effect)."""
    import datasets.config
    from huggingface_hub import constants

    return {"hub": constants.ENDPOINT, "datasets": datasets.config.HF_ENDPOINT, "cache": constants.HF_HUB_CACHE}


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: _jsonable(item) for key, item in dataclasses.asdict(value).items()}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return value


def _resolve(target: str) -> Any:
    module_name, _, function_name = target.partition(":")
    return getattr(importlib.import_module(module_name), function_name)


def _call_one(call: dict[str, Any]) -> dict[str, Any]:
    try:
        value = _resolve(call["target"])(*call.get("args", []), **call.get("kwargs", {}))
    except Exception as error:  # reported to the test process, which decides
        return {"error": {"type": type(error).__name__, "message": str(error)}}
    return {"ok": _jsonable(value)}


def main(argv: list[str]) -> int:
    """Client entry point: run the JSON list of calls in ``argv[1]`` and print the marked JSON results."""
    calls = json.loads(argv[1])
    results = [_call_one(call) for call in calls]
    print(_RESULT_MARK + json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
