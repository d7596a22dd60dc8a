"""``deepcontext run``: profile a script nobody edited.

The command (`dc_core.cli.run`) starts the user's command with a private
``sitecustomize`` on ``PYTHONPATH`` (`boot`). In each Python process it
reaches, `process.chosen` decides whether that process is profiled (the
command's own process, each torchrun worker; not the torchrun agent, not
multiprocessing or compile workers), and `child.boot` hooks the frameworks
as they are imported: trainers get the callback, plain PyTorch steps end at
``Optimizer.step``, JAX steps at calls of the jitted train step, and a
script with no step boundary is profiled by time. `Launch` is what those
drivers share in one process.
"""
