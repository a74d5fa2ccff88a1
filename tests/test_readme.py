"""The README's Python blocks run as written, and its set-up commands are the CI's."""

import pytest
import pathlib
import re

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _python_blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.slow  # end to end
def test_readme_python_blocks_run(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks that write files write them there
    blocks = _python_blocks()
    assert len(blocks) >= 2
    for block in blocks:
        namespace = {}
        exec(compile(block, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "(100, 51)" in out
    # the quickstart's mask/gather line prints 0.0
    assert re.search(r"^0\.0$", out, flags=re.M)


def test_readme_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    setup = re.search(r"## Set-up\n\n```bash\n(.*?)```", readme, flags=re.S).group(1).split("\n")
    install, test = setup[0].strip(), setup[1].strip()
    assert install == 'pip install -e ".[dev]"' and test == "pytest"
    assert re.search(r"^pip install -e \"\.\[dev\]\"", ci, flags=re.M)
    assert re.search(r"^pytest\b", ci, flags=re.M)


def test_custom_problem_block_finds_its_minimum():
    """The README's custom problem: f* found numerically agrees with a dense grid."""
    import jax.numpy as jnp

    import fedjax_abc as fa

    loss = lambda c, x: jnp.sum(jnp.logaddexp(0.0, x - c) + 0.05 * x ** 2)  # noqa: E731
    centres = np.array([0.0, 1.0, 3.0])
    problem = fa.make_problem(loss, jnp.asarray(centres)[:, None], fa.ExactOracle())
    xs = np.linspace(-30, 30, 600001)
    f = np.mean([np.logaddexp(0.0, xs - c) + 0.05 * xs ** 2 for c in centres], axis=0)
    assert abs(float(problem.f_star) - f.min()) < 1e-9
    assert abs(float(problem.x_star[0]) - xs[np.argmin(f)]) < 1e-3
