"""``trtcheck.Autocast``: the policy ``Settings.autocast`` takes, public beside ``Settings`` (one import for both)."""

from __future__ import annotations

import trtcheck
from trtcheck.settings import Autocast


def test_autocast_is_public_and_is_the_settings_policy():
    assert trtcheck.Autocast is Autocast and "Autocast" in trtcheck.__all__
    settings = trtcheck.Settings(precision="fp16", autocast=trtcheck.Autocast(max_depth_of_reduction=4096))
    settings.validate()
    assert Autocast.of(settings.autocast).max_depth_of_reduction == 4096
