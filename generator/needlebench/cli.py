"""The `needlebench` command line: list, build, eval, budget, report, publish, verify.

User errors (:class:`NeedlebenchError`) print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from needlebench import __version__
from needlebench.errors import NeedlebenchError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="NeedleBench and Counting-Stars as reproducible Hugging Face datasets and lm-eval tasks.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
console = Console()


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


@app.command("list")
def list_configs(
    patterns: Annotated[Optional[list[str]], typer.Argument(help="Config names or globs (default: all).")] = None,
) -> None:
    """List configs with their rows and approximate context tokens."""
    from needlebench.tasks.grid import match_configs, registry

    specs = match_configs(patterns) if patterns else list(registry().values())
    table = Table("config", "task", "language", "size", "rows", "context tokens")
    for spec in specs:
        table.add_row(
            spec.name, spec.task_label, spec.language, spec.size or "-", f"{spec.num_rows:,}",
            f"{spec.approx_tokens:,}" if spec.approx_tokens else "-",
        )
    console.print(table)


@app.command()
def build(
    configs: Annotated[Optional[list[str]], typer.Argument(help="Config names or globs, e.g. 'single_*_4k'.")] = None,
    out: Annotated[Path, typer.Option("--out", help="Dataset folder to write.")] = Path("needlebench-data"),
    all_configs: Annotated[bool, typer.Option("--all", help="Build every config.")] = False,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Release seed (default: the pinned one).")] = None,
    haystack_en: Annotated[Optional[str], typer.Option(help="English haystack: .txt, .jsonl, folder, hub:ORG/NAME[@REV][:CONFIG][:SPLIT][:COLUMN] or opencompass[@REV].")] = None,
    haystack_zh: Annotated[Optional[str], typer.Option(help="Chinese haystack (same forms).")] = None,
    corpus: Annotated[Optional[str], typer.Option("--corpus", help="opencompass[@REV]: the paper's original inputs from the Hub.")] = None,
    needles: Annotated[Optional[str], typer.Option(help="Reference needles.jsonl instead of the built-in bank.")] = None,
    reasoning_needles_en: Annotated[Optional[str], typer.Option(help="Reference multi_needle_reasoning_en.json.")] = None,
    reasoning_needles_zh: Annotated[Optional[str], typer.Option(help="Reference multi_needle_reasoning_zh.json.")] = None,
    names: Annotated[Optional[str], typer.Option(help="Reference names.json for ATC.")] = None,
    compat: Annotated[Optional[str], typer.Option(help="opencompass or counting-stars: reproduce the reference construction.")] = None,
    question_position: Annotated[str, typer.Option(help="end (the papers) or start.")] = "end",
    buffer: Annotated[Optional[int], typer.Option(help="Override the grid's length buffer (tokens).")] = None,
    depths: Annotated[Optional[str], typer.Option(help="Override the depth grid, e.g. '0,25,50,75,100' (percent).")] = None,
    tokenizer: Annotated[str, typer.Option(help="Counting tokenizer.")] = "cl100k_base",
    compression: Annotated[str, typer.Option(help="Parquet codec: zstd, snappy or none (fastest, largest).")] = "zstd",
    num_proc: Annotated[int, typer.Option("--num-proc", help="Worker processes.")] = 1,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output folder.")] = False,
    experiment: Annotated[Optional[Path], typer.Option("--experiment", help="Experiment YAML: your own needle test as a named config (see README).")] = None,
) -> None:
    """Build configs into a dataset folder (Parquet + card), byte-identical for the same version and seed."""
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions
    from needlebench.seeding import RELEASE_SEED
    from needlebench.tasks.grid import match_configs, registry

    if experiment is not None:
        from needlebench.dataset.experiment import build_experiment

        if configs or all_configs:
            raise NeedlebenchError("--experiment builds the experiment's own config; name no other configs with it")
        given = {
            "--seed": seed, "--haystack-en": haystack_en, "--haystack-zh": haystack_zh, "--corpus": corpus,
            "--needles": needles, "--reasoning-needles-en": reasoning_needles_en,
            "--reasoning-needles-zh": reasoning_needles_zh, "--names": names, "--compat": compat,
            "--buffer": buffer, "--depths": depths,
            "--question-position": None if question_position == "end" else question_position,
        }
        clash = [option for option, value in given.items() if value is not None]
        if clash:
            raise NeedlebenchError(
                f"{clash[0]} does not apply with --experiment; set it in the experiment file "
                "(keys seed, haystack, needles, depths, length_buffer, question_position)"
            )
        spec, manifest = build_experiment(experiment, out, num_proc=num_proc, overwrite=overwrite, compression=compression)
        entry = manifest["configs"][spec.name]
        console.print(f"{spec.name}: {entry['rows']:,} rows, {entry['haystack_tokens']:,} haystack tokens")
        console.print(f"wrote {out}")
        return
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
    manifest = build_dataset(names_list, out, options, num_proc=num_proc, overwrite=overwrite)
    table = Table("config", "rows", "haystack tokens", "fingerprint")
    for name in names_list:
        entry = manifest["configs"][name]
        table.add_row(name, f"{entry['rows']:,}", f"{entry['haystack_tokens']:,}", entry["fingerprint"][:16])
    console.print(table)
    console.print(f"wrote {out}")


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
    from needlebench.sources.hub import parse_corpus_option

    _, revision = parse_corpus_option(corpus)
    spec = f"opencompass@{revision}"
    return tuple(value or spec for value in (haystack_en, haystack_zh, needles, reasoning_en, reasoning_zh, names))


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def eval(ctx: typer.Context) -> None:  # noqa: A001 - the command is called eval
    """Run lm-eval with needlebench's models (incl. the oracle) registered; arguments pass through."""
    from needlebench.evaluation.evaluate import run_eval

    raise typer.Exit(run_eval(list(ctx.args)))


