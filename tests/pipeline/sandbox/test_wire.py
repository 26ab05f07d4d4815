"""arena.pipeline.sandbox.wire: what comes back from an attack's process is data (a JSON header and raw tensors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arena.pipeline.sandbox import decode, encode


def test_messages_carry_tensors_of_every_dtype_exactly() -> None:
    tensors = {"f": torch.randn(3, 2), "d": np.arange(4.0), "b": np.array([True, False]), "i": torch.arange(5),
               "e": torch.empty(0, 3), "s": torch.tensor(2.5, dtype=torch.float64)}
    header, back = decode(encode({"op": "x"}, tensors))
    assert header == {"op": "x"}
    for k, v in tensors.items():
        assert torch.equal(back[k], torch.as_tensor(v)), k
    with pytest.raises(TypeError, match="numbers only"):
        encode({}, {"o": np.array([object()])})
