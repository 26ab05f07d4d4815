"""The ``checkpoint`` defense: a model trained by a plain PyTorch script, outside the arena, is the release; the
game's challenge is its own members and non-members; shadow-training attacks train their shadows with the track's
recipe, and never see the checkpoint's records; LiRA and the threshold attack find the overfitted model's members.
A bad checkpoint or records file is exit 2 naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn

import arena
from arena.cli import EXIT_INPUT, EXIT_OK, main
from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena.plugins import registries
from tests.conftest import architecture, write_scenario

MEMBERS, HIDDEN, EPOCHS = 60, 128, 100


class Net(nn.Module):
    """The user's own network: a one-hidden-layer MLP, named as the arena's ``mlp`` names its layers."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, HIDDEN), nn.Linear(HIDDEN, 10)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[1](torch.relu(self.layers[0](x.flatten(1))))


def train_elsewhere(folder: Path, members: int = MEMBERS) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """A plain torch script: SGD on digits' first records of a shuffle until it overfits (by hand: importing
    torch.optim costs seconds); weights saved with torch.save, the member and non-member row indices as JSON."""
    digits = load_digits()
    X, y = torch.tensor(digits.data / 16.0, dtype=torch.float32), torch.tensor(digits.target)
    order = np.random.default_rng(0).permutation(len(y))
    mine, held_out = order[:members], order[members : 2 * members]
    torch.manual_seed(0)
    net = Net()
    params = list(net.parameters())
    velocity = [torch.zeros_like(p) for p in params]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny net: threads only contend
    try:
        for _ in range(EPOCHS):  # SGD with heavy-ball momentum, as torch.optim.SGD(lr=0.1, momentum=0.9) steps
            for batch in torch.randperm(members).split(32):
                net.zero_grad()
                nn.functional.cross_entropy(net(X[mine][batch]), y[mine][batch]).backward()
                with torch.no_grad():
                    for p, v in zip(params, velocity):
                        p.sub_(0.1 * v.mul_(0.9).add_(p.grad))
    finally:
        torch.set_num_threads(threads)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), folder / "weights.pt")
    (folder / "records.json").write_text(json.dumps({"members": mine.tolist(), "nonmembers": held_out.tolist()}))
    return folder / "weights.pt", folder / "records.json", mine, held_out