@app.command()
def tasks(
    folder: Annotated[Path, typer.Argument(help="Dataset folder written by `needlebench build` (built-in configs and experiments).")],
    out: Annotated[Path, typer.Option("--out", help="Task folder to write, for `lm_eval --include_path`.")] = Path("needlebench-tasks"),
) -> None:
    """Write lm-eval tasks (needlebench_<config>) for every config of a dataset folder, and a group per experiment."""
    from needlebench.evaluation.task_export import write_task_folder

    files = write_task_folder(folder, out)
    console.print(f"wrote {len(files)} files to {out}; run: lm_eval --include_path {out} --tasks needlebench_<config> ...")


@app.command()
def judge(
    results: Annotated[Path, typer.Argument(help="lm-eval --output_path of a run with --log_samples.")],
    base_url: Annotated[str, typer.Option("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (vllm serve).")],
    model: Annotated[str, typer.Option("--model", help="Judge model name as the endpoint knows it.")],
    api_key_env: Annotated[str, typer.Option("--api-key-env", help="Environment variable holding the API key (if any).")] = "OPENAI_API_KEY",
    concurrency: Annotated[int, typer.Option(help="Requests in flight.")] = 4,
    retries: Annotated[int, typer.Option(help="Retries per sample (errors and replies without a rating).")] = 3,
) -> None:
    """Rescore logged samples on the 1-10 rubric with a model judge; writes judged_samples_*.jsonl beside them."""
    import os

    from needlebench.evaluation.judge import JudgeConfig, judge_results

    config = JudgeConfig(base_url, model, os.environ.get(api_key_env) or None, concurrency, retries)
    counts = judge_results(results, config)
    console.print(
        f"judged {counts['samples']} samples in {counts['files']} files ({counts['requested']} requested, "
        f"{counts['cached']} from cache, {counts['unrated']} without a usable rating)"
    )


