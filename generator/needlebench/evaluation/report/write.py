"""Writing a report: the tables as Markdown and CSV, the figures as PNG (and PDF), ``README.md`` and a
self-contained ``report.html``, into a folder only a report wrote (:class:`ReportFolder`).
"""

from __future__ import annotations

import base64
import csv
import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from needlebench import __version__
from needlebench.dataset.publish import file_digest
from needlebench.errors import NeedlebenchError
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
from needlebench.evaluation.report.tables import Table, build_tables
from needlebench.evaluation.scoring.overall import overall_formula


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


#: Markdown characters a cell from input data may not use: links and images (``[x](javascript:...)``), table
#: pipes and backslash escapes. ``&``, ``<`` and ``>`` become entities, so no raw HTML passes.
_MD_SPECIAL = re.compile(r"([\\\[\]|])")


def _md_escape(text: str) -> str:
    """Text from input data (model, task and config names, metadata) as inert Markdown: no HTML, no link, no
    table break; it reads the same once rendered (CommonMark backslash escapes and entities)."""
    text = " ".join(str(text).splitlines())
    return html.escape(_MD_SPECIAL.sub(r"\\\1", text), quote=False)


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
    """A CSV cell a spreadsheet shows as text, never runs: text starting with ``= + - @``, tab or CR is
    prefixed with ``'`` (OWASP's rule); numbers, and text that is a plain number (``-3.5``), stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.match(value):
        return "'" + value
    return value


def write_table(table: Table, out_dir: Path) -> list[Path]:
    """Write a table as Markdown and CSV; return the two paths."""
    md = out_dir / f"{table.name}.md"
    md.write_text(table_markdown(table), encoding="utf-8")
    path = out_dir / f"{table.name}.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([csv_safe(value) for value in row] for row in table_csv_rows(table))
    return [md, path]


def table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    body = []
    for row in table.rows:
        cells = []
        for value in row:
            text = html.escape(_format(value, table.digits))
            empty = isinstance(value, Cell) and value.value is None
            cells.append(f'<td class="empty">{text}</td>' if empty else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f"<p class='note'>{html.escape(table.note)}</p>" if table.note else ""
    return (
        f"<h2 id='{table.name}'>{html.escape(table.title)}</h2>{note}"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0;"
    "font-size:13px}th,td{border:1px solid #bbb;padding:3px 6px;text-align:left}th{background:#eee}"
    "td.empty{background:repeating-linear-gradient(45deg,#eee,#eee 4px,#ddd 4px,#ddd 8px);color:#666}"
    ".note{color:#444;font-size:13px}figure{margin:1em 0}img{max-width:100%;border:1px solid #ccc}"
)


EXPLANATION = (
    "Headline numbers are the papers' means: NeedleBench averages per grid cell (S-RT per length and depth, "
    "M-RT per length, M-RS per length, depth and needle count; each cell the mean of its repeats) and weights the "
    "per-size overall "
    f"{overall_formula('v1')}; ATC is CircularEval perf_4 per needle count weighted by "
    "needle count; Counting-Stars is the mean over the star x length grid. NeedleBench v2 results have their own "
    "tables (needlebench_v2_<size>: each task the mean per grid cell, Overall the plain "
    f"{overall_formula('v2')}; "
    "atc_v2: weighted by relation count). lm-eval's own number (the mean over "
    "rows) is in the 'scores' table under 'lm-eval row mean'. n = samples behind a value; '[partial]' marks values "
    "built from part of a config ('[partial: EN only]': a both-languages value from one language); '–' is no value."
)


def write_html(
    path: Path,
    tables: Sequence[Table],
    figures: Sequence[tuple[str, Path]],
    sources: Sequence[Path],
    scorers: str = "",
) -> Path:
    """A self-contained page: every table, every figure embedded as a base64 PNG."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>NeedleBench report</title>",
        f"<style>{_CSS}</style></head><body><h1>NeedleBench report</h1>",
        f"<p class='note'>{html.escape(EXPLANATION)}</p>",
        f"<p class='note'>{html.escape(scorers)}</p>" if scorers else "",
        "<p class='note'>Sources: " + ", ".join(html.escape(source_label(s)) for s in sources) + "</p>",
    ]
    parts += [table_html(table) for table in tables]
    if figures:
        parts.append("<h2>Figures</h2>")
    for title, figure in figures:
        data = base64.b64encode(figure.read_bytes()).decode("ascii")
        parts.append(
            f"<figure><img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(title)}</figcaption></figure>"
        )
    parts.append("</body></html>")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


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
        return f"Scorer: {rules} (no judged_samples_*.jsonl found); {SCORING_LABEL[results.scoring]}."
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
    out_dir = Path(out_dir)
    names = [f"{table.name}.{ext}" for table in tables for ext in ("md", "csv")]
    names += [f"{figure.name}.{ext}" for figure in planned for ext in (("png", "pdf") if pdf else ("png",))]
    names += ["README.md", "report.html"]
    folder = ReportFolder.open(out_dir, names)
    written: list[Path] = []
    for table in tables:
        written += write_table(table, out_dir)
    drawn: list[tuple[str, Path]] = []
    for figure in planned:
        paths = report_figures.render(figure, out_dir, pdf=pdf)
        written += paths
        drawn.append((figure.title, paths[0]))
    index = out_dir / "README.md"
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
        lines += ["## Figures", ""] + [f"![{_md_escape(title)}]({path.name})" for title, path in drawn]
    index.write_text("\n".join(lines) + "\n", encoding="utf-8")
    written.append(index)
    written.append(write_html(out_dir / "report.html", tables, drawn, loaded.sources, scorers))
    folder.finish()
    return written


