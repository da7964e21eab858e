"""The one exception type users see: a one-line message that says what was wrong and what to do,
and the command's exit codes (docs/reliability.md)."""

EXIT_USAGE = 2  # bad input or usage: nothing was done
EXIT_FAILED = 3  # some of the work failed (revisions, ablations, a stopped panel); what finished is kept
EXIT_INTERRUPTED = 130  # Ctrl-C: what finished is kept


class HeadtraceError(Exception):
    """Bad input or an unrecoverable condition; the CLI prints the message and exits with `exit_code`."""

    exit_code = EXIT_USAGE


class WorkFailed(HeadtraceError):
    """Part of the work failed while the rest finished (failed revisions, ablations not run)."""

    exit_code = EXIT_FAILED


class DiskFull(HeadtraceError):
    """No space left for checkpoints or results: a panel stops at once (finished shards are kept)."""

    exit_code = EXIT_FAILED


class ResultsNotWritable(HeadtraceError):
    """The results folder refused a write (full, read-only, permissions): a panel stops at once."""


class HubUnreachable(HeadtraceError):
    """The hub did not answer after every retry (network, 5xx, 429): nothing could be listed or fetched."""

    exit_code = EXIT_FAILED
