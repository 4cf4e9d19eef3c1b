"""``python -m needlebench``: the same command as ``needlebench`` (the console script in pyproject.toml)."""

from needlebench.cli import main

if __name__ == "__main__":  # importing the module (pkgutil.walk_packages) runs nothing
    main()
