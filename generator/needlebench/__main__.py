"""``python -m needlebench``: the same command as ``needlebench`` (the console script in pyproject.toml)."""

from needlebench.cli import main

main()
