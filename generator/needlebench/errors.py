"""User-facing errors: one line naming the bad value and what is allowed; the CLI exits with status 2."""


class NeedlebenchError(Exception):
    """Bad input from the user (config, file, option).

    The message is a single line: it names the offending value and says what is allowed.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))
