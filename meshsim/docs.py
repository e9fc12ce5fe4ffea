"""The parameter reference (docs/parameters.md), generated from the parameter table (docs/design.md,
"Scenario files").

`python -m meshsim.docs` prints the reference; `python -m meshsim.docs --update docs/parameters.md`
rewrites the block between the lines `<!-- params:start -->` and `<!-- params:end -->` of that file
(any Markdown file with those two lines).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import InputError
from .params import (
    Param,
    aliases,
    format_choices,
    format_condition,
    format_number,
    format_range,
    section_params,
    sections,
)

START_MARKER = "<!-- params:start -->"
END_MARKER = "<!-- params:end -->"


def parameter_reference_markdown() -> str:
    """Markdown tables of every scenario key, one per section, from `meshsim.params.PARAMS`.

    docs/design.md, "Scenario files": the docs are generated from the one parameter table. A
    second-level heading per section, then its table. Columns: key, type, unit, default, allowed,
    description (with "Only when ..." for keys that apply conditionally).
    """
    out = [
        "Every key of a scenario file, generated from `meshsim/params.py` and each machine's "
        "`keys.py` (`python -m meshsim.docs`). Unknown keys are errors. A key marked *Only when* may "
        "be set to anything but its default only when that condition holds. Ranges are inclusive.",
        "",
    ]
    renamed = aliases()
    if renamed:
        out += ["Old names, still read with a warning: " + "; ".join(f"`{o}` is now `{n}`" for o, n in
                                                                  sorted(renamed.items())) + ".", ""]
    for section in sections():
        out.append(f"## `[{section}]`")
        out.append("")
        out.append("| key | type | unit | default | allowed | description |")
        out.append("|---|---|---|---|---|---|")
        for p in section_params(section):
            out.append(
                f"| `{p.name}` | {p.type} | {_cell(p.unit)} | {_cell(_default(p), code=True)} | "
                f"{_cell(_allowed(p))} | {_cell(_description(p))} |"
            )
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def update_file(path) -> bool:
    """Rewrite the parameter block of a Markdown file; returns whether the file changed.

    The block lies between a line `<!-- params:start -->` and a line `<!-- params:end -->`; the
    marker lines stay. Raises InputError if the markers are missing or out of order.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == START_MARKER]
    ends = [i for i, line in enumerate(lines) if line.strip() == END_MARKER]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise InputError([
            f"{path}: needs exactly one line {START_MARKER} followed by one line {END_MARKER} "
            f"(found {len(starts)} start and {len(ends)} end markers)"
        ])
    block = "\n" + parameter_reference_markdown() + "\n"
    new_text = "".join(lines[: starts[0] + 1]) + block + "".join(lines[ends[0]:])
    if new_text == text:
        return False
    path.write_text(new_text, encoding="utf-8")
    return True


def main(argv=None) -> int:
    """Print the parameter reference, or with --update FILE rewrite FILE's block."""
    parser = argparse.ArgumentParser(
        prog="python -m meshsim.docs", description="Generate the scenario parameter reference."
    )
    parser.add_argument("--update", metavar="FILE", help="rewrite the params block of FILE (docs/parameters.md)")
    args = parser.parse_args(argv)
    if args.update:
        try:
            changed = update_file(args.update)
        except InputError as e:
            sys.stderr.write("\n".join(e.problems) + "\n")
            return 2
        sys.stdout.write(f"{args.update}: {'updated' if changed else 'already up to date'}\n")
        return 0
    sys.stdout.write(parameter_reference_markdown())
    return 0


def _default(p: Param) -> str:
    if p.type == "str":
        return f'"{p.default}"'
    if p.type == "float":
        # Written as TOML would read it back as a float (1.0, not 1).
        return repr(float(p.default))
    if p.type == "regions":
        return "[]" if not p.default else str([list(r) for r in p.default])
    if p.type == "ints":
        return str(list(p.default))
    return format_number(p.default)


def _allowed(p: Param) -> str:
    if p.type == "ints":
        return f"list of integers in {format_range(p)}"
    if p.range is not None:
        return format_range(p)
    if p.choices is not None:
        return format_choices(p.choices)
    if p.type == "regions":
        return "list of [row0, col0, row1, col1] inside the grid"
    return "any"


def _description(p: Param) -> str:
    text = p.description
    if p.applies_when is not None:
        text += f" Only when {format_condition(p.applies_when)}."
    return text


def _cell(text: str, code: bool = False) -> str:
    # A "|" would end the cell early; none of the table's text needs one, but be safe.
    text = text.replace("|", "\\|")
    if code and text:
        return f"`{text}`"
    return text


if __name__ == "__main__":
    raise SystemExit(main())
