"""``needlebench eval`` and ``needlebench budget`` around lm-eval: options, length checks, chunks, resume, lean
samples, run folders and health."""
