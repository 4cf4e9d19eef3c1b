"""``needlebench judge``: model-judge rescoring of logged samples, and the files it reads and writes in a results
folder."""