def scenario(weights: Path, records: Path, members: int = MEMBERS, game: str = "membership",
             attacks: str = "[{name: threshold-mia}, {name: lira, shadows: 16, fixed_variance: true}]") -> str:
    game_spec = f"{{name: membership, members: {members}, test: 200}}" if game == "membership" else game
    return f"""
name: byo
seeds: [0]
tracks:
  - name: mine
    dataset: {{name: digits}}
    model: {{name: mlp, hidden: [{HIDDEN}]}}
    training: {{epochs: {EPOCHS}, batch_size: 32, lr: 0.1, momentum: 0.9}}
    game: {game_spec}
    defenses:
      - {{name: checkpoint, weights: {weights}, records: {records}}}
    attacks: {attacks}
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    return train_elsewhere(tmp_path_factory.mktemp("elsewhere"))


def test_the_game_plays_the_checkpoint_with_its_records_and_trains_shadows_without_them(checkpoint) -> None:
    weights, records, members, nonmembers = checkpoint
    cls = registries().defenses.get("checkpoint")
    defense = cls.expand(cls.Params(weights=weights, records=records))[0]
    arch = architecture("mlp", (1, 8, 8), 10, hidden=[HIDDEN])
    procedure = TrainingProcedure(cls(defense), arch, Recipe(epochs=1, lr=0.1, momentum=0.9, batch_size=32))
    dataset = load_dataset(PluginRef(name="digits"))
    game = MembershipGame(MembershipGameSpec(name="membership", members=MEMBERS, test=200), dataset, seed=11)
    release = game.release(procedure)
    assert release.claim is None and procedure.stats.trained == 0  # nothing trained: the checkpoint is the release
    assert sorted(game.members) == sorted(members) and sorted(game.nonmembers) == sorted(nonmembers)
    assert set(game.challenge[game._is_member]) == set(members)
    assert not set(game.test) & set(game.challenge) and not set(game.population) & set(game.challenge)
    digits = load_digits()
    net = Net()
    net.load_state_dict(torch.load(weights, weights_only=True))
    with torch.no_grad():
        expected = (net(torch.tensor(digits.data[game.test] / 16.0, dtype=torch.float32)).argmax(1).numpy()
                    == digits.target[game.test]).mean()
    assert release.utility == pytest.approx(expected)  # the user's model, on the game's test set
    attack_cls = registries().attacks.get("lira")
    view = game.view(attack_cls(attack_cls.Params()), release, procedure)
    shadows = object.__getattribute__(view, "_items")["train"]
    assert shadows.defense.name == "nonprivate" and shadows.recipe == procedure.recipe
    assert "records" not in json.dumps(shadows.defense.params.model_dump(mode="json"))  # no path to the secret


@pytest.mark.slow
def test_lira_and_the_threshold_attack_find_the_members_of_a_model_trained_elsewhere(checkpoint, tmp_path: Path,
                                                                                      capsys) -> None:
    weights, records, _, _ = checkpoint
    path = write_scenario(tmp_path / "byo.yaml", scenario(weights, records))
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--serial", "--no-report"]) == EXIT_OK
    capsys.readouterr()
    frame = arena.load(tmp_path / "run").frame().set_index("attack")
    assert set(frame["status"]) == {"ok"} and set(frame["defense"]) == {"checkpoint"}
    assert frame.loc["threshold-mia", "auc"] > 0.65 and frame.loc["lira", "auc"] > 0.75
    row = arena.load(tmp_path / "run").rows[0]
    assert row["claim"] is None and row["epsilon"] is None
    assert len(row["defense_params"]["sha256"]) == 64  # the files' content is in the key and the row


def test_a_changed_file_is_refused_by_its_recorded_hash(checkpoint, tmp_path: Path) -> None:
    weights, records, _, _ = checkpoint
    cls = registries().defenses.get("checkpoint")
    copy = tmp_path / "weights.pt"
    copy.write_bytes(weights.read_bytes())
    planned = cls.expand(cls.Params(weights=copy, records=records))[0].model_dump(mode="json")
    cls.Params.model_validate(planned)  # unchanged: valid
    net = Net()
    torch.save(net.state_dict(), copy)
    with pytest.raises(ValueError, match="changed since it was planned"):
        cls.Params.model_validate(planned)


def test_safetensors_weights_load_alike(checkpoint, tmp_path: Path, capsys) -> None:
    from safetensors.torch import save_file

    weights, records, _, _ = checkpoint
    save_file(torch.load(weights, weights_only=True), tmp_path / "weights.safetensors")
    path = write_scenario(tmp_path / "s.yaml", scenario(tmp_path / "weights.safetensors", records))
    assert main(["validate", str(path)]) == EXIT_OK, capsys.readouterr().err


def _bad_cases(tmp: Path, weights: Path, records: Path) -> list[tuple[dict, str, str]]:
    torch.save(nn.Linear(2, 2), tmp / "module.pt")
    torch.save({"w": torch.tensor([1, 2])}, tmp / "ints.pt")
    torch.save({"w": torch.tensor([float("nan")])}, tmp / "nan.pt")
    torch.save([torch.zeros(2)], tmp / "list.pt")
    (tmp / "garbage.pt").write_bytes(b"not a checkpoint")
    (tmp / "weights.txt").write_text("")
    small = Net()
    small.layers[0] = nn.Linear(64, 16)
    small.layers[1] = nn.Linear(16, 10)
    torch.save(small.state_dict(), tmp / "small.pt")
    ok = json.loads(records.read_text())
    cases = {"no-nonmembers": {"members": ok["members"]}, "overlap": {**ok, "nonmembers": ok["members"]},
             "few": {**ok, "nonmembers": ok["nonmembers"][:10]},
             "negative": {**ok, "members": [-1, *ok["members"][1:]]},
             "repeated": {**ok, "members": [ok["members"][0]] * 2 + ok["members"][2:]},
             "floats": {**ok, "members": [0.5, *ok["members"][1:]]},
             "range": {**ok, "nonmembers": [*ok["nonmembers"][:-1], 5000]}}
    for name, data in cases.items():
        (tmp / f"{name}.json").write_text(json.dumps(data))
    (tmp / "list.json").write_text("[1, 2]")
    return [
        ({"weights": tmp / "absent.pt"}, "weights", "absent.pt: cannot read"),
        ({"weights": tmp}, "weights", "not a regular file"),
        ({"weights": tmp / "weights.txt"}, "weights", "a .txt file"),
        ({"weights": tmp / "module.pt"}, "weights", "holds pickled objects other than tensors"),
        ({"weights": tmp / "ints.pt"}, "weights", "w: dtype torch.int64, not floating point"),
        ({"weights": tmp / "nan.pt"}, "weights", "w: holds NaN or infinite values"),
        ({"weights": tmp / "list.pt"}, "weights", "holds a list, not a state_dict"),
        ({"weights": tmp / "garbage.pt"}, "weights", "not a readable state_dict"),
        ({"weights": tmp / "small.pt"}, "weights", "does not fit the track's model 'mlp' (layers.0.bias: shape [16]"),
        ({"records": tmp / "no-nonmembers.json"}, "records", "nonmembers: missing"),
        ({"records": tmp / "overlap.json"}, "records", "nonmembers: 60 index(es) also in members"),
        ({"records": tmp / "few.json"}, "records", "nonmembers: 10 indices, fewer than the 60 members"),
        ({"records": tmp / "negative.json"}, "records", "members: index -1 is negative"),
        ({"records": tmp / "repeated.json"}, "records", "members: 1 index(es) repeated"),
        ({"records": tmp / "floats.json"}, "records", "members: record indices are whole numbers"),
        ({"records": tmp / "list.json"}, "records", "a JSON list, not an object"),
        ({"records": tmp / "range.json"}, "records", "nonmembers: index 5000 is out of range for dataset 'digits'"),
        ({"members": 50}, "records", "members: 60 indices, but the track's game trains on 50"),
    ]


def test_a_bad_checkpoint_is_exit_2_naming_the_file_and_the_field(checkpoint, tmp_path: Path, capsys) -> None:
    weights, records, _, _ = checkpoint
    for change, field, says in _bad_cases(tmp_path, weights, records):
        args = {"weights": weights, "records": records, "members": MEMBERS, **change}
        path = write_scenario(tmp_path / "bad.yaml", scenario(args["weights"], args["records"], args["members"]))
        assert main(["validate", str(path)]) == EXIT_INPUT, change
        err = capsys.readouterr().err
        assert f"tracks[0].defenses[0].{field}: " in err and says in err, (change, err)
        named = args["weights"] if field == "weights" else args["records"]
        assert str(named) in err, err


def test_only_the_membership_game_plays_a_checkpoint(checkpoint, tmp_path: Path, capsys) -> None:
    weights, records, _, _ = checkpoint
    text = scenario(weights, records, game="{name: reconstruction, fixed: 50, targets: 5, shadow_targets: 20}",
                    attacks="[{name: glm-reconstruction}]")
    assert main(["validate", str(write_scenario(tmp_path / "r.yaml", text))]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert "tracks[0].defenses[0].name: defense 'checkpoint' releases a model trained elsewhere, which the " \
           "'reconstruction' game does not play" in err, err
