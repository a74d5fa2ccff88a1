"""``benchmarks/gpu.py``: the accelerator run, checked on the CPU.

- ``--require-gpu`` without a GPU refuses in one line, with exit status 2.
- ``--quick`` runs its four tiny cases and writes the JSON and the Markdown report that
  ``benchmarks/report.py`` renders, naming the device (slow: about 30 s).
"""

import json
import os
import subprocess
import sys

import jax
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "benchmarks", "gpu.py")


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="a GPU is present")
def test_require_gpu_refuses_without_one(tmp_path):
    out_json = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--require-gpu", "--json", str(out_json)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line
    assert "--require-gpu" in proc.stderr and "no GPU" in proc.stderr
    assert proc.stdout.startswith("device: ")
    assert not out_json.exists()


@pytest.mark.slow
def test_quick_run_writes_the_report(tmp_path):
    out_json, out_md = tmp_path / "gpu.json", tmp_path / "gpu.md"
    proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--json", str(out_json),
                           "--markdown", str(out_md)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    device = proc.stdout.splitlines()[0]
    assert device.startswith("device: ")
    doc = json.loads(out_json.read_text())
    assert doc["quick"] and doc["machine"]["device"] == device[len("device: "):]
    rows = doc["results"]
    assert {r["workload"] for r in rows} == {"table2", "sweep"}
    for r in rows:
        assert "error" not in r and r["finite"] and r["run_s"] > 0, r
    assert any(r["impl"] == "fedjax_abc" and r["ratio_numpy"] for r in rows)
    text = out_md.read_text()
    assert f"JAX device(s): {doc['machine']['device']}" in text
    assert text.count("\n| table2 |") == sum(r["workload"] == "table2" for r in rows)
