"""Let ``loadertune loader=best`` find the loader settings a sweep's verdict exported.

The verdict writes ``<paths.output_root>/conf/loader/best.yaml``. A ``hydra.searchpath`` entry
in the app's config would make Hydra warn on every run until that folder exists, so this
plugin adds ``<paths.output_root>/conf`` (the output root the command line names, ``outputs``
by default, relative to the working directory) only when it exists, and only for apps on
loadertune's configs; never another root's, so an older export elsewhere is never measured.
"""

import sys

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from loadertune.loader import exported_conf


class LoadertuneSearchPathPlugin(SearchPathPlugin):
    """Appends ``file://<paths.output_root>/conf`` to loadertune's search path if it exists."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        ours = any(
            p.path in ("pkg://loadertune.conf", "pkg://loadertune/conf")
            for p in search_path.get_path()
        )
        exported = exported_conf(sys.argv[1:])
        if ours and exported.is_dir():
            search_path.append("loadertune-exported", f"file://{exported.resolve()}")
