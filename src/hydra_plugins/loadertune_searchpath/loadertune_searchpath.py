"""Let ``loadertune loader=best`` find the loader settings a sweep's verdict exported.

The verdict writes ``outputs/conf/loader/best.yaml``. A ``hydra.searchpath`` entry in the
app's config would make Hydra warn on every run until that folder exists, so this plugin adds
``outputs/conf`` (relative to the working directory) only when it exists, and only for the
loadertune app. With another ``paths.output_root``, pass ``hydra.searchpath=[file://<root>/conf]``.
"""

from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

EXPORTED = Path("outputs") / "conf"


class LoadertuneSearchPathPlugin(SearchPathPlugin):
    """Appends ``file://outputs/conf`` to loadertune's config search path when it exists."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        ours = any(
            p.path in ("pkg://loadertune.conf", "pkg://loadertune/conf")
            for p in search_path.get_path()
        )
        if ours and EXPORTED.is_dir():
            search_path.append("loadertune-exported", f"file://{EXPORTED.resolve()}")
