"""DeepContext core: config and step windows, the session, the collector facade,
the tree model, the profile format, the analyzer, exporters, CLI and plugin.

Importing it never imports torch or jax.
"""

__version__ = "0.1.0"
