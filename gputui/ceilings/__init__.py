"""This GPU's measured ceilings: HBM bandwidth, matrix-product FLOP/s per dtype,
PCIe transfer rates and kernel launch time (``gputui bench``).

Importing the package needs neither torch nor a GPU: ``load_ceilings(uuid)``
reads what an earlier ``gputui bench`` saved for that GPU.  The measuring code
(``probes``, ``runner``) gets torch passed in by the command.
"""

from __future__ import annotations

from gputui.ceilings.cache import load_ceilings
from gputui.ceilings.datasheet import Datasheet, datasheet_for
from gputui.ceilings.measured import Ceilings, Measurement

__all__ = ["Ceilings", "Datasheet", "Measurement", "datasheet_for", "load_ceilings"]
