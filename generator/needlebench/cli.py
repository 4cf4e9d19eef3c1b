"""The `needlebench` command line: list, build, eval, show, budget, report, publish, verify.

User errors (:class:`NeedlebenchError`) print one line on stderr and exit with status 2. Anything unexpected (a bug)
prints one line too, naming the command and the exception, and exits with status 1; its traceback is saved under
the cache root (``crash/``) for a report, or shown with ``NEEDLEBENCH_DEBUG=1``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from needlebench import __version__, interrupts, resources
from needlebench.errors import NeedlebenchError
from needlebench.terminal import make_streams_safe, markup_safe, plain_rows, printable, working

app = typer.Typer(
    add_completion=False,
    rich_markup_mode=None,
    no_args_is_help=True,
    help="NeedleBench and Counting-Stars as reproducible Hugging Face datasets and lm-eval tasks.",
    context_settings={"help_option_names": ["-h", "--help"]},
    # no Rich traceback (its local variables can show prompt text and paths): main() reports a crash in one line
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
)
console = Console()
# into a pipe or a file a printed line is never wrapped: rich would break it at 80 columns (its width when stdout is
# not a terminal), mid-path (``Console.soft_wrap``, https://rich.readthedocs.io/en/stable/reference/console.html)
console.soft_wrap = not console.is_terminal


def say(text: object, **options) -> None:
    """Print a line on stdout that may hold names from folders and files: control characters escaped
    (:func:`~needlebench.terminal.printable`), no rich markup read from it (nor wrapped into a pipe: `console`)."""
    console.print(printable(text), markup=False, **options)


def printable_lines(text: object) -> str:
    """`text` with its line breaks and tabs kept and every other control or bidi character escaped (each line
    :func:`~needlebench.terminal.printable`): what a terminal may be shown of a multi-line text."""
    return "\n".join("\t".join(printable(cell) for cell in line.split("\t")) for line in str(text).split("\n"))


def say_lines(text: object) -> None:
    """:func:`say` for a message of several lines: one printed line each, each made printable (a line break is
    not shown as ``\\n``)."""
    for line in str(text).split("\n"):
        say(line)


def _to_terminal() -> bool:
    """Whether stdout is a terminal (escape sequences in printed data would act on it)."""
    try:
        return sys.stdout.isatty()
    except (ValueError, OSError, AttributeError):
        return False


def _version(value: bool) -> None:
    if value:
        console.print(f"needlebench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """needlebench command line."""


@app.command("list", short_help="List configs, their rows and context tokens.")
def list_configs(
    patterns: Annotated[list[str] | None, typer.Argument(help="Config names or globs (default: all).")] = None,
) -> None:
    """List configs with their rows and approximate context tokens."""
    from needlebench.tasks.grid import match_configs, registry  # deferred: config registry (5 ms); --help needs none

    specs = match_configs(patterns) if patterns else list(registry().values())
    rows = [
        (
            spec.name,
            spec.task_label,
            spec.language,
            spec.size or "-",
            f"{spec.num_rows:,}",
            f"{spec.approx_tokens:,}" if spec.approx_tokens else "-",
        )
        for spec in specs
    ]
    headers = ("config", "task", "lang", "size", "rows", "tokens")
    if not console.is_terminal:  # pipes get plain text: one config a line, tab-separated, nothing cut
        sys.stdout.write(plain_rows(rows))
        return
    from rich import box

    table = Table(*headers, box=box.SIMPLE_HEAD, pad_edge=False)
    for column in table.columns:
        column.no_wrap = True
    for row in rows:
        table.add_row(*row)
    needed = Console(width=10_000).measure(table).maximum
    if needed > console.width:  # too narrow for the table: plain lines with a header, nothing cut
        sys.stdout.write(plain_rows([headers, *rows]))
        return
    console.print(table)


@app.command(short_help="Build configs into a dataset folder (Parquet + card).")
def build(
    configs: Annotated[list[str] | None, typer.Argument(help="Config names or globs, e.g. 'single_*_4k'.")] = None,
    out: Annotated[Path, typer.Option("--out", help="Dataset folder to write.")] = Path("needlebench-data"),
    all_configs: Annotated[bool, typer.Option("--all", help="Build every config.")] = False,
    seed: Annotated[int | None, typer.Option("--seed", help="Release seed (default: the pinned one).")] = None,
    haystack_en: Annotated[
        str | None,
        typer.Option(
            help=(
                "English haystack: .txt, .jsonl, folder, hub:ORG/NAME[@REV][:CONFIG][:SPLIT][:COLUMN] or "
                "opencompass[@REV]."
            )
        ),
    ] = None,
    haystack_zh: Annotated[str | None, typer.Option(help="Chinese haystack (same forms).")] = None,
    corpus: Annotated[
        str | None, typer.Option("--corpus", help="opencompass[@REV]: the paper's original inputs from the Hub.")
    ] = None,
    needles: Annotated[str | None, typer.Option(help="Reference needles.jsonl instead of the built-in bank.")] = None,
    reasoning_needles_en: Annotated[str | None, typer.Option(help="Reference multi_needle_reasoning_en.json.")] = None,
    reasoning_needles_zh: Annotated[str | None, typer.Option(help="Reference multi_needle_reasoning_zh.json.")] = None,
    names: Annotated[str | None, typer.Option(help="Reference names.json for ATC.")] = None,
    compat: Annotated[
        str | None, typer.Option(help="opencompass or counting-stars: reproduce the reference construction.")
    ] = None,
    question_position: Annotated[str, typer.Option(help="end (the papers) or start.")] = "end",
    buffer: Annotated[int | None, typer.Option(help="Override the grid's length buffer (tokens).")] = None,
    depths: Annotated[
        str | None, typer.Option(help="Override the depth grid, e.g. '0,25,50,75,100' (percent).")
    ] = None,
    tokenizer: Annotated[
        str,
        typer.Option(
            help=(
                "What lengths are counted in: cl100k_base, or hf:PATH_OR_NAME (a local tokenizer folder or a model in "
                "the local Hugging Face cache)."
            )
        ),
    ] = "cl100k_base",
    compression: Annotated[str, typer.Option(help="Parquet codec: zstd, snappy or none (fastest, largest).")] = "zstd",
    num_proc: Annotated[int, typer.Option("--num-proc", help="Worker processes (at most the CPUs).")] = 1,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            help=(
                "Refuse a build of more context tokens (default 20,000,000,000; a build also stops before it would "
                "overfill the disk)."
            ),
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace a needlebench dataset of another recipe (only the files it lists).")
    ] = False,
    experiment: Annotated[
        Path | None,
        typer.Option("--experiment", help="Experiment YAML: your own needle test as a named config (see README)."),
    ] = None,
    allow_path: Annotated[
        list[Path] | None,
        typer.Option(
            "--allow-path",
            help=(
                "With --experiment: a file or folder outside the experiment file's folder that it may read (its "
                "haystack, needles_file or hf: tokenizer). Its paths are taken relative to its own folder; one "
                "leading outside it (absolute, ~, .., a link) is refused unless given here. Repeatable."
            ),
        ),
    ] = None,
) -> None:
    """Build configs into a dataset folder (Parquet + card), byte-identical for the same version and seed."""
    if experiment is None and tokenizer == "cl100k_base":
        from needlebench.sources.tokenizer import prefetch_cl100k  # deferred: numpy, tiktoken; list, --help need none

        prefetch_cl100k()  # loads while the build's modules are imported and its inputs checked
    # the build's modules are imported after the prefetch started, so that cl100k loads meanwhile
    from needlebench.dataset.build import build_dataset  # deferred: pyarrow; imported while cl100k loads
    from needlebench.dataset.options import BuildOptions  # deferred: pyarrow; imported while cl100k loads
    from needlebench.seeding import RELEASE_SEED  # deferred: numpy; list and --help need none
    from needlebench.tasks.grid import match_configs, registry  # deferred: config registry (5 ms); --help needs none

    if experiment is not None:
        from needlebench.dataset.experiment import build_experiment  # deferred: pyarrow, yaml; only --experiment

        if configs or all_configs:
            raise NeedlebenchError("--experiment builds the experiment's own config; name no other configs with it")
        given = {
            "--seed": seed,
            "--haystack-en": haystack_en,
            "--haystack-zh": haystack_zh,
            "--corpus": corpus,
            "--needles": needles,
            "--reasoning-needles-en": reasoning_needles_en,
            "--reasoning-needles-zh": reasoning_needles_zh,
            "--names": names,
            "--compat": compat,
            "--buffer": buffer,
            "--depths": depths,
            "--question-position": None if question_position == "end" else question_position,
        }
        clash = [option for option, value in given.items() if value is not None]
        if clash:
            raise NeedlebenchError(
                f"{clash[0]} does not apply with --experiment; set it in the experiment file "
                "(keys seed, haystack, needles, depths, length_buffer, question_position)"
            )
        spec, manifest = build_experiment(
            experiment,
            out,
            num_proc=num_proc,
            overwrite=overwrite,
            compression=compression,
            tokenizer=None if tokenizer == "cl100k_base" else tokenizer,
            max_tokens=max_tokens,
            allowed_paths=tuple(allow_path or ()),
        )
        entry = manifest["configs"][spec.name]
        say(f"{spec.name}: {entry['rows']:,} rows, {entry['haystack_tokens']:,} haystack tokens")
        _print_counting_note(manifest)
        say(f"wrote {out}")
        return
    if allow_path:
        raise NeedlebenchError("--allow-path applies only with --experiment (paths given as options are read as given)")
    if all_configs:
        names_list = list(registry())
    elif configs:
        names_list = [spec.name for spec in match_configs(configs)]
    else:
        raise NeedlebenchError("no configs given; name configs or globs (see `needlebench list`) or pass --all")
    if corpus is not None:
        haystack_en, haystack_zh, needles, reasoning_needles_en, reasoning_needles_zh, names = _opencompass_inputs(
            corpus, haystack_en, haystack_zh, needles, reasoning_needles_en, reasoning_needles_zh, names
        )
    options = BuildOptions(
        release_seed=RELEASE_SEED if seed is None else seed,
        tokenizer=tokenizer,
        haystack_en=haystack_en,
        haystack_zh=haystack_zh,
        needles=needles,
        reasoning_needles_en=reasoning_needles_en,
        reasoning_needles_zh=reasoning_needles_zh,
        names=names,
        compat=compat,
        question_position=question_position,
        buffer=buffer,
        depths=_parse_depths(depths),
        compression=compression,
    )
    manifest = build_dataset(names_list, out, options, num_proc=num_proc, overwrite=overwrite, max_tokens=max_tokens)
    from needlebench.dataset.boundary_stats import (  # deferred: pyarrow; list and --help need none
        boundary_counts,
        format_shares,
    )

    table = Table("config", "rows", "haystack tokens", "fingerprint")
    for name in names_list:
        entry = manifest["configs"][name]
        table.add_row(
            markup_safe(name), f"{entry['rows']:,}", f"{entry['haystack_tokens']:,}", entry["fingerprint"][:16]
        )
    console.print(table)
    for name in names_list:  # share of each boundary kind the needles sit on (configs with needles)
        try:
            counts = boundary_counts(out, name, manifest["configs"][name]["files"])
        except (OSError, NeedlebenchError):  # the folder moved or changed since the build: the summary only
            continue
        if (shares := format_shares(counts)) != "-":
            say(f"needle boundaries of {name}: {shares}", soft_wrap=True)
    _print_counting_note(manifest)
    say(f"wrote {out}")


def _print_counting_note(manifest: dict) -> None:
    from needlebench.sources.tokenizer import counting_note  # deferred: numpy, tiktoken; list, --help need none

    if note := counting_note(manifest["recipe"]["tokenizer"]):
        say(note, soft_wrap=True)


def _parse_depths(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise NeedlebenchError(f"depths {text!r} are not comma-separated numbers between 0 and 100") from None


def _opencompass_inputs(corpus, haystack_en, haystack_zh, needles, reasoning_en, reasoning_zh, names):
    """Fill unset inputs with the paper's files from the Hub dataset opencompass/NeedleBench, as the pinned spec
    ``opencompass@REV`` (downloaded and cached when read; the recipe records the spec, not a local path)."""
    from needlebench.sources.hub import parse_corpus_option  # deferred: 3 ms of imports; only --corpus needs it

    _, revision = parse_corpus_option(corpus)
    spec = f"opencompass@{revision}"
    return tuple(value or spec for value in (haystack_en, haystack_zh, needles, reasoning_en, reasoning_zh, names))


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
    short_help="Run lm-eval with needlebench's models; arguments pass through.",
)
def eval(ctx: typer.Context) -> None:  # the command is called eval (shadows the builtin in this module only)
    """Run lm-eval with needlebench's models (incl. the oracle) registered; arguments pass through."""
    import contextlib

    from needlebench.evaluation.runner.evaluate import run_eval  # deferred: lm-eval, numpy; list and --help need none

    listing = list(ctx.args)[:1] == ["ls"]  # `eval ls tasks` indexes every lm-eval task for a minute or more
    with working("lm-eval is indexing its tasks (a minute or more)") if listing else contextlib.nullcontext():
        code = run_eval(list(ctx.args))
    raise typer.Exit(code)


