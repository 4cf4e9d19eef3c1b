"""lm-eval's CLI with a ``replay`` model that answers each request with a recorded output (imports lm-eval only).

    python replay_lm.py OUTPUTS.json run --model replay --tasks ... [other lm-eval arguments]

``OUTPUTS.json`` maps ``task name -> row id -> output``; a request is looked up by its task and its document's
``id`` column, so the same outputs reach two task folders (the project's, the exported one) in any request order.
A request without a recorded output fails the run. It runs in any environment that has lm-eval, with or without
needlebench (lm-eval finds no model by plugin, so this script registers it and then starts lm-eval's CLI).
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    path, *argv = sys.argv[1:]
    with open(path, encoding="utf-8") as stream:
        outputs: dict[str, dict[str, str]] = json.load(stream)

    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model

    @register_model("replay")
    class ReplayLM(LM):
        def __init__(self, **_ignored: object) -> None:
            super().__init__()

        @classmethod
        def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> ReplayLM:
            return cls()

        def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
            answers = []
            for request in requests:
                try:
                    answers.append(outputs[request.task_name][str(request.doc["id"])])
                except KeyError:
                    raise SystemExit(
                        f"replay: no output for {request.task_name} row {request.doc.get('id')!r}"
                    ) from None
            return answers

        def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list:
            raise NotImplementedError

    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
