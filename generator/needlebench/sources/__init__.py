"""Stage 1-2: where text comes from (corpora, Hub inputs) and its tokens (tokenizer, tokenized corpus)."""