@app.command(short_help="Write lm-eval tasks for every config of a dataset folder.")
def tasks(
    folder: Annotated[
        Path, typer.Argument(help="Dataset folder written by `needlebench build` (built-in configs and experiments).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Task folder to write, for `lm_eval --include_path`.")] = Path(
        "needlebench-tasks"
    ),
) -> None:
    """Write lm-eval tasks (needlebench_<config>) for every config of a dataset folder, and a group per experiment."""
    from needlebench.evaluation.harness.task_export import (  # deferred: pyarrow; list, --help need none
        write_task_folder,
    )

    files = write_task_folder(folder, out)
    say(f"wrote {len(files)} files to {out}; run: lm_eval --include_path {out} --tasks needlebench_<config> ...")


@app.command("export-tasks", short_help="Write an lm-eval task folder (in-tree form) that needs no needlebench.")
def export_tasks(
    repo: Annotated[
        str,
        typer.Option(
            "--repo", help="Hub dataset the tasks read, ORG/NAME (a release published by `needlebench publish`)."
        ),
    ],
    revision: Annotated[str, typer.Option("--revision", help="The release tag vX.Y.Z (or a commit id) the tasks pin.")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write (copy it to lm_eval/tasks/needlebench).")] = Path(
        "needlebench-lm-eval-tasks"
    ),
) -> None:
    """Write the task folder in lm-eval's in-tree form: every config's task and the groups reading REPO at REVISION,
    with a self-contained utils.py (the package's scorers, copied by source) and a README."""
    from needlebench.evaluation.harness.upstream import (  # deferred: pyarrow, yaml; list and --help need none
        TASK_REQUIREMENTS,
        write_export,
    )

    files = write_export(out, repo, revision)
    say(
        f"wrote {len(files)} files to {out}; copy it to lm_eval/tasks/needlebench (or pass --include_path {out}); "
        "the scorers need: pip install " + " ".join(f"'{requirement}'" for requirement in TASK_REQUIREMENTS.values()),
        soft_wrap=True,
    )


