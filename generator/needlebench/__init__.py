"""needlebench: NeedleBench and Counting-Stars as reproducible datasets and lm-eval tasks."""

__version__ = "0.2.0"

__all__ = ["__version__"]