@app.command()
def budget(
    configs: Annotated[list[str], typer.Argument(help="Config names or globs.")],
    tokenizer: Annotated[str, typer.Option(help="The model's tokenizer (name or local path).")],
    max_length: Annotated[int, typer.Option("--max-length", help="The model's context length.")],
    chat_template: Annotated[bool, typer.Option("--chat-template", help="Count with the chat template applied.")] = False,
    max_gen_toks: Annotated[Optional[int], typer.Option("--max-gen-toks", help="Tokens reserved for the answer (default: the task's).")] = None,
    data_dir: Annotated[Optional[str], typer.Option("--data-dir", help="A built dataset folder (default: build on the fly).")] = None,
) -> None:
    """List the rows whose prompt would not fit a model's context (lm-eval would silently left-truncate)."""
    from needlebench.evaluation.budget import format_budget, run_budget
    from needlebench.tasks.grid import match_configs

    names_list = [spec.name for spec in match_configs(configs)]
    rows = run_budget(tokenizer, max_length, names_list, chat_template=chat_template, max_gen_toks=max_gen_toks, data_dir=data_dir)
    console.print(format_budget(rows))
    if any(not row.get("fits", True) for row in rows):
        raise typer.Exit(1)


@app.command()
def report(
    results_dir: Annotated[Path, typer.Argument(help="lm-eval --output_path folder (with --log_samples files).")],
    out: Annotated[Path, typer.Option("--out", help="Where to write tables and heatmaps.")] = Path("needlebench-report"),
) -> None:
    """Paper tables (Markdown, CSV) and heatmap PNGs from lm-eval results."""
    from needlebench.evaluation.report import write_report

    for path in write_report(results_dir, out):
        console.print(str(path))


@app.command()
def publish(
    folder: Annotated[Path, typer.Argument(help="A dataset folder built by `needlebench build`.")],
    version: Annotated[str, typer.Option(help="Semantic version X.Y.Z; the commit is tagged vX.Y.Z.")],
    repo: Annotated[Optional[str], typer.Option(help="Hub dataset repo ORG/NAME.")] = None,
    to_git: Annotated[Optional[Path], typer.Option("--to-git", help="Publish into a local git repository instead.")] = None,
    private: Annotated[bool, typer.Option(help="Create the Hub repo private.")] = False,
    token: Annotated[Optional[str], typer.Option(help="Hub token (default: the logged-in one).")] = None,
) -> None:
    """Publish a dataset folder as a tagged, versioned Hub dataset (or into a local git repo)."""
    from needlebench.dataset.publish import publish_folder, publish_to_git

    if (repo is None) == (to_git is None):
        raise NeedlebenchError("give exactly one of --repo ORG/NAME or --to-git PATH")
    if to_git is not None:
        result = publish_to_git(folder, to_git, version=version)
    else:
        result = publish_folder(folder, repo_id=repo, version=version, private=private, token=token)
    console.print(result.how_to_load)


@app.command()
def verify(
    folder: Annotated[Optional[Path], typer.Argument(help="A dataset folder.")] = None,
    repo: Annotated[Optional[str], typer.Option(help="Hub dataset repo ORG/NAME.")] = None,
    revision: Annotated[Optional[str], typer.Option(help="Revision (tag vX.Y.Z) of --repo.")] = None,
    config: Annotated[Optional[list[str]], typer.Option("--config", help="Only these configs.")] = None,
) -> None:
    """Rebuild configs from the recorded recipe and compare fingerprints; exit 1 naming each that differs."""
    from needlebench.dataset.verify import verify_folder, verify_repo

    if (folder is None) == (repo is None):
        raise NeedlebenchError("give exactly one of FOLDER or --repo ORG/NAME --revision vX.Y.Z")
    if repo is not None:
        if revision is None:
            raise NeedlebenchError("--repo needs --revision (a tag such as v1.0.0)")
        differing = verify_repo(repo, revision, config)
    else:
        differing = verify_folder(folder, config)
    if differing:
        for name, reason in differing.items():
            console.print(f"[red]differs[/red] {name}: {reason}")
        raise typer.Exit(1)
    console.print("all configs match their fingerprints")


def main() -> None:
    """Console-script entry point: one-line errors and exit status 2 for bad input."""
    try:
        code = app(standalone_mode=False)
    except NeedlebenchError as error:
        print(f"needlebench: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.Abort:
        print("needlebench: aborted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as error:  # usage errors (unknown option, missing argument): exit 2
        message = error.format_message() if hasattr(error, "format_message") else str(error)
        print(f"needlebench: error: {message}", file=sys.stderr)
        sys.exit(getattr(error, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)
