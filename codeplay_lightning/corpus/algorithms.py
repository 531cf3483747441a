"""Algorithms puzzle families."""

from __future__ import annotations

import random

from codeplay_lightning.corpus.family import families_in, family

FAMILIES = families_in(globals())
