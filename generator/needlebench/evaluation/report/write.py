"""Writing a report: the tables as Markdown and CSV, the figures as PNG (and PDF), ``README.md`` and a
self-contained ``report.html``, into a folder only a report wrote (:class:`ReportFolder`).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from needlebench import __version__
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.families import EVAL_FAMILIES
from needlebench.evaluation.report import figures as report_figures
from needlebench.evaluation.report.aggregate import Cell
from needlebench.evaluation.report.load import (
    SCORING_LABEL,
    Results,
    apply_scoring,
    check_scoring,
    load_results,
    source_label,
)
from needlebench.evaluation.report.safety import loads
from needlebench.evaluation.report.tables import Table, build_tables
from needlebench.evaluation.scoring.overall import overall_formula
from needlebench.markdown import md_escape as _md_escape
from needlebench.markdown import plain_text
from needlebench.safe_fs import Folder
from needlebench.terminal import printable, warn


def _format(value: Any, digits: int) -> str:
    if isinstance(value, Cell):
        if value.value is None:  # a count only beside a value
            return "–"
        text = f"{value.value:.{digits}f} (n={value.n})"
        return text + (f" [{value.note}]" if value.note else "")
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _html(text: Any) -> str:
    """Text from input data as HTML text (or a quoted attribute): :func:`plain_text`, then ``html.escape``."""
    return html.escape(plain_text(text))


def table_markdown(table: Table) -> str:
    lines = [f"## {_md_escape(table.title)}", ""]
    if table.note:
        lines += [_md_escape(table.note), ""]
    lines += ["| " + " | ".join(_md_escape(h) for h in table.header) + " |", "|" + "---|" * len(table.header)]
    for row in table.rows:
        lines.append("| " + " | ".join(_md_escape(_format(cell, table.digits)) for cell in row) + " |")
    return "\n".join(lines) + "\n"


def table_csv_rows(table: Table) -> list[list[Any]]:
    """CSV rows: a :class:`Cell` column becomes two columns, the value and ``<column> n`` (and a note)."""
    cell_columns = [i for i in range(len(table.header)) if any(isinstance(row[i], Cell) for row in table.rows)]
    header: list[Any] = []
    for index, name in enumerate(table.header):
        header.append(name)
        if index in cell_columns:
            header.append(f"{name} n")
            if any(isinstance(row[index], Cell) and row[index].note for row in table.rows):
                header.append(f"{name} note")
    out = [header]
    for row in table.rows:
        line: list[Any] = []
        for index, value in enumerate(row):
            if index in cell_columns:
                cell = value if isinstance(value, Cell) else Cell(None, 0)
                line += ["" if cell.value is None else round(cell.value, 6), cell.n]
                if f"{table.header[index]} note" in header:
                    line.append(cell.note)
            else:
                line.append("" if value is None else (round(value, 6) if isinstance(value, float) else value))
        out.append(line)
    return out


#: Text a spreadsheet would run as a formula (OWASP "CSV injection"): it gets a leading ``'``.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def csv_safe(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text, never runs: text is :func:`plain_text` (no control character, bidi
    override or lone surrogate), and starting with ``= + - @``, tab or CR it is prefixed with ``'`` (OWASP's rule);
    numbers, and text that is a plain number (``-3.5``), stay numbers."""
    if not isinstance(value, str):
        return value
    value = plain_text(value)
    if value.startswith(_FORMULA_START) and not _NUMBER.match(value):
        return "'" + value
    return value


def table_csv(table: Table) -> str:
    """A table as CSV text (``csv`` module dialect ``excel``: CRLF line ends), every cell :func:`csv_safe`."""
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows([csv_safe(value) for value in row] for row in table_csv_rows(table))
    return buffer.getvalue()


