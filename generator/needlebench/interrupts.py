"""Ctrl-C (and SIGTERM) for the command line: one line, cleanup, exit status 130 within seconds, and never a hang.

The first SIGINT prints ``needlebench: interrupted, cleaning up`` and raises :class:`KeyboardInterrupt` in the main
thread, whose ``except``/``finally`` blocks terminate worker pools and remove the staging folder (a section marked
:func:`deferred`, such as a dataset's commit, completes first). Further presses are ignored (they never interrupt
the cleanup). A watchdog thread, woken by the signal itself through
:func:`signal.set_wakeup_fd` (so even while the main thread is inside a long C call), terminates the registered
worker processes and exits with status 130 if the process is still running :data:`DEADLINE` seconds later;
whatever it leaves (a staging folder) is removed by the next build. Worker processes ignore SIGINT: a terminal's
Ctrl-C reaches the whole process group, and only the parent decides.

SIGTERM (``kill``, a job scheduler's stop, ``timeout``) is handled the same way: ``needlebench: terminated, cleaning
up``, the same cleanup, and exit status 143 (128 + 15, as a shell reports a process killed by SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

MESSAGE = "needlebench: interrupted, cleaning up"
EXIT_STATUS = 130
#: What a stop by SIGTERM prints and exits with.
TERM_MESSAGE = "needlebench: terminated, cleaning up"
TERM_EXIT_STATUS = 143
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Seconds after the first Ctrl-C before the watchdog exits the process itself.
DEADLINE = 2.0

_lock = threading.Lock()
_interrupted = threading.Event()
_installed = False
_raised = False
_critical = 0
_pending = False
_status = EXIT_STATUS
_cleanups: dict[int, Callable[[], None]] = {}


def install() -> None:
    """Install the SIGINT and SIGTERM handling (main thread only; idempotent)."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    for signum in _SIGNALS:
        signal.signal(signum, _handler)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(reader, writer), name="needlebench-sigint", daemon=True).start()
    _installed = True


def _announce(signum: int = signal.SIGINT) -> bool:
    """Print the message of `signum` once; True for the first interruption (its signal sets the exit status)."""
    global _status
    with _lock:
        if _interrupted.is_set():
            return False
        _interrupted.set()
        _status = TERM_EXIT_STATUS if signum == signal.SIGTERM else EXIT_STATUS
    message = TERM_MESSAGE if signum == signal.SIGTERM else MESSAGE
    try:
        sys.stderr.write(("\n" if _stop_bars() else "") + message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return True


def _stop_bars() -> bool:
    """Freeze the progress bars (no redraw after the message); True when one is on the current line (the message
    then starts on a new one)."""
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)
    try:
        bars = [bar for bar in list(getattr(tqdm, "_instances", ())) if not getattr(bar, "disable", True)]
    except (TypeError, RuntimeError):
        return False
    for bar in bars:
        bar.disable = True
    return bool(bars)


@contextlib.contextmanager
def deferred():
    """A section Ctrl-C does not interrupt (e.g. a dataset's commit): KeyboardInterrupt is raised at its end."""
    global _critical
    _critical += 1
    try:
        yield
    finally:
        _critical -= 1
    if _critical == 0 and _pending:
        raise KeyboardInterrupt


def _ignore_signals() -> None:
    for signum in _SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _handler(signum, frame) -> None:
    global _raised, _pending
    _announce(signum)
    if _critical:
        _pending = True
        _ignore_signals()
        return
    if not _raised:
        _raised = True
        _pending = False
        # later presses are ignored, also during the interpreter's shutdown (which would restore the default)
        _ignore_signals()
        raise KeyboardInterrupt
    # a second press: ignored, the cleanup goes on (and the watchdog bounds it)


def _watch(reader: socket.socket, writer: socket.socket) -> None:
    while True:
        try:
            data = reader.recv(64)
        except OSError:
            return
        if not data:
            return
        received = [signum for signum in _SIGNALS if signum in data]
        if received:
            _announce(received[0])
            break
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        time.sleep(0.05)
    run_cleanups()
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(_status)


def interrupted() -> bool:
    return _interrupted.is_set()


def exit_now(status: int | None = None) -> None:
    """Exit with `status` (None: the interruption's, 130 for Ctrl-C and 143 for SIGTERM) once the work and its
    cleanup are done, skipping the interpreter's shutdown: collecting a large build's objects can take seconds, and
    the teardown of native thread pools after a large build aborted the process now and then ("terminate called
    without an active exception", exit 134) after every file was in place."""
    import logging

    if status is None:
        status = _status
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def register(cleanup: Callable[[], None]) -> int:
    """Run `cleanup` (e.g. terminate worker processes) if the watchdog must exit; returns a key for
    :func:`unregister`."""
    key = id(cleanup)
    _cleanups[key] = cleanup
    return key


def unregister(key: int) -> None:
    _cleanups.pop(key, None)


def run_cleanups() -> None:
    for cleanup in reversed(list(_cleanups.values())):
        try:
            cleanup()
        except Exception:  # best effort on the way out; the exit status says enough
            pass


def worker_init() -> None:
    """Initializer of worker processes: SIGINT ignored, SIGTERM ends them (as :func:`terminate_pool` expects), no
    wakeup fd or watchdog inherited from the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass


def terminate_pool(pool) -> None:
    """Stop a :class:`concurrent.futures.ProcessPoolExecutor` now: cancel queued work, terminate (then kill) the
    workers, never wait for running tasks."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        try:
            process.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + 0.5
    for process in processes:
        try:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(0.5)
        except (OSError, ValueError, AssertionError, AttributeError):
            pass


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs (ours counts as running); used to tell a live build's files from leftovers."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
