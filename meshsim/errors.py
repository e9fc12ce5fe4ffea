"""The one exception type for problems in what a user gave meshsim (scenario, trace, result file).

The command line prints its problems, one per line, and exits with status 2 without a traceback.
Anything else that escapes is a bug and keeps its traceback (exit status 1).
"""

from __future__ import annotations

import difflib


class InputError(Exception):
    """Bad input: carries every problem found, each a complete sentence naming where and what.

    problems: list of strings such as
        "scenarios/x.toml: workload.injection_rate = 1.5: must be a number in [0, 1]"
    """

    def __init__(self, problems):
        if isinstance(problems, str):
            problems = [problems]
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class WriteFailed(Exception):
    """A write of a run's files failed (a full disk, an I/O error, a file-size limit) or the file
    was taken away while the run wrote it: `why` says what failed, in the system's words. The run
    loop turns it into RunFailed, which says what was kept."""

    def __init__(self, why: str, errno: int | None = None, vanished: bool = False):
        self.why = why
        self.errno = errno
        self.vanished = vanished
        super().__init__(why)


class RunFailed(Exception):
    """A run that stopped because of its surroundings, not its input nor a bug in meshsim: what
    failed, what was kept and how to go on, one line each. The command line prints them and exits
    with status 1, without a traceback."""

    def __init__(self, lines):
        if isinstance(lines, str):
            lines = [lines]
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))


def closest(word: str, candidates, cutoff: float = 0.6) -> str | None:
    """The candidate the user most likely meant, or None."""
    candidates = list(candidates)
    folded = {c.lower(): c for c in candidates}
    if word.lower() in folded:
        return folded[word.lower()]
    # An abbreviation ("least" for "least_loaded") scores low on similarity but is unambiguous.
    if len(word) >= 3:
        starts = [c for c in candidates if c.lower().startswith(word.lower())]
        if len(starts) == 1:
            return starts[0]
    matches = difflib.get_close_matches(word.lower(), list(folded), n=1, cutoff=cutoff)
    return folded[matches[0]] if matches else None
