"""User-facing errors: one line naming the bad value and what is allowed; the CLI exits with status 2."""

import re

#: The line breaks and blanks a message is folded on. Only ASCII ones: ``str.split()`` also splits on NEL
#: (U+0085), U+2028 and the separators U+001C-U+001F, which a file name can hold; those stay in the message and
#: are shown escaped (``needlebench.terminal.printable``), so a named path is the path.
_ASCII_BLANKS = re.compile(r"[ \t\n\r\f\v]+")


class NeedlebenchError(Exception):
    """Bad input from the user (config, file, option).

    The message is a single line: it names the offending value and says what is allowed.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(_ASCII_BLANKS.sub(" ", message).strip())