@app.command(short_help="Rescore logged samples with a model judge (1-10 rubric).")
def judge(
    results: Annotated[Path, typer.Argument(help="lm-eval --output_path of a run with --log_samples.")],
    base_url: Annotated[
        str, typer.Option("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (vllm serve).")
    ],
    model: Annotated[str, typer.Option("--model", help="Judge model name as the endpoint knows it.")],
    api_key_env: Annotated[
        str, typer.Option("--api-key-env", help="Environment variable holding the API key (if any).")
    ] = "OPENAI_API_KEY",
    concurrency: Annotated[int, typer.Option(help="Requests in flight.")] = 4,
    retries: Annotated[
        int, typer.Option(help="Retries per sample (transient errors and replies without a rating).")
    ] = 3,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds one request may take in all (connect, wait, read).")
    ] = 60.0,
) -> None:
    """Rescore logged samples on the 1-10 rubric with a model judge; writes judged_samples_*.jsonl beside them.

    Exit status 1 when some rows got no verdict (server errors, timeouts): they are not cached, so a rerun asks
    only for them."""
    import os

    from needlebench.evaluation.judge.command import (  # deferred: asyncio, http client (0.1 s)
        JudgeConfig,
        judge_results,
    )

    config = JudgeConfig(base_url, model, os.environ.get(api_key_env) or None, concurrency, retries, timeout)
    counts = judge_results(results, config)
    shared = counts["samples"] - counts["requested"] - counts["cached"]  # rows whose texts another row has too
    line = (
        f"judged {counts['samples'] - counts['failed']} samples in {counts['files']} files ({counts['requested']} "
        f"requested, {counts['cached']} from cache"
        + (f", {shared} rows repeating the texts of another" if shared > 0 else "")
        + f", {counts['unrated']} without a usable rating)"
    )
    if counts["skipped"]:
        line += f"; {counts['skipped']} ATC and Counting-Stars rows not sent (the report scores them by rule)"
    say(line, soft_wrap=True)
    if counts["failed"]:
        print(
            f"needlebench judge: {counts['failed']} of {counts['samples']} rows got no verdict "
            f"({printable(counts['failure'])}); "
            "their files' judged_samples_*.jsonl were not written; rerun to retry them",
            file=sys.stderr,
        )
        raise typer.Exit(1)


