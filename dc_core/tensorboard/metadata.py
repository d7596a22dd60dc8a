"""Plugin identity, shared by the backend and the loader.

The plugin name is the directory name of the profile files
(``<run>/plugins/deepcontext/...``), so the tab and the files cannot disagree.
The profile's vocabulary (metrics, kinds, severities) is not here: it lives in
`dc_core.model.kinds`, and ``/runs`` sends it to the page.
"""

from __future__ import annotations

from ..store.logdir import PLUGIN_NAME

#: Bumped when the JSON the routes return changes incompatibly; the frontend
#: checks it against the one it was written for.
DATA_VERSION = 2

TAB_NAME = "DeepContext"

__all__ = ["PLUGIN_NAME", "DATA_VERSION", "TAB_NAME"]
