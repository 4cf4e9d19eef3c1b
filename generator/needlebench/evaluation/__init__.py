"""Stage 7-8: lm-eval hooks, scoring, token budgets, the eval wrapper and reports."""
