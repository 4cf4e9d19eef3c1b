"""Byte-for-byte replays of the reference constructions (OpenCompass NeedleBench, Counting-Stars), kept apart from the default generators."""