def table_html(table: Table) -> str:
    head = "".join(f"<th>{_html(h)}</th>" for h in table.header)
    body = []
    for row in table.rows:
        cells = []
        for value in row:
            text = _html(_format(value, table.digits))
            empty = isinstance(value, Cell) and value.value is None
            cells.append(f'<td class="empty">{text}</td>' if empty else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f"<p class='note'>{_html(table.note)}</p>" if table.note else ""
    return (
        f"<h2 id='{_html(table.name)}'>{_html(table.title)}</h2>{note}"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0;"
    "font-size:13px}th,td{border:1px solid #bbb;padding:3px 6px;text-align:left}th{background:#eee}"
    "td.empty{background:repeating-linear-gradient(45deg,#eee,#eee 4px,#ddd 4px,#ddd 8px);color:#666}"
    ".note{color:#444;font-size:13px}figure{margin:1em 0}img{max-width:100%;border:1px solid #ccc}"
)


def _explained(edition: str) -> str:
    """What the families with their own tables say of their means in an edition (``EvalFamily.explanation``)."""
    return "".join(
        f"; {entry.explanation[edition]}" for entry in EVAL_FAMILIES.values() if edition in entry.explanation
    )


EXPLANATION = (
    "Headline numbers are the papers' means: NeedleBench averages per grid cell (S-RT per length and depth, "
    "M-RT per length, M-RS per length, depth and needle count; each cell the mean of its repeats) and weights the "
    f"per-size overall {overall_formula('v1')}{_explained('v1')}. NeedleBench v2 results have their own "
    "tables (needlebench_v2_<size>: each task the mean per grid cell, Overall the plain "
    f"{overall_formula('v2')}{_explained('v2')}). lm-eval's own number (the mean over "
    "rows) is in the 'scores' table under 'lm-eval row mean'. n = samples behind a value; '[partial]' marks values "
    "built from part of a config ('[partial: EN only]': a both-languages value from one language); '–' is no value."
)


def report_html(
    tables: Sequence[Table],
    figures: Sequence[tuple[str, bytes]],
    sources: Sequence[Path],
    scorers: str = "",
) -> str:
    """A self-contained page: every table, every figure (title, PNG bytes) embedded as a base64 PNG."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>NeedleBench report</title>",
        f"<style>{_CSS}</style></head><body><h1>NeedleBench report</h1>",
        f"<p class='note'>{_html(EXPLANATION)}</p>",
        f"<p class='note'>{_html(scorers)}</p>" if scorers else "",
        "<p class='note'>Sources: " + ", ".join(_html(source_label(s)) for s in sources) + "</p>",
    ]
    parts += [table_html(table) for table in tables]
    if figures:
        parts.append("<h2>Figures</h2>")
    for title, figure in figures:
        data = base64.b64encode(figure).decode("ascii")
        parts.append(
            f"<figure><img alt='{_html(title)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{_html(title)}</figcaption></figure>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def left_out_text(left_out: Sequence[tuple[str, str]], shown: int = 3) -> str:
    """The one warning line of values left out: how many, and per file (the first `shown` files) how many and
    where the first one is."""
    by_file: dict[str, list[str]] = {}
    for path, where in left_out:
        by_file.setdefault(path, []).append(where)
    parts = [
        f"{path} ({len(places)}: {places[0]}{', ...' if len(places) > 1 else ''})"
        for path, places in list(by_file.items())[:shown]
    ]
    more = f" and {len(by_file) - shown} more file(s)" if len(by_file) > shown else ""
    return (
        f"left out {len(left_out)} value(s) that are not finite numbers or scores (NaN, Infinity, beyond 1e15, a "
        f"row's score outside 0-100); every mean is over the other values: {'; '.join(parts)}{more}"
    )


def scorer_text(results: Results) -> str:
    """One line saying which scorer each task's numbers come from (rule-based metric or model judge)."""
    judged = [run for run in results.runs if run.judged]
    rules = (
        "the rule-based metrics lm-eval logged"
        if results.scoring == "default"
        else "the reference-exact *_reference metrics lm-eval logged (computed from the output for runs without "
        "them), as OpenCompass's evaluators and the Counting-Stars notebook score"
    )
    if not judged:
        found = (
            f"{results.ignored_judged:,} judged_samples_*.jsonl ignored: not written by this user's needlebench judge"
            if results.ignored_judged
            else "no judged_samples_*.jsonl found"
        )
        return f"Scorer: {rules} ({found}); {SCORING_LABEL[results.scoring]}."
    parts = [f"{run.entity} / {run.label}: {run.scorer}" for run in judged]
    rule = len(results.runs) - len(judged)
    return (
        "Scorer: judge scores from judged_samples_*.jsonl (`needlebench judge`; rating 1-10 shown x 10 on the "
        "0-100 scale, unrated samples left out of every mean and counted as unscored) for "
        + "; ".join(parts)
        + (f"; the other {rule} task(s): {rules}." if rule else ".")
        + f" {SCORING_LABEL[results.scoring]}."
    )


def write_report(
    results: Sequence[Path | str] | Path | str,
    out_dir: Path | str,
    *,
    names: Mapping[str, str] | None = None,
    annotate: str = "counts",
    pdf: bool = False,
    figures: bool = True,
    data_dirs: Sequence[Path | str] = (),
    scoring: str = "default",
) -> list[Path]:
    """Tables (Markdown, CSV), figures (PNG, PDF on request), ``README.md`` and ``report.html`` in ``out_dir``.

    ``figures=False`` writes the tables only (``--no-figures``). ``scoring="reference"`` reports the
    reference-exact ``*_reference`` metrics instead of the default ones (:func:`apply_scoring`).

    Everything is read and computed before the first file is written, so bad input writes nothing.
    """
    if isinstance(results, (str, Path)):
        results = [results]
    check_scoring(scoring)
    loaded = apply_scoring(load_results(list(results), names, data_dirs), scoring)
    tables = build_tables(loaded)
    scorers = scorer_text(loaded)
    planned = report_figures.plan_figures(loaded, annotate=annotate) if figures else []
    if loaded.left_out:
        warn(left_out_text(loaded.left_out))
    out_dir = Path(out_dir)
    names = [f"{table.name}.{ext}" for table in tables for ext in ("md", "csv")]
    names += [f"{figure.name}.{ext}" for figure in planned for ext in (("png", "pdf") if pdf else ("png",))]
    names += ["README.md", "report.html"]
    folder = ReportFolder.open(out_dir, names)
    try:
        for table in tables:
            folder.write(f"{table.name}.md", table_markdown(table))
            folder.write(f"{table.name}.csv", table_csv(table))
        drawn: list[tuple[str, str, bytes]] = []
        for figure in planned:
            images = report_figures.render_bytes(figure, pdf=pdf)
            for name, data in images.items():
                folder.write(name, data)
            drawn.append((figure.title, f"{figure.name}.png", images[f"{figure.name}.png"]))
        lines = [
            "# NeedleBench report",
            "",
            EXPLANATION,
            "",
            _md_escape(scorers),
            "",
            "Sources: " + ", ".join(_md_escape(source_label(s)) for s in loaded.sources),
            "",
        ]
        lines += [table_markdown(table) for table in tables]
        if drawn:
            lines += ["## Figures", ""] + [f"![{_md_escape(title)}]({name})" for title, name, _data in drawn]
        folder.write("README.md", "\n".join(lines) + "\n")
        page = report_html(tables, [(title, data) for title, _name, data in drawn], loaded.sources, scorers)
        folder.write("report.html", page)
        folder.finish()
    finally:
        folder.close()
    return [out_dir / name for name in folder.names]


#: The file a report leaves in its folder, listing the files it wrote with their sha256: a later report into the
#: same folder replaces those (unless changed since) and nothing else.
REPORT_MANIFEST = ".needlebench-report.json"
#: Largest report file list read.
MAX_MANIFEST_BYTES = 16 << 20


class ReportFolder:
    """The ``--out`` folder of a report: new, empty, or one a report wrote before (it holds
    :data:`REPORT_MANIFEST`). A user's file is never overwritten: when a file the report would write is not
    one the manifest lists with the sha256 of what is there now, the report refuses before writing anything.

    Every file goes through safe_fs (:class:`~needlebench.safe_fs.Folder`: the folder's descriptor, an
    unpredictable temporary name created ``O_EXCL | O_NOFOLLOW``, one rename). Before a file is written, the list
    names it with the sha256 of the bytes about to be written (beside the sha256 of the earlier report's file it
    replaces): a report interrupted at any point leaves a list that matches only bytes a report wrote, so the
    next one never replaces a file the user put there since (an entry without a sha256, as earlier versions
    wrote, allows nothing)."""

    def __init__(self, folder: Folder | None, path: Path, names: Sequence[str], previous: Mapping[str, Any]) -> None:
        self.folder, self.path, self.names = folder, path, list(dict.fromkeys(names))
        self.previous = {name: _digests(value) for name, value in previous.items()}
        #: What the list on disk says: name -> sha256s allowed there.
        self.listed: dict[str, list[str]] = {name: sorted(value) for name, value in self.previous.items()}

    @classmethod
    def open(cls, path: Path, names: Sequence[str]) -> ReportFolder:
        """Check the folder (refusing with a one-line error) and create it if new; nothing is written yet."""
        path = Path(path)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            info = None
        except OSError as error:
            raise NeedlebenchError(f"cannot use --out {printable(repr(str(path)))}: {error.strerror}") from None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            raise NeedlebenchError(
                f"--out {printable(repr(str(path)))} is a file; give a new or empty folder, or an earlier report's"
            )
        folder = Folder.open(path) if info is not None else None
        try:
            previous = cls._previous(folder, path, names) if folder is not None else {}
            report = cls(folder, path, names, previous)
            for name in report.names:
                report._check_replaceable(name)
            if folder is None:
                try:
                    report.folder = Folder.open(path, create=True)
                except OSError as error:
                    raise NeedlebenchError(
                        f"cannot create --out {printable(repr(str(path)))}: {error.strerror}"
                    ) from None
        except BaseException:
            if folder is not None:
                folder.close()
            raise
        return report

    def close(self) -> None:
        if self.folder is not None:
            self.folder.close()

    @staticmethod
    def _previous(folder: Folder, path: Path, names: Sequence[str]) -> dict[str, Any]:
        """The files an earlier report listed (name -> sha256), {} for an empty folder; a refusal naming a file
        the report would overwrite (else the first one there) for a folder that holds anything else."""
        if not folder.is_file(REPORT_MANIFEST):
            entries = folder.listdir()
            if entries:
                clash = next((name for name in names if name in entries), None)
                held = f"would overwrite {clash!r}" if clash else f"holds {entries[0]!r}"
                raise NeedlebenchError(
                    printable(
                        f"--out {str(path)!r} is not empty and no needlebench report wrote it (the report {held}); "
                        "nothing was written. Give a new or empty folder, or an earlier report's "
                        f"(it holds {REPORT_MANIFEST})"
                    )
                )
            return {}
        try:
            data = loads(folder.read_bytes(REPORT_MANIFEST, limit=MAX_MANIFEST_BYTES))
            files = data["files"] if data.get("tool") == "needlebench report" else None
            if not isinstance(files, dict) or not all(
                _plain_name(name) and (digest is None or _digests(digest)) for name, digest in files.items()
            ):
                raise ValueError
        except (NeedlebenchError, OSError, UnicodeDecodeError, ValueError, AttributeError, KeyError, TypeError):
            raise NeedlebenchError(
                printable(
                    f"--out {str(path)!r} holds a {REPORT_MANIFEST} that is not a needlebench report's file list; "
                    "give a new or empty folder"
                )
            ) from None
        return files

    def _unchanged(self, name: str) -> bool:
        """Whether ``name`` is a regular file whose sha256 is one the list gives for it (bytes a report wrote)."""
        allowed = self.listed.get(name)
        if not allowed or self.folder is None or not self.folder.is_file(name):
            return False
        try:
            return _sha256_of(self.folder, name) in allowed
        except (NeedlebenchError, FileNotFoundError):
            return False

    def _check_replaceable(self, name: str) -> None:
        if self.folder is None or not self.folder.exists(name) or self._unchanged(name):
            return
        why = "changed since the report wrote it" if name in self.previous else "which needlebench report did not write"
        raise NeedlebenchError(
            printable(
                f"--out {str(self.path)!r} already holds {name!r}, {why}; nothing was written. Give a new or empty "
                "folder, or move the file away"
            )
        )

    def write(self, name: str, data: bytes | str) -> None:
        """Write ``name`` (listed first with the sha256 of `data`), when what is there is still the earlier
        report's file (checked again: the user may have saved one since the report began)."""
        assert self.folder is not None and name in self.names
        data = data.encode("utf-8") if isinstance(data, str) else data
        digest = hashlib.sha256(data).hexdigest()
        self._check_replaceable(name)
        kept = self.listed.get(name, []) if self._unchanged(name) else []
        self.listed[name] = sorted({*kept, digest})
        self._write_manifest(self.listed)
        self.folder.write_bytes(name, data)
        self.listed[name] = [digest]

    def finish(self) -> None:
        """Remove the earlier report's files this one did not write again (if unchanged); list this one's."""
        assert self.folder is not None
        for name in self.previous:
            if name not in self.names and self._unchanged(name):
                self.folder.unlink(name)
        self.listed = {name: self.listed[name] for name in self.names}
        self._write_manifest(self.listed)

    def _write_manifest(self, files: Mapping[str, Sequence[str]]) -> None:
        assert self.folder is not None
        listed = {name: digests[0] if len(digests) == 1 else list(digests) for name, digests in files.items()}
        data = {"tool": "needlebench report", "version": __version__, "files": dict(sorted(listed.items()))}
        self.folder.write_text(REPORT_MANIFEST, json.dumps(data, indent=1) + "\n")


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _digests(value: Any) -> set[str]:
    """The sha256s a list entry allows: one, or a list of them (a file being replaced when a report stopped);
    none for an entry without one."""
    values = value if isinstance(value, list) else [value]
    return {item for item in values if isinstance(item, str) and _SHA256.match(item)}


def _plain_name(name: Any) -> bool:
    """A file name directly in the folder: no separator, not ``.``/``..``, not the manifest itself."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..", REPORT_MANIFEST)
        and not any(char in name for char in "/\\\0")
        and not name.startswith(f".{REPORT_MANIFEST}")
    )


def _sha256_of(folder: Folder, name: str) -> str:
    """The sha256 of the regular file ``name`` of ``folder``, read through one descriptor (never a link)."""
    digest = hashlib.sha256()
    with folder.open_read(name) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_names(values: Iterable[str]) -> dict[str, str]:
    """``--name PATH=NAME`` options as a mapping; a value without ``=`` is a one-line error."""
    names: dict[str, str] = {}
    for value in values:
        key, sep, name = value.partition("=")
        if not sep or not key or not name:
            raise NeedlebenchError(f"--name {value!r} is not PATH=NAME (a results path or pretrained value, a name)")
        names[key] = name
    return names
