"""Seeded initialisation: model k is exactly the plugin's module built under ``torch.manual_seed(seed_k)``, and
the caller's random state is left as it was."""

import torch

from arena.engine.ensemble import init_state
from tests.conftest import architecture

CNN = architecture("cnn", (1, 8, 8), 4, channels=[4, 8], hidden=16)


def test_each_model_is_the_module_built_under_its_own_seed_and_the_global_generator_is_untouched():
    seeds = torch.tensor([3, 0, 2**40])
    before = torch.get_rng_state()
    state = init_state(CNN, seeds)
    assert torch.equal(torch.get_rng_state(), before)
    for k, seed in enumerate(seeds.tolist()):
        torch.manual_seed(seed)
        module = CNN.build()
        expected = {**dict(module.named_parameters()), **dict(module.named_buffers())}
        assert list(state) == list(expected)
        for name, tensor in expected.items():
            assert torch.equal(state[name][k], tensor.detach()), name
    assert not any(t.requires_grad for t in state.values())