@app.command("tasks-path", short_help="Print the lm-eval task folder, for lm_eval --include_path.")
def tasks_path() -> None:
    """Print the lm-eval task folder (for `lm_eval --include_path "$(needlebench tasks-path)"`)."""
    print(resources.tasks_path())


@app.command(short_help="Print a row of a dataset folder by id: its fields and its prompt.")
def show(
    data_dir: Annotated[Path, typer.Argument(help="A dataset folder built by `needlebench build --out DIR`.")],
    row_id: Annotated[
        str, typer.Argument(metavar="ID", help="The row's id, e.g. single_en_4k-L1000-d0-r0 (a sample's doc.id).")
    ],
    prompt_only: Annotated[bool, typer.Option("--prompt", help="Print only the prompt text.")] = False,
) -> None:
    """Print a row's fields (JSON, with prompt_sha256 as in lean sample logs) and then its prompt: what a lean
    sample log leaves out, recovered from the pinned dataset."""
    import json

    from needlebench.evaluation.runner.lean_samples import (  # deferred: pyarrow, numpy (0.3 s); list, --help need none
        PROMPT_CHARS_KEY,
        PROMPT_HASH_KEY,
        find_row,
        prompt_sha256,
    )

    row = find_row(data_dir, row_id)
    prompt = str(row.pop("prompt", ""))
    # a row from someone else may carry terminal escapes (ECMA-48 CSI/OSC, a CR, a bidi override): a terminal is
    # shown them escaped, line breaks and tabs kept; a pipe gets the exact text
    shown = printable_lines if _to_terminal() else str
    if prompt_only:  # exactly the prompt: `needlebench show DIR ID --prompt | sha256sum` gives prompt_sha256
        sys.stdout.write(shown(prompt))
        sys.stdout.flush()
        return
    row[PROMPT_HASH_KEY], row[PROMPT_CHARS_KEY] = prompt_sha256(prompt), len(prompt)
    print(shown(json.dumps(row, ensure_ascii=False, indent=1, default=str)))
    print("--- prompt ---")
    sys.stdout.write(shown(prompt if prompt.endswith("\n") else prompt + "\n"))