#: The file a report leaves in its folder, listing the files it wrote with their sha256: a later report into the
#: same folder replaces those (unless changed since) and nothing else.
REPORT_MANIFEST = ".needlebench-report.json"


class ReportFolder:
    """The ``--out`` folder of a report: new, empty, or one a report wrote before (it holds
    :data:`REPORT_MANIFEST`). A user's file is never overwritten: when a file the report would write is not
    one the manifest lists unchanged, the report refuses before writing anything."""

    def __init__(self, path: Path, names: Sequence[str], previous: Mapping[str, str | None]) -> None:
        self.path, self.names, self.previous = path, list(dict.fromkeys(names)), previous

    @classmethod
    def open(cls, path: Path, names: Sequence[str]) -> ReportFolder:
        """Check the folder (refusing with a one-line error), create it if new, and record what is coming."""
        if path.exists() and not path.is_dir():
            raise NeedlebenchError(f"--out {str(path)!r} is a file; give a new or empty folder, or an earlier report's")
        previous = cls._previous(path, names) if path.is_dir() else {}
        folder = cls(path, names, previous)
        for name in folder.names:
            folder._check_replaceable(name)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise NeedlebenchError(f"cannot create --out {str(path)!r}: {error.strerror}") from None
        # listed before anything is written: an interrupted report leaves a folder the next one may replace
        folder._write_manifest({**previous, **dict.fromkeys(folder.names)})
        return folder

    @staticmethod
    def _previous(path: Path, names: Sequence[str]) -> dict[str, str | None]:
        """The files an earlier report listed (name -> sha256), {} for an empty folder; a refusal naming a file
        the report would overwrite (else the first one there) for a folder that holds anything else."""
        manifest = path / REPORT_MANIFEST
        if not manifest.is_file() or manifest.is_symlink():
            entries = sorted(entry.name for entry in path.iterdir())
            if entries:
                clash = next((name for name in names if name in entries), None)
                held = f"would overwrite {clash!r}" if clash else f"holds {entries[0]!r}"
                raise NeedlebenchError(
                    f"--out {str(path)!r} is not empty and no needlebench report wrote it (the report {held}); "
                    "nothing was written. Give a new or empty folder, or an earlier report's "
                    f"(it holds {REPORT_MANIFEST})"
                )
            return {}
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            files = data["files"] if data.get("tool") == "needlebench report" else None
            if not isinstance(files, dict) or not all(
                _plain_name(name) and (digest is None or isinstance(digest, str)) for name, digest in files.items()
            ):
                raise ValueError
        except (OSError, UnicodeDecodeError, ValueError, AttributeError, KeyError, TypeError):
            raise NeedlebenchError(
                f"--out {str(path)!r} holds a {REPORT_MANIFEST} that is not a needlebench report's file list; "
                "give a new or empty folder"
            ) from None
        return files

    def _unchanged(self, name: str, *, interrupted_ok: bool = True) -> bool:
        """Whether ``name`` is a regular file the earlier report wrote and nobody changed since; one an
        interrupted report was writing (no sha256 yet) counts when ``interrupted_ok``."""
        target = self.path / name
        if name not in self.previous or target.is_symlink() or not target.is_file():
            return False
        digest = self.previous[name]
        return interrupted_ok if digest is None else _sha256(target) == digest

    def _check_replaceable(self, name: str) -> None:
        target = self.path / name
        if (target.exists() or target.is_symlink()) and not self._unchanged(name):
            why = (
                "changed since the report wrote it"
                if name in self.previous
                else "which needlebench report did not write"
            )
            raise NeedlebenchError(
                f"--out {str(self.path)!r} already holds {name!r}, {why}; nothing was written. Give a new or empty "
                "folder, or move the file away"
            )

    def finish(self) -> None:
        """Remove the earlier report's files this one did not write again (if unchanged); list this one's."""
        for name in self.previous:
            if name not in self.names and self._unchanged(name, interrupted_ok=False):
                (self.path / name).unlink()
        self._write_manifest({name: _sha256(self.path / name) for name in self.names})

    def _write_manifest(self, files: Mapping[str, str | None]) -> None:
        data = {"tool": "needlebench report", "version": __version__, "files": dict(sorted(files.items()))}
        temp = self.path / f".{REPORT_MANIFEST}.tmp"
        temp.unlink(missing_ok=True)  # never through a link someone left under this name
        temp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        temp.replace(self.path / REPORT_MANIFEST)


def _plain_name(name: Any) -> bool:
    """A file name directly in the folder: no separator, not ``.``/``..``, not the manifest itself."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..", REPORT_MANIFEST)
        and not any(char in name for char in "/\\\0")
        and not name.startswith(f".{REPORT_MANIFEST}")
    )


def _sha256(path: Path) -> str:
    return file_digest(path).sha256


def parse_names(values: Iterable[str]) -> dict[str, str]:
    """``--name PATH=NAME`` options as a mapping; a value without ``=`` is a one-line error."""
    names: dict[str, str] = {}
    for value in values:
        key, sep, name = value.partition("=")
        if not sep or not key or not name:
            raise NeedlebenchError(f"--name {value!r} is not PATH=NAME (a results path or pretrained value, a name)")
        names[key] = name
    return names
