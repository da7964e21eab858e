"""The one exception type users see: a one-line message that says what was wrong and what to do."""


class HeadtraceError(Exception):
    """Bad input or an unrecoverable condition; the CLI prints the message and exits with code 2."""


class DiskFull(HeadtraceError):
    """No space left for checkpoints or results: a panel stops at once (finished shards are kept)."""