@app.command(short_help="List the rows whose prompt would not fit a model's context.")
def budget(
    configs: Annotated[list[str], typer.Argument(help="Config names or globs.")],
    tokenizer: Annotated[
        str,
        typer.Option(
            help=(
                "The model's tokenizer: a model or tokenizer folder, a .gguf file, a folder holding one .gguf, or a "
                "Hub model id (ORG/NAME: its tokenizer files only, from the Hugging Face cache or fetched)."
            )
        ),
    ],
    max_length: Annotated[int, typer.Option("--max-length", help="The model's context length.")],
    gguf_file: Annotated[
        str | None,
        typer.Option(
            "--gguf-file",
            help="The GGUF file (a name inside the --tokenizer folder), as lm-eval's gguf_file model arg.",
        ),
    ] = None,
    chat_template: Annotated[
        bool, typer.Option("--chat-template", help="Count with the chat template applied.")
    ] = False,
    max_gen_toks: Annotated[
        int | None, typer.Option("--max-gen-toks", help="Tokens reserved for the answer (default: the task's).")
    ] = None,
    data_dir: Annotated[
        str | None, typer.Option("--data-dir", help="A built dataset folder (default: build on the fly).")
    ] = None,
    rows: Annotated[bool, typer.Option("--rows", help="Also list every row that does not fit.")] = False,
) -> None:
    """Which prompts would not fit a model's context (lm-eval would silently left-truncate): a table per config
    and length; exit status 1 when some row does not fit."""
    from needlebench.evaluation.runner.budget import (  # deferred: numpy; list, --help need none
        budget_report,
        format_budget,
    )
    from needlebench.tasks.grid import match_configs  # deferred: config registry (5 ms); --help needs none

    if data_dir is not None:  # the folder's experiment configs are looked up by name, as `show` and `tasks` do
        from needlebench.dataset.build import register_experiments  # deferred: card, builders (0.2 s)
        from needlebench.dataset.manifest import read_manifest  # deferred: as the line above

        manifest = read_manifest(Path(data_dir), missing_ok=True)
        if manifest is not None:
            register_experiments(manifest)
    names_list = [spec.name for spec in match_configs(configs)]
    report = budget_report(
        tokenizer,
        max_length,
        names_list,
        chat_template=chat_template,
        max_gen_toks=max_gen_toks,
        data_dir=data_dir,
        gguf_file=gguf_file,
    )
    print(format_budget(report, rows=rows))
    if report.over:
        raise typer.Exit(1)


