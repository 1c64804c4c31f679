"""Where a sweep starts: here, or fanned out over hosts.

Rooms (each imported on the first use of its name: this package stays light for Hydra's
plugin scan, which imports the plugin's module at every start):

- ``_start``: check the settings, then fan out or run the study here.
- ``_fanout``: one study over several hosts through a Hydra launcher.
"""

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = ["start"]

if TYPE_CHECKING:
    from ._start import start

__getattr__ = lazy_package(__name__, __file__)
