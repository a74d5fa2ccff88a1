"""The README's Python blocks run as written, and its set-up commands are the CI's.

What the README held before it became a front door is in the documentation's guides, whose
blocks tests/test_docs.py runs.
"""

import pytest
import pathlib
import re

import numpy as np

from markdown_blocks import python_blocks, run_blocks

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow  # end to end
def test_readme_python_blocks_run(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks that write files write them there
    assert run_blocks(ROOT / "README.md") >= 1
    out = capsys.readouterr().out
    assert "(100, 51)" in out
    # the first simulation's mask/gather line prints 0.0
    assert re.search(r"^0\.0$", out, flags=re.M)


def test_readme_has_a_first_simulation():
    (block,) = python_blocks(ROOT / "README.md")
    assert 'jax.config.update("jax_enable_x64", True)' in block and "fa.use_cpu_cores()" in block
    assert 10 <= len(block.strip().splitlines()) <= 20


def test_readme_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    setup = re.search(r"## Set-up\n\n```bash\n(.*?)```", readme, flags=re.S).group(1).split("\n")
    install, test = setup[0].strip(), setup[1].strip()
    assert install == 'pip install -e ".[dev]"' and test == "pytest"
    assert re.search(r"^pip install -e \"\.\[dev\]\"", ci, flags=re.M)
    assert re.search(r"^pytest\b", ci, flags=re.M)
    assert ("```bash\nfedjax-abc reproduce all --out results && "
            "fedjax-abc report --results results\n```") in readme


def test_readme_is_a_front_door():
    """About 120-150 lines, and every file it links to exists (the guides, the reports)."""
    readme = (ROOT / "README.md").read_text()
    assert 100 <= len(readme.splitlines()) <= 160
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert any(link.startswith("docs/guides/") for link in links)
    for link in links:
        assert (ROOT / link).exists(), link


def test_custom_problem_block_finds_its_minimum():
    """The problem guide's custom problem (docs/guides/learning.md): f* found numerically
    agrees with a dense grid."""
    import jax.numpy as jnp

    import fedjax_abc as fa

    loss = lambda c, x: jnp.sum(jnp.logaddexp(0.0, x - c) + 0.05 * x ** 2)  # noqa: E731
    centres = np.array([0.0, 1.0, 3.0])
    problem = fa.make_problem(loss, jnp.asarray(centres)[:, None], fa.ExactOracle())
    xs = np.linspace(-30, 30, 600001)
    f = np.mean([np.logaddexp(0.0, xs - c) + 0.05 * xs ** 2 for c in centres], axis=0)
    assert abs(float(problem.f_star) - f.min()) < 1e-9
    assert abs(float(problem.x_star[0]) - xs[np.argmin(f)]) < 1e-3
