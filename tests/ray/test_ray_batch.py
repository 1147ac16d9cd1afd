"""Batch inference on a local Ray instance (2 CPUs): one test, run by CI (about a minute)."""

from __future__ import annotations

import os

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import lowerkit as lk  # noqa: E402
import lowerkit.ray  # noqa: E402
from lowerkit import models  # noqa: E402
from lowerkit.ray.batch import dataset_from_columns  # noqa: E402

ROWS = 1200


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():  # pragma: no cover - someone else's instance
        pytest.skip("Ray is already initialised in this process")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    yield ray
    ray.shutdown()


@pytest.mark.ray
def test_predictor_on_ray_data(local_ray, tmp_path) -> None:
    have = {b.name for b in lk.backends(check=False) if not b.broken}
    if "glow_like" not in have:
        pytest.skip("glow_like not installed")
    module = lk.trace(models.small_cnn(), models.example_input("small_cnn", 1), dynamic_batch=True)
    path = tmp_path / "small_cnn.lkm"
    lk.save(lk.to_backend(module, "glow_like", keep_source=True), path)
    x = models.example_input("small_cnn", ROWS, seed=7)
    ids = np.arange(ROWS)
    expected = lk.load(path)(x)

    # Two actors, each loading and compiling the file once; named columns in and out.
    ds = dataset_from_columns({"image": x, "id": ids}, blocks=4)
    out = ds.map_batches(
        lk.ray.Predictor, fn_constructor_kwargs={"path": str(path), "inputs": {"x": "image"}, "outputs": ["logits"]},
        concurrency=2, batch_size=128, batch_format="numpy",
    )
    batches = list(out.iter_batches(batch_size=None, batch_format="numpy"))
    got = np.concatenate([b["logits"] for b in batches])
    np.testing.assert_array_equal(np.concatenate([b["id"] for b in batches]), ids)
    # Not bit for bit: the actors' batches hold 128 rows, the local call 1200, and BLAS may sum a
    # row's products in another order for another matrix size (seen on OpenBLAS and MKL, AVX2).
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

    # An unavailable backend on the workers fails the job with the pre-flight table, before any batch.
    env = {"env_vars": {"LOWERKIT_DISABLE_PLUGINS": "glow_like", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}}
    failing = ds.map_batches(
        lk.ray.Predictor, fn_constructor_kwargs={"path": str(path), "inputs": {"x": "image"}},
        concurrency=2, batch_size=128, runtime_env=env,
    )
    with pytest.raises(Exception, match=r"(?s)pre-flight failed.*glow_like.*disabled by LOWERKIT_DISABLE_PLUGINS.*NOT OK") as caught:
        failing.take_all()
    assert "Predictor" in str(caught.value) or "pre-flight" in str(caught.value)


def test_batch_cli_fails_the_pre_flight_before_starting_ray(tmp_path) -> None:
    import subprocess
    import sys

    module = lk.trace(models.small_cnn(), models.example_input("small_cnn", 1), dynamic_batch=True)
    path = tmp_path / "m.lkm"
    lk.save(lk.to_backend(module, "reference"), path)
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "x.npy", models.example_input("small_cnn", 4))
    env = dict(os.environ, LOWERKIT_DISABLE_PLUGINS="reference")
    done = subprocess.run(
        [sys.executable, "-m", "lowerkit.cli", "batch", str(path), "--input", str(data), "--output", str(tmp_path / "o")],
        capture_output=True, text=True, env=env,
    )
    assert done.returncode == 1
    assert "pre-flight failed" in done.stderr and "Traceback" not in done.stderr


def test_numpy_folders_are_read_as_columns(tmp_path) -> None:
    from lowerkit.errors import InputError
    from lowerkit.ray.batch import read_numpy_folder

    np.save(tmp_path / "x.npy", np.zeros((3, 2), np.float32))
    np.savez(tmp_path / "more.npz", y=np.arange(3))
    columns = read_numpy_folder(tmp_path)
    assert sorted(columns) == ["x", "y"] and columns["x"].shape == (3, 2)
    np.save(tmp_path / "z.npy", np.zeros(4))
    with pytest.raises(InputError, match="different row counts"):
        read_numpy_folder(tmp_path)
