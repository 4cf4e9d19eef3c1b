"""In-process checks of modules the rest of the fast tier (``pytest -m "not slow"``) reaches only through
subprocesses or lm-eval runs: the boundary shares of ``needlebench list``, the upstream task export, lean sample
logging, the printed results table and the engines a run may use (one endpoint, no reload per chunk)."""

from __future__ import annotations

import ast
import hashlib
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from needlebench.dataset.boundary_stats import boundary_counts, format_shares
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.upstream import check_repo, check_revision, export_files
from needlebench.evaluation.runner.engines import check_engine
from needlebench.evaluation.runner.lean_samples import is_lean, lean_sample
from needlebench.evaluation.runner.options import parse_eval
from needlebench.evaluation.runner.quiet import table_results


def test_boundary_counts_read_only_the_listed_files_and_format_shares_in_preference_order(tmp_path):
    config = tmp_path / "data" / "single_en_4k"
    config.mkdir(parents=True)
    kinds = [["word"], ["sentence", "sentence"], None, ["sentence"]]
    pq.write_table(pa.table({"needle_boundaries": kinds}), config / "a.parquet")
    pq.write_table(pa.table({"needle_boundaries": [["clause"]]}), config / "unlisted.parquet")
    counts = boundary_counts(tmp_path, "single_en_4k", ["data/single_en_4k/a.parquet"])
    assert counts == Counter({"sentence": 3, "word": 1})
    assert format_shares(counts) == "sentence 75.0% · word 25.0%"
    assert format_shares(Counter()) == "-"
    pq.write_table(pa.table({"id": ["x"]}), config / "atc.parquet")  # a family without needles
    assert boundary_counts(tmp_path, "atc_en", ["data/single_en_4k/atc.parquet"]) == Counter()


def test_the_upstream_export_points_every_base_template_at_the_pinned_release():
    files = export_files("my-org/needlebench", "v1.2.0")
    templates = {name: text for name, text in files.items() if name.startswith("_default_")}
    assert len(templates) >= 4 and "utils.py" in files and "README.md" in files
    pinned = "\ndataset_path: my-org/needlebench\ndataset_kwargs:\n  revision: v1.2.0\n"
    assert all(pinned in text and "custom_dataset" not in text for text in templates.values())
    assert "my-org/needlebench" in files["README.md"] and "v1.2.0" in files["README.md"]
    imported = {
        alias.name if isinstance(node, ast.Import) else node.module or ""
        for node in ast.walk(ast.parse(files["utils.py"]))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported and not any(name.split(".")[0] == "needlebench" for name in imported)
    with pytest.raises(NeedlebenchError, match="does not pin a release"):
        check_revision("main")
    with pytest.raises(NeedlebenchError, match="is not a Hub dataset id"):
        check_repo("../etc")


def test_a_lean_sample_keeps_the_prompts_hash_and_length_only():
    prompt = "长文本 haystack with the needle"
    sample = {"doc": {"id": "single_en_4k-1", "config": "single_en_4k", "prompt": prompt}, "arguments": [[prompt]]}
    lean = lean_sample(sample)
    assert "prompt" not in lean["doc"] and lean["arguments"] == [] and is_lean(lean)
    assert lean["doc"]["prompt_sha256"] == hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    assert lean["doc"]["prompt_chars"] == len(prompt)
    other = {"doc": {"question": "not a needlebench row"}, "arguments": [["q"]]}
    assert lean_sample(other) == {"doc": {"question": "not a needlebench row"}, "arguments": [["q"]]}
    assert not is_lean(other)


def test_the_printed_table_leaves_out_diagnostics_and_their_twins():
    results = {
        "results": {
            "needlebench_multi_retrieval_en_4k": {
                "recall,none": 100.0,
                "needle_hits,none": [1, 1],
                "needle_hits_reference,none": [1, 1],
                "needle_hits_stderr,none": "N/A",
                "alias": "needlebench_multi_retrieval_en_4k",
            }
        },
        "versions": {"needlebench_multi_retrieval_en_4k": 1},
    }
    table = table_results(results)
    assert table["results"] == {
        "needlebench_multi_retrieval_en_4k": {"recall,none": 100.0, "alias": "needlebench_multi_retrieval_en_4k"}
    }
    assert (
        table["versions"] == results["versions"]
        and "needle_hits,none" in results["results"]["needlebench_multi_retrieval_en_4k"]
    )


@pytest.mark.parametrize(
    ("model", "model_args", "expected"),
    [
        ("needlebench-local-completions", "model=m,base_url=http://a/v1/completions", "--model local-completions"),
        ("needlebench-local-chat-completions", "model=m", "--model local-chat-completions and num_concurrent"),
        ("local-completions", "model=m,base_urls=http://a/v1/completions|http://b/v1/completions", "base_urls="),
        ("vllm", "pretrained=m,data_parallel_size=4", "--data-parallel-size 4"),
    ],
)
def test_a_home_made_spread_or_a_reload_per_chunk_is_refused_saying_what_to_run(model, model_args, expected):
    _command, _namespace, args = parse_eval(["run", "--model", model, "--model_args", model_args, "--tasks", "x"])
    with pytest.raises(NeedlebenchError) as refused:
        check_engine(args)
    message = str(refused.value)
    assert expected in message and "\n" not in message
    assert "vllm-router" in message or "vllm serve" in message


def test_one_replica_of_vllm_and_one_endpoint_pass():
    for model, model_args in [
        ("vllm", "pretrained=m,data_parallel_size=1,tensor_parallel_size=2"),
        ("local-completions", "model=m,base_url=http://a/v1/completions,num_concurrent=8"),
        ("hf", "pretrained=m"),
    ]:
        _command, _namespace, args = parse_eval(["run", "--model", model, "--model_args", model_args, "--tasks", "x"])
        check_engine(args)  # no refusal
