"""needlebench: NeedleBench and Counting-Stars as reproducible datasets and lm-eval tasks."""

__version__ = "0.3.1"

__all__ = ["__version__"]
