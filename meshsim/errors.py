"""The one exception type for problems in what a user gave meshsim (scenario, trace, result file).

The command line prints its problems, one per line, and exits with status 2 without a traceback.
Anything else that escapes is a bug and keeps its traceback (exit status 1).
"""

from __future__ import annotations


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
