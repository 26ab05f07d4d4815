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


@pytest.mark.parametrize(("references", "says"), [(10**4000, "4001 digits, over 2\\^53"), (-(2**60), "over 2\\^53"),
                                                  (True, "a bool, where its class declares"),
                                                  (1.5, "a float, where its class declares"),
                                                  ("7", "a str, where its class declares")])
def test_a_guess_is_rebuilt_only_from_bounded_values_of_its_fields_types(references, says: str) -> None:
    """Numbers in a guess are bounded and typed at the wire (issue 40, D): the attack's matchup fails there with
    the field named, before any game or reader meets the value."""
    from arena.games.membership.guess import MembershipGuess
    from arena.pipeline.sandbox.wire import guess_fields, guess_message

    def rebuilt(value):
        header, tensors = decode(guess_message(MembershipGuess(np.zeros(3), np.zeros(3, dtype=bool), value)))
        return guess_fields(header, tensors, MembershipGuess)

    with pytest.raises((TypeError, ValueError), match=f"field 'references': .*{says}"):
        rebuilt(references)
    assert rebuilt(2**53)["references"] == 2**53 and rebuilt(None)["references"] is None
