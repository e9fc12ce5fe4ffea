"""The documentation stays in step with the code: the site (docs/, Sphinx) builds without a warning, its
parameter reference (docs/parameters.md) is the generated one, the scenarios the README and the pages name
exist and validate, and every command the README shows is run: those of "Your first hour" as written, in a
scratch copy of scenarios/, and those of "A quick tour" (full-wafer runs, bench, accuracy) validated or
found in `meshsim --help`."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meshsim.cli import main
from meshsim.docs import END_MARKER, START_MARKER, parameter_reference_markdown
from meshsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
COMMAND_TIMEOUT = 300  # seconds; each command of "Your first hour" takes a few on two cores


def _pages():
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _section(heading: str) -> str:
    """The README's text under `heading` up to the next heading of the same or a higher level."""
    text = (ROOT / "README.md").read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    rest = text[start + len(heading) + 2:]
    ends = [m.start() for m in re.finditer(r"^(#+) ", rest, re.M) if len(m.group(1)) <= len(level)]
    return rest[: ends[0]] if ends else rest


def _command_blocks(section: str) -> list[list[str]]:
    """The `meshsim` command lines of each plain code block (no language) of a section, comments removed."""
    blocks = re.findall(r"^```\n(.*?)^```", section, re.M | re.S)
    out = []
    for block in blocks:
        lines = [line.split(" #", 1)[0].strip() for line in block.splitlines()]
        commands = [line for line in lines if line.startswith("meshsim ")]
        if commands:
            out.append(commands)
    return out


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == "meshsim"
    return words[1:]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "meshsim", *argv], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT)


def _scratch(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    return tmp_path


def test_the_site_builds_without_warnings(tmp_path):
    """docs/ is a Sphinx site (docs/conf.py); `-W` makes any warning (a broken link, a page in no
    toctree, a heading level skipped) an error, as in CI."""
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                           str(tmp_path / "html")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "html" / "index.html").exists() and (tmp_path / "html" / "parameters.html").exists()


def test_every_page_is_in_the_site():
    index = (DOCS / "index.md").read_text()
    toctree = index.split("```{toctree}", 1)[1].split("```", 1)[0]
    names = {line.strip() for line in toctree.splitlines() if line.strip() and not line.startswith(":")}
    assert names == {p.stem for p in DOCS.glob("*.md")} - {"index"}


def test_parameter_reference_is_generated_from_the_table():
    text = (DOCS / "parameters.md").read_text()
    block = text.split(f"{START_MARKER}\n", 1)[1].split(END_MARKER, 1)[0]
    assert block.strip() == parameter_reference_markdown().strip(), \
        "docs/parameters.md is out of date: run python -m meshsim.docs --update docs/parameters.md"


def test_every_scenario_the_readme_and_the_pages_name_validates():
    names = set()
    for page in _pages():
        text = page.read_text()
        names |= {w.strip("`()[],.;:'\"") for w in text.split()}
    names = sorted(n for n in names if n.startswith("scenarios/") and n.endswith(".toml"))
    assert "scenarios/wse2_uniform.toml" in names and "scenarios/sweeps/noc_load.toml" in names
    assert "scenarios/sweeps/smoke_threshold.toml" in names
    for name in names:
        if name.startswith("scenarios/sweeps/"):
            from meshsim.sweep import load_sweep

            load_sweep(ROOT / name)
        else:
            load_scenario(ROOT / name)


def test_the_quick_tour_commands_validate_or_exist(capsys):
    """README, "A quick tour": its runs take minutes (full-wafer), so each `run` or `validate` line's
    scenario is validated with its overrides; every other subcommand must be one `meshsim --help` lists."""
    blocks = _command_blocks(_section("## A quick tour"))
    commands = [c for block in blocks for c in block]
    assert len(commands) >= 10
    listed = subprocess.run([sys.executable, "-m", "meshsim", "--help"], capture_output=True, text=True,
                            env=ENV, check=True).stdout
    validated = 0
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for command in commands:
            argv = _argv(command)
            assert re.search(rf"^\s+{argv[0]}\b", listed, re.M), f"{command}: no subcommand {argv[0]}"
            if argv[0] in ("run", "validate") and "--resume" not in argv:
                words = [w for i, w in enumerate(argv) if i > 0 and w != "-o" and argv[i - 1] != "-o"]
                assert main(["validate", *words]) == 0, command
                validated += 1
    finally:
        os.chdir(cwd)
    capsys.readouterr()
    assert validated >= 8


def test_the_first_hour_commands_run(tmp_path):
    """README, "Your first hour": every command as written, in order, in a scratch copy of scenarios/,
    except the resume block (next test)."""
    blocks = _command_blocks(_section("## Your first hour"))
    assert len(blocks) >= 5
    cwd = _scratch(tmp_path)
    for block in blocks:
        if any("--resume" in c for c in block):
            continue
        for command in block:
            done = _run(_argv(command), cwd)
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    assert (cwd / "results" / "smoke.trace.json").exists() and (cwd / "results" / "smoke" / "heatmap.png").exists()
    assert (cwd / "results" / "sweeps" / "smoke_threshold" / "summary.csv").exists()


@pytest.mark.slow  # 20 s; the resume itself is tests/test_resume.py's, from the command line too
def test_the_first_hour_resume_runs(tmp_path):
    """README, "Your first hour", "Resume a stopped run": the run is started as written and stopped with
    SIGINT (Ctrl-C) once its first checkpoint is written, then the resume command runs as written."""
    blocks = [b for b in _command_blocks(_section("## Your first hour")) if any("--resume" in c for c in b)]
    assert len(blocks) == 1 and len(blocks[0]) == 2
    start, resume = blocks[0]
    incomplete = _argv(resume)[-1]
    assert incomplete.endswith(".incomplete.h5")
    cwd = _scratch(tmp_path)
    checkpoint = cwd / incomplete.replace(".incomplete.h5", ".checkpoint.h5")
    # Ctrl-C as on a terminal: a new session, and SIGINT handled even where the tests were started with it
    # ignored (in the background, or under nohup), which the run would then keep ignoring
    proc = subprocess.Popen([sys.executable, "-m", "meshsim", *_argv(start)], cwd=cwd, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, f"{start} ended before it could be stopped"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=COMMAND_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out
    assert (cwd / incomplete).exists()
    done = _run(_argv(resume), cwd)
    assert done.returncode == 0, f"{resume}\n{done.stdout}\n{done.stderr}"
    assert not (cwd / incomplete).exists()
    assert (cwd / incomplete.replace(".incomplete.h5", ".h5")).exists()
