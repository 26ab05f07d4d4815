"""The gradients game: gradient inversion in federated learning (DLG, iDLG, Inverting Gradients, analytic and
informed attacks against a client's shared update).

This folder owns the game's spec, view and protocol (``game``), the client update and the contract of its
defenses (``update``), its guess type (``guess``), image-quality scores and matching (``quality``), its metrics
(``scoring``), its audit rule (``rule``, the reconstruction game's bounds) and its report section (``sections``,
``grids`` and ``templates/``).

Its classes are imported when first asked for: its audit rule and report parts need no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arena.games import lazy_attributes

if TYPE_CHECKING:
    from arena.games.gradients.game import GradientsGame, GradientsGameSpec, GradientsView
    from arena.games.gradients.guess import GradientsGuess
    from arena.games.gradients.quality import match, psnr, ssim
    from arena.games.gradients.update import UpdateDefense, client_update

__all__ = ["GradientsGame", "GradientsGameSpec", "GradientsGuess", "GradientsView", "UpdateDefense",
           "client_update", "match", "psnr", "ssim"]

_HOMES = {
    "GradientsGame": "arena.games.gradients.game",
    "GradientsGameSpec": "arena.games.gradients.game",
    "GradientsView": "arena.games.gradients.game",
    "GradientsGuess": "arena.games.gradients.guess",
    "UpdateDefense": "arena.games.gradients.update",
    "client_update": "arena.games.gradients.update",
    "match": "arena.games.gradients.quality",
    "psnr": "arena.games.gradients.quality",
    "ssim": "arena.games.gradients.quality",
}

__getattr__ = lazy_attributes(__name__, _HOMES)
