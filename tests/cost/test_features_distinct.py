"""``cost.features.distinct``: ``np.unique``'s values without importing ``numpy.ma``."""

from __future__ import annotations

import numpy as np

from layerscope.cost.features import distinct


def test_distinct_is_np_unique_as_python_scalars() -> None:
    codes = np.array([3, 1, 3, 0, 1, 7], dtype=np.int8)
    assert distinct(codes) == [0, 1, 3, 7] == np.unique(codes).tolist()
    assert all(type(c) is int for c in distinct(codes))
    assert distinct(np.array([], dtype=np.int64)) == []


def test_distinct_imports_no_masked_arrays() -> None:
    from tests.conftest import modules_loaded

    code = "import numpy as np; from layerscope.cost.features import distinct; distinct(np.array([2, 1, 2]))"
    assert modules_loaded(code, ("numpy.ma",)) == []
