"""The README stays in step with the code: its parameter reference is the generated one, and the
scenarios it lists exist and validate."""

from pathlib import Path

from meshsim.docs import parameter_reference_markdown
from meshsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def test_readme_parameter_reference_is_generated_from_the_table():
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- params:start -->\n", 1)[1].split("<!-- params:end -->", 1)[0]
    assert block.strip() == parameter_reference_markdown().strip(), \
        "README is out of date: run python -m meshsim.docs --update README.md"


def test_every_scenario_the_readme_names_validates():
    text = (ROOT / "README.md").read_text()
    names = sorted({w.strip("`") for w in text.split() if w.strip("`").startswith("scenarios/")
                    and w.strip("`").endswith(".toml")})
    assert "scenarios/wse2_uniform.toml" in names and "scenarios/sweeps/noc_load.toml" in names
    for name in names:
        if name.startswith("scenarios/sweeps/"):
            from meshsim.sweep import load_sweep

            load_sweep(ROOT / name)
        else:
            load_scenario(ROOT / name)
