"""The README of the exported lm-eval task folder, in the form of lm-eval's task READMEs (``lm_eval/tasks/ruler``:
Paper, Citation, Groups/Tags/Tasks, Checklist, Changelog), with the groups, tasks and metrics read from the
exported YAMLs and the metric descriptions from the hooks' docstrings."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from needlebench import __version__
from needlebench.evaluation import thinking

#: What an unclosed reasoning block is scored on, by policy (:data:`needlebench.evaluation.thinking.UNCLOSED_CHOICES`).
_UNCLOSED_TEXT = {"keep": "its whole text (as OpenCompass's reasoning-model configs do)", "empty": "an empty answer"}

PAPERS = """\
### Paper

Title: `NeedleBench: Can LLMs Do Retrieval and Reasoning in 1 Million Context Window?`

Abstract: `https://arxiv.org/abs/2407.11963`

`NeedleBench is a framework of progressively more challenging tasks for assessing bilingual (English and Chinese)
long-context capabilities, spanning length intervals from 4k to 1000k tokens and different depth ranges: critical
data points are inserted at chosen depths of long documents to test retrieval (single- and multi-needle) and
reasoning (multi-needle reasoning), and the Ancestral Trace Challenge (ATC) tests multi-step logical reasoning over
a chain of kinship relations.`

Homepage: `https://github.com/open-compass/opencompass` (reference implementation, `opencompass/datasets/needlebench`)

Title: `Counting-Stars: A Multi-evidence, Position-aware, and Scalable Benchmark for Evaluating Long-Context Large
Language Models`

Abstract: `https://arxiv.org/abs/2403.11802`

`Counting-Stars inserts sentences counting the stars a little penguin sees at evenly spaced positions of a long
context; the model lists every count (multi-evidence acquisition) or, when each sentence is followed by a
correction, the corrected counts (multi-evidence reasoning).`

Homepage: `https://github.com/nick7nlp/Counting-Stars`
"""

CITATION = """\
### Citation

```
@misc{li2024needlebench,
    title={NeedleBench: Can LLMs Do Retrieval and Reasoning in 1 Million Context Window?},
    author={Mo Li and Songyang Zhang and Yunxin Liu and Kai Chen},
    year={2024},
    eprint={2407.11963},
    archivePrefix={arXiv},
    primaryClass={cs.CL}
}

@misc{song2024countingstars,
    title={Counting-Stars: A Multi-evidence, Position-aware, and Scalable Benchmark for Evaluating Long-Context Large Language Models},
    author={Mingyang Song and Mao Zheng and Xuan Luo},
    year={2024},
    eprint={2403.11802},
    archivePrefix={arXiv},
    primaryClass={cs.CL}
}
```
"""

CHECKLIST = """\
### Checklist

For adding novel benchmarks/datasets to the library:
* [x] Is the task an existing benchmark in the literature?
  * [x] Have you referenced the original paper that introduced the task?
  * [x] If yes, does the original paper provide a reference implementation? If so, have you checked against the
    reference implementation and documented how to run such a test?
    (OpenCompass for NeedleBench, the Counting-Stars repository for Counting-Stars. The scorers in `utils.py` are
    copied from the `needlebench` package, whose tests check them against the reference behaviour, and whose
    `needlebench build --compat opencompass` rebuilds rows the reference way.)

If other tasks on this dataset are already supported:
* [x] Is the "Main" variant of this task clearly denoted?
  (NeedleBench: the size groups with S-RT/M-RT/M-RS, `needlebench_atc`; Counting-Stars: the 32-star configs.)
* [x] Have you provided a short sentence in a README on what each new variant adds / evaluates?
* [x] Have you noted which, if any, published evaluation setups are matched by this variant?
  (NeedleBench v1 grids and scores, the `v2_*` configs for NeedleBench v2; Counting-Stars 128k with 32 stars.)
