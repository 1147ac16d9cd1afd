"""Batch inference on Ray Data (optional extra ``lowerkit[ray]``).

``ds.map_batches(lowerkit.ray.Predictor, fn_constructor_kwargs={"path": "model.lkm"},
concurrency=2, batch_size=256)``: each actor pre-flights the file (:func:`lowerkit.check`),
loads and compiles it once, then maps input columns to the method's inputs and writes the
outputs as named columns. ``lowerkit batch`` (:func:`lowerkit.ray.batch.run_batch`) does the
same from the command line over Parquet or a folder of ``.npy``/``.npz`` files.

Ray itself is imported only by :mod:`lowerkit.ray.batch`; the predictor needs only numpy.
"""

from __future__ import annotations

from .predictor import PreflightError, Predictor

__all__ = ["PreflightError", "Predictor"]
