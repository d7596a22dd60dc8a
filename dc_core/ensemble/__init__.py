"""Profiles read together: the ranks of a window as one tree, outlier ranks,
a node's cost across a run's windows.

- `merge` / `Ensemble`: the union of several profiles' call paths with each
  node's inclusive value per profile (a column), streamed from the files.
- `cross_rank`: the ranks of one window, through a summary index saved
  beside the profiles (`index`).
- `outliers`: ranks whose step or phase times stand out, and the nodes that
  explain their excess, with collective waits kept apart from compute.
- `rows`: a cross-rank tree and its outlier ranks as printed rows and as
  JSON (``deepcontext report``'s ``"merged"``).
- `series`: a node's value and share per window of a run, and the nodes
  whose share trends up (Mann–Kendall, Theil–Sen).
"""

from .index import cross_rank
from .merge import PATH_SEP, Column, Ensemble, Stats, merge

__all__ = ["PATH_SEP", "Column", "Ensemble", "Stats", "cross_rank", "merge"]
