"""The TensorBoard glue: loader, plugin and its explicit route table.

Each route parses its query with `params` and calls one pure function; the
``_respond`` wrapper turns `BadRequest` into 400, `NotFound` into 404, an
unreadable profile into 422, a saturated plugin (`answers.Busy`) into 503
with ``Retry-After`` and anything else into a logged 500 whose body carries
no traceback. The heavy routes answer through `answers.Answers`, keyed by
the versions of the files they read and their parameters. Static assets are
listed one by one (no wildcard route).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from importlib import resources

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from ..store.profile import ProfileError
from . import browse, communication, diff, memory, overview, params, source, spread, tables, windows
from .answers import Answers, Busy
from .merged import versions
from .metadata import PLUGIN_NAME, TAB_NAME
from .store import Index, ProfileStore

logger = logging.getLogger("deepcontext")

STATIC_FILES = {
    "index.js": "text/javascript",
    "api.js": "text/javascript",
    "dom.js": "text/javascript",
    "table.js": "text/javascript",
    "views.js": "text/javascript",
    "flame.js": "text/javascript",
    "flamelayout.js": "text/javascript",
    "findings.js": "text/javascript",
    "axis.js": "text/javascript",
    "urlstate.js": "text/javascript",
    "details.js": "text/javascript",
    "charts.js": "text/javascript",
    "format.js": "text/javascript",
    "vocabulary.js": "text/javascript",
    "runs.js": "text/javascript",
    "spread.js": "text/javascript",
    "memory.js": "text/javascript",
    "communication.js": "text/javascript",
    "style.css": "text/css",
}


class DeepContextPlugin(base_plugin.TBPlugin):
    """Serves the DeepContext tab for the profiles under ``context.logdir``."""

    plugin_name = PLUGIN_NAME

    def __init__(
        self,
        context: base_plugin.TBContext,
        store: ProfileStore | None = None,
        answers: Answers | None = None,
    ) -> None:
        self.store = store or ProfileStore(context.logdir or "")
        self.answers = answers if answers is not None else Answers()  # an empty one is falsy
        self.source_roots = source.allowed_roots()

    def is_active(self) -> bool:
        return bool(self.store.files())

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/static/index.js", tab_name=TAB_NAME)

    def get_plugin_apps(self) -> dict[str, Callable]:
        light = {
            "/runs": lambda args: overview.runs(self.store),
            "/window": lambda args: overview.window(self._index(args)),
            "/source": self._source,
        }
        # route -> (handler, the files its answer reads: see `_versions`)
        heavy = {
            "/children": (self._children, "ref"),
            "/hotpath": (self._hot_path, "ref"),
            "/flat": (self._flat, "ref"),
            "/bottomup": (self._bottom_up, "ref"),
            "/node": (self._node, "ref"),
            "/search": (self._search, "ref"),
            "/flame": (self._flame, "ref"),
            "/memory": (self._memory, "ref"),
            "/memory/children": (self._memory_children, "ref"),
            "/communication": (self._communication, "ref"),
            "/diff": (self._diff, "pair"),
            "/diff/children": (self._diff_children, "pair"),
            "/ranks": (self._ranks, "window"),
            "/allranks": (self._all_ranks, "window"),
            "/allranks/children": (self._all_ranks_children, "window"),
            "/allranks/node": (self._all_ranks_node, "window"),
            "/allranks/locate": (self._all_ranks_locate, "window"),
            "/allranks/search": (self._all_ranks_search, "window"),
            "/windows": (self._windows, "run"),
        }
        apps = {path: _json_route(handler) for path, handler in light.items()}
        apps.update(
            {
                path: _json_route(self._kept(path, handler, reads))
                for path, (handler, reads) in heavy.items()
            }
        )
        apps.update(
            {f"/static/{name}": _static_route(name, kind) for name, kind in STATIC_FILES.items()}
        )
        return apps

    def _kept(
        self, route: str, handler: Callable, reads: str
    ) -> Callable[[Mapping[str, str]], bytes]:
        """``handler`` answered through `Answers`: gzip-compressed JSON bytes."""

        def answer(args: Mapping[str, str]) -> bytes:
            key = (route, self._versions(args, reads), tuple(sorted(args.items())))
            return self.answers.get(key, lambda: handler(args))

        return answer

    def _versions(self, args: Mapping[str, str], reads: str) -> tuple:
        """Path, mtime and size of the files an answer reads: the window of
        ``ref``, of both refs of a ``pair`` (a diff), every rank of a
        ``window`` (and the ref's file when named), every file of a ``run``."""
        if reads in ("ref", "pair"):
            refs = [params.profile_ref(args)] + (
                [params.profile_ref(args, "b_")] if reads == "pair" else []
            )
            return tuple(self.store.version(ref) for ref in refs)
        run = params.run_param(args)
        steps = params.window(args) if reads == "window" else None
        return versions(
            [f for f in self.store.files() if f.run == run and steps in (None, f.steps)]
        )

    # --- handlers: parse, then call one function ------------------------
    def _index(self, args: Mapping[str, str], prefix: str = "") -> Index:
        return self.store.index(params.profile_ref(args, prefix))

    def _children(self, args):
        index = self._index(args)
        return tables.children(
            index,
            params.node_list(args, size=len(index)),
            params.metric(args),
            params.choice(args, "sort", tables.SORTS, "incl"),
            _limit(args),
        )

    def _hot_path(self, args):
        index = self._index(args)
        return tables.hot_path(
            index,
            params.node(args, len(index)),
            params.metric(args),
            params.number(args, "threshold", 0.05, 0.0, 1.0),
            params.choice(args, "sort", tables.SORTS, "incl"),
            _limit(args),
        )

    def _flat(self, args):
        return tables.flat(
            self._index(args),
            params.metric(args),
            params.choice(args, "sort", tables.SORTS, "excl"),
            params.kind_list(args),
            _limit(args),
            params.integer(args, "offset", 0, hi=10**7),
        )

    def _bottom_up(self, args):
        index = self._index(args)
        path = (
            params.node_list(args, "path", size=len(index.tree.frames)) if args.get("path") else []
        )
        return tables.bottom_up(
            index,
            path,
            params.metric(args),
            params.choice(args, "mode", ("excl", "incl"), "excl"),
            params.choice(args, "sort", tables.SORTS, "incl"),
            params.kind_list(args),
            _limit(args),
        )

    def _node(self, args):
        index = self._index(args)
        return browse.node_details(
            index, params.node(args, len(index), default=None), params.metric(args)
        )

    def _source(self, args):
        index = self._index(args)
        frame = index.tree.node_frame(params.node(args, len(index), default=None))
        return source.snippet(frame.file, frame.line, self.source_roots)

    def _search(self, args):
        return browse.search(
            self._index(args),
            params.text(args, "q"),
            params.metric(args),
            params.integer(args, "limit", 50, lo=1, hi=500),
        )

    def _flame(self, args):
        index = self._index(args)
        return browse.flame(
            index,
            params.node(args, len(index)),
            params.metric(args),
            params.number(args, "min", 0.002, 0.0, 1.0),
            params.integer(args, "max", 3000, lo=1, hi=20000),
        )

    def _memory(self, args):
        return memory.memory_view(
            self._index(args),
            params.text(args, "device", default=""),
            params.choice(args, "sort", memory.SORTS, "incl"),
            params.number(args, "threshold", 0.05, 0.0, 1.0),
            _limit(args),
        )

    def _memory_children(self, args):
        index = self._index(args)
        return memory.memory_children(
            index,
            memory.device_of(index, params.text(args, "device", default="")),
            params.node_list(args, size=len(index)),
            params.choice(args, "sort", memory.SORTS, "incl"),
            _limit(args),
        )

    def _communication(self, args):
        return communication.communication_view(self._index(args))

    def _diff(self, args):
        union = diff.union_of(self._index(args), self._index(args, "b_"))
        return diff.diff_hot_path(
            union,
            params.metric(args),
            params.number(args, "threshold", 0.02, 0.0, 1.0),
            _limit(args),
        )

    def _diff_children(self, args):
        union = diff.union_of(self._index(args), self._index(args, "b_"))
        nodes = params.node_list(args, size=diff.union_size(union))
        return diff.diff_children(union, nodes, params.metric(args), _limit(args))

    def _ranks(self, args):
        run = params.run_param(args)
        return overview.ranks(self.store, run, params.window(args), params.metric(args))

    # --- all ranks of a window, and one rank's windows -----------------
    def _cross_rank(self, args):
        return self.store.cross_rank(params.run_param(args), params.window(args))

    def _all_ranks(self, args):
        merged = self._cross_rank(args)
        answer = spread.spread_hot_path(
            merged.ensemble,
            params.metric(args),
            params.number(args, "threshold", 0.05, 0.0, 1.0),
            params.choice(args, "sort", spread.SORTS, "mean"),
            _limit(args),
        )
        return {**answer, "errors": merged.errors}  # the rank files left out, by relative name

    def _all_ranks_children(self, args):
        e = self._cross_rank(args).ensemble
        return spread.spread_children(
            e,
            params.node_list(args, size=len(e)),
            params.metric(args),
            params.choice(args, "sort", spread.SORTS, "mean"),
            _limit(args),
        )

    def _all_ranks_node(self, args):
        e = self._cross_rank(args).ensemble
        return spread.distribution(
            e,
            params.node(args, len(e), default=None),
            params.metric(args),
            params.integer(args, "bins", spread.MAX_BINS, lo=1, hi=200),
        )

    def _all_ranks_search(self, args):
        return spread.spread_search(
            self._cross_rank(args).ensemble,
            params.text(args, "q"),
            params.metric(args),
            params.integer(args, "limit", 50, lo=1, hi=500),
        )

    def _all_ranks_locate(self, args):
        e = self._cross_rank(args).ensemble
        frames = spread.ensemble_path(e, params.node(args, len(e), default=None))
        return spread.locate(self._index(args), frames)

    def _windows(self, args):
        """The series of a node of (run, rank, window), or with ``from=all``
        of a node of that window's cross-rank tree, over the rank's windows."""
        if params.choice(args, "from", ("rank", "all"), "rank") == "all":
            e = self._cross_rank(args).ensemble
            frames = spread.ensemble_path(e, params.node(args, len(e), default=None))
        else:
            index = self._index(args)
            frames = index.tree.path_frames(params.node(args, len(index), default=None))
        ref = params.profile_ref(args)
        return {
            "rank": ref.rank,
            **windows.windows_series(
                self.store.rank_windows(ref.run, ref.rank).ensemble, frames, params.metric(args)
            ),
        }


def _limit(args: Mapping[str, str]) -> int:
    return params.integer(args, "limit", 200, lo=1, hi=2000)


def _json_route(handler: Callable[[Mapping[str, str]], dict | bytes]) -> Callable:
    """A route answering ``handler(args)``: JSON-ready data, or bytes that
    `answers.encode` made (gzip-compressed JSON)."""

    @wrappers.Request.application
    def app(request: wrappers.Request) -> wrappers.Response:
        code = 200
        try:
            body = handler(request.args.to_dict(flat=True))
            if isinstance(body, bytes):
                return http_util.Respond(request, body, "application/json", content_encoding="gzip")
        except Busy as exc:  # saturated: the client comes back later instead of queueing here
            return http_util.Respond(
                request,
                {"error": str(exc)},
                "application/json",
                code=503,
                headers=[("Retry-After", str(exc.retry_after_s))],
            )
        except params.BadRequest as exc:
            code, body = 400, {"error": str(exc)}
        except params.NotFound as exc:
            code, body = 404, {"error": str(exc)}
        except ProfileError as exc:
            code, body = 422, {"error": str(exc)}
        except Exception:  # logged here; the browser gets no traceback
            logger.exception("DeepContext plugin: %s failed", request.path)
            code, body = (
                500,
                {"error": "internal error in the DeepContext plugin; see the TensorBoard log"},
            )
        return http_util.Respond(request, body, "application/json", code=code)

    return app


def _static_route(name: str, content_type: str) -> Callable:
    cache: list[bytes] = []

    @wrappers.Request.application
    def app(request: wrappers.Request) -> wrappers.Response:
        if not cache:
            cache.append(
                resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
            )
        return http_util.Respond(request, cache[0], content_type + "; charset=utf-8")

    return app


class DeepContextLoader(base_plugin.TBLoader):
    """Entry point named in ``pyproject.toml`` (``tensorboard_plugins``)."""

    def load(self, context: base_plugin.TBContext) -> DeepContextPlugin:
        return DeepContextPlugin(context)
