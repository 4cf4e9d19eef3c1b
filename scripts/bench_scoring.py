"""Time 100,000 scorings: every library scorer on generated model outputs.

    python scripts/bench_scoring.py [--outputs 11112]

The outputs are those of the scorer property test (tests/support/scoring_fuzz.py: random unicode, JSON fragments,
nested brackets, answer-like texts) without the 1 MB strings; each output is scored by each of the 9 scorers
until 100,000 scorings are done. Prints the wall time, the CPU time of this process (less sensitive to other load on
a shared machine) and scorings per second.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.scoring_fuzz import outputs, scorers


def main(total: int = 100_000) -> None:
    functions = [function for _name, function, _bounds in scorers()]
    texts = outputs(-(-total // len(functions)), seed=1, big_every=0)
    done = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    for text in texts:
        for function in functions:
            if done == total:
                break
            function(text)
            done += 1
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    print(f"{done:,} scorings in {seconds:.2f} s wall, {cpu_seconds:.2f} s CPU ({done / seconds:,.0f}/s)")


if __name__ == "__main__":
    main()