"""


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def render_readme(repo: str, revision: str, yamls: Mapping[str, Mapping[str, Any]]) -> str:
    """The folder's README.md for ``repo`` at ``revision`` given the exported YAMLs (file name -> loaded data)."""
    from needlebench.evaluation.upstream import HOOKS_MODULE, NOTE, TASK_REQUIREMENTS, requirement_names

    hooks = importlib.import_module(HOOKS_MODULE)
    groups = {name: data for name, data in yamls.items() if "group" in data}
    tasks = {name: data for name, data in yamls.items() if "task" in data and "group" not in data}
    bases = {name: data for name, data in yamls.items() if "dataset_path" in data}
    pip_names = " ".join(f"'{requirement}'" for requirement in TASK_REQUIREMENTS.values())
    lines = [
        f"<!-- {NOTE} (needlebench {__version__}); regenerate it instead of editing. -->",
        "# NeedleBench and Counting-Stars",
        "",
        PAPERS,
        "### Dataset",
        "",
        f"Every task reads the Hub dataset `{repo}` at revision `{revision}` (`dataset_path`, `dataset_kwargs:"
        " {revision: ...}`), config `dataset_name: <config>`, split `test`. The rows were built by the `needlebench`"
        " package (`needlebench build`), reproducibly from a pinned seed; the dataset card records the recipe. The"
        " prompt is the row's `prompt` column, the target its `answer`.",
        "",
        "### Requirements",
        "",
        f"The scorers need `{'` and `'.join(requirement_names())}` besides lm-eval's own dependencies"
        f" (numpy, regex): `pip install {pip_names}` (`utils.py` says so when one is missing). Nothing else: the"
        " tasks do not need the `needlebench` package.",
        "",
        CITATION,
        "### Groups, Tags, and Tasks",
        "",
        "#### Groups",
        "",
    ]
    for data in groups.values():
        metrics = ", ".join(f"`{m['metric']}`" for m in data.get("aggregate_metric_list", []))
        lines.append(f"* `{data['group']}`: {data.get('group_alias', '')}, {len(data['task'])} tasks, {metrics}")
    lines += [
        "",
        "A group reports each metric as the row-weighted mean over its member tasks that have it.",
        "",
        "#### Tags",
        "",
        "None.",
        "",
        "#### Tasks",
        "",
        f"One task per dataset config, `needlebench_<config>` ({len(tasks)} tasks), by family:",
        "",
    ]
    by_base: dict[str, list[str]] = {}
    for data in tasks.values():
        by_base.setdefault(str(data.get("include")), []).append(str(data["task"]))
    for base, data in bases.items():
        names = sorted(by_base.get(base, []))
        hook = getattr(hooks, str(data["process_results"]).rpartition(".")[2])
        metrics = ", ".join(f"`{m['metric']}`" for m in data.get("metric_list", []))
        lines.append(f"* {_first_line(hook.__doc__)} Metrics {metrics}; base `max_gen_toks` "
                     f"{data['generation_kwargs']['max_gen_toks']}.")  # fmt: skip
        lines.append(f"  Tasks: {', '.join(f'`{name}`' for name in names)}.")
    lines += [
        "",
        "NeedleBench metrics are on 0-100 like the reference implementation, Counting-Stars metrics on 0-1 like the"
        " paper. Reasoning (`<think> ... </think>`) is stripped before scoring: the default metrics score the text"
        f" after the last `{thinking.DEFAULT_THINK_END}`; the environment variable `{thinking.THINK_END_ENV}` names"
        " another end marker, and an empty value turns this off. An output that opened a reasoning block and never"
        f" closed it is scored on {_UNCLOSED_TEXT[thinking.DEFAULT_UNCLOSED]} by default"
        f" (`{thinking.THINK_UNCLOSED_ENV}`: {', '.join(f'`{c}`' for c in thinking.UNCLOSED_CHOICES)}).",
        "",
        "Every metric has a reference-exact twin `<metric>_reference`, scored as the reference code scores"
        " (OpenCompass's NeedleBench evaluators and postprocessors, with closed `<think>` blocks removed as its"
        " `extract_non_reasoning_content` does; the Counting-Stars `viz.ipynb` rule, an output it cannot parse"
        " scoring 0): quote the `*_reference` metrics when comparing with numbers published by OpenCompass or the"
        " Counting-Stars paper.",
        "",
        "### Usage",
        "",
        "```bash",
        "lm_eval --model vllm --model_args pretrained=MODEL,max_model_len=131072 --apply_chat_template \\",
        "    --tasks needlebench_atc,needlebench_4k --log_samples --output_path out",
        "```",
        "",
        "Prompts are long: set the model's window (`max_model_len` / `max_length`) to cover the longest prompt of the"
        " tasks plus `max_gen_toks`; lm-eval otherwise truncates prompts from the left with only a warning. The"
        " paper's weighted overall scores (0.4 S-RT + 0.3 M-RT + 0.3 M-RS per size, ATC weighted by needle count)"
        " need a report step beyond lm-eval's group means (`needlebench report` reads lm-eval's outputs).",
        "",
        CHECKLIST,
        "### Changelog",
        "",
        f"v1.0: exported from needlebench {__version__}, dataset `{repo}` at `{revision}`.",
        "",
    ]
    return "\n".join(lines)