@app.command(short_help="Paper tables and heatmaps from lm-eval results.")
def report(
    results: Annotated[
        list[Path], typer.Argument(help="lm-eval --output_path folders or results/samples files (--log_samples).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help=(
                "Where to write tables, figures and report.html: a new or empty folder, or an earlier report's (only "
                "its files are replaced)."
            ),
        ),
    ] = Path("needlebench-report"),
    name: Annotated[
        list[str] | None,
        typer.Option("--name", help="PATH=NAME: call the model of a results path (or pretrained value) NAME."),
    ] = None,
    annotate: Annotated[str, typer.Option(help="Heatmap cell text: counts, values, both or none.")] = "counts",
    pdf: Annotated[bool, typer.Option("--pdf", help="Also write every figure as PDF.")] = False,
    no_figures: Annotated[bool, typer.Option("--no-figures", help="Write the tables only.")] = False,
    data_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--data-dir",
            help=(
                "Dataset folder whose experiments (custom configs) the results are of; default: the data_dir the run "
                "recorded."
            ),
        ),
    ] = None,
    scoring: Annotated[
        str,
        typer.Option(
            "--scoring",
            help=(
                "default (needlebench's metrics) or reference (the *_reference metrics, scored as OpenCompass and the "
                "Counting-Stars notebook score: quote these beside published numbers)."
            ),
        ),
    ] = "default",
) -> None:
    """The papers' tables (models as rows; Markdown, CSV, HTML) and figures from lm-eval results."""
    from needlebench.evaluation.report import parse_names, write_report  # deferred: numpy, matplotlib when drawing

    for path in write_report(
        results,
        out,
        names=parse_names(name or []),
        annotate=annotate,
        pdf=pdf,
        figures=not no_figures,
        data_dirs=data_dir or [],
        scoring=scoring,
    ):
        say(str(path))


@app.command(short_help="Publish a dataset folder as a tagged, versioned Hub dataset.")
def publish(
    folder: Annotated[Path, typer.Argument(help="A dataset folder built by `needlebench build`.")],
    version: Annotated[str, typer.Option(help="Semantic version X.Y.Z; the commit is tagged vX.Y.Z.")],
    repo: Annotated[str | None, typer.Option(help="Hub dataset repo ORG/NAME.")] = None,
    to_git: Annotated[
        Path | None, typer.Option("--to-git", help="Publish into a local git repository instead.")
    ] = None,
    private: Annotated[bool, typer.Option(help="Create the Hub repo private.")] = False,
    token: Annotated[str | None, typer.Option(help="Hub token (default: the logged-in one).")] = None,
) -> None:
    """Publish a dataset folder as a tagged, versioned Hub dataset (or into a local git repo)."""
    from needlebench.dataset.publish import publish_folder, publish_to_git  # deferred: pyarrow, huggingface_hub

    if (repo is None) == (to_git is None):
        raise NeedlebenchError("give exactly one of --repo ORG/NAME or --to-git PATH")
    if to_git is not None:
        result = publish_to_git(folder, to_git, version=version)
    else:
        result = publish_folder(folder, repo_id=repo, version=version, private=private, token=token)
    say_lines(result.how_to_load)


