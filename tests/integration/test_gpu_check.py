"""The GPU check (`benchmarks/gpu/`) in its CPU version, as CI runs it: every step measures something and none
fails, on tiny shapes of the two models, with the embedded model's tokenizer in place of the one prepare.sh copies."""

from __future__ import annotations

import json

from benchmarks.gpu.check import main
from codeplay_lightning.models.loading import embedded_model_dir


def test_the_gpu_check_runs_every_step_on_the_cpu(tmp_path):
    assert main(["--device", "cpu", "--tiny", "--out", str(tmp_path), "--tokenizer", str(embedded_model_dir())]) == 0
    results = json.loads((tmp_path / "check.json").read_text())
    assert not [name for name, result in results.items() if "error" in result or "skipped" in result]
    for shape, path in (("gpt-neo-125m", "plain"), ("smollm2-135m", "shared prefix")):
        samplers = results[f"samplers_{shape}"]
        assert samplers["path"] == path
        assert all(samplers[name]["tokens"] == 4 * 16 for name in ("solver_sample", "hf_generate"))
    runs = [result for name, result in results.items() if name.startswith("iterations_")]
    assert len(runs) == 3
    for run in runs:
        assert set(run["devices"].values()) - {"torch.bfloat16", "torch.float32"} == {"cpu"}
        assert run["exactness"]["ppo/clip_frac"] and set(run["exactness"]["ppo/clip_frac"]) == {0.0}
        assert max(abs(kl) for kl in run["exactness"]["ppo/approx_kl"]) < 1e-4
        assert [record["iteration"] for record in run["iterations"]] == [0, 1]
    assert results["solver_gpt-neo-125m"]["programs"] == 4 * 2
    assert results["sandbox"]["statuses"].keys() == {"pass", "fail", "error"}
    assert results["paper_iteration"]["paper_iteration_s"] > 0
