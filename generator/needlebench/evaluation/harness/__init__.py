"""The lm-eval tasks: their templates and groups, the loader and scoring hooks the YAMLs call, stratified subsets,
and the task folders of ``needlebench tasks`` and ``needlebench export-tasks``."""