@app.command(short_help="Rebuild configs from the recorded recipe and compare.")
def verify(
    folder: Annotated[Path | None, typer.Argument(help="A dataset folder.")] = None,
    repo: Annotated[str | None, typer.Option(help="Hub dataset repo ORG/NAME.")] = None,
    revision: Annotated[str | None, typer.Option(help="Revision (tag vX.Y.Z) of --repo.")] = None,
    config: Annotated[list[str] | None, typer.Option("--config", help="Only these configs.")] = None,
    haystack_en: Annotated[
        str | None, typer.Option(help="Where the recipe's local English haystack is now (checked by sha256).")
    ] = None,
    haystack_zh: Annotated[str | None, typer.Option(help="Where the recipe's local Chinese haystack is now.")] = None,
    needles: Annotated[str | None, typer.Option(help="Where the recipe's local needles.jsonl is now.")] = None,
    reasoning_needles_en: Annotated[
        str | None, typer.Option(help="Where the recipe's local reasoning needles (en) are now.")
    ] = None,
    reasoning_needles_zh: Annotated[
        str | None, typer.Option(help="Where the recipe's local reasoning needles (zh) are now.")
    ] = None,
    names: Annotated[str | None, typer.Option(help="Where the recipe's local names.json is now.")] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help=(
                "hf:PATH: where the recipe's Hugging Face tokenizer is now (checked by the sha256 of its "
                "tokenizer.json)."
            )
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            help="Rebuild configs of more context tokens (default: the size of the largest built-in config).",
        ),
    ] = None,
) -> None:
    """Rebuild configs from the recorded recipe and compare fingerprints; exit 1 naming each that differs.

    Local inputs are recorded by file name, size and sha256; pass --haystack-en PATH (etc.) when one has moved."""
    from needlebench.dataset.verify import verify_folder, verify_repo  # deferred: pyarrow; list, --help need none

    if tokenizer is not None:  # loaded once, the recipe's hf:LABEL@sha256:HEX finds it by its hash
        from needlebench.sources.tokenizer import canonical_tokenizer  # deferred: numpy, tiktoken; only --tokenizer

        canonical_tokenizer(tokenizer)

    inputs = {
        "haystack_en": haystack_en,
        "haystack_zh": haystack_zh,
        "needles": needles,
        "reasoning_needles_en": reasoning_needles_en,
        "reasoning_needles_zh": reasoning_needles_zh,
        "names": names,
    }

    if (folder is None) == (repo is None):
        raise NeedlebenchError("give exactly one of FOLDER or --repo ORG/NAME --revision vX.Y.Z")
    if repo is not None:
        if revision is None:
            raise NeedlebenchError("--repo needs --revision (a tag such as v1.0.0)")
        differing = verify_repo(repo, revision, config, inputs=inputs, max_tokens=max_tokens)
    else:
        differing = verify_folder(folder, config, inputs=inputs, max_tokens=max_tokens)
    if differing:
        for name, reason in differing.items():
            console.print(f"[red]differs[/red] {markup_safe(name)}: {markup_safe(reason)}")
        raise typer.Exit(1)
    console.print("all configs match their fingerprints")


