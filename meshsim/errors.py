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
