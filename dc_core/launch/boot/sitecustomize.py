"""Loaded by every Python process ``deepcontext run`` starts (this directory is
first on their ``PYTHONPATH``): the environment's own ``sitecustomize`` runs
first, as it would have; then, in the processes chosen for profiling, the
run's hooks go in. Nothing here may stop the user's program: any failure is
one warning and an unprofiled process.
"""


def _chain() -> None:
    """Run the ``sitecustomize`` this one hides, if the environment has one."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path[:] = path  # the user's imports see the path they always did
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _boot() -> None:
    try:
        from dc_core.launch.process import chosen, claim

        if chosen() is not None:  # most processes stop here, having imported next to nothing
            return
        claim()
        from dc_core.launch.child import boot
        from dc_core.launch.settings import RunSettings

        boot(RunSettings.from_env())
    except Exception as exc:  # fail-open: the program runs unprofiled
        import logging

        logging.getLogger("deepcontext").warning(
            "DeepContext could not hook this process (%r); it runs unprofiled", exc
        )


_chain()
_boot()