def main() -> None:
    """Console-script entry point: one-line errors and exit status 2 for bad input."""
    make_streams_safe()  # any locale: characters it cannot encode are escaped, never a UnicodeEncodeError
    interrupts.install()
    from needlebench.sources.cache import cache_root  # deferred: hashlib, hmac (4 ms), as in _report_crash

    try:
        cache_root()  # a relative NEEDLEBENCH_CACHE is refused before anything runs, not once a build is under way
        code = app(standalone_mode=False, prog_name="needlebench")
    except KeyboardInterrupt:  # the message was printed when Ctrl-C arrived; the cleanup is done
        interrupts.exit_now()
    except NeedlebenchError as error:
        print(f"needlebench: error: {printable(error)}", file=sys.stderr)
        sys.exit(error.exit_code)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.Abort:
        if interrupts.interrupted():  # Ctrl-C or SIGTERM: its message is printed, its status (130/143) kept
            interrupts.exit_now()
        print("needlebench: aborted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as error:  # usage errors (unknown option, missing argument): exit 2
        if type(error).__name__ == "NoArgsIsHelpError":  # `needlebench` alone: the help, no empty error line
            print(error.format_message(), file=sys.stderr)
            sys.exit(2)
        message = error.format_message() if hasattr(error, "format_message") else str(error)
        print(f"needlebench: error: {printable(message)}", file=sys.stderr)
        sys.exit(getattr(error, "exit_code", 2))
    except OSError as error:  # the system refused (disk full, permissions): one line, not a traceback
        where = f" ({error.filename})" if getattr(error, "filename", None) else ""
        print(f"needlebench: error: {printable(error.strerror or error)}{printable(where)}", file=sys.stderr)
        sys.exit(1)
    except Exception as error:  # a bug: one line and a saved traceback, never a traceback
        _report_crash(error)
        sys.exit(1)
    except BaseException as error:
        # the tokenizers library (Rust, through pyo3) panics on some tokenizer.json files a model folder may hold
        # (a Precompiled normalizer with a bad charsmap, a template naming an unknown token): pyo3's
        # PanicException derives from BaseException (pyo3 src/panic.rs), so it is the input's fault, said in one line
        if type(error).__name__ != "PanicException":
            raise
        detail = " ".join(str(error).split())[:200]
        print(
            f"needlebench: error: the tokenizers library stopped on the tokenizer files given ({printable(detail)}); "
            "allowed: tokenizer files that transformers loads and encodes with",
            file=sys.stderr,
        )
        sys.exit(2)
    if interrupts.interrupted():  # typer turns KeyboardInterrupt into exit status 130
        interrupts.exit_now()
    status = code if isinstance(code, int) else 0
    if _FAST_EXIT_COMMANDS.intersection(sys.argv[1:2]):  # everything is written and closed: skip the teardown
        interrupts.exit_now(status)
    sys.exit(status)


#: Set to anything but "", "0", "false" or "no" to see the traceback of an internal error on the terminal.
DEBUG_ENV = "NEEDLEBENCH_DEBUG"


def _command_name(argv: list[str]) -> str:
    """The sub-command of a command line (its first word that is not an option), for messages and file names."""
    import re

    word = next((arg for arg in argv if not arg.startswith("-")), "needlebench")
    return re.sub(r"[^A-Za-z0-9_-]", "_", word)[:40] or "needlebench"


def _report_crash(error: BaseException) -> None:
    """One line on stderr for an unexpected exception: the command, the exception and where its traceback went.

    With ``NEEDLEBENCH_DEBUG=1`` the traceback is printed instead of saved. Otherwise it goes to
    ``<cache root>/crash/<UTC time>-<command>.txt`` (readable by the user only); the command line is not
    recorded there (it may hold a token), only the command's name and the versions."""
    import errno
    import os
    import platform
    import traceback
    from datetime import datetime, timezone

    from needlebench.sources.cache import cache_folder, cache_root  # deferred: hashlib, hmac (4 ms); only a crash

    command = _command_name(sys.argv[1:])
    summary = printable(" ".join(f"{type(error).__name__}: {error}".split()))
    if len(summary) > 300:
        summary = summary[:299] + "…"
    text = "".join(traceback.format_exception(error))
    if os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no"):
        sys.stderr.write(text)
        print(f"needlebench: internal error in {command}: {summary}; please report it", file=sys.stderr)
        return
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    path = cache_root() / "crash" / f"{stamp}-{command}.txt"
    header = (
        f"needlebench {__version__} internal error in `needlebench {command}`\n"
        f"python {platform.python_version()} on {platform.platform()}\n\n"
    )
    try:
        with cache_folder(path.parent) as folder:  # 0700 whatever the umask; the file new (O_EXCL), never a link
            if not folder.create_new(path.name, (header + text).encode("utf-8"), mode=0o600):
                raise FileExistsError(errno.EEXIST, "exists", str(path))
    except (OSError, NeedlebenchError) as failure:
        reason = getattr(failure, "strerror", None) or failure
        where = f"(could not save its traceback: {reason}; rerun with {DEBUG_ENV}=1 to see it)"
    else:
        where = f"full traceback in {path}"
    print(f"needlebench: internal error in {command}: {summary}; {where}, please report it", file=sys.stderr)


#: Commands that own no background processes or libraries with exit hooks (unlike `eval`, whose vLLM engine
#: is shut down by its own exit hooks), so they end with :func:`interrupts.exit_now` once their work is done.
_FAST_EXIT_COMMANDS = {"build", "verify", "list"}
