"""UTF-8 byte offsets of a text's characters, shared by the tokenised corpus and the Hugging Face tokenizers."""

from __future__ import annotations

import numpy as np


def utf8_offsets(text: str) -> np.ndarray:
    """Byte offset of every character position 0..len(text) in the UTF-8 encoding."""
    codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    lengths = np.where(codepoints < 0x80, 1, np.where(codepoints < 0x800, 2, np.where(codepoints < 0x10000, 3, 4)))
    offsets = np.zeros(len(codepoints) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets
